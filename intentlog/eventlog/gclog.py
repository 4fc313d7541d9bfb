"""The gc.jsonl format: what garbage collection deleted on purpose (written by :mod:`intentlog.retention`).

gc.jsonl is a hash-chained stream in the ledger root: ``gc.started`` lists every task
(with its stream id, head and length) and blob a run is about to delete, before it
deletes anything; ``gc.finished`` says what it did. This module is its one codec: the
kinds, the event data builders the writer uses, and the read-only decoder the checker and
export use to tell a stream gc deleted from a stream lost.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, final

from ..errors import CorruptStream
from ..heads.codec import StreamHead
from .format import Event
from .reader import StreamScan
from .remote import events_in

__all__ = [
    "GC_FINISHED",
    "GC_KEPT",
    "GC_LEASED",
    "GC_LEASING",
    "GC_LOG",
    "GC_RELEASED",
    "GC_STARTED",
    "GC_SWEPT",
    "check_shape",
    "GcDeletion",
    "finished_data",
    "fold_deletions",
    "read_gc_deletions",
    "retired_by_gc",
    "started_task",
    "store_gc_deletions",
]

GC_LOG: Final = "gc.jsonl"
GC_STARTED: Final = "gc.started"
GC_FINISHED: Final = "gc.finished"
#: a store's gc log: the leases gc is about to take (with its holder token), taken, and what a killed gc left, removed
GC_LEASING: Final = "gc.leasing"
GC_LEASED: Final = "gc.leased"
GC_SWEPT: Final = "gc.swept"
#: a store's gc log: ``keep`` and ``keep --remove`` (a folder keeps its marks in keep.json)
GC_KEPT: Final = "gc.kept"
GC_RELEASED: Final = "gc.released"


# -- writing: the fields the decoder below reads, built in one place ------------------


def started_task(task: str, stream: str | None, head: str | None, events: int, **more: Any) -> dict[str, Any]:
    """One entry of ``gc.started`` data ``tasks``: the stream about to be deleted (``more``: what else a plan says)."""
    return {"task": task, "stream": stream, "head": head, "events": events, **more}


def finished_data(
    started: int, deleted: Sequence[str], skipped: Sequence[tuple[str, str]], **more: Any
) -> dict[str, Any]:
    """``gc.finished`` data: the ``gc.started`` seq it closes, the tasks deleted, those left in place and why."""
    return {
        "started": started,
        "deleted": list(deleted),
        "skipped": [{"task": t, "reason": r} for t, r in skipped],
        **more,
    }


# -- reading ------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class GcDeletion:
    """A task stream that gc recorded deleting: which stream, its head and length, when."""

    task: str
    stream: str | None
    head: str | None
    events: int
    ts: str  # the gc.started event's timestamp
    seq: int  # the gc.started event's seq in gc.jsonl
    finished: bool  # a gc.finished confirmed it (False: that run was interrupted)

    def matches(self, sealed: StreamHead) -> bool:
        """Did the stream gc deleted contain the sealed head? (same stream, sealed event within it)"""
        if sealed.stream != self.stream or sealed.seq >= self.events:
            return False
        return sealed.seq < self.events - 1 or sealed.head == self.head


def read_gc_deletions(root: Path) -> tuple[dict[str, GcDeletion], str | None]:
    """The deletions recorded in ``root/gc.jsonl`` (latest per task), and what is wrong with the log, if anything.

    The log is a hash-chained stream: a line that fails its checks (other than a torn
    tail, as a task stream's) makes the whole log untrusted, and then no deletion is excused.
    """
    path = root / GC_LOG
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"{GC_LOG} cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return {}, f"{GC_LOG} is a symbolic link or not a regular file, so it was not read"
    scan = StreamScan(path)
    try:
        out = fold_deletions(scan)
    except OSError as exc:
        return {}, f"{GC_LOG} cannot be read ({exc.strerror or exc})"
    except CorruptStream as exc:
        return {}, f"{GC_LOG} line {exc.line}: {exc.reason}"
    p = scan.problem
    if p is not None and (p.suspect or not (p.torn or p.incomplete)):
        # a torn tail (garbage with nothing event-like after it: what a power cut leaves while
        # a line is written) is a crash's, repaired by the next gc; anything else is damage
        return {}, f"{GC_LOG} line {p.line}: {p.reason}"
    return out, None


def store_gc_deletions(data: bytes | None, where: str) -> tuple[dict[str, GcDeletion], str | None]:
    """:func:`read_gc_deletions` over the bytes of an object store's gc log (None: there is none).

    A store's segments are whole, so any line that fails its checks is damage: the log is
    then untrusted and no deletion is excused, as for a damaged ``gc.jsonl``. On a store a
    task counts as deleted only once a record says its deletion was carried out
    (``gc.leased``, ``gc.finished`` or ``gc.swept`` naming it): ``gc.started`` alone, what a
    gc killed before it touched anything leaves, excuses nothing.
    """
    if data is None:
        return {}, None
    try:
        return fold_deletions(events_in(data, where), where, carried_out=True), None
    except CorruptStream as exc:
        return {}, f"{where} line {exc.line}: {exc.reason}"


#: the data fields a gc log event must have the shape of (missing is allowed; another type is damage)
_SHAPES: Final[dict[str, dict[str, type | tuple[type, ...]]]] = {
    GC_STARTED: {"tasks": list, "blobs": dict},
    GC_FINISHED: {"started": int, "deleted": list, "skipped": list},
    GC_LEASING: {"started": int, "tasks": list},
    GC_LEASED: {"started": int, "tasks": list},
    GC_SWEPT: {"tasks": list},
}


def check_shape(ev: Event, where: str) -> None:
    """``CorruptStream`` when a gc log event's fields are not of the types gc writes (a well-chained forgery or bug)."""
    for key, want in _SHAPES.get(ev.kind, {}).items():
        value = ev.data.get(key)
        if value is not None and (not isinstance(value, want) or isinstance(value, bool)):
            raise CorruptStream(
                where,
                ev.seq + 1,
                f"{ev.kind} field {key!r} is {type(value).__name__}, not what gc writes; the gc log is not trusted",
            )


def fold_deletions(events: Iterable[Event], where: str = GC_LOG, *, carried_out: bool = False) -> dict[str, GcDeletion]:
    """The deletions a gc log's events record (latest per task); a task a run left in place is dropped.

    With ``carried_out`` (a store's log) a ``gc.started`` entry counts only once a
    ``gc.leased`` / ``gc.finished`` / ``gc.swept`` names it. A wrong-shaped event:
    ``CorruptStream`` (:func:`check_shape`).
    """
    out: dict[str, GcDeletion] = {}
    pending: dict[str, GcDeletion] = {}
    for ev in events:
        check_shape(ev, where)
        if ev.kind == GC_STARTED:
            for t in ev.data.get("tasks") or []:
                if isinstance(t, dict) and isinstance(t.get("task"), str) and type(t.get("events")) is int:
                    stream, head = t.get("stream"), t.get("head")
                    new = GcDeletion(
                        t["task"],
                        stream if isinstance(stream, str) else None,
                        head if isinstance(head, str) else None,
                        t["events"],
                        ev.ts,
                        ev.seq,
                        False,
                    )
                    (pending if carried_out else out)[new.task] = new
        elif ev.kind in (GC_LEASED, GC_SWEPT) and carried_out:
            for t in ev.data.get("tasks") or []:
                name = t.get("task") if isinstance(t, dict) else t
                done = pending.get(name) if isinstance(name, str) else None
                if done is not None and (ev.kind == GC_SWEPT or done.seq == ev.data.get("started")):
                    out[done.task] = done
        elif ev.kind == GC_FINISHED:
            started = ev.data.get("started")
            for name in ev.data.get("deleted") or []:
                d = (pending.get(name) or out.get(name)) if isinstance(name, str) else None
                if d is not None and d.seq == started:
                    out[name] = replace(d, finished=True)
            for skipped in ev.data.get("skipped") or []:
                left = skipped.get("task") if isinstance(skipped, dict) else None
                if isinstance(left, str) and left in out and out[left].seq == started:
                    del out[left]  # left in place after all
    return out


def retired_by_gc(root: str | os.PathLike[str], task: str, sealed: StreamHead) -> bool:
    """True when a trusted ``gc.jsonl`` records deleting exactly the stream ``heads.json`` seals for ``task``.

    The seal then binds only a stream with that stream id (gc may have left it in place
    after all); a stream created under the id afterwards is a new task, not a rewrite. Only a
    run that recorded its end (``gc.finished`` naming the task) counts: a run killed after
    ``gc.started`` may have deleted nothing, and a swapped stream is then a replacement.
    """
    deleted, problem = read_gc_deletions(Path(root))
    d = deleted.get(task)
    # a run killed after gc.started may have touched nothing: only its recorded end excuses a swap
    return problem is None and d is not None and d.finished and d.matches(sealed)


# -- reading files, read-only -----------------------------------------------------------
#
# The store's own helpers live beside its writing code (artifacts/store.py imports the
