"""What the view and a run's start need of each item task, read only for the tasks that changed.

A backlog's view and its supervisor's start need, per item task, its operator state (the
one the tasks view shows: :func:`intentlog.projections.status.status_of`), the runner's
records in it (:func:`intentlog.backlog.model.task_extras`) and its quota reservations.
Reading every item task each time costs what the whole ledger holds; this module keeps
those values as derived, deletable entries, one per item task with its stream's *stamp*
(:meth:`~intentlog.eventlog.storage.StreamStorage.stamps`: on a folder its file's size,
inode, device, mtime_ns and ctime_ns; on an object store its segments' numbers, sizes and
ETags, one LIST) when it was last read whole. On a folder they are a file under the
ledger's ``cache/`` folder (``cache/backlog-NAME.json``, written with the view cache's own
atomic, link-refusing helpers in :mod:`intentlog.viewcache.store`, never fsync'd); on a
store, which has no such folder, this process's memory (the last few backlogs). Guarantees:

- an entry is used only when its stream's stamp is exactly the recorded one; a missing,
  corrupt (the file's digest fails), foreign, malformed or stale entry is ignored and the
  task read whole again (a folder's stamp holds the change time: nothing can set it back;
  a store's the ETags: a segment replaced by other bytes of its size has another);
- the stamps are taken *before* the reads, so an append racing a read leaves an entry
  that no longer matches, never one that hides the append;
- the cache never decides what is sent and is never read by ``verify``; a run's start
  re-reads a task whole before recording anything the cache says of it
  (:mod:`intentlog.backlog.supervisor`), and a run with a quota counts what was spent
  from the streams themselves (:func:`read_reservations`), never from the cache (anyone
  who can write ``cache/`` can forge an entry with the stream's stamp): the cached
  reservations are for display only;
- who holds each item task's lock is never cached: it is read from ``/proc/locks`` once
  per call (each task's lock file then only ``stat``'ed), else probed per task.

A run's closing view reads no item task its workers just finished: the worker that wrote a
task's last records makes its line from the events it held as its writer closed
(:func:`entry_left`, only when that writer vouches for every event and every stored byte),
and the run adds those lines (:func:`remember`) before its view reads the rest: on a store
the view then costs one LIST per such task instead of reading its segments.

Deleting the file changes nothing but speed. On a folder, a backlog of fewer than
:data:`MIN_ITEMS` items writes no file (a read of a small backlog writes nothing).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import orjson

from ..eventlog.format import Event, parse_utc
from ..eventlog.storage import NO_STREAM
from ..projections.status import StatusFold, TaskStatus, task_status
from ..viewcache.store import cache_dir, read_lines, write_lines
from .model import LeaseRecord, LedgerLike, TaskExtras, task_extras

if TYPE_CHECKING:
    from ..stream import TaskStream

__all__ = [
    "FORMAT", "MIN_ITEMS", "CacheEntry", "ItemTask", "Reservations", "TaskSummary", "entry_left", "fold_item",
    "read_item_task", "read_items", "read_reservations", "read_returned_and_reserved", "remember",
]  # fmt: skip

FORMAT: Final = b"intentlog-backlogitems/4"  # /4: a stream's stamp, not its file facts
#: A backlog with fewer items than this is read whole and writes no cache file.
MIN_ITEMS: Final = 64

#: ``(task id, stream stamp, encoded ItemTask)``: one line of the cache
CacheEntry = tuple[str, str, Any]
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


def fold_item(task_id: str, events: Iterable[Event], status: TaskStatus | None = None) -> ItemTask:
    """An item task's :class:`ItemTask` from its events (pure); ``status``: their :func:`task_status`, when the
    caller folded them already."""
    evs = list(events)
    st = status if status is not None else task_status(evs, task_id=task_id)
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


def entry_left(stream: TaskStream, fold: StatusFold | None = None) -> CacheEntry | None:
    """The cache entry of an item task as its writer just left it, from the events it held: no read.

    Made only when the handle's last writer vouches for every event and every stored byte
    (:meth:`~intentlog.stream.TaskStream.take_left`): a folder's file facts as it let the lock
    go, a store's segments up to its release, as a stamp
    (:meth:`~intentlog.eventlog.storage.StreamStorage.stamps`), so a later append makes it
    stale like any entry. None otherwise (the reader then reads the task whole).
    ``fold``: the caller's status fold of the task, used when it folded exactly those events.
    """
    got = stream.take_left()
    if got is None:
        return None
    events, stamp = got
    status = fold.status() if fold is not None and fold.folded(events) else None
    return stream.id, stamp, _encode(fold_item(stream.id, events, status))


def remember(ledger: LedgerLike, backlog: str, entries: Iterable[Any], tasks: Collection[str]) -> None:
    """Add the entries :func:`entry_left` made to the cache of the backlog whose item tasks are ``tasks``.

    Only an entry of one of ``tasks``, in the shape of a line, is kept (its value is checked
    when used, as every line's); a folder's file is not written for a backlog of fewer than
    :data:`MIN_ITEMS` items. An entry is used later only while its stream's stamp is still
    the one it names.
    """
    got: dict[str, tuple[str, Any]] = {}
    for entry in entries:  # what a slot sent
        if type(entry) is tuple and len(entry) == 3 and entry[0] in tasks and type(entry[1]) is str:
            got[entry[0]] = (entry[1], entry[2])
    place = _place(ledger, backlog, len(tasks))
    if not got or place is None:
        return
    values = place.load()
    values.update(got)
    place.save(values)


class _File:
    """A folder ledger's cache file, ``cache/backlog-NAME.json`` (nothing when there is no ``cache/``)."""

    def __init__(self, root: Path, backlog: str) -> None:
        self.root, self.name = root, f"backlog-{backlog}.json"

    def load(self) -> dict[str, tuple[str, Any]]:
        dfd = cache_dir(self.root, None, create=False)
        if dfd is None:
            return {}
        try:
            lines = read_lines(dfd, self.name, FORMAT)
        finally:
            os.close(dfd)
        out: dict[str, tuple[str, Any]] = {}
        for line in lines or ():
            try:
                v = orjson.loads(line)
            except orjson.JSONDecodeError:
                return {}
            if type(v) is list and len(v) == 3 and type(v[0]) is str and type(v[1]) is str:
                out[v[0]] = (v[1], v[2])
        return out

    def save(self, values: Mapping[str, tuple[str, Any]]) -> None:
        dfd = cache_dir(self.root, None, create=False)  # cache/ is made with the ledger: a reader never makes it
        if dfd is None:
            return
        try:
            dumps = orjson.dumps
            write_lines(dfd, self.name, FORMAT, [dumps([t, st, v]) for t, (st, v) in values.items()])
        finally:
            os.close(dfd)


#: per (ledger, backlog) of ledgers with no cache folder (an object store): this process's entries, the
#: backlogs used longest ago dropped first
_MEMORY: OrderedDict[tuple[str, str], dict[str, tuple[str, Any]]] = OrderedDict()
_MEMORY_BACKLOGS: Final = 8
_MEMORY_MUTEX = threading.Lock()


class _Memory:
    """This process's entries of one backlog of a ledger with no cache folder (an object store).

    A process that views once (``intentlog backlog``) pays a LIST per task for stamps it
    never uses again; a run's start pays one LIST for a task with no stream yet, where a
    read is two, and its closing view one for each task its workers finished.
    """

    def __init__(self, key: tuple[str, str]) -> None:
        self.key = key

    def load(self) -> dict[str, tuple[str, Any]]:
        with _MEMORY_MUTEX:
            got = _MEMORY.get(self.key)
            if got is None:
                return {}
            _MEMORY.move_to_end(self.key)
            return dict(got)

    def save(self, values: Mapping[str, tuple[str, Any]]) -> None:
        with _MEMORY_MUTEX:
            _MEMORY[self.key] = dict(values)
            _MEMORY.move_to_end(self.key)
            while len(_MEMORY) > _MEMORY_BACKLOGS:
                _MEMORY.popitem(last=False)


def _place(ledger: LedgerLike, backlog: str, items: int) -> _File | _Memory | None:
    """Where the backlog's entries are kept: a folder's cache file (None below :data:`MIN_ITEMS` items: a
    small backlog is read whole), else this process's memory (a store, where a read whole costs requests)."""
    backend = ledger.backend
    if backend.row_files() is not None:
        return _File(ledger.root, backlog) if items >= MIN_ITEMS else None
    return _Memory((backend.key, backlog))


def read_items(ledger: LedgerLike, backlog: str, task_ids: Iterable[str]) -> dict[str, ItemTask]:
    """Each item task's :class:`ItemTask`, read whole only when its stream's stamp changed since the cache.

    Raises what a full read raises (:class:`~intentlog.errors.CorruptStream`) for a task
    read whole.
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


def _read(
    ledger: LedgerLike, backlog: str, task_ids: Iterable[str], decode: Callable[[Any], T], of: Callable[[ItemTask], T]
) -> dict[str, T]:
    ids = list(task_ids)
    place = _place(ledger, backlog, len(ids)) if ids else None
    if place is None:
        return {tid: of(read_item_task(ledger, tid)) for tid in ids}
    stamps = ledger.backend.streams.stamps(ids)  # taken before any read: an append meanwhile makes them stale
    old = place.load()
    new = dict(old)  # the entries of tasks not asked for stay (each is checked when used)
    out: dict[str, T] = {}
    changed = False
    for tid in ids:
        stamp, cached = stamps[tid], old.get(tid)
        if stamp is not None and cached is not None and cached[0] == stamp:
            try:
                out[tid] = decode(cached[1])
                continue
            except (ValueError, TypeError, KeyError):
                pass
        if stamp == NO_STREAM:
            out[tid] = of(_no_stream())
            continue
        task = ledger.task(tid)
        item = fold_item(tid, task.events())
        # a stream this process writes may hold records its storage does not yet (a store's buffered batch,
        # whose put may still fail): what was read is not what its stamp names, so no entry is made of it
        if stamp is not None and not task.stream.writing:
            new[tid] = (stamp, _encode(item))
            changed = True
        elif tid in new:
            del new[tid]
            changed = True
        out[tid] = of(item)
    if changed:
        place.save(new)
    return out
