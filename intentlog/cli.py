"""The ``intentlog`` command line: thin over the library.

Each command parses its arguments, makes one library call and renders the result.
Errors are mapped once: an :class:`~intentlog.errors.IntentlogError` (or an OS error) is
one line on stderr and exit 1; a usage error exits 2; a refusal or a failed check exits 1.
Colour is used only on a terminal (click strips it elsewhere).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
from click.shell_completion import CompletionItem

from ._text import format_table
from .errors import IntentlogError, InvalidDigest, InvalidTaskId, NotALedger, TaskBusy, UnknownCall, UsageError
from .eventlog.format import Event, check_task_id
from .fork import default_fork_id
from .ledger import DEFAULT_ROOT, Ledger, open_ledger

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


#: Exit status after a closed pipe, as git and a shell report a SIGPIPE death (128 + 13).
EXIT_PIPE = 141

#: Commands whose names, after "intentlog ", start a hint that the CLI completes with --root.
_COMMANDS = (
    "accept", "approve", "demo", "export", "fail", "fork", "gc", "init", "keep", "log", "reconcile",
    "reject", "repair", "seal", "show", "status", "tasks", "verify",
)  # fmt: skip
_HINT_RE = re.compile(r"\bintentlog (?=(?:" + "|".join(_COMMANDS) + r")\b)")


class _Ctx:
    def __init__(self, root: Path, *, explicit: bool) -> None:
        self.root = root
        self.explicit = explicit  # the ledger is not ./.intentlog: hints must name it

    def ledger(self, *, create: bool = False) -> Ledger:
        return open_ledger(self.root, create=create)

    @property
    def prog(self) -> str:
        """How a hint starts: ``intentlog``, plus ``--root PATH`` when the ledger is not the default."""
        return f"intentlog --root {shlex.quote(str(self.root))}" if self.explicit else "intentlog"

    def hint(self, text: str) -> str:
        """``text`` with every ``intentlog COMMAND`` completed so that it runs as printed."""
        if not self.explicit:
            return text
        return _HINT_RE.sub(self.prog + " ", text)


def _hint(text: str) -> str:
    ctx = click.get_current_context(silent=True)
    c = ctx.find_object(_Ctx) if ctx is not None else None
    return c.hint(text) if c is not None else text


def _emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode())


def json_option(f: F) -> F:
    """The one shared ``--json`` option: machine-readable output for scripts."""
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)


def dry_run_option(f: F) -> F:
    """The one shared ``--dry-run`` option of the writing commands."""
    return click.option("--dry-run", is_flag=True, help="Print the event this would append, and write nothing.")(f)


class NotFound(IntentlogError):
    """A task, call, approval or digest named on the command line does not exist (exit 1)."""


def _fail(message: str, code: int = EXIT_PROBLEMS) -> None:
    """One error line on stderr; with ``--json``, also ``{"error", "exit_code"}`` on stdout, so a script's
    JSON parser meets JSON whether the command succeeded or not."""
    text = _hint(message)
    click.echo(f"intentlog: error: {text}", err=True)
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.params.get("as_json"):
        _emit_json({"error": text, "exit_code": code})
    sys.exit(code)


def _quiet_pipe() -> None:
    """The reader of stdout went away: end quietly, as git does (no message, status 141)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(EXIT_PIPE)


def _no_ledger_hint(exc: NotALedger) -> str:
    return (
        f"{exc}; point at an existing ledger with 'intentlog --root PATH ...' or INTENTLOG_ROOT=PATH, "
        f"or create one here with 'intentlog init'"
    )


def handle_errors(f: F) -> F:
    """Map library and OS errors to one clear line on stderr: exit 2 for usage, else 1; never a traceback."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except BrokenPipeError:
            _quiet_pipe()
        except click.UsageError as exc:  # malformed usage met inside a command: click prints it, exit 2
            ctx = click.get_current_context(silent=True)
            if ctx is not None and ctx.params.get("as_json"):
                _emit_json({"error": exc.format_message(), "exit_code": EXIT_USAGE})
            raise
        except (InvalidTaskId, InvalidDigest, UsageError) as exc:
            # a malformed id, digest or option value is a usage error, whichever command met it
            _fail(str(exc), EXIT_USAGE)
        except NotALedger as exc:
            _fail(_no_ledger_hint(exc))
        except TaskBusy as exc:
            _fail(f"{exc}: retry with --wait SECONDS (this command takes the task's writer lock)")
        except IntentlogError as exc:
            _fail(str(exc))
        except OSError as exc:
            _fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
        return None

    return wrapper  # type: ignore[return-value]


def _complete_task(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of task ids from the ledger the command line names (never creates one)."""
    root = ctx.find_root().params.get("root") or os.environ.get("INTENTLOG_ROOT") or DEFAULT_ROOT
    try:
        ids = open_ledger(Path(root), create=False).task_ids()
    except (IntentlogError, OSError):
        return []
    return [CompletionItem(i) for i in ids if i.startswith(incomplete)]


