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

from .._internal.digest import digest_bytes
from ..errors import NotSerializable, UsageError
from .redaction import DEFAULT_NAMES, GENERATION, REDACTED, Walk, is_credential_name, surely_clean

__all__ = [
    "CANON_EARLIER",
    "CANON_V1",
    "CANON_V2",
    "CANON_V3",
    "CANON_VERSION",
    "DEFAULT_DROP",
    "DEFAULT_REDACT",
    "MAX_DEPTH",
    "REDACTED",
    "Canonical",
    "Redact",
    "canon_before",
    "canon_generation",
    "canonicalize",
    "check_json",
    "dumps",
    "request_hash",
    "resolve_rules",
    "redact_value",
    "scrub_value",
    "secrets_in",
]

CANON_VERSION = "intentlog-canon/4"
#: The third: today's walk, but a boolean or null under a credential name redacted like a secret
#: (:data:`~intentlog.eventlog.redaction.GENERATION` 3), so ``{"otp_enabled": true}`` and ``false`` hashed alike.
CANON_V3 = "intentlog-canon/3"
#: The second: today's walk with the rules before credential shapes and the names ``otp``, ``cvv``,
#: ``creds``, ``card number`` … (:data:`~intentlog.eventlog.redaction.GENERATION` 2).
CANON_V2 = "intentlog-canon/2"
#: The first canonicalisation: exact default names, replaced (not extended) by a caller's names.
CANON_V1 = "intentlog-canon/1"
#: The redaction rules' generation each walked canonicalisation uses.
_GENERATIONS = {CANON_VERSION: GENERATION, CANON_V3: 3, CANON_V2: 2}
#: Every earlier canonicalisation, newest first: a request recorded under one of them is still recognised.
CANON_EARLIER: tuple[str, ...] = (CANON_V3, CANON_V2, CANON_V1)


def canon_generation(version: str) -> int:
    """The name rules' generation ``version`` was made with (0: :data:`CANON_V1`, exact names only)."""
    if version == CANON_V1:
        return 0
    generation = _GENERATIONS.get(version)
    if generation is None:
        raise UsageError(f"unknown canonicalisation {version!r}: expected one of {[CANON_VERSION, *CANON_EARLIER]}")
    return generation


def canon_before(version: str) -> str | None:
    """The canonicalisation before ``version`` (None before the first)."""
    order = (CANON_VERSION, *CANON_EARLIER)
    i = order.index(version)
    return order[i + 1] if i + 1 < len(order) else None
DEFAULT_DROP: frozenset[str] = frozenset({"ts", "timestamp", "created_at", "updated_at"})
#: The names :data:`CANON_V1` redacted; every one of them is a credential name by today's rule.
DEFAULT_REDACT: frozenset[str] = DEFAULT_NAMES
#: How deep a value may nest (containers within containers): orjson's own limit.
MAX_DEPTH = 254

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


def _too_deep(path: str) -> tuple[str, str]:
    shown = path if len(path) <= 120 else f"{path[:60]}…{path[-40:]}"
    return shown, f"the value nests more than {MAX_DEPTH} levels deep; flatten it or store it as an artifact"


def _find_bad(value: Any, path: str, depth: int = 0) -> tuple[str, str] | None:
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
    if type(value) in (dict, list, tuple) and depth >= MAX_DEPTH:
        return _too_deep(path)
    if type(value) is dict:
        for k, v in value.items():
            if type(k) is not str:
                # the key's type, never its value: a message is recorded, and a key may hold anything
                items = k if type(k) is tuple else (k,)
                plain = all(x is None or type(x) in (int, float, bool) for x in items)
                shown = repr(k) if plain else f"of type {type(k).__name__}"
                return path, f"key {shown} is not a string"
            found = _bad_text(k, path) or _find_bad(v, f"{path}.{k}", depth + 1)
            if found:
                return found
        return None
    if type(value) in (list, tuple):
        for i, v in enumerate(value):
            found = _find_bad(v, f"{path}[{i}]", depth + 1)
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



RedactHook = Callable[[str, str, Any], bool]


