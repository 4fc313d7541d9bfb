"""Commands that read a ledger (and ``init``, which makes one): tasks, status, log, revisions, show."""

from __future__ import annotations

import base64
import itertools
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import click
import orjson

from .._internal.text import printable as p
from ..errors import UnknownCall
from ..eventlog.format import Event
from .app import (
    EXIT_OK,
    EXIT_PROBLEMS,
    Ctx,
    echo,
    emit_json,
    handle_errors,
    json_option,
    main,
    pass_ctx,
    print_table,
    require_task,
    task_arg,
)

if TYPE_CHECKING:
    from ..artifacts import ArtifactStore
    from ..views import TaskRow

# -- ledger ---------------------------------------------------------------------------


@main.command()
@json_option
@pass_ctx
@handle_errors
def init(c: Ctx, as_json: bool) -> None:
    """Create a ledger folder (with .gitignore and .gitattributes for git-kept evidence).

    \b
    Example:
      intentlog --root evidence init
    """
    ledger = c.ledger(create=True)
    if as_json:
        emit_json({"root": ledger.location, "created": True})
        return
    echo(f"ledger ready at {p(str(ledger.location))}")


def _states() -> list[str]:
    from ..views import STATES

    return list(STATES)


@main.command()
@click.option(
    "--state", "states", multiple=True, type=click.Choice(_states()), metavar="STATE",
    help="Only the tasks in this state (repeat for several): " + ", ".join(_states()) + ".",
)  # fmt: skip
@json_option
@pass_ctx
@handle_errors
def tasks(c: Ctx, states: tuple[str, ...], as_json: bool) -> None:
    """One line per task: id, events, last activity, state, stream, phase, next operation.

    The state is the one 'status' and 'gc' name. A torn or unreadable stream is marked in
    the stream column; its problem is in the JSON 'problem' field. A backlog's own stream
    (NAME.backlog) is in the state of its items: awaiting approval or paused for review
    while one waits for a person, interrupted while some are still to run.

    \b
    Example:
      intentlog tasks --json
      intentlog tasks --state "paused for review" --state "awaiting approval"
    """
    from ..views import STATES, STREAM_UNREADABLE, iter_task_rows

    rows = iter_task_rows(c.ledger())
    try:
        chosen: Iterator[TaskRow] = rows
        if states:
            chosen = (r for r in rows if r.state in states)
        if as_json:
            _echo_json_list(r.to_json() | {"next_step": c.hint(r.next_step)} for r in chosen)
            return
        empty = "no tasks in state " + " or ".join(repr(s) for s in states) if states else "no tasks"
        damaged = _echo_task_table(chosen, rows.names, max(map(len, STATES)), len(STREAM_UNREADABLE), empty=empty)
    finally:
        rows.close()
    for task, problem in damaged:
        echo(f"  {p(task)}: {p(problem)}", err=True)


#: ``tasks`` sizes its columns from this many first rows (the task column from every id); a
#: longer cell further down pushes the rest of its line right. Memory: this many rows.
TABLE_HEAD = 512
_CHUNK = 512  # lines per write


def _echo_json_list(items: Iterable[Any]) -> None:
    """A JSON array written item by item, byte for byte what ``emit_json`` writes for the whole list."""
    opts = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    out: list[str] = []
    n = 0
    for item in items:
        out.append(("[\n  " if n == 0 else ",\n  ") + orjson.dumps(item, option=opts).decode().replace("\n", "\n  "))
        n += 1
        if len(out) >= _CHUNK:
            click.echo("".join(out), nl=False)
            out = []
    out.append("\n]" if n else "[]")
    click.echo("".join(out))


