"""The idioms' view of a task held by this process, kept current without re-reading the stream each time.

While this process holds a task's writer, no other process appends to it, and every idiom
record is appended here through :func:`record`; so the fold built when the writer was
opened stays exact for as long as that writer is open. A new writer (the lock was
released and taken again) means the fold is built again from the stream.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ..projections.idioms import IdiomFold, IdiomState

if TYPE_CHECKING:
    from ..eventlog import Event
    from ..stream import TaskStream

__all__ = ["current", "record"]

#: stream -> (the writer the fold was built under, the fold)
_FOLDS: weakref.WeakKeyDictionary[TaskStream, tuple[object, IdiomFold]] = weakref.WeakKeyDictionary()


def _fold(task: TaskStream) -> IdiomFold:
    """The fold of ``task``'s idiom records (opens the writer: the lock is held from here on)."""
    with task.mutex:
        writer = task.open_writer()
        got = _FOLDS.get(task)
        if got is not None and got[0] is writer:
            return got[1]
        fold = IdiomFold()
        for ev in task.events():
            fold.apply(ev)
        _FOLDS[task] = (writer, fold)
        return fold


def current(task: TaskStream) -> IdiomState:
    """What the task's idiom records say now (takes the writer lock)."""
    return _fold(task).result()


def record(task: TaskStream, kind: str, data: dict[str, Any]) -> Event:
    """Append one idiom record, synced before this returns (even inside a batch), and fold it in."""
    with task.mutex:
        fold = _fold(task)
        ev = task.append(kind, data, sync=True)
        fold.apply(ev)
        return ev