class Redact:
    """A redaction rule: key names and/or a hook, **added** to the default rules unless ``defaults=False``.

    ``canonicalize(x, redact=["customer_ref"])`` redacts ``customer_ref`` *and* every
    credential the defaults match. ``redact=Redact(["customer_ref"], defaults=False)``
    redacts only ``customer_ref`` (and values already known to be secret): the defaults are
    off, and the call's manifest says so. ``hook(path, key, value) -> bool`` marks further
    keys. Names compare case-insensitively.
    """

    __slots__ = ("defaults", "hook", "names")

    def __init__(self, names: Iterable[str] = (), *, hook: RedactHook | None = None, defaults: bool = True) -> None:
        if isinstance(names, (str, bytes)):
            raise UsageError(f"redact takes a collection of key names, not the single string {names!r}")
        names = tuple(names)
        if not all(isinstance(n, str) for n in names):
            raise UsageError(f"redact names must be strings, not {names!r}")
        if hook is not None and not callable(hook):
            raise UsageError(f"a redaction hook must be a callable (path, key, value) -> bool, not {hook!r}")
        if not isinstance(defaults, bool):
            raise UsageError(f"defaults must be True or False, not {defaults!r}")
        self.names: frozenset[str] = frozenset(n.lower() for n in names)
        self.hook = hook
        self.defaults = defaults

    def __repr__(self) -> str:
        return f"Redact({sorted(self.names)!r}, hook={self.hook!r}, defaults={self.defaults})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Redact) and (self.names, self.hook, self.defaults) == (
            other.names,
            other.hook,
            other.defaults,
        )

    def __hash__(self) -> int:
        return hash((self.names, self.defaults))

    @property
    def is_default(self) -> bool:
        """True when this rule is exactly the defaults (nothing added, nothing turned off)."""
        return self.defaults and not self.names and self.hook is None

    def key_hit(self, path: str, key: str, value: Any, generation: int = GENERATION) -> bool:
        """Whether the value under ``key`` (at ``path``) is redacted (by the rules of ``generation``)."""
        if self.defaults and is_credential_name(key, generation):
            return True
        if key.lower() in self.names:
            return True
        return self.hook is not None and bool(self.hook(path, key, value))

    def describe(self) -> dict[str, Any]:
        """The rule as a manifest records it: ``{"defaults": bool, "names": [...], "hook": name | None}``."""
        hook = None
        if self.hook is not None:
            hook = f"{getattr(self.hook, '__module__', '?')}.{getattr(self.hook, '__qualname__', repr(self.hook))}"
        return {"defaults": self.defaults, "names": sorted(self.names), "hook": hook}


_DEFAULT_RULE = Redact()


@dataclass(frozen=True, slots=True)
class Canonical:
    """A request in canonical form: its bytes, its hash, and what was dropped or redacted.

    ``rules`` is :meth:`Redact.describe` of the rule used, or ``None`` for the defaults;
    ``secrets`` are the credential values found (never recorded: used to scrub what the
    call records later); ``kept`` the paths under a credential name whose boolean or null
    was kept as given (an earlier canonicalisation redacted them).
    """

    data: bytes
    digest: str
    dropped: tuple[str, ...]
    redacted: tuple[str, ...]
    version: str = CANON_VERSION
    rules: dict[str, Any] | None = None
    secrets: frozenset[str] = frozenset()
    kept: tuple[str, ...] = ()

    @property
    def earlier_may_differ(self) -> bool:
        """Whether an earlier canonicalisation may give other bytes (False: nothing any rule touched)."""
        return bool(self.redacted or self.kept or self.secrets)


def _walk(drop: frozenset[str], rule: Redact, generation: int = GENERATION) -> Walk:
    """The one redaction walk (:class:`~intentlog.eventlog.redaction.Walk`) under ``rule``."""
    return Walk(
        key_hit=lambda path, key, value: rule.key_hit(path, key, value, generation),
        values=rule.defaults,
        drop=drop,
        generation=generation,
    )


def _transform_v1(value: Any, path: str, drop: frozenset[str], names: frozenset[str], hook: RedactHook | None) -> Any:
    """The :data:`CANON_V1` transform: exact names (or the hook instead of them), no value rules."""
    if type(value) is dict:
        out: dict[Any, Any] = {}
        for k, v in value.items():
            sub = f"{path}.{k}"
            if isinstance(k, str):
                if k in drop:
                    continue
                if hook(sub, k, v) if hook is not None else (k.lower() in names):
                    out[k] = REDACTED
                    continue
            out[k] = _transform_v1(v, sub, drop, names, hook)
        return out
    if type(value) in (list, tuple):
        return [_transform_v1(v, f"{path}[{i}]", drop, names, hook) for i, v in enumerate(value)]
    return value


RedactArg = Iterable[str] | RedactHook | Redact | None


def resolve_rules(drop: Iterable[str] | None, redact: RedactArg) -> tuple[frozenset[str], Redact]:
    """The key names to drop and the redaction rule, defaults applied.

    ``redact`` is ``None`` (the defaults), key names or a hook (both *added* to the
    defaults), or a :class:`Redact` (which can turn the defaults off). Raises
    :class:`UsageError` for a single string: ``frozenset("ts")`` would be ``{"t", "s"}``,
    a silent and wrong rule.
    """
    for label, given in (("drop", drop), ("redact", redact)):
        if isinstance(given, (str, bytes)):
            raise UsageError(f"{label} takes a collection of key names, not the single string {given!r}")
    drop_set = DEFAULT_DROP if drop is None else frozenset(drop)
    if redact is None:
        return drop_set, _DEFAULT_RULE
    if isinstance(redact, Redact):
        return drop_set, redact
    if callable(redact):
        return drop_set, Redact(hook=redact)
    return drop_set, Redact(redact)