def _echo_task_table(
    rows: Iterator[TaskRow], names: Sequence[str], state_width: int, stream_width: int, *, empty: str = "no tasks"
) -> list[tuple[str, str]]:
    """The ``tasks`` table, written as rows are read; returns ``(task, problem)`` of each damaged stream."""
    head = list(itertools.islice(rows, TABLE_HEAD))
    if not head:
        echo(empty)
        return []
    header = ["task", "events", "last activity", "state", "stream", "phase", "next operation"]
    # what a task waits for and its parent: columns of their own when a row has one (or rows are still to come)
    tree = len(names) > len(head) or any(r.waiting is not None or r.parent is not None for r in head)
    if tree:
        header += ["waiting for", "parent"]
    widths = [len(h) for h in header]
    widths[0] = max(widths[0], *(len(p(n)) for n in names))
    for r in head:
        for i, cell in enumerate(_cells(r, tree=tree)):
            widths[i] = max(widths[i], len(cell))
    if len(names) > len(head):  # rows to come: the columns of known words take their widest word
        widths[3] = max(widths[3], state_width)
        widths[4] = max(widths[4], stream_width)
    damaged: list[tuple[str, str]] = []
    out = [click.style("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip(), bold=True)]
    for r in itertools.chain(head, rows):
        out.append(_table_line(r, widths, tree=tree))
        if r.problem is not None:
            damaged.append((r.task, r.problem))
        if len(out) >= _CHUNK:
            echo("\n".join(out))
            out = []
    if out:
        echo("\n".join(out))
    return damaged


def _cells(r: TaskRow, *, tree: bool = False) -> list[str]:
    n = len(r.pending_events)  # signalled into the task's inbox (folded into its row), not received yet
    cells = [
        p(r.task) + (f" ({n} pending event{'s' if n != 1 else ''})" if n else ""),
        str(r.events),
        p(r.last_activity or "-"),
        p(r.state),
        p(r.stream),
        p(r.phase or "-"),
        p(r.next_operation),
    ]
    if tree:
        cells += [p((r.waiting or "-").removeprefix("waiting for ")), p(r.parent or "-")]
    return cells


def _table_line(r: TaskRow, widths: Sequence[int], *, tree: bool = False) -> str:
    """One row: cells left-aligned two spaces apart; only the state cell is coloured."""
    cells = _cells(r, tree=tree)
    colour = _STATE_COLOUR.get(r.state)
    parts = [v.ljust(w) for v, w in zip(cells, widths, strict=True)]
    if colour is not None:
        parts[3] = click.style(cells[3], fg=colour) + parts[3][len(cells[3]) :]
    return "  ".join(parts).rstrip()


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
@task_arg()
@json_option
@pass_ctx
@handle_errors
def status(c: Ctx, task: str, as_json: bool) -> None:
    """The operator view: state, phase, last outcome, what is unresolved outside, the safe next step.

    Exit 1 when the task does not exist or its stream cannot be read.

    \b
    Example:
      intentlog status chapter-16
    """
    from ..projections.status import tree_lines
    from ..views import inbox_of_row, task_row

    ledger = c.ledger()
    require_task(c, ledger, task)
    row = task_row(ledger, task)
    st = row.status
    box = inbox_of_row(ledger, row)
    if as_json:
        out: dict[str, Any] = (
            st.to_json() if st is not None else {"task": task, "state": row.state, "next_step": row.next_step}
        )
        out["next_step"] = c.hint(str(out["next_step"]))
        out["inbox"] = box.to_json() if box is not None else None
        emit_json(out | {"stream": row.stream, "problem": row.problem})
        sys.exit(EXIT_OK if st is not None else EXIT_PROBLEMS)
    if st is None:
        echo(f"task            {p(task)}")
        echo(f"state           {click.style(p(row.state), fg='red')}")
        echo(f"stream          {p(row.stream)}: {p(str(row.problem))}")
        echo(f"next step       {click.style(p(c.hint(row.next_step)), bold=True)}")
        sys.exit(EXIT_PROBLEMS)
    why = f" ({p(st.reason)})" if st.reason else ""
    echo(f"task            {p(task)}")
    echo(f"state           {click.style(p(st.state), fg=_STATE_COLOUR.get(st.state))}{why}")
    if row.problem is not None:
        echo(f"stream          {p(row.stream)}: {p(row.problem)}")
    echo(f"phase           {p(st.phase or '-')}")
    cp = st.checkpoint
    echo(f"checkpoint      {p(f'{cp.phase} ({cp.status}) at seq {cp.seq}') if cp is not None else '-'}")
    for a in st.awaiting_approvals:
        binding = p(a.binding or "nothing")
        echo(f"approval        {p(a.approval_id)} [{p(a.status)}]: {p(a.question)} (binds {binding})")
    forked = st.operator.forked if st.operator is not None else None
    if forked is not None:
        echo(f"forked from     {p(str(forked.get('from_task')))} before {p(str(forked.get('from_call')))}")
    for label, text in tree_lines(st):
        echo(f"{label:<16}{p(text)}")
    if box is not None:
        echo(f"inbox of        {p(box.task)}" + ("" if box.task_exists else " (no stream yet: not started)"))
        for e in box.events:
            said = "received" if e.received else "pending: not received yet"
            echo(f"event           {p(repr(e.event))} (id {p(e.event_id)}, seq {e.seq}): {said}")
    echo(f"last outcome    {p(st.last_outcome or '-')}")
    echo(f"unresolved      {p(st.unresolved_action or '-')}")
    echo(f"next operation  {p(st.next_operation)}")
    echo(f"next step       {click.style(p(c.hint(st.next_step)), bold=True)}")
    ws = st.work
    if ws.calls or ws.compilations:
        echo("")
        rows = [
            [
                p(c_.call_id),
                p(c_.key),
                p(c_.stage),
                p(c_.next_operation),
                p(c_.provider_effect),
                str(c_.attempts),
                p(c_.superseded_by or c_.resumes or ""),
            ]
            for c_ in ws.calls.values()
        ]
        rows += [
            [
                p(k.compilation_id),
                "(compilation)",
                p(k.stage),
                p(k.next_operation),
                "none",
                "-",
                p(", ".join(k.missing)),
            ]
            for k in ws.compilations.values()
        ]
        print_table(["id", "key", "stage", "next operation", "provider effect", "attempts", "link/missing"], rows)


_SUMMARY_DEPTH = 64


def _brief(v: Any, depth: int = 0) -> Any:
    """A JSON value made printable: refs shortened, deep nesting cut, never a failure on user data."""
    if depth > _SUMMARY_DEPTH:
        return "…"
    if isinstance(v, dict):
        d = v.get("digest")
        if isinstance(d, str) and d.startswith("blake3:") and isinstance(v.get("size"), int):
            short = f"{d[:19]}… ({v['size']} B)"
            if depth > 0:
                return short
            # an event whose data is itself an artifact's (artifact.recorded): keep its other fields, the path first
            rest = {str(k): _brief(x, depth + 1) for k, x in v.items() if k not in ("digest", "size") and x is not None}
            return {**{k: rest.pop(k) for k in ("locator",) if k in rest}, "digest": short, **rest}
        return {str(k): _brief(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_brief(x, depth + 1) for x in v]
    return v


def _summary(ev: Event, width: int = 100) -> str:
    try:
        data = _brief(ev.data)
        ordered = isinstance(data, dict) and "locator" in data  # the path first, as _brief put it
        text = orjson.dumps(data, option=0 if ordered else orjson.OPT_SORT_KEYS).decode()
    except (TypeError, ValueError):  # pragma: no cover - _brief bounds the depth; this is the last guard
        text = "(data not printable; see --json)"
    return text if len(text) <= width else text[: width - 1] + "…"


@main.command()
@task_arg()
@click.option("--kind", "kinds", multiple=True, help="Only events of this kind (repeatable).")
@click.option("--call", "call_id", help="Only events of this call (call-N).")
@click.option("--since", type=click.IntRange(min=0), default=0, show_default=True, help="Start at this seq.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events as they are appended.")
@click.option("--timeout", type=float, default=None, help="With --follow: stop after this many idle seconds.")
@json_option
@pass_ctx
@handle_errors
def log(
    c: Ctx,
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
    require_task(c, ledger, task)
    t = ledger.task(task)
    if call_id is not None and not follow and call_id not in t.work_state().calls:
        raise UnknownCall(task, call_id)  # nothing to print is a wrong call id, not an empty answer (exit 1)

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
            echo(f"{ev.seq:>6}  {p(ev.ts)}  {click.style(p(ev.kind).ljust(26), fg='cyan')}  {p(_summary(ev))}")

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
@click.argument("path")
@click.option("--task", "task_id", default=None, help="Only the revisions this task recorded.")
@json_option
@pass_ctx
@handle_errors
def revisions(c: Ctx, path: str, task_id: str | None, as_json: bool) -> None:
    """The recorded revisions of a workspace file, oldest first: task, seq, time, digest, size.

    PATH is the file as task.record_artifact named it, relative to the workspace. Each
    digest is the prefix 'show' accepts; a revision whose bytes are those of the one
    before it is marked '(same)'. Exit 1 when a stream could not be read (the others are
    still listed) or when --task names no task.

    \b
    Example:
      intentlog revisions out/chapter-16.md
      intentlog revisions out/chapter-16.md --task chapter-16 --json
    """
    ledger = c.ledger()
    if task_id is not None:
        require_task(c, ledger, task_id)
    found = ledger.revisions(path, task=task_id)
    if as_json:
        emit_json({
            "path": found.path, "revisions": [r.to_json() for r in found],
            "problems": [{"task": t, "problem": m} for t, m in found.problems],
        })  # fmt: skip
    elif not found:
        where = f" by task {task_id!r}" if task_id is not None else ""
        echo(f"no revisions of {p(found.path)} recorded{where}")
    else:
        rows = [
            [str(i), p(r.task), str(r.seq), p(r.ts), r.digest[:19] + ("" if r.changed else " (same)"), str(r.size),
             p(r.producer or "-")]
            for i, r in enumerate(found, 1)
        ]  # fmt: skip
        print_table(["#", "task", "seq", "recorded", "digest", "size", "producer"], rows)
        last = found[-1]
        echo(f"latest bytes: {c.hint(f'intentlog show {last.digest[:19]}')}")
    for t, m in found.problems:
        echo(f"  {p(t)}: {p(m)}", err=True)
    sys.exit(EXIT_PROBLEMS if found.problems else EXIT_OK)


@main.command()
@click.argument("digest")
@json_option
@pass_ctx
@handle_errors
def show(c: Ctx, digest: str, as_json: bool) -> None:
    """Write an artifact's bytes to stdout (checked against its digest first).

    DIGEST may be a unique prefix, with or without 'blake3:', at least as long as 'log'
    prints; an ambiguous prefix exits 2 and lists the candidates.

    \b
    Example:
      intentlog show blake3:6a1f2b3c4d5e > response.json
      intentlog show 6a1f2b3c4d5e --json
    """
    from ..views import resolve_digest

    ledger = c.ledger()
    full = resolve_digest(ledger, digest)
    _write_checked(ledger.artifacts, full, as_json=as_json)


#: How much of an artifact ``show`` holds at a time.
SHOW_CHUNK = 1 << 20


def _write_checked(store: ArtifactStore, digest: str, *, as_json: bool = False) -> None:
    """Write an artifact to stdout in chunks, only once all of its bytes were checked against the digest.

    Two reads through :meth:`ArtifactStore.open`, which checks the digest as a read reaches
    the end: the first proves the bytes (and, for ``--json``, whether they are UTF-8 text)
    before anything is written, the second writes them (checked again, so bytes swapped in
    between are cut off with the error, never completed). ``--json`` writes the same bytes
    as ``emit_json({"digest", "size", "text"[, "base64"]})`` would, a chunk at a time.
    Memory: one chunk (:data:`SHOW_CHUNK`) whatever the artifact's size.
    """
    import codecs

    size, text = 0, as_json
    check = codecs.getincrementaldecoder("utf-8")()
    with store.open(digest) as f:
        while chunk := f.read(SHOW_CHUNK):
            size += len(chunk)
            if text:
                try:
                    check.decode(chunk)
                except UnicodeDecodeError:
                    text = False
    if text:
        try:
            check.decode(b"", final=True)
        except UnicodeDecodeError:
            text = False
    # emit_json's layout (keys sorted, indent 2) around the one long string, written as it is read
    known = b'  "digest": %b,\n  "size": %d,\n  "text": ' % (orjson.dumps(digest), size)
    head, tail = (b"{\n" + known + b'"', b'"\n}\n') if text else (b'{\n  "base64": "', b'",\n' + known + b"null\n}\n")
    out = sys.stdout.buffer
    sys.stdout.flush()
    if as_json:
        out.write(head)
    decode = codecs.getincrementaldecoder("utf-8")().decode
    pending = b""  # base64 turns 3 bytes into 4 characters: a remainder waits for the next chunk
    with store.open(digest) as f:
        while chunk := f.read(SHOW_CHUNK):
            if not as_json:
                out.write(chunk)
            elif text:
                out.write(orjson.dumps(decode(chunk))[1:-1])  # JSON escapes each character on its own
            else:
                pending += chunk
                cut = len(pending) - len(pending) % 3
                out.write(base64.b64encode(pending[:cut]))
                pending = pending[cut:]
    if as_json:
        last = orjson.dumps(decode(b"", final=True))[1:-1] if text else base64.b64encode(pending)
        out.write(last + tail)
    out.flush()
