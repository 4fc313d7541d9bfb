"""The operator's rows: one task's state as ``intentlog tasks`` and ``intentlog status`` show it.

Both commands, and gc's plan, name a task's state with the one projection
:func:`intentlog.projections.status.status_of`; this module adds only what reading the
file tells beside it -- whether the stream is whole (``stream``: ``ok``, ``torn tail``,
``unreadable``) and whether a live process holds its writer lock. It reads, never writes,
and takes no lock.

A task whose stream cannot be read has ``state`` ``unreadable`` (a word of
:data:`STATES`), its error in ``problem``; a torn tail keeps the state of the events
before it, with ``stream`` ``torn tail`` and the problem beside it.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, final

from . import viewcache
from ._internal.commands import command
from ._internal.digest import DIGEST_PREFIX
from ._internal.nofollow import open_dir_nofollow
from ._internal.procs import PROC_LOCKS, flock_holders
from .errors import ArtifactMissing, IntentlogError, InvalidDigest, UsageError
from .eventlog.format import TASK_ID_RE, check_task_id
from .projections.idioms import INBOX_SUFFIX, tasks_with_inboxes
from .projections.operator import OperatorFold
from .projections.status import INTERRUPTED, OPERATOR_STATES, TaskStatus, status_of, taking_over
from .projections.workstate import WorkStateFold
from .stream import lock_holder
from .viewcache import fold_task
from .viewcache.index import IndexJoin, facts_of

if TYPE_CHECKING:
    from .eventlog.format import Event
    from .ledger import Ledger
    from .ledgerstorage import LeaseOwner

__all__ = [
    "MIN_PREFIX",
    "STATES",
    "STREAM_OK",
    "STREAM_TORN",
    "STREAM_UNREADABLE",
    "UNREADABLE",
    "TaskRow",
    "TaskRows",
    "AmbiguousDigest",
    "Inbox",
    "InboxEvent",
    "inbox_of_row",
    "iter_task_rows",
    "resolve_digest",
    "task_row",
    "task_rows",
]

#: The state of a task whose stream cannot be read past a damaged line.
UNREADABLE: Final = "unreadable"
#: Every word the JSON ``state`` of ``tasks``, ``status`` and gc's plan takes.
STATES: Final = (*OPERATOR_STATES, UNREADABLE)

STREAM_OK: Final = "ok"
STREAM_TORN: Final = "torn tail"
STREAM_UNREADABLE: Final = "unreadable"


@final
@dataclass(frozen=True, slots=True)
class TaskRow:
    """One task as the operator views show it.

    ``status`` is the full :class:`TaskStatus` when this row was projected from the stream
    (``task_row``); None when the stream is unreadable, or when a listing took the row from
    the view cache's index because the stream's file facts had not changed since.
    """

    task: str
    state: str  # one of STATES
    stream: str  # "ok" | "torn tail" | "unreadable"
    problem: str | None
    events: int
    status: TaskStatus | None
    reason: str | None = None
    last_activity: str | None = None
    phase: str | None = None
    next_operation: str = "verify"
    next_step: str = ""
    pending_events: tuple[str, ...] = ()  # signalled into its inbox, not received yet (a listing folds the inbox in)
    waiting: str | None = None  # what its record says it waits for: a wake time, an event, children to join
    parent: str | None = None  # the task that spawned it (its record's task.spawned)

    def to_json(self) -> dict[str, Any]:
        """The row of ``intentlog tasks --json`` (documented in docs/cli.md)."""
        return {
            "task": self.task,
            "state": self.state,
            "reason": self.reason,
            "stream": self.stream,
            "problem": self.problem,
            "events": self.events,
            "last_activity": self.last_activity,
            "phase": self.phase,
            "next_operation": self.next_operation,
            "next_step": self.next_step,
            "pending_events": list(self.pending_events),
            "waiting": self.waiting,
            "parent": self.parent,
        }


def _row(task_id: str, state: str, stream: str, problem: str | None, events: int, st: TaskStatus | None) -> TaskRow:
    if st is None:
        step = "see what is damaged: intentlog verify " + task_id
        return TaskRow(task_id, state, stream, problem, events, None, next_step=step)
    work = st.work
    return TaskRow(
        task_id, state, stream, problem, events, st, st.reason, work.last_ts, st.phase, st.next_operation, st.next_step,
        waiting=st.waiting, parent=st.parent,
    )  # fmt: skip


_FIELDS: Final = (
    "state", "reason", "stream", "problem", "events", "last_activity", "phase", "next_operation", "next_step",
    "waiting", "parent",
)


def _packed(row: TaskRow) -> list[Any]:
    """The row as the index keeps it: its fields in :data:`_FIELDS` order, no keys."""
    return [getattr(row, f) for f in _FIELDS]


_STREAMS: Final = frozenset((STREAM_OK, STREAM_TORN, STREAM_UNREADABLE))


def _unpacked(task_id: str, v: Any) -> TaskRow | None:
    """A row the index holds (as :func:`_packed` wrote it), or None for anything else.

    The one place an index entry becomes a row: every field's type is checked (text or
    None where the row allows None, a count that is a non-negative int, a state and a
    stream word the listing knows); anything else means the stream is read.
    """
    if type(v) is not list or len(v) != len(_FIELDS):
        return None
    state, reason, stream, problem, events, last, phase, nxt, step, waiting, parent = v
    if type(events) is not int or events < 0 or not all(type(x) is str for x in (state, stream, nxt, step)):
        return None
    if state not in STATES or stream not in _STREAMS:
        return None
    if not all(x is None or type(x) is str for x in (reason, problem, last, phase, waiting, parent)):
        return None
    return TaskRow(
        task_id, state, stream, problem, events, None, reason, last, phase, nxt, step, waiting=waiting, parent=parent
    )


def _project(ledger: Ledger, task_id: str, running: bool | None) -> tuple[TaskRow, TaskRow | None]:
    """The row read from the stream (through the view cache), and the same row for the other liveness.

    ``running`` None: probe the writer lock. The second row is None when the stream is unreadable.
    """
    path = ledger.stream_path(task_id)
    try:
        folded = fold_task(ledger.root, ledger.tasks_dir, task_id)
    except (OSError, IntentlogError) as exc:
        return _row(task_id, UNREADABLE, STREAM_UNREADABLE, f"{path}: {exc}", 0, None), None
    scan = folded.scan
    p = scan.problem
    if p is not None and (p.suspect or not p.torn):
        problem = f"tasks/{task_id}.jsonl line {p.line}: {p.reason}"
        return _row(task_id, UNREADABLE, STREAM_UNREADABLE, problem, scan.count, None), None
    if running is None:
        running = lock_holder(path.with_name(path.name + ".lock")) is not None
    ws = folded.work_state()
    ops = folded.ops.result(ws)
    rows = []
    for live in (running, not running):
        st = status_of(task_id, ws, ops, running=live)
        if p is not None:
            problem = f"tasks/{task_id}.jsonl line {p.line}: {p.reason}; the next writer quarantines it"
            rows.append(_row(task_id, st.state, STREAM_TORN, problem, scan.count, st))
        else:
            rows.append(_row(task_id, st.state, STREAM_OK, None, scan.count, st))
    return rows[0], rows[1]


def task_row(ledger: Ledger, task_id: str) -> TaskRow:
    """Read one task's stream and project its row. Raises ``InvalidTaskId`` for a malformed id.

    Reads through the view cache (only the events after its last read, once the stream
    vouches for the entry): the row is what a full read gives.
    """
    check_task_id(task_id)
    task = ledger.task(task_id)
    owner = ledger.backend.lease_owner(task.stream)
    if ledger.backend.row_files() is None:  # no stream files to vouch for a cached entry: read it whole
        row = _row_read_whole(task_id, task.events, running=owner is not None and owner.alive is True)
    else:
        row = _project(ledger, task_id, None)[0]
    row = _holder_said(_with_tree(ledger, _with_inbox(ledger, _with_idioms(row, task.events)), task.events), owner)
    st = row.status
    box = task_id.endswith(INBOX_SUFFIX) and row.state == "queued" and row.next_operation == "none"
    if box and not ledger.task(task_id[: -len(INBOX_SUFFIX)]).exists():  # an inbox whose task has not started
        step = _unstarted_inbox_step(task_id)
        row = replace(row, next_step=step, status=None if st is None else replace(st, next_step=step))
    return row


def _with_tree(ledger: Ledger, row: TaskRow, events: Callable[[], Iterator[Event]]) -> TaskRow:
    """The row whose status names the task's parent and each child with its state and next step.

    Read only for a task whose record spawned or was spawned (the work state counts those
    kinds); each child's row is read as ``tasks`` reads it, without its own tree.
    """
    from .projections.idioms import CHILD_SPAWNED, SPAWNED, idiom_state
    from .projections.status import COMPLETE, ChildLine, open_children

    st = row.status
    if st is None or not (st.work.other_kinds.get(CHILD_SPAWNED) or st.work.other_kinds.get(SPAWNED)):
        return row
    try:
        idioms = idiom_state(events())
    except (OSError, IntentlogError):
        return row
    children = []
    for cid in idioms.children:
        child = _child_row(ledger, cid)
        children.append(ChildLine(cid, child.state, child.next_step))
    st = replace(st, parent=idioms.parent, children=tuple(children))
    kids = open_children(idioms)
    if kids and st.state == INTERRUPTED and idioms.waiting is None and idioms.sleeping is None:
        states = {c.task: c.state for c in children}
        left = [c for c in kids if states.get(c) != COMPLETE]
        step = (
            f"re-run the script: its {len(kids)} child task(s) returned and it joins them"
            if not left
            else f"run child {left[0]} to its end ({len(left)} of {len(kids)} not returned yet): "
            + command(None, "status", left[0])
            + "; then re-run the script (it joins them)"
        )
        st = replace(st, next_step=step)
        return replace(row, status=st, next_step=step)
    return replace(row, status=st)


def _child_row(ledger: Ledger, task_id: str) -> TaskRow:
    """A child's row for its parent's status: as ``tasks`` shows it, its inbox folded in."""
    if ledger.backend.row_files() is None:
        row = _listed_row(ledger, task_id)
    else:
        row = _project(ledger, task_id, None)[0]
        row = _with_idioms(row, ledger.task(task_id).events)
    return _with_inbox(ledger, row)


def _listed_row(ledger: Ledger, task_id: str) -> TaskRow:
    """:func:`task_row` without its inbox (a listing folds in the inboxes it lists)."""
    task = ledger.task(task_id)
    owner = ledger.backend.lease_owner(task.stream)
    row = _row_read_whole(task_id, task.events, running=owner is not None and owner.alive is True)
    return _holder_said(_with_idioms(row, task.events), owner)


def _with_inbox(ledger: Ledger, row: TaskRow) -> TaskRow:
    """The row naming the events signalled into the task's inbox that its record has not received yet.

    A task waiting for one of them is told to re-run its script (it receives the event
    from the inbox), not to signal it again. A task with no inbox reads nothing more.
    """
    from .projections.idioms import idiom_state, inbox_signals, pending_events

    box = row.task + INBOX_SUFFIX
    if row.stream == STREAM_UNREADABLE or row.task.endswith(INBOX_SUFFIX) or not TASK_ID_RE.match(box):
        return row
    try:
        signals = inbox_signals(ledger.task(box).events())
        if not signals:
            return row
        idioms = idiom_state(ledger.task(row.task).events())
    except (OSError, IntentlogError):
        return row
    pending = pending_events(idioms, signals)
    if not pending:
        return row
    st = row.status
    step = row.next_step
    w = idioms.waiting
    if w is not None and w.name in pending and row.state == INTERRUPTED:
        step = f"re-run the script: event {w.name!r} arrived (in its inbox {box}) and the task continues from it"
    st = None if st is None else replace(st, next_step=step)
    return replace(row, status=st, next_step=step, pending_events=pending)


#: The kinds whose records tell what a task waits for or where it sits in a tree: a row with one is folded again.
_IDIOM_ROW_KINDS: Final = (
    "task.sleep_started", "task.event_awaited", "task.child_spawned", "task.spawned", "task.returned",
)  # fmt: skip


def _with_idioms(row: TaskRow, events: Callable[[], Iterator[Event]]) -> TaskRow:
    """The row naming what the task's record says it waits for (a wake time, an event, children) and its parent.

    Read again only for a task whose work state counts one of :data:`_IDIOM_ROW_KINDS`.
    """
    from .projections.idioms import idiom_state

    st = row.status
    if st is None or st.operator is None:
        return row
    if not any(k in st.work.other_kinds for k in _IDIOM_ROW_KINDS):
        return row  # the work state counts the kinds it does not fold: nothing waits, no second read
    try:
        idioms = idiom_state(events())
    except (OSError, IntentlogError):
        return row
    st = replace(status_of(row.task, st.work, st.operator, running=st.running, idioms=idioms), parent=idioms.parent)
    return replace(
        row, state=st.state, status=st, reason=st.reason, next_operation=st.next_operation, next_step=st.next_step,
        waiting=st.waiting, parent=idioms.parent,
    )  # fmt: skip


def _holder_said(row: TaskRow, owner: LeaseOwner | None, *, now: float | None = None) -> TaskRow:
    """The row saying who holds the task's lease (pid, host), and since when its holder last beat.

    A holder that runs: the reason names it. One that ended, or that cannot be told from
    here (another host), while the record waits for a person: the next step adds the
    command that takes the lease over once that process is gone (``--take-over-after 0``).
    """
    st = row.status
    if owner is None or st is None:
        return row
    who = f"process {owner.pid} on {owner.host}" if owner.pid is not None else "a process that recorded no pid"
    beat = ""
    if owner.beat is not None:
        ago = max(0.0, (time.time() if now is None else now) - owner.beat)
        when = _dt.datetime.fromtimestamp(owner.beat, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        beat = f"; its last heartbeat {when}, about {ago:.0f} s ago (the store's clock against this machine's)"
    step = st.next_step
    if st.running:
        reason = f"{st.reason}: {who}{beat}"
    else:
        ended = "which has ended" if owner.alive is False else "alive or not cannot be told from this machine"
        reason = f"{st.reason + '; ' if st.reason else ''}its lease is still held by {who} ({ended}){beat}"
        again = taking_over(step)
        if again != step:
            step = again if owner.alive is False else f"{step}; once {who} is gone: {again}"
    st = replace(st, reason=reason, next_step=step)
    return replace(row, status=st, reason=reason, next_step=step)


def _row_read_whole(task_id: str, events: Callable[[], Iterator[Event]], *, running: bool = False) -> TaskRow:
    """The row of a stream that is not a file (an object store's): read whole through the seam (no torn tails)."""
    work, ops, n = WorkStateFold(task_id), OperatorFold(), 0
    try:
        for ev in events():
            work.apply(ev)
            ops.apply(ev)
            n += 1
    except (OSError, IntentlogError) as exc:
        return TaskRow(task_id, UNREADABLE, STREAM_UNREADABLE, str(exc), n, None)
    ws = work.result()
    st = status_of(task_id, ws, ops.result(ws), running=running)
    return _row(task_id, st.state, STREAM_OK, None, n, st)  # its reason, activity, phase and next step too


def task_rows(ledger: Ledger) -> list[TaskRow]:
    """Every task's row, in id order; one damaged stream never hides the others (:func:`iter_task_rows`, held)."""
    return list(iter_task_rows(ledger))


class TaskRows(Iterator[TaskRow]):
    """The rows of a ledger's tasks in id order, projected one at a time as they are taken.

    ``names`` are the task ids (known before any row is read: a table can size its task
    column from them). Memory: the ids, and one row and one block of the index at a time.
    """

    def __init__(self, names: Sequence[str], rows: Iterator[TaskRow]) -> None:
        self.names = names
        self._rows = rows

    def __next__(self) -> TaskRow:
        return next(self._rows)

    def close(self) -> None:
        """Stop early: release the listing's files (the index is then left as it was)."""
        close = getattr(self._rows, "close", None)
        if close is not None:
            close()


def iter_task_rows(ledger: Ledger) -> TaskRows:
    """Every task's row, in id order, streamed; one damaged stream never hides the others.

    Costs what changed: a stream whose file facts (size, inode, device, mtime_ns, ctime_ns) are
    those the view cache's index recorded when it last read the stream whole is not read
    at all; the writer locks are read once from ``/proc/locks`` where it exists. The index
    is read entry by entry beside the listing and rewritten (atomically, off every durable
    path) when anything changed, once the last row is taken.
    """
    files = ledger.backend.row_files()
    if files is None:  # no file facts, no cache (yet): each stream read whole
        ids = ledger.task_ids()
        return _inboxes_under_tasks(ledger, TaskRows(ids, (_listed_row(ledger, tid) for tid in ids)))
    try:
        dfd = open_dir_nofollow(files, what="task streams")
    except FileNotFoundError:
        return TaskRows([], iter(()))
    try:
        locked = _locked_inodes()
        names, locks = _list_streams(dfd, locked)
    except BaseException:
        os.close(dfd)
        raise
    return _inboxes_under_tasks(ledger, TaskRows(names, _stream_rows(ledger, dfd, names, locks, locked)))


def _inboxes_under_tasks(ledger: Ledger, rows: TaskRows) -> TaskRows:
    """The rows with each task's inbox folded into its task's row (``pending_events``), not listed of its own.

    An inbox is where signals wait for their task, not a task to run: its task's row says
    which events wait there. An inbox whose task has no stream (signalled before the task
    started) stays listed. Reads more only for the tasks that have an inbox.
    """
    bases = tasks_with_inboxes(rows.names)
    if not bases and not any(n.endswith(INBOX_SUFFIX) for n in rows.names):
        return rows

    def folded(task: str) -> bool:
        return task.endswith(INBOX_SUFFIX) and task[: -len(INBOX_SUFFIX)] in bases

    def gen() -> Iterator[TaskRow]:
        try:
            for row in rows:
                if folded(row.task):
                    continue
                if row.task.endswith(INBOX_SUFFIX) and row.next_operation == "none" and row.state == "queued":
                    row = replace(row, next_step=_unstarted_inbox_step(row.task))  # its task has no stream
                yield _with_inbox(ledger, row) if row.task in bases else row
        finally:
            rows.close()

    return TaskRows([n for n in rows.names if not folded(n)], gen())


def _stream_rows(
    ledger: Ledger, dfd: int, names: list[str], locks: dict[str, int], locked: set[tuple[int, int]] | None
) -> Iterator[TaskRow]:
    """The rows, merge-joined with the index; owns ``dfd`` (closed at the end, or when the consumer stops)."""
    join = IndexJoin(ledger.root, "rows", write=len(names) >= viewcache.MIN_TASKS)
    try:
        lstat, regular = os.stat, stat.S_ISREG
        for tid in names:
            try:
                st: os.stat_result | None = lstat(tid + ".jsonl", dir_fd=dfd, follow_symlinks=False)
            except OSError:
                st = None
            if st is not None and not regular(st.st_mode):
                st = None
            yield _one_row(ledger, join, tid, st, locks.get(tid), locked)
        join.commit()
    finally:
        join.close()
        os.close(dfd)


def _one_row(
    ledger: Ledger,
    join: IndexJoin,
    tid: str,
    st: os.stat_result | None,
    lock_ino: int | None,
    locked: set[tuple[int, int]] | None,
) -> TaskRow:
    running = None if locked is None else (st is not None and (st.st_dev, lock_ino) in locked)
    cached = join.find(tid)
    if st is not None and cached is not None and running is not None and cached[0] == facts_of(st):
        pair = cached[1]
        if type(pair) is list and len(pair) == 2:
            row = _unpacked(tid, pair[1] if running and pair[1] is not None else pair[0])
            if row is not None:
                join.keep()
                return row
    row, other = _project(ledger, tid, running)
    if row.status is not None and any(k in row.status.work.other_kinds for k in _IDIOM_ROW_KINDS):
        events = ledger.task(tid).events  # what it waits for and its parent: from its own record, so cached with it
        row = _with_idioms(row, events)
        other = _with_idioms(other, events) if other is not None else None
    if other is not None and st is not None and row.stream == STREAM_OK and running is not None:
        idle, live = (other, row) if running else (row, other)
        packed = _packed(idle), _packed(live)
        join.put(tid, facts_of(st), [packed[0], None if packed[1] == packed[0] else packed[1]])
    return row


def _list_streams(dfd: int, locked: set[tuple[int, int]] | None) -> tuple[list[str], dict[str, int]]:
    """The task ids with a stream in ``tasks/`` (sorted), and the inode of each lock file a writer may hold.

    Only lock files whose inode ``/proc/locks`` names are kept (none without it): memory is
    the ids, not a table per task.
    """
    held = {ino for _, ino in locked} if locked else set()
    streams: list[str] = []
    locks: dict[str, int] = {}
    match = TASK_ID_RE.match
    with os.scandir(dfd) as it:
        for e in it:
            name = e.name
            if name.endswith(".jsonl"):
                if match(name[:-6]) is not None:
                    streams.append(name[:-6])
            elif held and name.endswith(".jsonl.lock") and e.inode() in held:
                locks[name[:-11]] = e.inode()
    streams.sort()
    return streams, locks


def _locked_inodes() -> set[tuple[int, int]] | None:
    """``(device, inode)`` of every file an exclusive ``flock`` is held on, from ``/proc/locks``; None without it."""
    try:
        holders = flock_holders(PROC_LOCKS)
    except OSError:
        return None
    out: set[tuple[int, int]] = set()
    for key in holders:
        try:
            major, minor, ino = key.split(":")
            out.add((os.makedev(int(major, 16), int(minor, 16)), int(ino)))
        except ValueError:
            continue
    return out


# -- digests as people type them ----------------------------------------------------------

#: The shortest prefix (hex digits after ``blake3:``) accepted; ``intentlog log`` prints 12.
MIN_PREFIX: Final = 6
_HEX = frozenset("0123456789abcdef")
_DIGEST_BYTES = re.compile(rb"blake3:[0-9a-f]{64}")


@final
@dataclass(frozen=True, slots=True)
class InboxEvent:
    """One event signalled into an inbox, and whether its task's record received it yet."""

    event: str
    event_id: str
    seq: int  # the inbox stream's seq of its ``task.signalled``
    received: bool

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "id": self.event_id, "seq": self.seq, "pending": not self.received}