def _depth_guard(obj: Any) -> None:
    """Refuse a value nested past :data:`MAX_DEPTH` before any recursive walk can overflow the stack."""
    stack: list[tuple[Any, int, str]] = [(obj, 0, "$")]
    while stack:
        value, depth, path = stack.pop()
        t = type(value)
        if t is dict or t is list or t is tuple:
            if depth >= MAX_DEPTH:
                shown, message = _too_deep(path)
                raise NotSerializable(message, path=shown)
            items = value.items() if t is dict else enumerate(value)
            for k, v in items:
                if type(v) in (dict, list, tuple):
                    stack.append((v, depth + 1, f"{path}.{k}" if t is dict else f"{path}[{k}]"))


def canonicalize(
    obj: Any,
    *,
    drop: Iterable[str] | None = None,
    redact: RedactArg = None,
    version: str = CANON_VERSION,
    known: Iterable[str] = (),
) -> Canonical:
    """Drop timestamp fields at any depth, redact credentials, sort keys, serialize, hash.

    ``drop`` names keys removed wherever they occur (default :data:`DEFAULT_DROP`).
    ``redact`` adds key names (case-insensitive) or a hook ``(path, key, value) -> bool``
    to the default credential rules (docs/effects.md, "Redaction"), or is a
    :class:`Redact` that may turn them off; what they match is replaced by
    ``"[REDACTED]"`` before hashing, so credentials never reach the record (a boolean or
    null under a credential name is no credential: kept). ``version`` one of
    :data:`CANON_EARLIER` reproduces that canonicalisation (to compare with a request
    recorded under it). ``known`` are further values known to be secret (found elsewhere
    in the same request): scrubbed wherever they occur. Raises :class:`NotSerializable`
    (a value nested more than :data:`MAX_DEPTH` levels deep included).
    """
    drop_set, rule = resolve_rules(drop, redact)
    _depth_guard(obj)
    if version == CANON_V1:
        names = DEFAULT_NAMES if rule.is_default else rule.names
        data = dumps(_transform_v1(obj, "$", drop_set, names, rule.hook))
        return Canonical(data, digest_bytes(data), (), (), CANON_V1)
    generation = canon_generation(version)
    walk = _walk(drop_set, rule, generation)
    cleaned = walk.run(obj, known)
    data = dumps(cleaned)
    rules = None if rule.is_default else rule.describe()
    secrets = frozenset(walk.secrets)
    return Canonical(
        data, digest_bytes(data), tuple(walk.dropped), tuple(walk.redacted), version, rules, secrets, tuple(walk.kept)
    )


def secrets_in(
    obj: Any, *, drop: Iterable[str] | None = None, redact: RedactArg = None
) -> frozenset[str]:
    """The credential values the rule finds in ``obj`` (never recorded; used to scrub what is recorded later).

    Works on any value (what is not JSON is skipped), so a request that cannot be
    canonicalised still has its credentials scrubbed from the recorded error.
    """
    drop_set, rule = resolve_rules(drop, redact)
    _depth_guard(obj)
    walk = _walk(drop_set, rule)
    walk.collect(obj, "$")
    return frozenset(walk.secrets)


def scrub_value(value: Any, *, secrets: Iterable[str] = (), redact: RedactArg = None) -> Any:
    """``value`` with what the rule matches redacted and the known ``secrets`` scrubbed (heartbeat info, say).

    The same walk as :func:`canonicalize` without dropping or serializing: what is not
    JSON is left for the writer to refuse.
    """
    return redact_value(value, secrets=secrets, redact=redact)[0]


def redact_value(
    value: Any, *, secrets: Iterable[str] = (), redact: RedactArg = None, shapes: bool = True
) -> tuple[Any, tuple[str, ...]]:
    """``value`` as it may be recorded, and the paths where something was redacted (none: nothing was).

    The walk of :func:`canonicalize` (names at any depth, header pairs, credential-looking
    parts of strings and keys, the known ``secrets``) without dropping or serializing;
    a value nested past :data:`MAX_DEPTH` is refused first (:class:`NotSerializable`).
    ``shapes=False`` may leave a credential that only its shape marks (for data about to be
    appended: the stream core replaces shapes in every record).
    """
    rule = _DEFAULT_RULE if redact is None else resolve_rules((), redact)[1]
    if rule.is_default and not secrets:
        try:
            dumps(value)  # bounds the depth (orjson's own limit) before the recursive test
            if surely_clean(value, shapes=shapes):
                return value, ()
        except NotSerializable:
            pass  # the walk leaves it for the writer to refuse (or refuses a value nested too deep)
    _depth_guard(value)
    walk = _walk(frozenset(), rule)
    cleaned = walk.run(value, secrets)
    return cleaned, tuple(walk.redacted)


def request_hash(
    obj: Any,
    *,
    drop: Iterable[str] | None = None,
    redact: RedactArg = None,
) -> str:
    """The canonical hash of a request: ``"blake3:…"``, independent of key order and timestamps."""
    return canonicalize(obj, drop=drop, redact=redact).digest