def _task_arg(name: str = "task", **kw: Any) -> Callable[[F], F]:
    return click.argument(name, shell_complete=_complete_task, **kw)


_DEFAULT_ROOT_SHOWN = os.environ.get("INTENTLOG_ROOT") or str(DEFAULT_ROOT)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--root",
    type=click.Path(path_type=Path),
    envvar="INTENTLOG_ROOT",
    default=None,
    show_default=_DEFAULT_ROOT_SHOWN,
    help="The ledger folder (else $INTENTLOG_ROOT, else ./.intentlog).",
)
@click.version_option(package_name="intentlog")
@click.pass_context
def main(ctx: click.Context, root: Path | None) -> None:
    """Durable, resumable records of work that calls things that cannot be taken back.

    Exit status: 0 ok; 1 problems found, refused, or not found; 2 malformed usage.
    Colour only on a terminal, never with NO_COLOR set.

    \b
    Example:
      intentlog demo                 # see what it is for, in seconds
      intentlog --root evidence status chapter-16
    """
    if os.environ.get("NO_COLOR"):
        ctx.color = False
    explicit = root is not None and Path(root) != Path(DEFAULT_ROOT)
    ctx.obj = _Ctx(Path(root) if root is not None else Path(DEFAULT_ROOT), explicit=explicit)


pass_ctx = click.make_pass_decorator(_Ctx)


# -- ledger ---------------------------------------------------------------------------


@main.command()
@json_option
@pass_ctx
@handle_errors
def init(c: _Ctx, as_json: bool) -> None:
    """Create a ledger folder (with .gitignore and .gitattributes for git-kept evidence).

    \b
    Example:
      intentlog --root evidence init
    """
    ledger = c.ledger(create=True)
    if as_json:
        _emit_json({"root": str(ledger.root), "created": True})
        return
    click.echo(f"ledger ready at {ledger.root}")


def _event_json(task: str, ev: Event) -> dict[str, Any]:
    """An event as the writing commands print it with --json: the stored object, its digest and task."""
    return {"task": task, **ev.to_json(), "digest": ev.digest}


def _existing(c: _Ctx, ledger: Ledger, task: str) -> None:
    """Refuse (exit 1) a well-formed task id with no stream; a malformed one is exit 2 (InvalidTaskId)."""
    if not ledger.task(task).exists():
        raise NotFound(f"no task {task!r} in {ledger.root}; see 'intentlog tasks'")


@main.command()
@json_option
@pass_ctx
@handle_errors
def tasks(c: _Ctx, as_json: bool) -> None:
    """One line per task: id, events, last activity, state, stream, phase, next operation.

    The state is the one 'status' and 'gc' name. A torn or unreadable stream is marked in
    the stream column; its problem is in the JSON 'problem' field.

    \b
    Example:
      intentlog tasks --json
    """
    from .views import task_rows

    rows = task_rows(c.ledger())
    if as_json:
        _emit_json([r.to_json() for r in rows])
        return
    if not rows:
        click.echo("no tasks")
        return
    _table(
        ["task", "events", "last activity", "state", "stream", "phase", "next operation"],
        [
            [
                r.task,
                str(r.events),
                (r.status.work.last_ts if r.status is not None else None) or "-",
                click.style(r.state, fg=_STATE_COLOUR.get(r.state)),
                r.stream,
                (r.status.phase if r.status is not None else None) or "-",
                r.next_operation,
            ]
            for r in rows
        ],
    )
    damaged = [r for r in rows if r.problem is not None]
    for r in damaged:
        click.echo(f"  {r.task}: {r.problem}", err=True)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    first, *rest = format_table(header, [[click.unstyle(x) for x in row] for row in rows])
    click.echo(click.style(first, bold=True))
    for line, row in zip(rest, rows, strict=False):
        for cell in row:
            plain = click.unstyle(cell)
            if plain != cell:
                line = line.replace(plain, cell, 1)
        click.echo(line)