@final
@dataclass(frozen=True, slots=True)
class Inbox:
    """An inbox stream seen from its task: the task, whether it has a stream, each signalled event."""

    task: str
    task_exists: bool
    events: tuple[InboxEvent, ...]

    @property
    def pending(self) -> tuple[InboxEvent, ...]:
        return tuple(e for e in self.events if not e.received)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "task_exists": self.task_exists, "events": [e.to_json() for e in self.events]}


def inbox_of_row(ledger: Ledger, row: TaskRow) -> Inbox | None:
    """What an inbox row holds, seen from its task (None: the row is no inbox). Reads both streams, no lock."""
    from .projections.idioms import idiom_state, inbox_signals
    from .projections.status import inbox_of

    st = row.status
    base = inbox_of(row.task, st.work) if st is not None else None
    if base is None:
        return None
    try:
        signals = inbox_signals(ledger.task(row.task).events())
        task = ledger.task(base)
        exists = task.exists()
        idioms = idiom_state(task.events()) if exists else None
    except (OSError, IntentlogError):
        return None
    events = tuple(
        InboxEvent(
            sig.name, sig.event_id, sig.seq,
            idioms is not None and (w := idioms.waits.get(sig.name)) is not None and w.received,
        )
        for sig in sorted(signals.values(), key=lambda x: x.seq)
    )  # fmt: skip
    return Inbox(base, exists, events)


