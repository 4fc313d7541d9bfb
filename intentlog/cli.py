"""The ``intentlog`` command line: thin over the library.

Each command parses its arguments, makes one library call and renders the result.
Errors are mapped once: an :class:`~intentlog.errors.IntentlogError` (or an OS error) is
one line on stderr and exit 1; a usage error exits 2; a refusal or a failed check exits 1.
Colour is used only on a terminal (click strips it elsewhere).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson

from ._text import format_table
from .errors import IntentlogError, InvalidDigest, InvalidTaskId, UsageError
from .eventlog.format import Event
from .ledger import DEFAULT_ROOT, Ledger, open_ledger

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


class _Ctx:
    def __init__(self, root: Path) -> None:
        self.root = root

    def ledger(self, *, create: bool = False) -> Ledger:
        return open_ledger(self.root, create=create)


def _emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode())


def json_option(f: F) -> F:
    """The one shared ``--json`` option: machine-readable output for scripts."""
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)


def _fail(message: str) -> None:
    click.echo(f"intentlog: error: {message}", err=True)
    sys.exit(EXIT_PROBLEMS)


def handle_errors(f: F) -> F:
    """Map library and OS errors to one clear line on stderr and exit 1: never a traceback."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except (InvalidTaskId, InvalidDigest, UsageError) as exc:
            # a malformed id, digest or option value is a usage error, whichever command met it
            click.echo(f"intentlog: error: {exc}", err=True)
            sys.exit(EXIT_USAGE)
        except IntentlogError as exc:
            _fail(str(exc))
        except OSError as exc:
            _fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
        return None

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--root",
    type=click.Path(path_type=Path),
    envvar="INTENTLOG_ROOT",
    default=DEFAULT_ROOT,
    show_default=True,
    help="The ledger folder (else $INTENTLOG_ROOT, else ./.intentlog).",
)
@click.version_option(package_name="intentlog")
@click.pass_context
def main(ctx: click.Context, root: Path) -> None:
    """Durable, resumable records of work that calls things that cannot be taken back.

    \b
    Example:
      intentlog demo                 # see what it is for, in under 30 seconds
      intentlog --root evidence status chapter-16
    """
    ctx.obj = _Ctx(root)


pass_ctx = click.make_pass_decorator(_Ctx)


# -- ledger ---------------------------------------------------------------------------


@main.command()
@pass_ctx
@handle_errors
def init(c: _Ctx) -> None:
    """Create a ledger folder (with .gitignore and .gitattributes for git-kept evidence).

    \b
    Example:
      intentlog --root evidence init
    """
    ledger = c.ledger(create=True)
    click.echo(f"ledger ready at {ledger.root}")


