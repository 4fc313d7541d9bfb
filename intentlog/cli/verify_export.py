"""Commands that check, export, seal and repair a ledger."""

from __future__ import annotations

import errno
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from .._internal.regular import NotRegular
from ..errors import InvalidTaskId, LedgerError, NotALedger, UsageError
from ..eventlog.format import check_task_id
from .app import (
    Ctx,
    NotFound,
    echo,
    emit_json,
    handle_errors,
    json_option,
    main,
    pass_ctx,
    progress_for,
    require_task,
    task_arg,
)

if TYPE_CHECKING:
    from ..checker.seams import LedgerReads

#: The errors of a write refused by the file system itself (mounted read-only, no permission).
_NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def _not_writable(exc: OSError, what: str, next_step: str) -> LedgerError | None:
    """A refused write as one line saying what could not be written, where, and what to do instead."""
    if exc.errno not in _NOT_WRITABLE:
        return None
    where = f" ({exc.filename})" if exc.filename else ""
    return LedgerError(f"{what} is not writable here: {exc.strerror or exc}{where}; nothing was written; {next_step}")


# -- checks ---------------------------------------------------------------------------


@main.command()
@task_arg("tasks", nargs=-1)
@click.option(
    "--bundle",
    type=click.Path(path_type=Path),
    help="Check an exported bundle (this folder, or the tar export --tar wrote) instead of the ledger, with its "
    "states, receipts and hashes.json.",
)
@json_option
@pass_ctx
@handle_errors
def verify(c: Ctx, tasks: tuple[str, ...], bundle: Path | None, as_json: bool) -> None:
    """Check chains, event shapes, the identity graph and every artifact's bytes; write nothing.

    Exit 0 when nothing is wrong, 1 when problems were found.

    \b
    Example:
      intentlog --root evidence verify
      intentlog verify chapter-16 --json
      intentlog verify --bundle bundle
      intentlog verify --bundle bundle.tar
    """
    if bundle is not None and tasks:
        raise click.UsageError("--bundle checks the whole bundle; name no TASK")
    progress = progress_for("verifying") if not as_json else None
    try:
        if bundle is not None:
            from ..bundle import check_bundle

            report = check_bundle(bundle, progress=progress)
        else:
            from ..checker import verify

            # the ledger's reads, not open_ledger: a check must not even create the empty folders a git clone lacks
            reads = _reads_of_ledger(c)
            if c.url is None:  # a folder names a task with no stream as not found (exit 1) before reading
                for t in tasks:
                    if check_task_id(t) not in reads.names():
                        raise NotFound(f"no task {t!r} in {c.root}; see 'intentlog tasks'")
            report = verify(reads, list(tasks) or None, progress=progress)
    except (UsageError, InvalidTaskId) as exc:
        raise click.UsageError(str(exc)) from exc
    if progress is not None:
        echo("", err=True)
    if as_json:
        emit_json(report.to_json())
    else:
        echo(report.render())
    sys.exit(report.exit_code)


@main.command()
@task_arg("tasks", nargs=-1)
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), help="Write the bundle into this new (or empty) folder."
)
@click.option(
    "--tar",
    "tar_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the bundle as this new tar file (deterministic: sorted, mtime 0, owner 0).",
)
@click.option(
    "--receipts",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A provider's receipt log to carry in the bundle (JSON lines naming each request by a body_hash, "
    "blake3:/sha256: of the body, or an idempotency_key; see docs/bundles.md); repeatable.",
)
@click.option("--no-check", is_flag=True, help="Do not run the library's check over the written bundle.")
@json_option
@pass_ctx
@handle_errors
def export(
    c: Ctx,
    tasks: tuple[str, ...],
    out: Path | None,
    tar_file: Path | None,
    receipts: tuple[Path, ...],
    no_check: bool,
    as_json: bool,
) -> None:
    """Export tasks (default: all) as an evidence bundle an auditor checks without intentlog.

    The bundle holds the streams byte for byte, every artifact they reference, heads.json,
    states.json, hashes.json, a README and verify_bundle.py. Exporting again gives the same
    bytes. Exit 1 when the library's check of the written bundle finds a problem.

    \b
    Example:
      intentlog --root evidence export chapter-16 --out bundle --receipts receipts.jsonl
      python bundle/verify_bundle.py bundle
    """
    from ..bundle import export_bundle

    if out is None and tar_file is None:
        raise click.UsageError("say where the bundle goes: --out DIR, --tar FILE, or both")
    ledger = c.ledger()
    for t in tasks:
        require_task(c, ledger, t)
    progress = None if as_json else progress_for("exporting")
    try:
        result = _export(
            export_bundle,
            ledger,  # read through its own storage: a folder's files, or a store's seams
            list(tasks) or None,
            out=out,
            tar=tar_file,
            receipts=receipts,
            check=not no_check,
            progress=progress,
            where=" and ".join(str(x) for x in (out, tar_file) if x is not None),
        )
    except (UsageError, InvalidTaskId) as exc:
        raise click.UsageError(str(exc)) from exc
    finally:
        if progress is not None:
            echo("", err=True)  # end the progress line
    if as_json:
        emit_json(result.to_json())
    else:
        echo(_export_summary(c, result), nl=False)
    sys.exit(result.exit_code)


