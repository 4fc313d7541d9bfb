"""``merge`` (one ledger into another) and ``doctor`` (may this store be written to?)."""

from __future__ import annotations

import sys

import click

from .._internal.commands import command, hint_root
from ..errors import NotALedger
from .app import EXIT_OK, EXIT_PROBLEMS, Ctx, NotFound, echo, emit_json, handle_errors, json_option, main, pass_ctx


def _url(text: str) -> str:
    """An ``s3://`` URL that went through a path (``s3:/b/p``) restored; anything else unchanged."""
    return "s3://" + text[len("s3:/") :] if text.startswith("s3:/") and not text.startswith("s3://") else text


@main.command()
@click.argument("src")
@click.argument("dst")
@json_option
@handle_errors
def merge(src: str, dst: str, as_json: bool) -> None:
    """Copy into DST the tasks and objects of SRC it lacks; refuse tasks that diverged.

    A task only SRC has is copied; one that DST holds a prefix of is extended; a task that
    diverged (the same id, different lines at one seq) is refused and named, and then
    nothing is written to DST. DST is verified after the merge (exit 1 if it does not
    verify). SRC and DST are ledger folders (DST is created if new) or
    s3://BUCKET/PREFIX.

    \b
    Example:
      intentlog merge laptop/.intentlog shared/.intentlog
      intentlog merge run-7/.intentlog archive --json
    """
    from ..merge import merge as merge_ledgers

    try:
        result = merge_ledgers(_url(src), _url(dst))
    except NotALedger as exc:
        if exc.root not in (src, _url(src)):
            raise
        reason = exc.reason.split("; run ")[0]  # creating SRC would not help: it is what is copied from
        raise NotFound(
            f"{src}: {reason}: name the ledger to merge from (the folder holding intentlog.json, or "
            "s3://BUCKET/PREFIX); nothing was written"
        ) from None
    ok = result.verify is None or result.verify.ok
    if as_json:
        emit_json(result.to_json())
    else:
        p = result.plan
        echo(
            f"merged {src} into {dst}: {len(p.create)} task(s) copied, {len(p.extend)} extended, "
            f"{len(p.same)} already the same, {len(p.dst_ahead)} ahead in {dst}; "
            f"{p.events} event(s) and {len(p.objects)} object(s) copied"
        )
        for name in p.torn:
            repair = command(hint_root(_url(src)), "repair", name)
            echo(f"  {name}: its torn last line in {src} was not copied (repair it there: {repair})")
        for name in p.retired:
            echo(f"  {name}: gc retired it in {dst} (what gc keeps of a stream it deleted): not copied")
        if result.verify is not None:
            echo(result.verify.summary())
    sys.exit(EXIT_OK if ok else EXIT_PROBLEMS)


@main.command()
@click.option("--root", "url", help="The store to check: s3://BUCKET/PREFIX (default: the ledger's --root).")
@click.option("--racers", type=click.IntRange(2, 256), default=32, show_default=True, help="Creates racing on one key.")
@json_option
@pass_ctx
@handle_errors
def doctor(c: Ctx, url: str | None, racers: int, as_json: bool) -> None:
    """Check that the ledger's store can keep one writer per task; exit 1 if it cannot.

    For s3://BUCKET/PREFIX: a second conditional create (If-None-Match: *) of one key must be
    refused, and of 32 (--racers) racing creates exactly one may win. A store that fails is refused
    for writing. A folder ledger's writer lock is the file system's (flock): nothing to probe.

    \b
    Example:
      AWS_ENDPOINT_URL=http://127.0.0.1:8333 intentlog doctor --root s3://bucket/ledger
      intentlog doctor --root s3://bucket/ledger --json
    """
    root = _url(url if url is not None else str(c.root))
    if not root.startswith("s3://"):
        if as_json:
            emit_json({"root": root, "ok": True, "checks": [], "note": "a folder: the writer lock is flock"})
        else:
            echo(f"{root}: a folder ledger; its writer lock is the file system's (flock): nothing to probe")
        sys.exit(EXIT_OK)
    from ..s3 import S3Client, parse_s3_url, probe_store

    report = probe_store(S3Client(parse_s3_url(root)), racers=racers)
    if as_json:
        emit_json(report.to_json())
    else:
        for check in report.checks:
            echo(f"{'ok  ' if check.ok else 'FAIL'}  {check.name}: {check.detail}")
        verdict = (
            "can fence writers: safe to write" if report.ok
            else "cannot reach the store: refused for writing" if report.unreached
            else "cannot fence writers: refused for writing"
        )  # fmt: skip
        echo(f"{report.root}: {verdict}")
    sys.exit(EXIT_OK if report.ok else EXIT_PROBLEMS)
