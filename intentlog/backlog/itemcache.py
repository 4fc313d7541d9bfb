"""What the view and a run's start need of each item task, read only for the tasks that changed.

A backlog's view and its supervisor's start need, per item task, its operator state (the
one the tasks view shows: :func:`intentlog.projections.status.status_of`), the runner's
records in it (:func:`intentlog.backlog.model.task_extras`) and its quota reservations.
Reading every item task each time costs what the whole folder holds; this module keeps
those values in a derived, deletable file under the ledger's ``cache/`` folder
(``cache/backlog-NAME.json``, written with the view cache's own atomic, link-refusing
helpers in :mod:`intentlog.viewcache.store`, never fsync'd), one line per item task with the
file facts of its stream (size, inode, device, mtime_ns, ctime_ns) when it was last read
whole. Guarantees:

- an entry is used only when its stream's facts are exactly the recorded ones; a missing,
  corrupt (the file's digest fails), foreign, malformed or stale entry is ignored and the
  task read whole again (the change time is in the facts: nothing can set it back);
- the facts are taken *before* the read, so an append racing the read leaves an entry
  that no longer matches, never one that hides the append;
- the cache never decides what is sent and is never read by ``verify``; a run's start
  re-reads a task whole before recording anything the cache says of it
  (:mod:`intentlog.backlog.supervisor`), and a run with a quota counts what was spent
  from the streams themselves (:func:`read_reservations`), never from the cache (anyone
  who can write ``cache/`` can forge an entry with the stream's facts): the cached
  reservations are for display only;
- who holds each item task's lock is never cached: it is read from ``/proc/locks`` once
  per call (each task's lock file then only ``stat``'ed), else probed per task.

A run's closing view reads no item task its workers just finished: the worker that wrote a
task's last records makes its line from the events it holds (:func:`entry_written`, only
when its writer vouches the file holds exactly them, durable), and the run adds those lines
(:func:`remember`) before its view reads the rest.

Deleting the file changes nothing but speed. A backlog of fewer than :data:`MIN_ITEMS`
items writes no file (a read of a small backlog writes nothing).
"""

from __future__ import annotations

import os
import stat as _stat
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import orjson

from .._internal.nofollow import check_real_dir
from ..eventlog.format import Event, parse_utc
from ..projections.status import task_status
from ..viewcache.store import cache_dir, read_lines, write_lines
from .model import LeaseRecord, LedgerLike, TaskExtras, task_extras

if TYPE_CHECKING:
    from ..stream import TaskStream

__all__ = [
    "FORMAT", "MIN_ITEMS", "CacheEntry", "ItemTask", "Reservations", "TaskSummary", "entry_written", "fold_item",
    "read_item_task", "read_items", "read_reservations", "read_returned_and_reserved", "remember",
]  # fmt: skip

FORMAT: Final = b"intentlog-backlogitems/3"
#: A backlog with fewer items than this is read whole and writes no cache file.
MIN_ITEMS: Final = 64

Facts = tuple[int, int, int, int, int]
#: ``(task id, facts, encoded ItemTask)``: one line of the cache file
CacheEntry = tuple[str, Facts, Any]
T = TypeVar("T")
#: ``(unix time, {quota: units})`` per ``quota.reserved``, in stream order.
Reservations = tuple[tuple[float, dict[str, float]], ...]


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """The parts of an item task's operator state (a ``TaskStatus``) that a backlog shows."""

    state: str
    reason: str | None
    next_step: str
    next_operation: str


@dataclass(frozen=True, slots=True)
class ItemTask:
    """One item task as a backlog sees it: its operator state, the runner's records, its reservations."""

    status: TaskSummary
    extras: TaskExtras
    #: ``(unix time, {quota: units})`` per ``quota.reserved``, in stream order
    reservations: tuple[tuple[float, dict[str, float]], ...]


def fold_item(task_id: str, events: Iterable[Event]) -> ItemTask:
    """An item task's :class:`ItemTask` from its events (pure)."""
    evs = list(events)
    st = task_status(evs, task_id=task_id)
    res = _reserved_in(evs)
    return ItemTask(TaskSummary(st.state, st.reason, st.next_step, st.next_operation), task_extras(evs, task_id), res)


def _reserved_in(events: Iterable[Event]) -> Reservations:
    return tuple(
        (parse_utc(ev.ts).timestamp(), {str(k): float(v) for k, v in dict(ev.data.get("units", {})).items()})
        for ev in events
        if ev.kind == "quota.reserved"
    )