@main.command()
@json_option
@pass_ctx
@handle_errors
def tasks(c: _Ctx, as_json: bool) -> None:
    """One line per task: id, events, last activity, state, phase, next operation.

    \b
    Example:
      intentlog tasks --json
    """
    ledger = c.ledger()
    rows = []
    for tid in ledger.task_ids():
        try:
            st = ledger.task(tid).status()
        except IntentlogError as exc:  # one unreadable task must not hide the others
            rows.append(
                {
                    "task": tid,
                    "events": 0,
                    "last_activity": None,
                    "state": f"unreadable: {exc}",
                    "phase": None,
                    "next_operation": "run 'intentlog verify'",
                }
            )
            continue
        rows.append(
            {
                "task": tid,
                "events": st.work.events,
                "last_activity": st.work.last_ts,
                "state": st.state,
                "phase": st.phase,
                "next_operation": st.work.next_operation,
            }
        )
    if as_json:
        _emit_json(rows)
        return
    if not rows:
        click.echo("no tasks")
        return
    _table(
        ["task", "events", "last activity", "state", "phase", "next operation"],
        [
            [
                str(r["task"]),
                str(r["events"]),
                str(r["last_activity"] or "-"),
                str(r["state"]),
                str(r["phase"] or "-"),
                str(r["next_operation"]),
            ]
            for r in rows
        ],
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    first, *rest = format_table(header, rows)
    click.echo(click.style(first, bold=True))
    for line in rest:
        click.echo(line)


_STATE_COLOUR = {
    "complete": "green",
    "paused for review": "red",
    "failed": "red",
    "interrupted": "yellow",
    "awaiting approval": "magenta",
    "running": "cyan",
}


@main.command()
@click.argument("task")
@json_option
@pass_ctx
@handle_errors
def status(c: _Ctx, task: str, as_json: bool) -> None:
    """The operator view: state, phase, last outcome, what is unresolved outside, the safe next step.

    \b
    Example:
      intentlog status chapter-16
    """
    ledger = c.ledger()
    t = ledger.task(task)
    if not t.exists():
        raise IntentlogError(f"no task {task!r} in {ledger.root}; see 'intentlog tasks'")
    st = t.status()
    if as_json:
        _emit_json(st.to_json())
        return
    why = f" ({st.reason})" if st.reason else ""
    click.echo(f"task            {task}")
    click.echo(f"state           {click.style(st.state, fg=_STATE_COLOUR.get(st.state))}{why}")
    click.echo(f"phase           {st.phase or '-'}")
    cp = st.checkpoint
    click.echo(f"checkpoint      {f'{cp.phase} ({cp.status}) at seq {cp.seq}' if cp is not None else '-'}")
    for a in st.awaiting_approvals:
        click.echo(f"approval        {a.approval_id} [{a.status}]: {a.question} (binds {a.binding or 'nothing'})")
    forked = st.operator.forked if st.operator is not None else None
    if forked is not None:
        click.echo(f"forked from     {forked.get('from_task')} before {forked.get('from_call')}")
    click.echo(f"last outcome    {st.last_outcome or '-'}")
    click.echo(f"unresolved      {st.unresolved_action or '-'}")
    click.echo(f"next step       {click.style(st.next_step, bold=True)}")
    ws = st.work
    if ws.calls or ws.compilations:
        click.echo("")
        rows = [
            [
                c_.call_id,
                c_.key,
                c_.stage,
                c_.next_operation,
                c_.provider_effect,
                str(c_.attempts),
                c_.superseded_by or c_.resumes or "",
            ]
            for c_ in ws.calls.values()
        ]
        rows += [
            [k.compilation_id, "(compilation)", k.stage, k.next_operation, "none", "-", ", ".join(k.missing)]
            for k in ws.compilations.values()
        ]
        _table(["id", "key", "stage", "next operation", "provider effect", "attempts", "link/missing"], rows)


def _summary(ev: Event, width: int = 100) -> str:
    data = {k: v for k, v in ev.data.items()}
    for k, v in list(data.items()):
        if isinstance(v, dict) and "digest" in v:
            data[k] = f"{v['digest'][:19]}… ({v.get('size')} B)"
    text = orjson.dumps(data, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


@main.command()
@click.argument("task")
@click.option("--kind", "kinds", multiple=True, help="Only events of this kind (repeatable).")
@click.option("--call", "call_id", help="Only events of this call (call-N).")
@click.option("--since", type=int, default=0, show_default=True, help="Start at this seq.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events as they are appended.")
@click.option("--timeout", type=float, default=None, help="With --follow: stop after this many idle seconds.")
@json_option
@pass_ctx
@handle_errors
def log(
    c: _Ctx,
    task: str,
    kinds: tuple[str, ...],
    call_id: str | None,
    since: int,
    follow: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """The events of a task, readable (or one JSON object per line with --json).

    \b
    Example:
      intentlog log chapter-16 --call call-3
      intentlog log chapter-16 --kind attempt.started --json
    """
    t = c.ledger().task(task)
    if not t.exists():
        raise IntentlogError(f"no task {task!r}; see 'intentlog tasks'")

    def wanted(ev: Event) -> bool:
        return (not kinds or ev.kind in kinds) and (call_id is None or ev.data.get("call") == call_id)

    def show(ev: Event) -> None:
        if as_json:
            click.echo(orjson.dumps(ev.to_json() | {"digest": ev.digest}, option=orjson.OPT_SORT_KEYS).decode())
        else:
            click.echo(f"{ev.seq:>6}  {ev.ts}  {click.style(ev.kind.ljust(26), fg='cyan')}  {_summary(ev)}")

    nxt = since
    for ev in t.events(since=since):
        nxt = ev.seq + 1
        if wanted(ev):
            show(ev)
    if not follow:
        return
    idle_since = time.monotonic()
    try:
        while timeout is None or time.monotonic() - idle_since < timeout:
            time.sleep(0.2)
            for ev in t.events(since=nxt):
                nxt = ev.seq + 1
                idle_since = time.monotonic()
                if wanted(ev):
                    show(ev)
    except KeyboardInterrupt:
        return


@main.command()
@click.argument("digest")
@pass_ctx
@handle_errors
def show(c: _Ctx, digest: str) -> None:
    """Write an artifact's bytes to stdout (checked against its digest first).

    \b
    Example:
      intentlog show blake3:6a1f… > response.json
    """
    data = c.ledger().artifacts.get(digest)
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


# -- checks ---------------------------------------------------------------------------


@main.command()
@click.argument("tasks", nargs=-1)
@click.option(
    "--bundle",
    type=click.Path(file_okay=False, path_type=Path),
    help="Check an exported bundle (this folder) instead of the ledger, with its states, receipts and hashes.json.",
)
@json_option
@pass_ctx
@handle_errors
def verify(c: _Ctx, tasks: tuple[str, ...], bundle: Path | None, as_json: bool) -> None:
    """Check chains, event shapes, the identity graph and every artifact's bytes; write nothing.

    Exit 0 when nothing is wrong, 1 when problems were found.

    \b
    Example:
      intentlog --root evidence verify
      intentlog verify chapter-16 --json
      intentlog verify --bundle bundle
    """
    from .errors import InvalidTaskId, NotALedger, UsageError
    from .projections.verify import verify_path

    if bundle is not None and tasks:
        raise click.UsageError("--bundle checks the whole bundle; name no TASK")
    progress = _progress if (sys.stderr.isatty() and not as_json) else None
    try:
        if bundle is not None:
            from .bundle import check_bundle

            report = check_bundle(bundle, progress=progress)
        else:
            # verify_path, not open_ledger: a check must not even create the empty folders a git clone lacks
            report = verify_path(c.root, list(tasks) or None, progress=progress)
    except (UsageError, InvalidTaskId, NotALedger) as exc:
        raise click.UsageError(str(exc)) from exc
    if progress is not None:
        click.echo("", err=True)
    if as_json:
        _emit_json(report.to_json())
    else:
        click.echo(report.render())
    sys.exit(report.exit_code)


@main.command()
@click.argument("tasks", nargs=-1)
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
    help="A provider's receipt log (JSON lines with a body_hash) to carry in the bundle; repeatable.",
)
@click.option("--no-check", is_flag=True, help="Do not run the library's check over the written bundle.")
@json_option
@pass_ctx
@handle_errors
def export(
    c: _Ctx,
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
    from .bundle import export_bundle
    from .errors import InvalidTaskId, UsageError

    if out is None and tar_file is None:
        raise click.UsageError("say where the bundle goes: --out DIR, --tar FILE, or both")
    try:
        result = export_bundle(
            c.root, list(tasks) or None, out=out, tar=tar_file, receipts=receipts, check=not no_check
        )
    except (UsageError, InvalidTaskId) as exc:
        raise click.UsageError(str(exc)) from exc
    if as_json:
        _emit_json(result.to_json())
    else:
        click.echo(result.render(), nl=False)
    sys.exit(result.exit_code)


def _progress(what: str, done: int, total: int) -> None:
    click.echo(f"\rverifying {what}: {done}/{total}", nl=False, err=True)


@main.command()
@pass_ctx
@handle_errors
def seal(c: _Ctx) -> None:
    """Write heads.json (each stream's last seq and head digest) so truncation is detectable.

    Commit the folder to git, or sign heads.json, to anchor it.

    \b
    Example:
      intentlog seal && git add evidence && git commit -m "seal"
    """
    from .heads import seal as seal_heads

    path = seal_heads(c.ledger())
    click.echo(f"sealed {path}")


@main.command()
@click.argument("task")
@click.option("--accept-damage", is_flag=True, help="Also move aside damage a crash cannot cause, recording it.")
@click.option("--dry-run", is_flag=True, help="Say what would be moved; write nothing.")
@json_option
@pass_ctx
@handle_errors
def repair(c: _Ctx, task: str, accept_damage: bool, dry_run: bool, as_json: bool) -> None:
    """Move a stream's bad tail to quarantine/ and record it (stream.repaired).

    Without --accept-damage only a torn tail (what a crash leaves) is repaired; a stream
    writers refuse (a line that does not chain, damage in the middle, a cut sealed
    stream) is refused here too (exit 1) until you pass --accept-damage.

    \b
    Example:
      intentlog repair chapter-16 --dry-run
      intentlog repair chapter-16 --accept-damage
    """
    with c.ledger() as ledger:
        report = ledger.repair(task, accept_damage=accept_damage, dry_run=dry_run)
    if as_json:
        _emit_json({**report.to_json(), "dry_run": dry_run})
    elif report.action == "none":
        click.echo(f"task {task!r}: nothing to repair")
    else:
        verb = "would move" if dry_run else "moved"
        what = "a torn tail" if report.action == "torn_tail" else "accepted damage"
        click.echo(
            f"task {task!r}: {verb} {what} from line {report.line} ({report.size} bytes, {report.digest}) "
            f"to {report.quarantined}: {report.reason}"
        )


# -- operator decisions ----------------------------------------------------------------


@main.command()
@click.argument("task")
@click.argument("call")
@click.option("--served", "outcome", flag_value="served", help="The provider served it.")
@click.option("--not-served", "outcome", flag_value="not_served", help="The provider never served it.")
@click.option("--resend", "outcome", flag_value="resend", help="Resend, accepting the duplicate risk.")
@click.option(
    "--evidence",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="With --served: the response bytes the provider returned.",
)
@click.option("--note", help="Why you decided so (kept in the record).")
@click.option("--by", help="Who decided (kept in the record).")
@pass_ctx
@handle_errors
def reconcile(
    c: _Ctx, task: str, call: str, outcome: str | None, evidence: Path | None, note: str | None, by: str | None
) -> None:
    """Record what happened to an unknown effect, so the next run can continue safely.

    \b
    Example:
      intentlog reconcile chapter-16 call-3 --served --evidence response.json
      intentlog reconcile chapter-16 call-3 --not-served --note "not in the provider's usage log"
    """
    if outcome is None:
        raise click.UsageError("say what happened: --served, --not-served or --resend")
    if evidence is not None and outcome != "served":
        raise click.UsageError("--evidence goes with --served")
    with c.ledger() as ledger:
        data = evidence.read_bytes() if evidence is not None else None
        ev = ledger.task(task).reconcile(call, outcome, evidence=data, note=note, by=by)
    click.echo(f"recorded effect.reconciled ({outcome}) for {call} at seq {ev.seq}")


@main.command()
@click.argument("task")
@click.argument("call", required=False)
@click.option("--reason", required=True, help="Why it is given up (kept in the record).")
@click.option("--by", help="Who decided.")
@pass_ctx
@handle_errors
def fail(c: _Ctx, task: str, call: str | None, reason: str, by: str | None) -> None:
    """Record that an unresolved call has failed, or (without CALL) that the whole task is given up.

    \b
    Example:
      intentlog fail chapter-16 call-3 --reason "served but the response is lost"
      intentlog fail chapter-16 --reason "the source was withdrawn"
    """
    with c.ledger() as ledger:
        t = ledger.task(task)
        if call is None:
            if not t.exists():
                raise IntentlogError(f"no task {task!r}; see 'intentlog tasks'")
            ev = t.fail_task(reason, by=by)
            click.echo(f"recorded task.failed at seq {ev.seq}: task {task} is failed")
            return
        ev = t.fail(call, reason, by=by)
    click.echo(f"recorded call.failed for {call} at seq {ev.seq}")


def _decide(
    c: _Ctx,
    task: str,
    approval: str,
    decision: str,
    by: str | None,
    note: str | None,
    request_hash: str | None,
    wait: float,
) -> None:
    with c.ledger() as ledger:
        t = ledger.task(task, wait=wait)
        if not t.exists():
            raise IntentlogError(f"no task {task!r}; see 'intentlog tasks'")
        ev = t.decide(approval, decision, by=by, note=note, request_hash=request_hash)
    click.echo(
        f"recorded approval.decided ({decision}) for {approval} at seq {ev.seq}, bound to "
        f"{ev.data['request_hash'] or 'no request'}; re-run the script to continue"
    )


_HASH = click.option("--hash", "request_hash", help="The request hash you reviewed: refused if the request changed.")
_WAIT = click.option(
    "--wait", type=float, default=10.0, show_default=True, help="Seconds to wait for the task's writer lock."
)


@main.command()
@click.argument("task")
@click.argument("approval")
@click.option("--by", help="Who approves (kept in the record).")
@click.option("--note", help="Why (kept in the record).")
@_HASH
@_WAIT
@pass_ctx
@handle_errors
def approve(
    c: _Ctx, task: str, approval: str, by: str | None, note: str | None, request_hash: str | None, wait: float
) -> None:
    """Record a person's approval of the exact request an approval binds.

    \b
    Example:
      intentlog approve invoices pay-7 --by alice
      intentlog approve invoices pay-7 --by alice --hash blake3:6a1f…   # refused if the request changed
    """
    _decide(c, task, approval, "approve", by, note, request_hash, wait)


@main.command()
@click.argument("task")
@click.argument("approval")
@click.option("--by", help="Who rejects (kept in the record).")
@click.option("--note", help="Why (kept in the record).")
@_HASH
@_WAIT
@pass_ctx
@handle_errors
def reject(
    c: _Ctx, task: str, approval: str, by: str | None, note: str | None, request_hash: str | None, wait: float
) -> None:
    """Record a person's rejection of the exact request an approval binds.

    \b
    Example:
      intentlog reject invoices pay-7 --by bob --note "over budget"
    """
    _decide(c, task, approval, "reject", by, note, request_hash, wait)


@main.command()
@click.argument("task")
@click.option("--from", "from_call", required=True, help="The call (call-N) or key (turn-N) to run again from.")
@click.option("--as", "new_id", help="The new task's id (default: TASK.fork-N).")
@click.option("--note", help="Why (kept in the new task's task.forked).")
@json_option
@pass_ctx
@handle_errors
def fork(c: _Ctx, task: str, from_call: str, new_id: str | None, note: str | None, as_json: bool) -> None:
    """Start a new task that reuses TASK's record up to a call; TASK is left byte-identical.

    Run the script against the new task (with changed input) to continue from there.

    \b
    Example:
      intentlog fork chapter-16 --from call-3 --as chapter-16.v2
      intentlog fork chat-42 --from turn-5
    """
    with c.ledger() as ledger:
        new = ledger.fork(task, from_call, new_id, note=note)
        forked = next(ev.data for ev in new.events() if ev.kind == "task.forked")
    if as_json:
        _emit_json({"task": new.id, **forked})
        return
    click.echo(
        f"forked {task} before {from_call} ({forked['upto_seq']} event(s) copied) as {new.id}; "
        f"run the script against task {new.id!r}"
    )


@main.command()
@click.argument("task")
@click.option("--note", help="What was checked.")
@click.option("--by", help="Who accepted.")
@pass_ctx
@handle_errors
def accept(c: _Ctx, task: str, note: str | None, by: str | None) -> None:
    """Record that a task's results were checked and accepted.

    \b
    Example:
      intentlog accept chapter-16 --by alice --note "read the reviews"
    """
    with c.ledger() as ledger:
        t = ledger.task(task)
        if not t.exists():
            raise IntentlogError(f"no task {task!r}; see 'intentlog tasks'")
        ev = t.accept(note=note, by=by)
    click.echo(f"recorded task.accepted at seq {ev.seq}")


# -- retention ------------------------------------------------------------------------


def _check_duration(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Validate --max-age / --grace at parse time, so a bad value is a usage error (exit 2)."""
    from .errors import UsageError
    from .retention import parse_duration

    if value is not None:
        name = param.name or ""
        try:
            parse_duration(value, what=f"--{name.replace('_', '-')}", allow_none=name == "max_age")
        except UsageError as exc:
            raise click.BadParameter(str(exc)) from exc
    return value


def _check_size(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Validate --max-size at parse time (exit 2 on a bad value)."""
    from .errors import UsageError
    from .retention import parse_size

    if value is not None:
        try:
            parse_size(value, what="--max-size", allow_none=True)
        except UsageError as exc:
            raise click.BadParameter(str(exc)) from exc
    return value


@main.command()
@click.option(
    "--max-age",
    callback=_check_duration,
    help="Expire tasks idle longer than this, by the timestamps inside their streams (30d, 12h, 90m; "
    "'none': no age limit). Default: intentlog.json 'retention', else 30d.",
)
@click.option(
    "--max-size",
    callback=_check_size,
    help="Keep streams and objects together under this, evicting the oldest eligible tasks first "
    "(500MiB, 2GiB, 10MB; 'none'). Default: intentlog.json 'retention', else 500MiB.",
)
@click.option(
    "--grace",
    callback=_check_duration,
    help="Spare unreferenced blobs, and tasks, touched more recently than this. Default: intentlog.json "
    "'retention', else 1h.",
)
@click.option(
    "--apply",
    "do_apply",
    is_flag=True,
    help="Delete: re-plan under the ledger's gc lock and carry out exactly that plan (recorded in gc.jsonl).",
)
@json_option
@pass_ctx
@handle_errors
def gc(c: _Ctx, max_age: str | None, max_size: str | None, grace: str | None, do_apply: bool, as_json: bool) -> None:
    """Delete old task streams and unreferenced artifacts; without --apply, only print the plan.

    Never deleted: a task with an unknown effect or paused for review, a task marked with
    'intentlog keep', a task open for writing, and any artifact a kept task refers to.
    Exit 1 when the plan is refused. See docs/retention.md.

    \b
    Example:
      intentlog gc                          # the plan: what would go, why, the bytes freed
      intentlog gc --max-age 14d --apply    # carry it out
    """
    from .retention import apply_gc, plan_gc

    ledger = c.ledger()
    if do_apply:
        result = apply_gc(ledger, max_age=max_age, max_size=max_size, grace=grace)
        if as_json:
            _emit_json(result.to_json())
        else:
            click.echo(result.render())
        return
    plan = plan_gc(ledger, max_age=max_age, max_size=max_size, grace=grace)
    if as_json:
        _emit_json(plan.to_json())
    else:
        click.echo(plan.render())
    sys.exit(EXIT_PROBLEMS if plan.refused else EXIT_OK)


@main.command()
@click.argument("task", required=False)
@click.option("--note", help="Why it is kept (stored in keep.json).")
@click.option("--remove", is_flag=True, help="Release the task: gc may collect it again.")
@json_option
@pass_ctx
@handle_errors
def keep(c: _Ctx, task: str | None, note: str | None, remove: bool, as_json: bool) -> None:
    """Mark a task so that gc never deletes it; without TASK, list the kept tasks.

    The mark lives in keep.json at the ledger root, outside the task's stream.

    \b
    Example:
      intentlog keep chapter-16 --note "evidence for the 2026 audit"
      intentlog keep chapter-16 --remove
      intentlog keep --json
    """
    from .retention import keep as keep_task
    from .retention import kept_tasks, unkeep

    ledger = c.ledger()
    if task is None:
        if note is not None or remove:
            raise click.UsageError("--note and --remove need a TASK")
        marks = kept_tasks(ledger)
        if as_json:
            _emit_json([m.to_json() for m in marks.values()])
        elif not marks:
            click.echo("no kept tasks")
        else:
            _table(["task", "since", "note"], [[m.task, m.since, m.note or ""] for m in marks.values()])
        return
    if remove:
        if note is not None:
            raise click.UsageError("--note goes with keeping a task, not with --remove")
        removed = unkeep(ledger, task)
        if as_json:
            _emit_json({"task": task, "kept": False, "changed": removed})
        else:
            click.echo(f"released {task}: gc may collect it again" if removed else f"{task} was not kept")
        return
    mark = keep_task(ledger, task, note=note)
    if as_json:
        _emit_json(mark.to_json() | {"kept": True})
    else:
        click.echo(f"kept {task}: gc will never delete it (keep.json); 'intentlog keep {task} --remove' releases it")


# -- demo -------------------------------------------------------------------------------


@main.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@json_option
@handle_errors
def demo(directory: Path | None, as_json: bool) -> None:
    """Reproduce the crash experiment: real processes, real kills, a provider with its own receipts.

    Leaves one folder per case under DIRECTORY (default ./intentlog-demo) to inspect
    with 'status', 'log' and 'verify'. Exit 1 if any claim fails its check.

    \b
    Example:
      intentlog demo /tmp/intentlog-demo
      intentlog --root /tmp/intentlog-demo/1-killed-after-manifest/ledger status chapter-16
    """
    from .demo.run import render, run_demo

    result = run_demo(directory or Path("intentlog-demo"))
    if as_json:
        _emit_json(result.to_json())
    else:
        click.echo(render(result))
    sys.exit(EXIT_OK if result.ok else EXIT_PROBLEMS)


if __name__ == "__main__":  # pragma: no cover
    main(prog_name=os.path.basename(sys.argv[0]) or "intentlog")
