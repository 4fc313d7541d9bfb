"""Quotas counted from the record: ``calls=60/60s`` (a window that reopens) or ``tokens=100000`` (a budget).

Every unit is reserved before the ``attempt.started`` it pays for (``quota.reserved`` in
the item's task, synced with the attempt) and never given back: an effect whose outcome is
unknown counts as spent, and a crash cannot lose or reset the count because the count is
read back from the streams. ``calls`` is one unit per attempt; any other name counts the
units a step declares for its next effect (:func:`intentlog.backlog.units`). Pure: the
caller passes the time.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from ..errors import UsageError

__all__ = ["GRANT_VALID", "MARGIN", "Quota", "QuotaBook", "parse_quota"]

#: Seconds a window counts a reservation beyond its length, so that the sends, which follow
#: their grants, fit the limit too: a send starts within :data:`GRANT_VALID` of its grant
#: or not at all, and the rest of the margin absorbs how much the requests' transit times
#: to the provider differ.
MARGIN: Final = 1.0

#: Seconds a grant stays valid, counted by the worker from the moment it asked (so before
#: the grant was made, on the worker's own monotonic clock): the effect protocol checks it
#: at the last moment before the send, after ``attempt.started`` is durable, and a grant
#: past it is not sent (``attempt.not_sent``, asked again; its units stay counted).
GRANT_VALID: Final = 0.75

_QUOTA_RE = re.compile(r"([a-z][a-z0-9_]*)=(\d+(?:\.\d+)?)(?:/(\d+(?:\.\d+)?)(ms|s|m|h|d)?)?\Z")
_UNIT: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


@dataclass(frozen=True, slots=True)
class Quota:
    """``name`` units at most per ``window`` seconds; ``window`` None: a budget that never reopens."""

    name: str
    limit: float
    window: float | None

    def spec(self) -> str:
        if self.window is None:
            return f"{self.name}={self.limit:g}"
        return f"{self.name}={self.limit:g}/{self.window:g}s"


def parse_quota(text: object) -> Quota:
    """``calls=60/60s``, ``tokens=5000/1h``, ``cost=20`` (a budget); UsageError naming the form otherwise."""
    if isinstance(text, Quota):
        return text
    if not isinstance(text, str):
        raise UsageError(f"a quota is a string like 'calls=60/60s' or 'tokens=100000', not {type(text).__name__}")
    m = _QUOTA_RE.match(text.strip())
    if m is None:
        raise UsageError(
            f"quota {text!r} is not NAME=LIMIT/WINDOW (calls=60/60s) or NAME=LIMIT (a budget: tokens=100000)"
        )
    name, limit, win, unit = m.groups()
    window = None if win is None else float(win) * _UNIT[unit]
    if float(limit) <= 0 or (window is not None and window <= 0):
        raise UsageError(f"quota {text!r}: the limit and the window must be positive")
    return Quota(name, float(limit), window)


@dataclass
class QuotaBook:
    """The reservations of one run's quotas: loaded from the record, then kept by the grants made."""

    quotas: Sequence[Quota]
    spent: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for q in self.quotas:
            self.spent.setdefault(q.name, deque())

    def load(self, reservations: Iterable[tuple[float, dict[str, float]]]) -> None:
        """Add recorded reservations ``(unix time, {quota: units})`` in any order."""
        rows: list[tuple[float, dict[str, float]]] = sorted(reservations, key=lambda r: r[0])
        for t, units in rows:
            for name, n in units.items():
                if name in self.spent:
                    self.spent[name].append((t, n))

    def used(self, q: Quota, now: float) -> float:
        rows = self.spent[q.name]
        if q.window is not None:
            horizon = now - q.window - MARGIN
            while rows and rows[0][0] <= horizon:
                rows.popleft()
        return sum(n for _, n in rows)

    def check(self, units: dict[str, float], now: float) -> tuple[Quota, float | None] | None:
        """None when ``units`` fit now; else the quota in the way and when it reopens (None: never)."""
        for q in self.quotas:
            want = units.get(q.name, 0.0)
            if not want:
                continue
            if want > q.limit:
                return q, None
            if self.used(q, now) + want <= q.limit:
                continue
            if q.window is None:
                return q, None
            rows = self.spent[q.name]
            need = self.used(q, now) + want - q.limit
            freed = 0.0
            for t, n in rows:
                freed += n
                if freed >= need:
                    return q, t + q.window + MARGIN
            return q, now + q.window + MARGIN  # pragma: no cover - freed always reaches need
        return None

    def reserve(self, units: dict[str, float], now: float) -> None:
        for name, n in units.items():
            if name in self.spent and n:
                self.spent[name].append((now, n))
