"""The view cache: a derived, deletable store of each task's projections, so a view reads only what changed.

Kept under ``cache/`` in the ledger, made with it (the ledger's ``.gitignore`` excludes it;
deleting it changes nothing but speed; a reader never creates ``cache/`` itself, so a git
clone, which lacks it, is read without a cache until a writer puts the folder back). Two
kinds of file, both written atomically (temp + rename; not fsync'd: they are derivable)
and both checked before use, never trusted as read:

- ``cache/views/TASK.json`` (its layout: :mod:`intentlog.viewcache.store`): the work-state and
  operator folds of one task at a seq, with the byte offset, length and digest of that
  seq's line (and of line 0). A reader
  (:func:`fold_task`) uses it only when the stream is at least that long and the line at
  that offset hashes to the recorded digest; the scan then continues from the next byte,
  checking the chain exactly as a full read does (the next line must name that digest as
  its ``prev``), and folds only the later events. A missing, corrupt, stale or foreign
  entry, or one whose anchor line no longer matches, is ignored and rebuilt by a full
  read. A stream *shorter* than its entry says, whose line 0 is still the same, is
  reported (:class:`~intentlog.errors.CorruptStream`): events were cut from its end.
- ``cache/index-rows.json``, ``cache/index-gc.json``, ``cache/index-backlogs.json``: per
  task (one per line, sorted by id, in checked blocks: :mod:`intentlog.viewcache.index`), the
  file facts of its stream (size, inode, device, mtime_ns, ctime_ns) when last read whole,
  and what listings show of it (:mod:`intentlog.views`, gc's preview; the plan gc applies
  reads every stream). A listing reads a stream only when its facts differ from the
  index's, and reads the index entry by entry beside the directory listing.

The cache never decides what is sent: a writer's open reads and checks its whole stream
(tail, damage, seal), and ``intentlog verify`` reads every byte and never reads the cache.
Nothing under ``cache/`` is read or written through a link: a linked ``cache/`` or
``cache/views/`` is not used at all, a linked entry is ignored (a new entry's rename
replaces the link itself, never what it points to).
Entries are written by readers (a task's once a read folded :data:`MIN_EVENTS` events past
its entry, the index by a listing of at least :data:`MIN_TASKS` tasks), never on the
durable append path. A ledger made before the cache has no ``cache/`` and no line for it
in its ``.gitignore``: it is read without a cache until both are added.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._internal.digest import digest_bytes
from .._internal.nofollow import check_real_dir
from ..errors import CorruptStream
from ..eventlog.reader import StreamScan, open_stream
from ..projections.operator import OPERATOR_KINDS, OperatorFold
from ..projections.records import CallRecord
from ..projections.workstate import WorkState, WorkStateFold, work_state
from ..stream import read_events
from .index import INDEX_FORMAT, Facts, IndexJoin, facts_of, iter_index, write_index
from .store import CACHE_DIR, ENTRY_FORMAT, EntryRecords, StaleEntry, cache_dir, drop_entry, load_entry, save_entry

__all__ = [
    "CACHE_DIR",
    "ENTRY_FORMAT",
    "INDEX_FORMAT",
    "MIN_EVENTS",
    "MIN_TASKS",
    "Facts",
    "Folded",
    "IndexJoin",
    "drop_entry",
    "facts_of",
    "fold_task",
    "load_index",
    "paused_gc",
    "save_index",
    "save_folds",
    "work_state_of",
]

#: A reader writes a task's entry only when it folded at least this many events (a
#: small stream is read faster than an entry; reads of small ledgers write nothing).
MIN_EVENTS = 256
#: A listing rewrites the index only when it covers at least this many tasks.
MIN_TASKS = 64


@dataclass(slots=True)
class Folded:
    """One task's folds over its trusted events, and the scan that read (the rest of) them.

    ``resumed_at`` is the seq the folds were resumed after (-1: a full read). When the
    stream held nothing after the entry, ``work`` holds no call records: read the state
    with :meth:`work_state`, which takes them from the entry as they are looked up.
    """

    work: WorkStateFold
    ops: OperatorFold
    scan: StreamScan
    resumed_at: int
    records: Mapping[str, CallRecord] | None = None
    summary: Mapping[str, Any] | None = None

    def work_state(self) -> WorkState:
        """The work state (feed nothing to ``work`` afterwards)."""
        if self.records is not None and self.summary is not None:
            return self.work.finished_from(self.records, self.summary)
        return self.work.finished()


# -- one task's folds -----------------------------------------------------------------------


def _line_at(fd: int, offset: int, length: int) -> bytes | None:
    try:
        line = os.pread(fd, length, offset)
    except OSError:
        return None
    return line if len(line) == length and line.endswith(b"\n") else None


def _anchor(fd: int, size: int, path: Path, entry: Mapping[str, Any]) -> tuple[int, int, str] | None:
    """Where to resume: ``(offset, seq, digest)`` after the entry's line, or None to read from line 0.

    Raises :class:`CorruptStream` when the stream is shorter than the entry says while its
    line 0 is the one the entry saw: events were cut from its end.
    """
    try:
        seq, offset, end, digest = int(entry["seq"]), int(entry["offset"]), int(entry["end"]), entry["digest"]
        first_len, first = int(entry["first_len"]), entry["first"]
    except (KeyError, TypeError, ValueError):
        return None
    if not 0 <= offset < end or seq < 0 or first_len <= 0 or type(digest) is not str:
        return None
    if size < end:
        line0 = _line_at(fd, 0, first_len) if size >= first_len else None
        if line0 is not None and digest_bytes(line0) == first:
            raise CorruptStream(
                str(path),
                seq + 1,
                f"the stream is {size} bytes, but it held {seq + 1} events ending at byte {end} when it was "
                f"last read (cache/views/{path.stem}.json): events were cut from its end; run 'intentlog verify' "
                "and restore the stream from a copy (if an older copy was restored on purpose, delete that "
                "cache entry)",
            )
        return None  # another stream under this name (gc retired the old one): read it whole
    line = _line_at(fd, offset, end - offset)
    if line is None or digest_bytes(line) != digest:
        return None  # rewritten under the entry: read it whole (the full read judges it)
    return end, seq + 1, digest


class _Fallback(Mapping[str, CallRecord]):
    """An entry's records; should the entry change or fail a check meanwhile, the stream's own, read up to its seq."""

    def __init__(self, records: EntryRecords, path: Path, task_id: str, seq: int) -> None:
        self._records: Mapping[str, CallRecord] = records
        self._path, self._task, self._seq = path, task_id, seq

    def _switch(self) -> Mapping[str, CallRecord]:
        fold = WorkStateFold(self._task)
        for ev in read_events(self._path, self._path.parent):
            if ev.seq > self._seq:
                break
            fold.apply(ev)
        self._records = fold.records()
        return self._records

    def __getitem__(self, cid: str) -> CallRecord:
        try:
            return self._records[cid]
        except StaleEntry:
            return self._switch()[cid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)


def _restore(
    meta: Mapping[str, Any], records: EntryRecords, *, lazy: bool
) -> tuple[WorkStateFold, OperatorFold] | None:
    try:
        if lazy:
            work = WorkStateFold.from_snapshot(meta["work"], (), known=frozenset(records.cids))
        else:
            work = WorkStateFold.from_snapshot(meta["work"], records.load_all())
        return work, OperatorFold.from_snapshot(meta["ops"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, StaleEntry):
        return None


def fold_task(root: Path, tasks_dir: Path, task_id: str, *, save: bool = True, ops: bool = True) -> Folded:
    """Fold one task's trusted events, resuming from its cache entry when the stream vouches for it.

    The folds (:meth:`Folded.work_state`, ``ops``) and the scan's ``problem``, ``count``,
    ``end`` and ``head`` are what a full read gives, or :class:`CorruptStream` for a stream
    shorter than its entry says (see the module doc). A missing stream raises
    ``FileNotFoundError``; a linked ``tasks/`` or stream
    :class:`~intentlog.errors.LinkRefused`, as a full read does. With ``save``, an entry is
    written when the read folded at least :data:`MIN_EVENTS` events past the cached one
    (never for a stream with damage in it). ``ops=False``: the caller reads only the work
    state; the operator fold is then kept only when an entry may be written.
    """
    check_real_dir(tasks_dir, what="task streams")
    if not ops and save:
        dfd = cache_dir(root, None, create=False)
        if dfd is not None:
            os.close(dfd)
        ops = dfd is not None
    path = tasks_dir / f"{task_id}.jsonl"
    with open_stream(path) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        loaded = load_entry(root, task_id)
        start = _anchor(fd, size, path, loaded[0]) if loaded is not None else None
        lazy = start is not None and size == start[0]  # nothing after the entry: read records on demand
        folds = _restore(*loaded, lazy=lazy) if start is not None and loaded is not None else None
        if folds is None:
            start, lazy = None, False
            folds = WorkStateFold(task_id), OperatorFold()
        work, op_fold = folds
        scan = StreamScan(path, fd=fd, resume=start)
        first: tuple[int, str] | None = None
        apply_work, apply_ops, kinds = work.apply, op_fold.apply, OPERATOR_KINDS if ops else frozenset()
        for ev in scan:
            if ev.seq == 0:
                first = (scan.end, ev.digest)
            apply_work(ev)
            if ev.kind in kinds or (ops and "phase" in ev.data):  # the rest are nothing to the operator fold
                apply_ops(ev)
    resumed_at = start[1] - 1 if start is not None else -1
    if lazy and loaded is not None and start is not None:
        meta, records = loaded
        fallback = _Fallback(records, path, task_id, resumed_at)
        return Folded(work, op_fold, scan, resumed_at, fallback, meta["summary"])
    if first is None and loaded is not None and start is not None:
        first = (int(loaded[0]["first_len"]), loaded[0]["first"])
    p = scan.problem
    worth = scan.count - 1 - resumed_at >= MIN_EVENTS
    if save and ops and worth and first is not None and (p is None or (p.torn and not p.suspect)):
        save_folds(root, task_id, scan, first, work, op_fold)
    return Folded(work, op_fold, scan, resumed_at)


def save_folds(
    root: Path, task_id: str, scan: StreamScan, first: tuple[int, str], work: WorkStateFold, ops: OperatorFold
) -> None:
    """Write the entry for ``task_id`` at the scan's last trusted line (best effort: the cache is only speed)."""
    if scan.count == 0 or scan.head is None:
        return
    anchor: dict[str, Any] = {
        "task": task_id,
        "seq": scan.count - 1,
        "offset": scan.last_start,
        "end": scan.end,
        "digest": scan.head,
        "first_len": first[0],
        "first": first[1],
        "ops": ops.snapshot(),
    }
    save_entry(root, task_id, anchor, work)