_STATE_COLOUR = {
    "complete": "green",
    "paused for review": "red",
    "failed": "red",
    "unreadable": "red",
    "interrupted": "yellow",
    "awaiting approval": "magenta",
    "running": "cyan",
}


@main.command()
@_task_arg()
@json_option
@pass_ctx
@handle_errors
def status(c: _Ctx, task: str, as_json: bool) -> None:
    """The operator view: state, phase, last outcome, what is unresolved outside, the safe next step.

    Exit 1 when the task does not exist or its stream cannot be read.

    \b
    Example:
      intentlog status chapter-16
    """
    from .views import task_row

    ledger = c.ledger()
    _existing(c, ledger, task)
    row = task_row(ledger, task)
    st = row.status
    if as_json:
        out = st.to_json() if st is not None else {"task": task, "state": row.state, "next_step": row.next_step}
        out["next_step"] = c.hint(str(out["next_step"]))
        _emit_json(out | {"stream": row.stream, "problem": row.problem})
        sys.exit(EXIT_OK if st is not None else EXIT_PROBLEMS)
    if st is None:
        click.echo(f"task            {task}")
        click.echo(f"state           {click.style(row.state, fg='red')}")
        click.echo(f"stream          {row.stream}: {row.problem}")
        click.echo(f"next step       {click.style(c.hint(row.next_step), bold=True)}")
        sys.exit(EXIT_PROBLEMS)
    why = f" ({st.reason})" if st.reason else ""
    click.echo(f"task            {task}")
    click.echo(f"state           {click.style(st.state, fg=_STATE_COLOUR.get(st.state))}{why}")
    if row.problem is not None:
        click.echo(f"stream          {row.stream}: {row.problem}")
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
    click.echo(f"next operation  {st.next_operation}")
    click.echo(f"next step       {click.style(c.hint(st.next_step), bold=True)}")
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


_SUMMARY_DEPTH = 64