def _export(export_bundle: Any, *args: Any, where: str, **kwargs: Any) -> Any:
    """``export_bundle``, a refused write of the bundle said as such (the ledger is only read)."""
    try:
        return export_bundle(*args, **kwargs)
    except OSError as exc:
        err = _not_writable(
            exc, f"the bundle's folder (export writes {where})",
            "the ledger is only read, so it may stay read-only: choose --out (or --tar) on a writable file system",
        )  # fmt: skip
        if err is None:
            raise
        raise err from exc


def _export_summary(c: Ctx, result: Any) -> str:
    """The export's summary at any scale: counts and human sizes, task names only when few."""
    from ..retention import format_size

    names = ", ".join(result.tasks[:5]) + (f", … ({len(result.tasks) - 5} more)" if len(result.tasks) > 5 else "")
    where = " and ".join(str(p) for p in (result.out, result.tar) if p is not None)
    lines = [f"exported {len(result.tasks)} task(s) ({names}): {result.files} files, {format_size(result.size)}"]
    lines.append(f"  to {where}")
    if result.report is not None:
        lines.append(f"  library check: {result.report.summary()}")
        lines.extend(f"  {p.render()}" for p in result.report.problems if p.severity != "info")
    folder = result.out if result.out is not None else Path("intentlog-bundle")
    lines.append(f"  an auditor runs: python {folder / 'verify_bundle.py'} {folder}")
    return "\n".join(lines) + "\n"


def _reads_of_ledger(c: Ctx) -> LedgerReads:
    """What the root's ledger is read through; refused (exit 1) when there is no ledger, saying how to point at one."""
    from ..ledgerreads import open_reads

    reads = open_reads(c.url or c.root)
    try:
        reads.marker()  # a folder holds one; a storage that keeps none is a ledger by construction
    except NotRegular:
        pass  # a link (or not a file): verify reports it, and reads nothing through it
    except OSError as exc:
        raise NotALedger(str(c.root), "no ledger here (no intentlog.json)") from exc
    return reads


@main.command()
@json_option
@pass_ctx
@handle_errors
def seal(c: Ctx, as_json: bool) -> None:
    """Write heads.json (each stream's last seq and head digest) so truncation is detectable.

    Commit the folder to git, or sign heads.json, to anchor it.

    \b
    Example:
      intentlog seal && git add evidence && git commit -m "seal"
    """
    if c.url is not None:
        from .storeroot import seal_store

        where, data = seal_store(c.url)  # a new numbered seal object on the store, never a replacement
        emit_json({"sealed": where, "heads": orjson.loads(data)}) if as_json else echo(f"sealed {where}")
        return
    from ..heads import seal as seal_heads

    ledger = c.ledger()
    try:
        path = seal_heads(ledger)
    except OSError as exc:
        err = _not_writable(
            exc, f"the ledger {ledger.root} (seal writes heads.json into it)",
            f"seal a writable copy: intentlog merge {shlex.quote(str(ledger.root))} COPY, then: intentlog --root "
            "COPY seal; or make the ledger writable and seal again",
        )  # fmt: skip
        if err is None:
            raise
        raise err from exc
    if as_json:
        emit_json({"sealed": str(path), "heads": orjson.loads(Path(path).read_bytes())})
        return
    echo(f"sealed {path}")


@main.command()
@click.argument("task")
@click.option("--accept-damage", is_flag=True, help="Also move aside damage a crash cannot cause, recording it.")
@click.option(
    "--accept-resend",
    is_flag=True,
    help="With --accept-damage: also move aside lines recording attempt.started (their sends may run again).",
)
@click.option("--dry-run", is_flag=True, help="Say what would be moved; write nothing.")
@json_option
@pass_ctx
@handle_errors
def repair(c: Ctx, task: str, accept_damage: bool, accept_resend: bool, dry_run: bool, as_json: bool) -> None:
    """Move a stream's bad tail to quarantine/ and record it (stream.repaired).

    Without --accept-damage only a torn tail (what a crash leaves) is repaired; a stream
    writers refuse (a line that does not chain, damage in the middle, a cut sealed
    stream) is refused here too (exit 1) until you pass --accept-damage. Damage whose
    lines record an attempt.started (a send that began) is refused until you also pass
    --accept-resend: a re-run may send those calls again.

    On an s3:// root nothing is moved, whatever the flags: a store keeps no torn tail,
    so a clean stream has nothing to repair and anything else is damage, named and
    refused (exit 1) with nothing written; restore the task's segments from a copy.

    \b
    Example:
      intentlog repair chapter-16 --dry-run
      intentlog repair chapter-16 --accept-damage
      intentlog repair chapter-16 --accept-damage --accept-resend
    """
    if accept_resend and not accept_damage:
        raise UsageError("--accept-resend only widens --accept-damage: pass both, or neither")
    with c.ledger() as ledger:
        if ledger.storage is None:
            require_task(c, ledger, task)
        elif check_task_id(task) not in ledger.task_ids():  # listed, not read: the read is the repair's to judge
            raise NotFound(f"no task {task!r} in {ledger.location}; see 'intentlog tasks'")
        report = ledger.repair(task, accept_damage=accept_damage, accept_resend=accept_resend, dry_run=dry_run)
    if as_json:
        emit_json({**report.to_json(), "dry_run": dry_run})
    elif report.action == "none":
        echo(f"task {task!r}: nothing to repair")
    else:
        verb = "would move" if dry_run else "moved"
        what = "a torn tail" if report.action == "torn_tail" else "accepted damage"
        echo(
            f"task {task!r}: {verb} {what} from line {report.line} ({report.size} bytes, {report.digest}) "
            f"to {report.quarantined}: {report.reason}"
        )