def read_reservations(ledger: LedgerLike, task_ids: Iterable[str]) -> dict[str, Reservations]:
    """Each item task's quota reservations, read from its stream whole: never from the cache.

    What a run's quota book is loaded from: the units a run may still grant are decided by
    the record alone. Raises what a full read raises (:class:`~intentlog.errors.CorruptStream`).
    Memory: one task's events at a time, and the reservations.
    """
    return {tid: _reserved_in(ledger.task(tid).events()) for tid in task_ids}


_EMPTY: list[ItemTask] = []


def _no_stream() -> ItemTask:
    """The item task of no events (the same for every task: it names none)."""
    if not _EMPTY:
        _EMPTY.append(fold_item("-", ()))
    return _EMPTY[0]


def read_item_task(ledger: LedgerLike, task_id: str) -> ItemTask:
    """One item task read whole (no cache)."""
    return fold_item(task_id, ledger.task(task_id).events())


# -- the cache file -------------------------------------------------------------------------


def _encode(item: ItemTask) -> list[Any]:
    s, x = item.status, item.extras
    lease = x.lease
    packed_lease = (
        None if lease is None else [lease.epoch, lease.pid, lease.host, lease.start_time, lease.since, lease.released]
    )
    return [
        [s.state, s.reason, s.next_step, s.next_operation],
        [packed_lease, x.returned, x.last_ts, x.events, dict(x.reserved), x.foreign, dict(x.children_in)],
        [[t, u] for t, u in item.reservations],
    ]


def _opt_str(v: object) -> str | None:
    if v is None or type(v) is str:
        return v
    raise ValueError("not a string")


def _decode(v: Any) -> ItemTask:
    """The entry's value, every field's type checked; ValueError/TypeError/KeyError for anything else."""
    (state, reason, nxt, nop), (lease, returned, last_ts, n, reserved, foreign, sent), res = v
    if type(state) is not str or type(nxt) is not str or type(nop) is not str or type(returned) is not bool:
        raise ValueError("bad entry")
    if type(n) is not int or type(reserved) is not dict or type(sent) is not dict:
        raise ValueError("bad entry")
    if not all(type(c) is str and type(b) is str for c, b in sent.items()):
        raise ValueError("bad entry")
    lr = None
    if lease is not None:
        epoch, pid, host, started, since, released = lease
        if type(epoch) is not int or type(pid) is not int or type(host) is not str or type(since) is not str:
            raise ValueError("bad lease")
        if (started is not None and type(started) is not int) or type(released) is not bool:
            raise ValueError("bad lease")
        lr = LeaseRecord(epoch, pid, host, started, since, released)
    reservations = _reservations(res)
    totals = {str(k): float(u) for k, u in reserved.items()} if reserved else {}
    # no view shows the result
    extras = TaskExtras(lr, returned, None, totals, _opt_str(last_ts), n, _opt_str(foreign), sent)
    return ItemTask(TaskSummary(state, _opt_str(reason), nxt, nop), extras, reservations)


def _reservations(res: Any) -> tuple[tuple[float, dict[str, float]], ...]:
    if type(res) is not list:
        raise ValueError("bad entry")
    return tuple((float(t), {str(k): float(u) for k, u in dict(units).items()}) for t, units in res) if res else ()


def _decode_start(v: Any) -> tuple[bool, tuple[tuple[float, dict[str, float]], ...]]:
    """Only whether the task returned and its reservations (what a run's start reads)."""
    _, (_, returned, _, _, _, _, _), res = v
    if type(returned) is not bool:
        raise ValueError("bad entry")
    return returned, _reservations(res)


def entry_written(stream: TaskStream, events: Sequence[Event]) -> CacheEntry | None:
    """The cache entry of an item task its writer just wrote, from the events it holds in memory: no read.

    ``events``: every event of the stream, in order (those read before the writer's last
    appends, then those appends). The entry is made only when the writer vouches the file
    holds exactly them (:meth:`~intentlog.stream.TaskStream.vouched`: its size is what the
    writer wrote; the events' seqs run 0..n-1 and the last one is the writer's head), with
    the file's facts as they are now, so a later append makes it stale like any entry.
    None on an object store, or when anything does not match (the reader then reads the
    task whole, as without it).
    """
    chk = stream.vouched()
    if chk is None or not events or events[-1].digest != chk.head or any(ev.seq != i for i, ev in enumerate(events)):
        return None
    facts = (chk.size, chk.ino, chk.dev, chk.mtime_ns, chk.ctime_ns)
    return stream.id, facts, _encode(fold_item(stream.id, events))


