"""The backlog stream as a run writes it: its records, their group commit, and how long its lock is held.

A run is the one writer of its backlog's stream, but not its only one: ``add`` and
``unblock`` append between the run's turns. So the lock is held at most about a second at
a time (:meth:`Journal.release`), and the fold is read again only when the stream says
another process appended (:meth:`Journal.refresh`).
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from typing import Any, Final

from ..eventlog.format import Event
from .model import BacklogFold, BacklogLike

__all__ = ["LAZY", "Journal"]

#: Records that may wait for the next sync (about a second): each is derivable from the item tasks.
LAZY: Final = frozenset({"backlog.item_done", "backlog.item_blocked", "backlog.holder_died", "backlog.quota_waiting"})


class Journal:
    """A run's record of its decisions in the backlog stream, and the fold of that stream kept current."""

    def __init__(self, backlog: BacklogLike) -> None:
        self.backlog = backlog
        self.fold = BacklogFold()
        self.batch: ExitStack | None = None
        #: in the loop: records ride in a batch synced about once a second
        self.batching = False
        self.last_close = 0.0
        #: the backlog stream's size when this process last let its lock go (-1: unknown)
        self.closed_size = -1
        #: the token of the run that records here (set once its start is recorded): nothing is recorded
        #: once the backlog's last start is another run's
        self.run: str | None = None

    def ours(self) -> bool:
        """Under the lock: whether the backlog's last ``run_started`` is this journal's run's (True before one)."""
        if self.run is None:
            return True
        self.hold()  # what is read next is the whole stream
        self.refresh()
        last = self.fold.run
        return last is not None and last.get("run") == self.run

    def record(self, kind: str, data: dict[str, Any]) -> Event | None:
        """Append to the backlog stream; decisions and ends of holders are durable on return.

        The rest (:data:`LAZY`: an item done or blocked, a worker that died, a quota wait)
        may ride in the open batch, synced within about a second: each of them is found
        again in the item tasks at the next start if a crash loses it. None, and nothing
        written, once another run started on the backlog (this one was taken over): from
        its start the backlog is that run's, which finds all of it again in the item tasks.
        """
        durable = kind not in LAZY
        if self.batching:
            self.begin()
        if not self.ours():
            return None
        ev = self.backlog.task.stream.append(kind, data, sync=durable)
        if ev.seq == self.fold.seq + 1:
            self.fold.apply(ev)
        else:  # another process (add, unblock) appended while this one did not hold the lock: fold it all again
            self.fold = BacklogFold()
            for e in self.backlog.task.events():
                self.fold.apply(e)
        return ev

    def begin(self) -> None:
        if self.batch is None:
            es = ExitStack()
            es.enter_context(self.backlog.task.batch())
            self.batch = es

    def hold(self) -> None:
        """Take the backlog's lock now: ``add`` and ``unblock`` wait until the next :meth:`release` or :meth:`close`."""
        self.backlog.task.stream.open_writer()

    def end(self) -> None:
        """Sync what the open batch holds (the backlog's lock stays held)."""
        es, self.batch = self.batch, None
        if es is not None:
            es.close()

    def refresh(self) -> None:
        """Read the backlog stream again when another process (add, unblock) appended to it.

        Not read when nothing says so: while this process holds the writer, the writer's
        count (it read the stream whole when it opened) equals the fold's; otherwise the
        stream's size equals the one seen when the fold was last current (appends only grow it).
        """
        stream = self.backlog.task.stream
        if stream.writing:
            if stream.next_seq - 1 == self.fold.seq:
                return
            size = -1
        else:
            size = _size(stream.path)  # before the read: an append racing it makes the next look read again
            if self.closed_size >= 0 and size == self.closed_size:
                return
        f = BacklogFold()
        for ev in self.backlog.task.events():
            f.apply(ev)
        if f.seq != self.fold.seq:
            self.fold = f
        self.closed_size = size

    def release(self, *, now: bool = False) -> None:
        """Let ``add`` and ``unblock`` in: the backlog's lock is held at most about a second at a time.

        On a store that bound is what keeps a live supervisor's lease from being taken as
        stale (``add``, ``unblock`` and the next ``run`` take a lease whose stream stood still
        for 5 s): ``now`` gives it back at once, before work that reads for long.
        """
        if now or time.monotonic() - self.last_close > 1.0:
            self.end()
            self.refresh()  # what others appended before this process took the lock last
            t = self.backlog.task
            if t.stream.writing:
                self.closed_size = _size(t.stream.path)  # exact: the lock is still held
            t.close()
            self.last_close = time.monotonic()

    def close(self) -> None:
        """Sync and let the lock go now, reading nothing (a forked child must not inherit it)."""
        self.end()
        self.backlog.task.close()
        self.last_close = time.monotonic()


def _size(path: os.PathLike[str] | str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1