def _brief(v: Any, depth: int = 0) -> Any:
    """A JSON value made printable: refs shortened, deep nesting cut, never a failure on user data."""
    if depth > _SUMMARY_DEPTH:
        return "…"
    if isinstance(v, dict):
        d = v.get("digest")
        if isinstance(d, str) and d.startswith("blake3:") and isinstance(v.get("size"), int):
            return f"{d[:19]}… ({v['size']} B)"
        return {str(k): _brief(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_brief(x, depth + 1) for x in v]
    return v


def _summary(ev: Event, width: int = 100) -> str:
    try:
        text = orjson.dumps(_brief(ev.data), option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, ValueError):  # pragma: no cover - _brief bounds the depth; this is the last guard
        text = "(data not printable; see --json)"
    return text if len(text) <= width else text[: width - 1] + "…"


@main.command()
@_task_arg()
@click.option("--kind", "kinds", multiple=True, help="Only events of this kind (repeatable).")
@click.option("--call", "call_id", help="Only events of this call (call-N).")
@click.option("--since", type=click.IntRange(min=0), default=0, show_default=True, help="Start at this seq.")
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

    Digests are shortened to the prefix 'show' accepts.

    \b
    Example:
      intentlog log chapter-16 --call call-3
      intentlog log chapter-16 --kind attempt.started --json
      intentlog log chapter-16 | head -1
    """
    ledger = c.ledger()
    _existing(c, ledger, task)
    t = ledger.task(task)

    def wanted(ev: Event) -> bool:
        return (not kinds or ev.kind in kinds) and (call_id is None or ev.data.get("call") == call_id)

    def show(ev: Event) -> None:
        if as_json:
            try:
                line = orjson.dumps(ev.to_json() | {"digest": ev.digest}, option=orjson.OPT_SORT_KEYS).decode()
            except (TypeError, ValueError):  # nested deeper than orjson writes: cut, and say so
                cut = ev.to_json() | {"data": _brief(ev.data), "digest": ev.digest, "data_truncated": True}
                line = orjson.dumps(cut, option=orjson.OPT_SORT_KEYS).decode()
            click.echo(line)
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
@json_option
@pass_ctx
@handle_errors
def show(c: _Ctx, digest: str, as_json: bool) -> None:
    """Write an artifact's bytes to stdout (checked against its digest first).

    DIGEST may be a unique prefix, with or without 'blake3:', at least as long as 'log'
    prints; an ambiguous prefix exits 2 and lists the candidates.

    \b
    Example:
      intentlog show blake3:6a1f2b3c4d5e > response.json
      intentlog show 6a1f2b3c4d5e --json
    """
    from .views import resolve_digest

    ledger = c.ledger()
    full = resolve_digest(ledger, digest)
    data = ledger.artifacts.get(full)
    if as_json:
        try:
            text: str | None = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        out: dict[str, Any] = {"digest": full, "size": len(data), "text": text}
        if text is None:
            import base64

            out["base64"] = base64.b64encode(data).decode()
        _emit_json(out)
        return
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


# -- checks ---------------------------------------------------------------------------


@main.command()
@click.argument("tasks", nargs=-1)
@click.option(
    "--bundle",
    type=click.Path(path_type=Path),
    help="Check an exported bundle (this folder, or the tar export --tar wrote) instead of the ledger, with its "
    "states, receipts and hashes.json.",
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
      intentlog verify --bundle bundle.tar
    """
    from .projections.verify import verify_path

    if bundle is not None and tasks:
        raise click.UsageError("--bundle checks the whole bundle; name no TASK")
    if bundle is None:
        _require_ledger(c)
        for t in tasks:
            if not (c.root / "tasks" / f"{check_task_id(t)}.jsonl").exists():
                raise NotFound(f"no task {t!r} in {c.root}; see 'intentlog tasks'")
    progress = _progress_for("verifying") if not as_json else None
    try:
        if bundle is not None:
            from .bundle import check_bundle

            report = check_bundle(bundle, progress=progress)
        else:
            # verify_path, not open_ledger: a check must not even create the empty folders a git clone lacks
            report = verify_path(c.root, list(tasks) or None, progress=progress)
    except (UsageError, InvalidTaskId) as exc:
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

    if out is None and tar_file is None:
        raise click.UsageError("say where the bundle goes: --out DIR, --tar FILE, or both")
    ledger = c.ledger()
    for t in tasks:
        _existing(c, ledger, t)
    try:
        result = export_bundle(
            c.root, list(tasks) or None, out=out, tar=tar_file, receipts=receipts, check=not no_check
        )
    except (UsageError, InvalidTaskId) as exc:
        raise click.UsageError(str(exc)) from exc
    if as_json:
        _emit_json(result.to_json())
    else:
        click.echo(_export_summary(c, result), nl=False)
    sys.exit(result.exit_code)


def _export_summary(c: _Ctx, result: Any) -> str:
    """The export's summary at any scale: counts and human sizes, task names only when few."""
    from .retention import format_size

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


def _require_ledger(c: _Ctx) -> None:
    """Refuse (exit 1) a root with no ledger, saying how to point at one."""
    if not (c.root / "intentlog.json").is_file():
        raise NotALedger(str(c.root), "no ledger here (no intentlog.json)")


def _progress_for(verb: str) -> Callable[[str, int, int], None] | None:
    """A progress line on stderr, only when stderr is a terminal (never in pipes or logs)."""
    if not sys.stderr.isatty():
        return None

    def progress(what: str, done: int, total: int) -> None:
        click.echo(f"\r{verb} {what}: {done}/{total}\x1b[K", nl=False, err=True)

    return progress


@main.command()
@json_option
@pass_ctx
@handle_errors
def seal(c: _Ctx, as_json: bool) -> None:
    """Write heads.json (each stream's last seq and head digest) so truncation is detectable.

    Commit the folder to git, or sign heads.json, to anchor it.

    \b
    Example:
      intentlog seal && git add evidence && git commit -m "seal"
    """
    from .heads import seal as seal_heads

    path = seal_heads(c.ledger())
    if as_json:
        _emit_json({"sealed": str(path), "heads": orjson.loads(Path(path).read_bytes())})
        return
    click.echo(f"sealed {path}")


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
def repair(c: _Ctx, task: str, accept_damage: bool, accept_resend: bool, dry_run: bool, as_json: bool) -> None:
    """Move a stream's bad tail to quarantine/ and record it (stream.repaired).

    Without --accept-damage only a torn tail (what a crash leaves) is repaired; a stream
    writers refuse (a line that does not chain, damage in the middle, a cut sealed
    stream) is refused here too (exit 1) until you pass --accept-damage. Damage whose
    lines record an attempt.started (a send that began) is refused until you also pass
    --accept-resend: a re-run may send those calls again.

    \b
    Example:
      intentlog repair chapter-16 --dry-run
      intentlog repair chapter-16 --accept-damage
      intentlog repair chapter-16 --accept-damage --accept-resend
    """
    if accept_resend and not accept_damage:
        raise UsageError("--accept-resend only widens --accept-damage: pass both, or neither")
    with c.ledger() as ledger:
        _existing(c, ledger, task)
        report = ledger.repair(task, accept_damage=accept_damage, accept_resend=accept_resend, dry_run=dry_run)
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


@contextmanager
def _writable(c: _Ctx, tasks: Sequence[str], *, dry_run: bool, with_objects: bool = False) -> Iterator[Ledger]:
    """The ledger to write to: the real one, or for ``--dry-run`` a private copy of ``tasks``' streams
    (with ``heads.json``, so a stream the seal contradicts is refused in the copy as for real).

    A dry run performs the very library call on the copy (so every check and refusal is the
    real one) and the real folder is never opened for writing: its bytes stay unchanged.
    A stream that is a link is refused: nothing outside the ledger is read or written.
    """
    ledger = c.ledger()
    if not dry_run:
        with ledger:
            yield ledger
        return
    tmp = Path(tempfile.mkdtemp(prefix="intentlog-dry-run."))
    try:
        copy = open_ledger(tmp / "ledger", create=True)
        for tid in tasks:
            src = ledger.stream_path(tid)
            if src.is_symlink():
                raise IntentlogError(
                    f"tasks/{tid}.jsonl is a symbolic link, not a stream; a link is never followed: "
                    "move it aside and restore the stream from a copy or git"
                )
            if src.exists():
                shutil.copyfile(src, copy.stream_path(tid), follow_symlinks=False)
        seal = ledger.root / "heads.json"  # writers check streams against the seal: so must the copy
        if seal.is_file() and not seal.is_symlink():
            shutil.copyfile(seal, copy.root / "heads.json", follow_symlinks=False)
        real_objects = ledger.root / "objects"
        if with_objects and real_objects.is_dir() and not real_objects.is_symlink():
            shutil.copytree(real_objects, copy.root / "objects", ignore=_links, dirs_exist_ok=True)
        with copy:
            yield copy
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _known_call(ledger: Ledger, task: str, call: str) -> None:
    """Refuse a call the task does not have before any lock is taken (taking one rewrites the lock file)."""
    if call not in ledger.task(task).work_state().calls:
        raise UnknownCall(task, call)


def _links(folder: str, names: list[str]) -> set[str]:
    """For ``shutil.copytree``: leave out every link, so a dry run's copy holds nothing outside the ledger."""
    return {n for n in names if os.path.islink(os.path.join(folder, n))}


def _report(c: _Ctx, task: str, ev: Event, text: str, *, as_json: bool, dry_run: bool) -> None:
    """Print the event a writing command appended (or, with --dry-run, would append)."""
    if as_json:
        _emit_json(_event_json(task, ev) | {"dry_run": dry_run})
        return
    if dry_run:
        body = orjson.dumps(ev.data, option=orjson.OPT_SORT_KEYS).decode()
        click.echo(f"dry run: would append {ev.kind} to {task} at seq {ev.seq}: {body}; nothing was written")
        return
    click.echo(c.hint(text))


_WAIT = click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the task's writer lock.",
)


