"""The gc policy: its limits, parsed from durations and sizes, resolved from arguments and config."""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, final

from ..errors import UsageError
from ..eventlog.format import TS_FORMAT, parse_utc


class Configured(Protocol):
    """What the policy is read from: a ledger's root and its ``intentlog.json`` marker."""

    @property
    def root(self) -> Path: ...

    @property
    def marker(self) -> dict[str, Any]: ...


DEFAULT_MAX_AGE: Final = 30 * 86400.0
DEFAULT_MAX_SIZE: Final = 500 << 20
DEFAULT_GRACE: Final = 3600.0
#: Above this many distinct digests the scan stops tracking references (about 130 bytes
#: each in memory) and declares itself incomplete: no blob is deleted.
MAX_TRACKED: Final = 4_000_000

GC_LOG: Final = "gc.jsonl"
GC_LOCK: Final = "gc.lock"
KEEP_FILE: Final = "keep.json"
KEEP_FORMAT: Final = "intentlog-keep/1"
PLAN_VERSION: Final = "intentlog-gc-plan/1"
CONFIG_KEY: Final = "retention"


# -- durations and sizes ---------------------------------------------------------------

_DURATION_UNITS: Final = {
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
}
_SIZE_UNITS: Final = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_NUMBER_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*\Z")
_UNLIMITED: Final = frozenset({"none", "off", "unlimited"})


def parse_duration(
    text: str | float | _dt.timedelta, *, what: str = "duration", allow_none: bool = False
) -> float | None:
    """Seconds from ``"30d"``, ``"12h"``, ``"90m"``, ``"45s"``, ``"2w"`` (a number is seconds).

    ``"none"`` (or ``"off"``) means no limit and is accepted only with ``allow_none``.
    Raises :class:`UsageError` naming ``what`` and the accepted forms.
    """
    if isinstance(text, _dt.timedelta):
        seconds = text.total_seconds()
    elif isinstance(text, bool):
        raise UsageError(f"{what}: expected a duration such as 30d, 12h or 90m, not {text!r}")
    elif isinstance(text, (int, float)):
        seconds = float(text)
    elif isinstance(text, str):
        if allow_none and text.strip().lower() in _UNLIMITED:
            return None
        m = _NUMBER_RE.match(text)
        unit = m.group(2).lower() if m else ""
        if m is None or unit not in _DURATION_UNITS:
            hint = " (add a unit: s, m, h, d or w)" if m is not None and not unit else ""
            extra = "; 'none' for no limit" if allow_none else ""
            raise UsageError(f"{what}: {text!r} is not a duration such as 30d, 12h, 90m or 45s{hint}{extra}")
        seconds = float(m.group(1)) * _DURATION_UNITS[unit]
    else:
        raise UsageError(f"{what}: expected a duration such as 30d, 12h or 90m, not {type(text).__name__}")
    if not seconds >= 0 or seconds == float("inf"):
        raise UsageError(f"{what}: must be a finite, non-negative duration, not {text!r}")
    return seconds


def parse_size(text: str | int, *, what: str = "size", allow_none: bool = False) -> int | None:
    """Bytes from ``"500MiB"``, ``"2GiB"``, ``"10MB"``, ``"4096"`` (binary and decimal units).

    ``"none"`` means no limit and is accepted only with ``allow_none``. Raises
    :class:`UsageError` naming ``what`` and the accepted forms.
    """
    if isinstance(text, bool):
        raise UsageError(f"{what}: expected a size such as 500MiB, 2GiB or 10MB, not {text!r}")
    if isinstance(text, int):
        n = float(text)
    elif isinstance(text, str):
        if allow_none and text.strip().lower() in _UNLIMITED:
            return None
        m = _NUMBER_RE.match(text)
        if m is None or m.group(2).lower() not in _SIZE_UNITS:
            extra = "; 'none' for no limit" if allow_none else ""
            raise UsageError(
                f"{what}: {text!r} is not a size such as 500MiB, 2GiB, 10MB or 4096 "
                f"(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB){extra}"
            )
        n = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    else:
        raise UsageError(f"{what}: expected a size such as 500MiB or 2GiB, not {type(text).__name__}")
    if n < 0:
        raise UsageError(f"{what}: must not be negative, not {text!r}")
    return int(n)