def remember(ledger: LedgerLike, backlog: str, entries: Iterable[Any], tasks: Collection[str]) -> None:
    """Add the entries :func:`entry_written` made to the cache file of the backlog whose item tasks are ``tasks``.

    Only an entry of one of ``tasks``, in the shape of a line, is kept (its value is checked
    when used, as every line's); nothing for a backlog of fewer than :data:`MIN_ITEMS` items
    or on an object store. An entry is used later only while its stream's facts are still
    the ones it names.
    """
    got: dict[str, tuple[Facts, Any]] = {}
    for entry in entries:  # what a slot sent
        if type(entry) is tuple and len(entry) == 3 and entry[0] in tasks and type(entry[1]) is tuple:
            facts = entry[1]
            if len(facts) == 5 and all(type(x) is int for x in facts):
                got[entry[0]] = (facts, entry[2])
    if not got or len(tasks) < MIN_ITEMS or not _files_here(ledger, next(iter(got))):
        return
    values = _load(ledger.root, backlog)
    values.update(got)
    _save(ledger.root, backlog, values)


def _name(backlog: str) -> str:
    return f"backlog-{backlog}.json"


def _load(root: Path, backlog: str) -> dict[str, tuple[Facts, Any]]:
    dfd = cache_dir(root, None, create=False)
    if dfd is None:
        return {}
    try:
        lines = read_lines(dfd, _name(backlog), FORMAT)
    finally:
        os.close(dfd)
    out: dict[str, tuple[Facts, Any]] = {}
    for line in lines or ():
        try:
            v = orjson.loads(line)
        except orjson.JSONDecodeError:
            return {}
        if type(v) is list and len(v) == 7 and type(v[0]) is str:
            f = (v[1], v[2], v[3], v[4], v[5])
            if all(type(x) is int for x in f):
                out[v[0]] = (f, v[6])
    return out


def _save(root: Path, backlog: str, values: Mapping[str, tuple[Facts, Any]]) -> None:
    dfd = cache_dir(root, None, create=False)  # cache/ is made with the ledger: a reader never makes it
    if dfd is None:
        return
    try:
        dumps = orjson.dumps
        write_lines(dfd, _name(backlog), FORMAT, [dumps([t, *f, v]) for t, (f, v) in values.items()])
    finally:
        os.close(dfd)


def read_items(ledger: LedgerLike, backlog: str, task_ids: Iterable[str]) -> dict[str, ItemTask]:
    """Each item task's :class:`ItemTask`, read whole only when its stream's facts changed since the cache.

    Raises what a full read raises (:class:`~intentlog.errors.CorruptStream`) for a task
    read whole. A ledger whose streams are not files here (an object store) is read whole.
    """
    return _read(ledger, backlog, task_ids, _decode, lambda item: item)


def read_returned_and_reserved(
    ledger: LedgerLike, backlog: str, task_ids: Iterable[str]
) -> dict[str, tuple[bool, Reservations]]:
    """Whether each item task returned, and its reservations, as :func:`read_items` (through the cache).

    Where to look only: a run re-reads a task before recording it done, and counts its
    quota from :func:`read_reservations`.
    """
    return _read(ledger, backlog, task_ids, _decode_start, lambda item: (item.extras.returned, item.reservations))


def _files_here(ledger: LedgerLike, task_id: str) -> bool:
    """Whether the ledger's streams are files here (a folder), the only ones the cache keeps facts of."""
    return getattr(ledger.task(task_id).stream, "remote", None) is None


def _read(
    ledger: LedgerLike, backlog: str, task_ids: Iterable[str], decode: Callable[[Any], T], of: Callable[[ItemTask], T]
) -> dict[str, T]:
    ids = list(task_ids)
    if not ids:
        return {}
    if len(ids) < MIN_ITEMS or not _files_here(ledger, ids[0]):
        return {tid: of(read_item_task(ledger, tid)) for tid in ids}
    layout = ledger.task(ids[0]).stream.layout
    tasks = str(layout.tasks_dir)
    check_real_dir(layout.tasks_dir, what="task streams")  # the paths below are stat'ed inside it
    old = _load(ledger.root, backlog)
    new = dict(old)  # the entries of tasks not asked for stay (each is checked when used)
    out: dict[str, T] = {}
    changed = False
    join, stat_, is_reg = os.path.join, os.stat, _stat.S_ISREG
    for tid in ids:
        try:
            st = stat_(join(tasks, tid + ".jsonl"))
        except FileNotFoundError:
            out[tid] = of(_no_stream())
            continue
        facts = (st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns) if is_reg(st.st_mode) else None
        cached = old.get(tid)
        if facts is not None and cached is not None and cached[0] == facts:
            try:
                out[tid] = decode(cached[1])
                continue
            except (ValueError, TypeError, KeyError):
                pass
        item = fold_item(tid, ledger.task(tid).events())
        changed = True
        if facts is not None:
            new[tid] = (facts, _encode(item))
        out[tid] = of(item)
    if changed:
        _save(ledger.root, backlog, new)
    return out
