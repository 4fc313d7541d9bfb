"""The quota broker: every attempt's units are granted here first, counted from the record.

What was spent is read from the items' tasks at the start (``quota.reserved``) and kept by
the grants made since. A full window makes the asking workers wait (``backlog.quota_waiting``,
recorded once per quota that fills); a spent budget that cannot reopen stops the run
(``backlog.quota_exhausted``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from .journal import Journal
from .messages import Grant, Spent
from .quota import Quota, QuotaBook

__all__ = ["QuotaBroker"]


class QuotaBroker:
    """Answers reservations against one run's quotas."""

    def __init__(self, journal: Journal, quotas: tuple[Quota, ...]) -> None:
        self.journal = journal
        self.quotas = quotas
        self.book = QuotaBook(quotas)
        #: why the run takes no more attempts (a budget that cannot reopen is spent), once it is so
        self.exhausted: str | None = None
        self.waiting_logged: str | None = None

    def load(self, reservations: Iterable[tuple[float, dict[str, float]]]) -> None:
        """Count what the record says was reserved (``(unix time, {quota: units})``, any order)."""
        self.book.load(reservations)

    def answer(self, item: str, want: dict[str, float]) -> Grant | Spent | None:
        """Grant ``want`` now (reserved), refuse it for good, or None: the worker waits for the window."""
        now = time.time()
        blocked = self.book.check(want, now)
        if blocked is None:
            self.book.reserve(want, now)
            self.waiting_logged = None
            return Grant("grant", now)
        q, until = blocked
        if until is None:
            why = f"quota {q.spec()} is spent and cannot reopen"
            self.exhausted = why
            self.journal.record("backlog.quota_exhausted", {"quota": q.spec(), "item": item})
            self.journal.record("backlog.quota_waiting", {"quota": q.spec(), "until": None, "reason": why})
            return Spent("exhausted", why)
        if self.waiting_logged != q.name:
            self.waiting_logged = q.name
            self.journal.record(
                "backlog.quota_waiting",
                {"quota": q.spec(), "until": until, "used": self.book.used(q, now), "reason": "window full"},
            )
        return None
