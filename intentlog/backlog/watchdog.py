"""The watchdog: stalls and overruns judged on this process's monotonic clock, never on another's timestamps.

An item whose stream has not grown for ``inactivity`` seconds (a quota wait excepted) has
a stalled holder; one running longer than ``max_duration`` has overrun. A holder is ended
(SIGKILL) only once its pid *and* start time match, or, on a store, fenced; a lock held
by a process that is not the run's is watched the same way and taken only once it stalls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import leases
from .journal import Journal
from .model import ItemRecord, task_extras
from .procs import end_holder, host_name

if TYPE_CHECKING:
    from ..task import Task

__all__ = ["Watchdog"]


@dataclass
class _Foreign:
    """An item whose task lock another process (not one of ours) holds."""

    size: int
    progress: float


class Watchdog:
    """Judges each running item, and each item another process holds, against the run's limits."""

    def __init__(self, journal: Journal, *, inactivity: float, max_duration: float | None) -> None:
        self.journal = journal
        self.inactivity, self.max_duration = inactivity, max_duration
        #: items held by a process that is not ours, with their progress as last seen
        self.foreign: dict[str, _Foreign] = {}

    def overdue(self, rec: ItemRecord, since: float, progress: float, now: float) -> tuple[str, str] | None:
        """``(record kind, reason)`` when the item handed over at ``since`` overran or stalled; None while fine."""
        hard = rec.max_duration if rec.max_duration is not None else self.max_duration
        limit = rec.inactivity if rec.inactivity is not None else self.inactivity
        if hard is not None and now - since > hard:
            return "backlog.item_timed_out", f"timed out: running longer than {hard:g} s"
        if now - progress > limit:
            return "backlog.holder_ended", f"stalled: its stream did not grow for {limit:g} s"
        return None

    def mine(self, item: str) -> None:
        """The item is now held by one of the run's workers: no longer watched as another's."""
        self.foreign.pop(item, None)

    def watch_foreign(self, rec: ItemRecord, t: Task) -> None:
        """A lock held by a process that is not ours: taken only after it stalls and is ended (pid + start time)."""
        size, now = leases.progress(t), time.monotonic()
        seen = self.foreign.get(rec.item)
        if seen is None or seen.size != size:
            self.foreign[rec.item] = _Foreign(size, now)
            return
        if now - seen.progress < self.inactivity:
            return
        if t.ledger.backend.fences:  # a lease that names no process here: the stalled holder is fenced, on any host
            if leases.fence(t) is not None:
                why = f"stalled: its stream did not grow for {self.inactivity:g} s; lease taken"
                self.journal.record(
                    "backlog.holder_ended", {"item": rec.item, "task": rec.task, "fenced": True, "reason": why}
                )
            self.foreign.pop(rec.item, None)
            return
        holder = t.writer_pid()
        lease = task_extras(t.events()).lease
        if holder is None or lease is None or lease.pid != holder or lease.host != host_name():
            return  # not provably the recorded holder on this host: never guessed at
        if end_holder(lease.pid, lease.start_time):
            self.journal.record(
                "backlog.holder_ended",
                {
                    "item": rec.item, "task": rec.task, "pid": lease.pid, "start_time": lease.start_time,
                    "epoch": lease.epoch, "reason": f"stalled: its stream did not grow for {self.inactivity:g} s",
                },
            )  # fmt: skip
            self.foreign.pop(rec.item, None)