@main.command()
@_task_arg()
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
    c: _Ctx,
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
    _existing(c, c.ledger(), task)
    _known_call(c.ledger(), task, call)
    with _writable(c, [task], dry_run=dry_run) as ledger:
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
@_task_arg()
@click.argument("call", required=False)
@click.option("--reason", required=True, help="Why it is given up (kept in the record).")
@click.option("--by", help="Who decided.")
@_WAIT
@dry_run_option
@json_option
@pass_ctx
@handle_errors
def fail(
    c: _Ctx, task: str, call: str | None, reason: str, by: str | None, wait: float, dry_run: bool, as_json: bool
) -> None:
    """Record that an unresolved call has failed, or (without CALL) that the whole task is given up.

    \b
    Example:
      intentlog fail chapter-16 call-3 --reason "served but the response is lost"
      intentlog fail chapter-16 --reason "the source was withdrawn"
    """
    _existing(c, c.ledger(), task)
    if call is not None:
        _known_call(c.ledger(), task, call)
    with _writable(c, [task], dry_run=dry_run) as ledger:
        t = ledger.task(task, wait=wait)
        ev = t.fail_task(reason, by=by) if call is None else t.fail(call, reason, by=by)
    text = (
        f"recorded task.failed at seq {ev.seq}: task {task} is failed"
        if call is None
        else f"recorded call.failed for {call} at seq {ev.seq}"
    )
    _report(c, task, ev, text, as_json=as_json, dry_run=dry_run)


