"""The quota broker: every attempt's units are granted here first, counted from the record.

What was spent is read from the items' tasks at the start (``quota.reserved``) and kept by
the grants made since. Windows are counted on the supervisor's monotonic clock, never on
the wall clock, so no step of it (forward or back) can open or hold a window: this run's
grants at the monotonic time they were made; those of earlier runs, whose wall-clock times
cannot be trusted, as made at this run's start (never counted short; a window they fill
reopens at most one window, plus its margin, after the start).
A grant carries its deadline (:data:`~.quota.GRANT_VALID`): a send that cannot start by
then is not sent, and its units stay counted (the worker asks again).
A full window makes the asking workers wait (``backlog.quota_waiting``,
recorded once per quota that fills); a spent budget that cannot reopen stops the run
(``backlog.quota_exhausted``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from .journal import Journal
from .messages import Grant, Spent
from .quota import GRANT_VALID, Quota, QuotaBook

__all__ = ["QuotaBroker"]


class QuotaBroker:
    """Answers reservations against one run's quotas."""

    def __init__(
        self,
        journal: Journal,
        quotas: tuple[Quota, ...],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.journal = journal
        self.quotas = quotas
        #: what windows are counted on (monotonic); ``wall`` only says when a window reopens, for people
        self.clock, self.wall = clock, wall
        self.book = QuotaBook(quotas)
        #: why the run takes no more attempts (a budget that cannot reopen is spent), once it is so
        self.exhausted: str | None = None
        self.waiting_logged: str | None = None
        #: when each item's pending reservation reached the supervisor (its clock): a grant's deadline counts from it
        self.asked_at: dict[str, float] = {}

    def load(self, reservations: Iterable[tuple[float, dict[str, float]]]) -> None:
        """Count what the record says earlier runs reserved (``(unix time, {quota: units})``, any order).

        Their recorded wall-clock times are not used: each is counted as made now (see the module).
        """
        now = self.clock()
        self.book.load((now, units) for _, units in reservations)

    def asked(self, item: str) -> None:
        """A reservation for ``item`` reached the supervisor now (the one its next grant answers)."""
        self.asked_at[item] = self.clock()

    def answer(self, item: str, want: dict[str, float], *, until: float | None = None) -> Grant | Spent | None:
        """Grant ``want`` now (reserved), refuse it for good, or None: the worker waits for the window.

        A grant is valid for the time the reservation waited here plus :data:`~.quota.GRANT_VALID`,
        which the worker counts from when it asked (before this process saw the request, on
        its own clock): its deadline is never later than :data:`~.quota.GRANT_VALID` after the grant.
        ``until`` (this clock): when the run stops being shown to hold its backlog (its last
        heartbeat plus ``FRESH``); no grant is given that could still be used then -- read
        on the same clock reading as the grant, so a run that stood still since it last
        looked (a paused VM) grants nothing once another could have taken its backlog.
        """
        now = self.clock()
        if until is not None and now + GRANT_VALID >= until:
            return None  # the worker waits: the next heartbeat (or the run's end) decides
        blocked = self.book.check(want, now)
        if blocked is None:
            self.book.reserve(want, now)
            self.waiting_logged = None
            waited = max(0.0, now - self.asked_at.pop(item, now))
            return Grant("grant", self.wall(), waited + GRANT_VALID)
        q, until = blocked
        if until is None:
            why = f"quota {q.spec()} is spent and cannot reopen"
            self.asked_at.pop(item, None)
            self.exhausted = why
            self.journal.record("backlog.quota_exhausted", {"quota": q.spec(), "item": item})
            self.journal.record("backlog.quota_waiting", {"quota": q.spec(), "until": None, "reason": why})
            return Spent("exhausted", why)
        if self.waiting_logged != q.name:
            self.waiting_logged = q.name
            wall_until = self.wall() + max(0.0, until - now)  # for people: when, by the wall clock, it reopens
            self.journal.record(
                "backlog.quota_waiting",
                {"quota": q.spec(), "until": wall_until, "used": self.book.used(q, now), "reason": "window full"},
            )
        return None