def format_duration(seconds: float | None) -> str:
    """``2592000`` → ``"30d"``; ``93600`` → ``"1d 2h"``; None → ``"none"``."""
    if seconds is None:
        return "none"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            parts.append(f"{s // size}{unit}")
            s %= size
    return " ".join(parts[:2])


def format_size(n: int | None) -> str:
    """``524288000`` → ``"500 MiB"``; None → ``"none"``."""
    if n is None:
        return "none"
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            text = f"{value:.1f}".removesuffix(".0")
            return f"{text} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


# -- policy ----------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class GcPolicy:
    """Limits: ``max_age`` seconds of inactivity, ``max_size`` bytes, ``grace`` seconds (None: no limit)."""

    max_age: float | None = DEFAULT_MAX_AGE
    max_size: int | None = DEFAULT_MAX_SIZE
    grace: float = DEFAULT_GRACE

    def to_json(self) -> dict[str, Any]:
        return {"max_age": self.max_age, "max_size": self.max_size, "grace": self.grace}

    def render(self) -> str:
        return (
            f"max age {format_duration(self.max_age)}, max size {format_size(self.max_size)}, "
            f"grace {format_duration(self.grace)}"
        )


def resolve_policy(
    ledger: Configured,
    *,
    max_age: str | float | _dt.timedelta | None = None,
    max_size: str | int | None = None,
    grace: str | float | _dt.timedelta | None = None,
) -> GcPolicy:
    """The policy in force: each argument given, else ``intentlog.json``'s ``retention``, else the default.

    ``intentlog.json`` may hold ``{"retention": {"max_age": "30d", "max_size": "500MiB",
    "grace": "1h"}}`` (any subset). Raises :class:`UsageError` for a malformed value,
    naming where it came from.
    """
    config = ledger.marker.get(CONFIG_KEY, {})
    if not isinstance(config, dict) or not all(k in ("max_age", "max_size", "grace") for k in config):
        raise UsageError(
            f"{ledger.root / 'intentlog.json'}: {CONFIG_KEY!r} must be an object with any of max_age, max_size, "
            f'grace, such as {{"max_age": "30d", "max_size": "500MiB", "grace": "1h"}}; got {config!r}'
        )
    where = f"{ledger.root / 'intentlog.json'} {CONFIG_KEY}"
    age: float | None = DEFAULT_MAX_AGE
    size: int | None = DEFAULT_MAX_SIZE
    grace_s: float | None = DEFAULT_GRACE
    if max_age is not None:
        age = parse_duration(max_age, what="max age", allow_none=True)
    elif "max_age" in config:
        value = _config_value(config["max_age"], f"{where}.max_age")
        age = parse_duration(value, what=f"{where}.max_age", allow_none=True)
    if max_size is not None:
        size = parse_size(max_size, what="max size", allow_none=True)
    elif "max_size" in config:
        size_value = _config_size(config["max_size"], f"{where}.max_size")
        size = parse_size(size_value, what=f"{where}.max_size", allow_none=True)
    if grace is not None:
        grace_s = parse_duration(grace, what="grace")
    elif "grace" in config:
        grace_s = parse_duration(_config_value(config["grace"], f"{where}.grace"), what=f"{where}.grace")
    return GcPolicy(max_age=age, max_size=size, grace=grace_s if grace_s is not None else DEFAULT_GRACE)


def _config_value(value: object, where: str) -> str | float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UsageError(f'{where}: expected a string such as "30d", not {value!r}')
    return value


def _config_size(value: object, where: str) -> str | int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UsageError(f'{where}: expected a string such as "500MiB", not {value!r}')
    return value


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def format_ts(when: _dt.datetime) -> str:
    return when.astimezone(_dt.timezone.utc).strftime(TS_FORMAT)


def parse_ts(text: str) -> _dt.datetime:
    return parse_utc(text)


def check_now(now: _dt.datetime | None) -> _dt.datetime:
    if now is None:
        return utcnow()
    if not isinstance(now, _dt.datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise UsageError(f"now must be a timezone-aware datetime, not {now!r}")
    return now.astimezone(_dt.timezone.utc)
