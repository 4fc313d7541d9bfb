"""The operator's decisions: commands that append one event (each with ``--dry-run`` and ``--wait``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import orjson

from .._internal.text import printable as p
from ..errors import IntentlogError, UnknownCall, UsageError
from ..eventlog.format import Event
from ..eventlog.storage import DEFAULT_TAKE_OVER_AFTER
from ..fork import default_fork_id
from ..heads.codec import HEADS_FILE, encode_heads
from ..ledger import Ledger, open_ledger
from .app import (
    Ctx,
    F,
    NotFound,
    dry_run_option,
    echo,
    emit_json,
    handle_errors,
    json_option,
    main,
    pass_ctx,
    require_task,
    task_arg,
)

# -- operator decisions ----------------------------------------------------------------


def _event_json(task: str, ev: Event) -> dict[str, Any]:
    """An event as the writing commands print it with --json: the stored object, its digest and task."""
    return {"task": task, **ev.to_json(), "digest": ev.digest}


def private_copy(ledger: Ledger, tasks: Sequence[str], into: Path) -> Ledger:
    """A private folder ledger at ``into`` holding ``tasks``' streams and ``ledger``'s seals, read through its seams.

    Each stream's bytes as the source's stream seam reads them (:meth:`StreamStorage.read
    <intentlog.eventlog.storage.StreamStorage.read>`: a folder's stream that is a link is
    refused, a store's segments that do not make one stream are ``CorruptStream``, as the
    real command's read would be), and the heads its seals record as one ``heads.json``
    (:meth:`~intentlog.Ledger.sealed_heads`), so the copy's writer checks each stream
    against them as the real one does. A task with no stream is left out (the library call
    on the copy then says what the real one would). The source is only read, whatever its
    storage: nothing is written to it and no probe runs.
    """
    copy = open_ledger(into, create=True)
    for tid in tasks:
        try:
            data = ledger.streams.read(tid)
        except FileNotFoundError:
            continue
        copy.stream_path(tid).write_bytes(data)
    heads = ledger.sealed_heads()
    if heads is not None:
        (copy.root / HEADS_FILE).write_bytes(encode_heads(heads))
    return copy


@contextmanager
def writable(c: Ctx, tasks: Sequence[str], *, dry_run: bool) -> Iterator[Ledger]:
    """The ledger to write to: the real one, or for ``--dry-run`` a :func:`private_copy` of ``tasks``.

    A dry run performs the very library call on the copy (so every check and refusal is the
    real one) and the real ledger is never opened for writing: its bytes stay unchanged.
    """
    ledger = c.ledger(write=not dry_run)  # a decision writes: a store must pass the fencing probe first
    if not dry_run:
        with ledger:
            yield ledger
        return
    tmp = Path(tempfile.mkdtemp(prefix="intentlog-dry-run."))
    try:
        with private_copy(ledger, tasks, tmp / "ledger") as copy:
            yield copy
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _known_call(ledger: Ledger, task: str, call: str) -> None:
    """Refuse a call the task does not have before any lock is taken (taking one rewrites the lock file)."""
    if call not in ledger.task(task).work_state().calls:
        raise UnknownCall(task, call)


def _report(c: Ctx, task: str, ev: Event, text: str, *, as_json: bool, dry_run: bool) -> None:
    """Print the event a writing command appended (or, with --dry-run, would append)."""
    if as_json:
        emit_json(_event_json(task, ev) | {"dry_run": dry_run})
        return
    if dry_run:
        body = orjson.dumps(ev.data, option=orjson.OPT_SORT_KEYS).decode()
        echo(f"dry run: would append {p(ev.kind)} to {p(task)} at seq {ev.seq}: {p(body)}; nothing was written")
        return
    echo(p(c.hint(text)))


def _take_over_after(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--take-over-after``: kept on the command's :class:`Ctx`, so the ledger it opens takes over so."""
    if value is None:
        return
    try:
        seconds = float(value)  # a bare number is seconds
    except ValueError:
        from ..retention import parse_duration

        try:
            seconds = parse_duration(value, what="--take-over-after") or 0.0
        except UsageError as exc:
            raise click.BadParameter(str(exc)) from exc
    if not seconds >= 0:
        raise click.BadParameter(f"{value!r} is not a number of seconds >= 0 (or a duration such as 30s, 5m)")
    ctx.ensure_object(Ctx).take_over_after = seconds


def _WAIT(f: F) -> F:
    """``--wait`` and ``--take-over-after``: how a command writing a task meets another writer."""
    f = click.option(
        "--take-over-after",
        callback=_take_over_after,
        expose_value=False,
        metavar="SECONDS",
        help="On an object store: take the task's lease from a writer whose stream stood still this long "
        f"(0 or 0s: now; default {DEFAULT_TAKE_OVER_AFTER:g}s, on this process's own clock). "
        "The old writer is fenced. A folder's lock dies with its holder.",
    )(f)
    return click.option(
        "--wait",
        type=click.FloatRange(min=0),
        default=10.0,
        show_default=True,
        help="Seconds to wait for the task's writer lock.",
    )(f)


@main.command()
@task_arg()
@click.argument("call")
@click.option("--served", is_flag=True, help="The provider served it.")
@click.option("--not-served", is_flag=True, help="The provider never served it.")
@click.option("--resend", is_flag=True, help="Resend, accepting the duplicate risk.")
@click.option(
    "--evidence",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --served: the response bytes the provider returned.",
)
@click.option("--note", help="Why you decided so (kept in the record).")
@click.option("--by", help="Who decided (kept in the record).")
@_WAIT
@dry_run_option
@json_option
@pass_ctx
@handle_errors
def reconcile(
    c: Ctx,
    task: str,
    call: str,
    served: bool,
    not_served: bool,
    resend: bool,
    evidence: Path | None,
    note: str | None,
    by: str | None,
    wait: float,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Record what happened to an unknown effect, so the next run can continue safely.

    Exactly one of --served, --not-served, --resend: the decision cannot be undone, so
    conflicting flags exit 2 and write nothing.

    \b
    Example:
      intentlog reconcile chapter-16 call-3 --served --evidence response.json
      intentlog reconcile chapter-16 call-3 --not-served --note "not in the provider's usage log"
      intentlog reconcile chapter-16 call-3 --not-served --dry-run
    """
    chosen = [name for name, on in (("served", served), ("not_served", not_served), ("resend", resend)) if on]
    if len(chosen) > 1:
        flags = " and ".join("--" + x.replace("_", "-") for x in chosen)
        raise click.UsageError(f"{flags} conflict: say exactly one of what happened; nothing was recorded")
    if not chosen:
        raise click.UsageError("say what happened: --served, --not-served or --resend")
    outcome = chosen[0]
    if evidence is not None and outcome != "served":
        raise click.UsageError("--evidence goes with --served")
    data: bytes | None = None
    if evidence is not None:
        if not evidence.is_file():
            raise NotFound(f"no evidence file {str(evidence)!r}: save the provider's response bytes there first")
        data = evidence.read_bytes()
    require_task(c, c.ledger(), task)
    _known_call(c.ledger(), task, call)
    with writable(c, [task], dry_run=dry_run) as ledger:
        ev = ledger.task(task, wait=wait).reconcile(call, outcome, evidence=data, note=note, by=by)
    _report(
        c,
        task,
        ev,
        f"recorded effect.reconciled ({outcome}) for {call} at seq {ev.seq}",
        as_json=as_json,
        dry_run=dry_run,
    )


@main.command()
@task_arg()
@click.argument("call", required=False)
@click.option("--reason", required=True, help="Why it is given up (kept in the record).")
@click.option("--by", help="Who decided.")
@_WAIT
@dry_run_option
@json_option
@pass_ctx
@handle_errors
def fail(
    c: Ctx, task: str, call: str | None, reason: str, by: str | None, wait: float, dry_run: bool, as_json: bool
) -> None:
    """Record that an unresolved call has failed, or (without CALL) that the whole task is given up.

    \b
    Example:
      intentlog fail chapter-16 call-3 --reason "served but the response is lost"
      intentlog fail chapter-16 --reason "the source was withdrawn"
    """
    require_task(c, c.ledger(), task)
    if call is not None:
        _known_call(c.ledger(), task, call)
    with writable(c, [task], dry_run=dry_run) as ledger:
        t = ledger.task(task, wait=wait)
        ev = t.fail_task(reason, by=by) if call is None else t.fail(call, reason, by=by)
    text = (
        f"recorded task.failed at seq {ev.seq}: task {task} is failed"
        if call is None
        else f"recorded call.failed for {call} at seq {ev.seq}"
    )
    _report(c, task, ev, text, as_json=as_json, dry_run=dry_run)


def _decide(
    c: Ctx,
    task: str,
    approval: str,
    decision: str,
    by: str | None,
    note: str | None,
    request_hash: str | None,
    wait: float,
    dry_run: bool,
    as_json: bool,
) -> None:
    ledger = c.ledger()
    require_task(c, ledger, task)
    if request_hash is not None:
        request_hash = _resolve_binding(ledger, task, approval, request_hash)
    with writable(c, [task], dry_run=dry_run) as w:
        ev = w.task(task, wait=wait).decide(approval, decision, by=by, note=note, request_hash=request_hash)
    text = (
        f"recorded approval.decided ({decision}) for {approval} at seq {ev.seq}, bound to "
        f"{ev.data['request_hash'] or 'no request'}; re-run the script to continue"
    )
    _report(c, task, ev, text, as_json=as_json, dry_run=dry_run)


def _resolve_binding(ledger: Ledger, task: str, approval: str, given: str) -> str:
    """A ``--hash`` prefix expanded against the hash the approval binds (a full digest is kept as given)."""
    from ..views import resolve_prefix

    st = ledger.task(task).status()
    a = st.operator.approvals.get(approval) if st.operator is not None else None
    bound = [a.binding] if a is not None and a.binding is not None else []
    return resolve_prefix(given, bound)


_HASH = click.option("--hash", "request_hash", help="The request hash you reviewed: refused if the request changed.")


@main.command()
@task_arg()
@click.argument("approval")
@click.option("--by", help="Who approves (kept in the record).")
@click.option("--note", help="Why (kept in the record).")
@_HASH
@_WAIT
@dry_run_option
@json_option
@pass_ctx
@handle_errors
def approve(
    c: Ctx,
    task: str,
    approval: str,
    by: str | None,
    note: str | None,
    request_hash: str | None,
    wait: float,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Record a person's approval of the exact request an approval binds.

    \b
    Example:
      intentlog approve invoices pay-7 --by alice
      intentlog approve invoices pay-7 --by alice --hash blake3:6a1f2b3c4d5e   # refused if the request changed
    """
    _decide(c, task, approval, "approve", by, note, request_hash, wait, dry_run, as_json)


@main.command()
@task_arg()
@click.argument("approval")
@click.option("--by", help="Who rejects (kept in the record).")
@click.option("--note", help="Why (kept in the record).")
@_HASH
@_WAIT
@dry_run_option
@json_option
@pass_ctx
@handle_errors
def reject(
    c: Ctx,
    task: str,
    approval: str,
    by: str | None,
    note: str | None,
    request_hash: str | None,
    wait: float,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Record a person's rejection of the exact request an approval binds.

    \b
    Example:
      intentlog reject invoices pay-7 --by bob --note "over budget"
    """
    _decide(c, task, approval, "reject", by, note, request_hash, wait, dry_run, as_json)


@main.command()
@task_arg()
@click.option("--from", "from_call", required=True, help="The call (call-N) or key (turn-N) to run again from.")
@click.option("--as", "new_id", help="The new task's id (default: TASK.fork-N).")
@click.option("--note", help="Why (kept in the new task's task.forked).")
@click.option(
    "--accept-risk",
    is_flag=True,
    help="Fork even though a call left out has an unknown effect (it may be paid twice); recorded in task.forked.",
)
@_WAIT
@dry_run_option
@json_option
@pass_ctx
@handle_errors
def fork(
    c: Ctx,
    task: str,
    from_call: str,
    new_id: str | None,
    note: str | None,
    accept_risk: bool,
    wait: float,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Start a new task that reuses TASK's record up to a call; TASK is left byte-identical.

    Run the script against the new task (with changed input) to continue from there.

    \b
    Example:
      intentlog fork chapter-16 --from call-3 --as chapter-16.v2
      intentlog fork chat-42 --from turn-5
    """
    real = c.ledger()
    require_task(c, real, task)
    if new_id is not None and real.task(new_id).exists():
        raise IntentlogError(f"task {new_id!r} already exists in {real.location}; name another with --as")
    # the default id is chosen in the real ledger, so a dry run names the task a real fork creates
    target = new_id if new_id is not None else default_fork_id(real, task)
    with writable(c, [task], dry_run=dry_run) as ledger:
        ledger.task(task, wait=wait)
        new = ledger.fork(task, from_call, target, note=note, accept_risk=accept_risk)
        forked = next(ev for ev in new.events() if ev.kind == "task.forked")
        new_task = new.id
    text = (
        f"forked {task} before {from_call} ({forked.data['upto_seq']} event(s) copied) as {new_task}; "
        f"run the script against task {new_task!r}"
    )
    _report(c, new_task, forked, text, as_json=as_json, dry_run=dry_run)


@main.command()
@task_arg()
@click.option("--note", help="What was checked.")
@click.option("--by", help="Who accepted.")
@_WAIT
@dry_run_option
@json_option
@pass_ctx
@handle_errors
def accept(c: Ctx, task: str, note: str | None, by: str | None, wait: float, dry_run: bool, as_json: bool) -> None:
    """Record that a task's results were checked and accepted.

    Refused (exit 1, nothing written) unless the task is awaiting acceptance: not while
    calls are unresolved, not twice, not for a task given up.

    \b
    Example:
      intentlog accept chapter-16 --by alice --note "read the reviews"
    """
    from ..projections.status import acceptance_refusal

    require_task(c, c.ledger(), task)
    with writable(c, [task], dry_run=dry_run) as ledger:
        t = ledger.task(task, wait=wait)
        refusal = acceptance_refusal(t.status())
        if refusal is not None:
            raise IntentlogError(refusal)
        ev = t.accept(note=note, by=by)
    _report(c, task, ev, f"recorded task.accepted at seq {ev.seq}", as_json=as_json, dry_run=dry_run)