def _unstarted_inbox_step(box: str) -> str:
    """The next step of an inbox whose task has no stream yet: nothing to run here; see what waits."""
    base = box[: -len(INBOX_SUFFIX)]
    return (
        f"nothing to run here: task {base!r} has not started; its script receives these events when it waits "
        f"for them (task.wait_for_event); see them: {command(None, 'status', box)}"
    )


def resolve_digest(ledger: Ledger, text: str) -> str:
    """The one full digest ``text`` names: a full digest, or a unique prefix as ``log`` prints it.

    ``blake3:`` is optional and a trailing ``…`` (as ``log`` shortens) is ignored. Candidates
    are the objects in ``objects/`` and every digest the streams name (small payloads ride
    inline). Raises :class:`~intentlog.errors.InvalidDigest` for a malformed or too short
    prefix, :class:`~intentlog.errors.UsageError` naming the candidates when it is ambiguous,
    :class:`~intentlog.errors.ArtifactMissing` when nothing matches. Reads only.
    """
    raw = text.strip().rstrip("…").rstrip(".")
    hexpart = raw[len(DIGEST_PREFIX) :] if raw.startswith(DIGEST_PREFIX) else raw
    if not hexpart or not set(hexpart) <= _HEX or len(hexpart) > 64:
        raise InvalidDigest(text)
    if len(hexpart) == 64:
        return DIGEST_PREFIX + hexpart
    if len(hexpart) < MIN_PREFIX:
        raise UsageError(f"digest prefix {text!r} is too short: give at least {MIN_PREFIX} hex digits")
    want = DIGEST_PREFIX + hexpart
    found = {d for d in ledger.artifacts.iter_digests() if d.startswith(want)}
    needle = want.encode()
    for tid in ledger.task_ids():
        try:
            data = ledger.streams.read(tid)  # the stream seam: a folder's file, or a store's segments
        except (OSError, IntentlogError):
            continue
        if needle in data:
            found.update(m.group().decode() for m in _DIGEST_BYTES.finditer(data) if m.group().startswith(needle))
    if not found:
        raise ArtifactMissing(f"{want}…")
    if len(found) > 1:
        names = "\n  ".join(sorted(found))
        raise AmbiguousDigest(f"digest prefix {want} is ambiguous; it matches {len(found)}:\n  {names}")
    return found.pop()


class AmbiguousDigest(UsageError):
    """A digest prefix matches more than one digest (a usage error: give more digits)."""


def resolve_prefix(text: str, candidates: Sequence[str]) -> str:
    """``text`` expanded to the one of ``candidates`` it is a prefix of; a full digest is returned as given.

    Raises :class:`~intentlog.errors.InvalidDigest` when malformed, :class:`AmbiguousDigest`
    when several match. With no match the text is returned unchanged, for the caller's own
    refusal (an approval names the hash it binds).
    """
    raw = text.strip().rstrip("…")
    hexpart = raw[len(DIGEST_PREFIX) :] if raw.startswith(DIGEST_PREFIX) else raw
    if not hexpart or not set(hexpart) <= _HEX or len(hexpart) > 64:
        raise InvalidDigest(text)
    if len(hexpart) == 64:
        return DIGEST_PREFIX + hexpart
    want = DIGEST_PREFIX + hexpart
    found = sorted({cand for cand in candidates if cand.startswith(want)})
    if len(found) > 1:
        raise AmbiguousDigest(f"digest prefix {want} is ambiguous; it matches {len(found)}:\n  " + "\n  ".join(found))
    return found[0] if found else want
