"""Provider-side deduplication: what a call relies on when it resends an unknown effect (DESIGN §5).

Many providers that take money or send messages keep the first response for an
idempotency key and replay it for a repeat of the same key sent within a *window* of the
first send (Stripe: 24 hours). :class:`ProviderDedup` declares that guarantee for a call;
it is recorded in the call's manifest (``dedup: {window_s, header, margin_s}``), so a later
process and an auditor see what was relied on.

With the declaration recorded *and* passed again by the run that finds the effect
unknown, an attempt that started and left nothing after it is resent under the same key
without a person — but only when the call's **first** attempt started less than
``window - margin`` ago, judged from the record's own ``ts`` of that ``attempt.started``
and this machine's clock. ``effect.reconciled {outcome: "provider_dedup", window_s,
age_s, margin_s}`` is durable first. Outside the window, with no declaration, or when
the recorded timestamp lies in this machine's future, nothing is appended and
:class:`~intentlog.errors.EffectUnknown` stands.

The margin (default ``max(60 s, 5 % of the window)``) absorbs the error between the clock
that wrote the record, this machine's clock and the provider's clock, and the time the
resend takes to reach the provider. A minute covers NTP-synchronised machines many times
over and a slow resend; 5 % scales it for long windows, where provider-side expiry is
coarse (a 24 h window keeps 72 min). A record moved to a machine whose clock runs behind
makes the first attempt look younger than it is: the margin is all that protects it.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from .errors import UsageError
from .eventlog.format import parse_utc

__all__ = [
    "DEFAULT_MARGIN_FLOOR",
    "DEFAULT_MARGIN_SHARE",
    "MAX_WINDOW_S",
    "ProviderDedup",
    "age_of",
    "clock",
    "parse_ts",
    "within",
]

#: The smallest default margin, seconds.
DEFAULT_MARGIN_FLOOR: Final = 60.0
#: The default margin's share of the window.
DEFAULT_MARGIN_SHARE: Final = 0.05
#: The longest window a declaration may give (30 days): longer than providers keep an idempotency key.
MAX_WINDOW_S: Final = 30 * 86400.0

_TOKEN: Final = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 field-name


def _seconds(value: object, what: str) -> float:
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"ProviderDedup({what}=...) must be a finite timedelta or number of seconds, not {value!r}")
    return float(value)


@final
@dataclass(frozen=True, slots=True, init=False)
class ProviderDedup:
    """The provider replays the first response for a repeated key sent within ``window`` of the first send.

    ``window``: a positive, finite ``timedelta`` or number of seconds. ``header``: the
    HTTP header the provider reads the key from (``"Idempotency-Key"``), or None when
    ``send`` conveys the key itself; with :mod:`intentlog.http` every attempt then carries
    the call's key in that header, and the header is part of the recorded request.
    ``margin``: seconds kept back from the window for clock error and transit (default
    ``max(60, 5 % of window)``); it must leave part of the window usable.
    """

    window_s: float
    header: str | None
    margin_s: float

    def __init__(
        self, window: _dt.timedelta | float, header: str | None = None, *, margin: _dt.timedelta | float | None = None
    ) -> None:
        w = _seconds(window, "window")
        if not 0 < w <= MAX_WINDOW_S:
            raise UsageError(
                f"ProviderDedup(window=...) must be positive and at most {MAX_WINDOW_S:g} s (30 days), not {window!r}"
            )
        if header is not None and (not isinstance(header, str) or _TOKEN.match(header) is None):
            raise UsageError(
                f"ProviderDedup(header=...) must be an HTTP header name (letters, digits, '-'), or None, not {header!r}"
            )
        m = max(DEFAULT_MARGIN_FLOOR, DEFAULT_MARGIN_SHARE * w) if margin is None else _seconds(margin, "margin")
        if m < 0 or m >= w:
            raise UsageError(
                f"ProviderDedup: the margin ({m:g} s) must be at least 0 and less than the window ({w:g} s); "
                "give a longer window or a smaller margin="
            )
        object.__setattr__(self, "window_s", w)
        object.__setattr__(self, "header", header)
        object.__setattr__(self, "margin_s", m)

    @property
    def usable_s(self) -> float:
        """Seconds after the first send within which a resend is relied on: ``window - margin``."""
        return self.window_s - self.margin_s

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``dedup`` field."""
        return {"window_s": self.window_s, "header": self.header, "margin_s": self.margin_s}

    @classmethod
    def from_json(cls, value: Any) -> ProviderDedup | None:
        """The declaration a manifest recorded, or None when it recorded none (or a malformed one)."""
        if not isinstance(value, Mapping):
            return None
        try:
            return cls(value.get("window_s"), value.get("header"), margin=value.get("margin_s"))  # type: ignore[arg-type]
        except UsageError:
            return None


def check(dedup: object) -> ProviderDedup | None:
    """``dedup`` if a :class:`ProviderDedup` or None; misuse is a :class:`UsageError`, nothing written."""
    if dedup is not None and not isinstance(dedup, ProviderDedup):
        raise UsageError(f"dedup must be an intentlog.ProviderDedup(window=...), not {type(dedup).__name__}")
    return dedup


def clock() -> float:
    """This machine's clock (epoch seconds) as the window check reads it (one place, so tests can move it)."""
    return time.time()


def parse_ts(ts: str) -> float | None:
    """Seconds since the epoch of a recorded ``ts`` (``2026-11-30T02:04:05.123456Z``), None when unreadable."""
    try:
        when = parse_utc(ts)
    except (TypeError, ValueError):
        return None
    return when.timestamp()


def age_of(first_ts: str, now: float) -> float | None:
    """Seconds between a recorded ``ts`` and ``now`` (epoch seconds); None when the ts is unreadable."""
    start = parse_ts(first_ts)
    return None if start is None else now - start


def within(window_s: Any, margin_s: Any, age_s: float) -> bool:
    """The rule both verifiers and the protocol apply: ``0 <= age <= window - margin``."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (window_s, margin_s)):
        return False
    return 0 <= age_s <= float(window_s) - float(margin_s)