# -- the listings' index (streamed: intentlog.viewcache.index) --------------------------------------


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the block (a listing builds many small acyclic containers)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load_index(root: Path, part: str) -> dict[str, tuple[Facts, Any]]:
    """What the index ``part`` holds per task, as one dict (a listing streams it with :class:`IndexJoin`)."""
    return {task: (facts, value) for task, facts, value in iter_index(root, part)}


def save_index(root: Path, part: str, values: Mapping[str, tuple[Facts, Any]]) -> None:
    """Replace the index ``part`` with ``values``; best effort, atomic, never through a link."""
    write_index(root, part, ((t, f, v) for t, (f, v) in sorted(values.items())))


def work_state_of(root: Path, tasks_dir: Path, task_id: str) -> WorkState:
    """The work state of ``task_id`` as a full read gives it, resumed from the cache where it vouches.

    No stream: the state of no events. A torn tail ends the events quietly; damage raises
    :class:`CorruptStream` (as :func:`intentlog.stream.read_events` does), and so does a
    stream shorter than its cache entry says.
    """
    try:
        folded = fold_task(root, tasks_dir, task_id, ops=False)
    except FileNotFoundError:
        return work_state((), task_id=task_id)
    p = folded.scan.problem
    if p is not None and (p.suspect or not p.torn):
        raise CorruptStream(str(folded.scan.path), p.line, p.reason)
    return folded.work_state()