def _decide(
    c: _Ctx,
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
    _existing(c, ledger, task)
    if request_hash is not None:
        request_hash = _resolve_binding(ledger, task, approval, request_hash)
    with _writable(c, [task], dry_run=dry_run) as w:
        ev = w.task(task, wait=wait).decide(approval, decision, by=by, note=note, request_hash=request_hash)
    text = (
        f"recorded approval.decided ({decision}) for {approval} at seq {ev.seq}, bound to "
        f"{ev.data['request_hash'] or 'no request'}; re-run the script to continue"
    )
    _report(c, task, ev, text, as_json=as_json, dry_run=dry_run)


def _resolve_binding(ledger: Ledger, task: str, approval: str, given: str) -> str:
    """A ``--hash`` prefix expanded against the hash the approval binds (a full digest is kept as given)."""
    from .views import resolve_prefix

    st = ledger.task(task).status()
    a = st.operator.approvals.get(approval) if st.operator is not None else None
    bound = [a.binding] if a is not None and a.binding is not None else []
    return resolve_prefix(given, bound)


_HASH = click.option("--hash", "request_hash", help="The request hash you reviewed: refused if the request changed.")


@main.command()
@_task_arg()
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
    c: _Ctx,
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
@_task_arg()
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
    c: _Ctx,
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
@_task_arg()
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
    c: _Ctx,
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
    _existing(c, real, task)
    if new_id is not None and real.task(new_id).exists():
        raise IntentlogError(f"task {new_id!r} already exists in {real.root}; name another with --as")
    # the default id is chosen in the real ledger, so a dry run names the task a real fork creates
    target = new_id if new_id is not None else default_fork_id(real, task)
    with _writable(c, [task], dry_run=dry_run, with_objects=True) as ledger:
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
@_task_arg()
@click.option("--note", help="What was checked.")
@click.option("--by", help="Who accepted.")
@_WAIT
@dry_run_option
@json_option
@pass_ctx
@handle_errors
def accept(c: _Ctx, task: str, note: str | None, by: str | None, wait: float, dry_run: bool, as_json: bool) -> None:
    """Record that a task's results were checked and accepted.

    Refused (exit 1, nothing written) unless the task is awaiting acceptance: not while
    calls are unresolved, not twice, not for a task given up.

    \b
    Example:
      intentlog accept chapter-16 --by alice --note "read the reviews"
    """
    from .projections.status import acceptance_refusal

    _existing(c, c.ledger(), task)
    with _writable(c, [task], dry_run=dry_run) as ledger:
        t = ledger.task(task, wait=wait)
        refusal = acceptance_refusal(t.status())
        if refusal is not None:
            raise IntentlogError(refusal)
        ev = t.accept(note=note, by=by)
    _report(c, task, ev, f"recorded task.accepted at seq {ev.seq}", as_json=as_json, dry_run=dry_run)


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
    progress = _progress_for("gc: scanned") if not as_json else None
    plan = plan_gc(ledger, max_age=max_age, max_size=max_size, grace=grace, progress=progress)
    if progress is not None:
        click.echo("", err=True)
    if as_json:
        _emit_json(plan.to_json())
    else:
        click.echo(plan.render())
    sys.exit(EXIT_PROBLEMS if plan.refused else EXIT_OK)


@main.command()
@_task_arg(required=False)
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
    _existing(c, ledger, task)
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
