"""Canonical JSON bytes and the request hash (DESIGN §3 and §5).

Two rules make records trustworthy: a value is recorded exactly or refused (orjson
would write NaN as ``null``; a set, bytes or a datetime would be changed or coerced), and
a request hashes the same whatever its key order or timestamps. ``CANON_VERSION`` names
the canonicalisation so a manifest can say which one produced its hash.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from .._digest import digest_bytes
from ..errors import NotSerializable, UsageError

__all__ = [
    "CANON_VERSION",
    "DEFAULT_DROP",
    "DEFAULT_REDACT",
    "Canonical",
    "canonicalize",
    "check_json",
    "dumps",
    "request_hash",
    "resolve_rules",
]

CANON_VERSION = "intentlog-canon/1"
DEFAULT_DROP: frozenset[str] = frozenset({"ts", "timestamp", "created_at", "updated_at"})
DEFAULT_REDACT: frozenset[str] = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "x-api-key",
        "authorization",
        "proxy-authorization",
        "password",
        "secret",
        "access_token",
        "refresh_token",
        "client_secret",
        "cookie",
        "set-cookie",
        "token",
        "auth_token",
        "x-auth-token",
        "session_token",
        "private_key",
        "x-goog-api-key",
    }
)
REDACTED = "[REDACTED]"

# Passthrough options make orjson hand dataclasses, datetimes and subclasses to
# ``default``, which refuses them: those would otherwise be silently converted.
_OPTS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _bad_text(text: str, path: str) -> tuple[str, str] | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return path, f"text holds a lone surrogate at index {exc.start}: surrogates are not valid UTF-8"
    return None


def _find_bad(value: Any, path: str) -> tuple[str, str] | None:
    """Locate the first value orjson would change or refuse, with its JSON path."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return path, f"{value!r} is not a finite number"
        return None
    if type(value) is str:
        return _bad_text(value, path)
    if type(value) is int:
        if not -(2**63) <= value < 2**64:
            return path, "integer exceeds 64 bits"
        return None
    if type(value) is dict:
        for k, v in value.items():
            if type(k) is not str:
                return path, f"key {k!r} is not a string"
            found = _bad_text(k, path) or _find_bad(v, f"{path}.{k}")
            if found:
                return found
        return None
    if type(value) in (list, tuple):
        for i, v in enumerate(value):
            found = _find_bad(v, f"{path}[{i}]")
            if found:
                return found
        return None
    return path, f"{type(value).__name__} is not JSON"


def check_json(value: Any) -> None:
    """Raise :class:`NotSerializable` naming the first value that is not exact JSON."""
    found = _find_bad(value, "$")
    if found:
        raise NotSerializable(found[1], path=found[0])


def dumps(value: Any) -> bytes:
    """Compact JSON with sorted keys, or :class:`NotSerializable`; never a silent change.

    orjson does the work; the slow walk runs only when orjson refuses the value (to name
    the bad path) or when its output contains ``null`` (the only way NaN can hide) and
    parsing the output back does not give the value.
    """
    try:
        out = orjson.dumps(value, default=_refuse, option=_OPTS)
    except (orjson.JSONEncodeError, TypeError) as exc:
        check_json(value)
        raise NotSerializable(str(exc)) from exc
    if b"null" in out and orjson.loads(out) != value:
        # NaN and infinities come out as null; the parse differs from the value (a tuple,
        # which becomes a list, differs too: then the walk finds nothing and the bytes stand)
        check_json(value)
    return out


@dataclass(frozen=True, slots=True)
class Canonical:
    """A request in canonical form: its bytes, its hash, and what was dropped or redacted."""

    data: bytes
    digest: str
    dropped: tuple[str, ...]
    redacted: tuple[str, ...]
    version: str = CANON_VERSION


RedactHook = Callable[[str, str, Any], bool]


def _transform(
    value: Any,
    path: str,
    drop: frozenset[str],
    redact: Callable[[str, str, Any], bool] | frozenset[str],
    dropped: list[str],
    redacted: list[str],
) -> Any:
    if type(value) is dict:
        out: dict[Any, Any] = {}
        for k, v in value.items():
            sub = f"{path}.{k}"
            if isinstance(k, str):
                if k in drop:
                    dropped.append(sub)
                    continue
                hit = redact(sub, k, v) if callable(redact) else (k.lower() in redact)
                if hit:
                    redacted.append(sub)
                    out[k] = REDACTED
                    continue
            out[k] = _transform(v, sub, drop, redact, dropped, redacted)
        return out
    if type(value) in (list, tuple):
        return [_transform(v, f"{path}[{i}]", drop, redact, dropped, redacted) for i, v in enumerate(value)]
    return value


def resolve_rules(
    drop: Iterable[str] | None, redact: Iterable[str] | RedactHook | None
) -> tuple[frozenset[str], RedactHook | frozenset[str]]:
    """The key names to drop and the redaction rule (names, lowercased, or a hook), defaults applied.

    Raises :class:`UsageError` for a single string: ``frozenset("ts")`` would be
    ``{"t", "s"}``, a silent and wrong rule.
    """
    for label, given in (("drop", drop), ("redact", redact)):
        if isinstance(given, (str, bytes)):
            raise UsageError(f"{label} takes a collection of key names, not the single string {given!r}")
    drop_set = DEFAULT_DROP if drop is None else frozenset(drop)
    rule: RedactHook | frozenset[str]
    if redact is None:
        rule = DEFAULT_REDACT
    elif callable(redact):
        rule = redact
    else:
        rule = frozenset(k.lower() for k in redact)
    return drop_set, rule


def canonicalize(
    obj: Any,
    *,
    drop: Iterable[str] | None = None,
    redact: Iterable[str] | RedactHook | None = None,
) -> Canonical:
    """Drop timestamp fields at any depth, redact credentials, sort keys, serialize, hash.

    ``drop`` names keys removed wherever they occur (default :data:`DEFAULT_DROP`).
    ``redact`` is a set of key names (case-insensitive, default :data:`DEFAULT_REDACT`) or
    a hook ``(path, key, value) -> bool``; matching values are replaced by ``"[REDACTED]"``
    before hashing, so credentials never reach the record. Raises :class:`NotSerializable`.
    """
    drop_set, redact_rule = resolve_rules(drop, redact)
    dropped: list[str] = []
    redacted: list[str] = []
    cleaned = _transform(obj, "$", drop_set, redact_rule, dropped, redacted)
    data = dumps(cleaned)
    return Canonical(data, digest_bytes(data), tuple(dropped), tuple(redacted))


def request_hash(
    obj: Any,
    *,
    drop: Iterable[str] | None = None,
    redact: Iterable[str] | RedactHook | None = None,
) -> str:
    """The canonical hash of a request: ``"blake3:…"``, independent of key order and timestamps."""
    return canonicalize(obj, drop=drop, redact=redact).digest
