"""The intent of a call: argument checks, the canonical redacted request, drift, and its two events."""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from .._internal.commands import hint_root, reconcile_commands
from .._internal.diff import first_difference
from .._internal.digest import is_digest
from ..errors import (
    EffectUnknown,
    IntentlogError,
    ResumeRefused,
    UsageError,
)
from ..eventlog.canonical import CANON_EARLIER, Canonical, canonicalize, resolve_rules, secrets_in
from ..eventlog.redaction import scrub_text, shape_spans
from ..projections.workstate import (
    RECONCILE_EFFECT,
    CallState,
)
from .records import error_text, load_ref, store_bytes

if TYPE_CHECKING:
    from .._internal.types import RedactRule
    from ..stream import TaskStream


def check_rules(drop: Iterable[str] | None, redact: RedactRule) -> None:
    """Refuse a malformed drop/redact rule before anything is written."""
    resolve_rules(drop, redact)


#: What a ``send`` (or an ``interpret``) that is not callable is told.
NOT_CALLABLE: Final = "send (and interpret, when given) must be callables"


def check_send(send: Any) -> None:
    """Refuse a ``send`` that cannot be called, before anything is written (the options are checked apart)."""
    if not callable(send):
        raise UsageError(NOT_CALLABLE)


def check_not_async(send: Any, interpret: Any, here: str, instead: str) -> None:
    """Refuse a coroutine function where the synchronous form would call it without awaiting it.

    Such a ``send`` would hand back an un-awaited coroutine after ``attempt.started`` is
    durable: the record would say unknown for a request never made. Refused before anything
    is written, naming the awaitable form.
    """
    for label, fn in (("send", send), ("interpret", interpret)):
        if fn is not None and inspect.iscoroutinefunction(fn):
            raise UsageError(
                f"{here} was given an async {label} ({getattr(fn, '__qualname__', fn)!r}), which it cannot await; "
                f"nothing was written: use {instead}(...) from a coroutine"
            )


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > 512:
        raise UsageError(f"an idempotency key must be a non-empty string of at most 512 characters, not {key!r}")
    if shape_spans(key):  # recorded as given (it finds the call again): a credential in it would be stored
        raise UsageError(
            "the idempotency key holds what looks like a credential (a token, key or webhook path by its shape); "
            "a key is recorded as given, so derive it from something else (an order id, a hash); nothing was written"
        )
    return key


# The key named by the innermost ``with task.key(k):`` block, with the stream it names it for.
_NAMED_KEY: contextvars.ContextVar[tuple[TaskStream, str] | None] = contextvars.ContextVar(
    "intentlog_current_key", default=None
)


@contextmanager
def key_scope(task: TaskStream, key: str) -> Iterator[str]:
    """Name the idempotency key of the effects integrations make for ``task`` inside the block (checked)."""
    check_key(key)
    token = _NAMED_KEY.set((task, key))
    try:
        yield key
    finally:
        _NAMED_KEY.reset(token)


def current_key(task: TaskStream) -> str | None:
    """The key named by the innermost :func:`key_scope` block for ``task``, if any."""
    cur = _NAMED_KEY.get()
    return cur[1] if cur is not None and cur[0] is task else None


def check_name(name: object) -> None:
    if name is not None and not isinstance(name, str):
        raise UsageError(f"a call name must be a string, not {type(name).__name__}")


def _check_inputs(inputs: Mapping[str, str] | None) -> dict[str, str]:
    """Named input digests; a bad one is named by its input, never echoed (it could be anything)."""
    if inputs is None:
        return {}
    if not isinstance(inputs, Mapping):
        raise UsageError(f"inputs must map names to digests, not {type(inputs).__name__}")
    out: dict[str, str] = {}
    for name, digest in inputs.items():
        if not isinstance(name, str):
            raise UsageError(f"input names must be strings, not {type(name).__name__}")
        if not is_digest(digest):
            raise UsageError(f"input {name!r} is not a digest: expected 'blake3:' and 64 lowercase hex digits")
        out[name] = digest
    return out


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` as it may be recorded: known secrets and credential-looking values replaced (docs/effects.md)."""
    return scrub_text(text, secrets)


class BuildFailed(Exception):
    """Internal: the request was built but cannot be canonicalised; ``text`` is the scrubbed error."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True, slots=True)
class Intent:
    canonical: Canonical
    inputs: dict[str, str]
    request: Any
    secrets: frozenset[str]
    # fields the manifest carries besides the protocol's own (a session turn's message refs)
    extra: Mapping[str, Any] = field(default_factory=dict)
    # the request's hash under an earlier canonicalisation, computed only to compare with a record made by it
    legacy_digest: Callable[[str], str] | None = None

    def matches(self, recorded: str) -> bool:
        """Whether ``recorded`` (a manifest's request hash) is this request's hash, under today's rules or
        an earlier canonicalisation's (:data:`~intentlog.eventlog.canonical.CANON_EARLIER`, newest first: a
        record made before the rules changed)."""
        if recorded == self.canonical.digest:
            return True
        return self.legacy_digest is not None and any(
            recorded == self.legacy_digest(version) for version in CANON_EARLIER
        )


def build_intent(
    request: Any, inputs: Mapping[str, str] | None, drop: Iterable[str] | None, redact: RedactRule
) -> Intent:
    """Build and canonicalise the request; any failure is a preparation failure."""
    value = request() if callable(request) else request
    try:
        canonical = canonicalize(value, drop=drop, redact=redact)
    except Exception as exc:  # the error may quote the request: scrub what the rule finds in it
        raise BuildFailed(scrub(error_text(exc), secrets_of(value, drop=drop, redact=redact))) from exc
    legacy = functools.partial(_legacy_digest, value, drop, redact)
    return Intent(canonical, _check_inputs(inputs), value, canonical.secrets, legacy_digest=legacy)


def _legacy_digest(value: Any, drop: Iterable[str] | None, redact: RedactRule, version: str) -> str:
    return canonicalize(value, drop=drop, redact=redact, version=version).digest


def secrets_of(value: Any, *, drop: Iterable[str] | None, redact: RedactRule) -> frozenset[str]:
    """The credential values the redaction rule finds in ``value``, to scrub them wherever the call records them.

    Never raises for a value that cannot be recorded (what is not JSON is skipped; a value
    nested too deep yields nothing, and is refused where it would be recorded).
    """
    try:
        return secrets_in(value, drop=drop, redact=redact)
    except IntentlogError:
        return frozenset()


def drift_of(task: TaskStream, state: CallState, intent: Intent) -> str | None:
    """What differs between the recorded intent and the rebuilt request, or None.

    The hash (and input digests) come from the call's first event, ``call.requested``, so a
    run that died before its manifest is checked too. With the manifest's stored request
    bytes at hand, the message names the first differing path; before it, only the hashes.
    """
    if state.request_hash is None:  # a record older than hashes in call.requested, killed before its manifest
        return None
    if not intent.matches(state.request_hash):
        hashes = f"the rebuilt request hashes to {intent.canonical.digest}, the record has {state.request_hash}"
        if state.request is None:
            return f"{hashes} (only its hash is recorded: the run stopped before its manifest)"
        where = _recorded_difference(task, state, intent)
        if where is None:  # the stored bytes are unreadable, or differ only in how they were canonicalised
            return hashes
        return f"the rebuilt request differs from the recorded one at {where} ({hashes})"
    if dict(state.inputs) != intent.inputs:
        recorded, now = dict(state.inputs), intent.inputs
        names = sorted(n for n in {*recorded, *now} if recorded.get(n) != now.get(n))
        return f"the input digests differ from the recorded ones for {', '.join(names)}"
    return None


def _recorded_difference(task: TaskStream, state: CallState, intent: Intent) -> str | None:
    """The first path where the manifest's stored request differs from the rebuilt one (None: not found)."""
    try:
        recorded = orjson.loads(load_ref(task, state.request))
        return first_difference(recorded, orjson.loads(intent.canonical.data))
    except (IntentlogError, orjson.JSONDecodeError, RecursionError):
        return None


def refuse(
    task: TaskStream, state: CallState, reason: str, detail: str = "", next_operation: str | None = None
) -> ResumeRefused:
    """The refusal to continue ``state``: :class:`EffectUnknown` (with its decisions) when its effect is unknown."""
    if state.next_operation == RECONCILE_EFFECT:
        return unknown_effect(task, state.call_id, state.key, reason, detail)
    nxt = next_operation or state.next_operation
    return ResumeRefused(call_id=state.call_id, key=state.key, reason=reason, next_operation=nxt, detail=detail)


def unknown_effect(task: TaskStream, call_id: str, key: str, reason: str, detail: str = "") -> EffectUnknown:
    """An unknown effect, reported with the complete commands that record the operator's decision.

    The commands are the ones ``intentlog status`` offers, built by the same function, with
    ``--root`` when the command line run here would not open this ledger by default.
    """
    root = hint_root(task.layout.location)
    return EffectUnknown(
        call_id=call_id,
        key=key,
        reason=reason,
        next_operation=RECONCILE_EFFECT,
        detail=detail,
        commands=reconcile_commands(task.id, call_id, root),
    )


def encode_text(text: str) -> tuple[bytes, str | None]:
    """The bytes of a ``send`` that returned text, and how to decode them back to the same ``str``.

    Valid text is UTF-8 (``None``: plain). Text holding lone surrogates is not: one that
    came from bytes decoded with ``surrogateescape`` gets those bytes back
    (``utf-8/surrogateescape``); any other lone surrogate is kept as its three-byte form
    (``utf-8/surrogatepass``). Either way the provider's answer is recorded, not lost.
    """
    try:
        return text.encode("utf-8"), None
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape"), "utf-8/surrogateescape"
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass"), "utf-8/surrogatepass"


def decode_text(data: bytes, encoding: str | None = None) -> str:
    """The text of recorded response bytes; with the observation's ``encoding``, the very ``str`` send returned.

    Without an ``encoding`` (bytes, or plain UTF-8 text) bytes that are not UTF-8 decode
    with ``surrogateescape``, so ``text.encode("utf-8", "surrogateescape")`` is ``data`` again.
    """
    if encoding == "utf-8/surrogatepass":
        return data.decode("utf-8", "surrogatepass")
    return data.decode("utf-8", "surrogateescape")


def append_intent(
    task: TaskStream, call_id: str, key: str, intent: Intent, *, name: str | None, resumes: str | None
) -> None:
    c = intent.canonical
    # the hash and inputs ride in the first event: a run killed before the manifest is drift-checked too
    requested: dict[str, Any] = {
        "call": call_id,
        "key": key,
        "name": name,
        "request_hash": c.digest,
        "inputs": intent.inputs,
    }
    if resumes is not None:
        requested["resumes"] = resumes
    task.append("call.requested", requested)
    task.append(
        "call.manifest",
        {
            "call": call_id,
            "key": key,
            "request_hash": c.digest,
            "request": store_bytes(task, c.data, "application/json"),
            "inputs": intent.inputs,
            "canon": c.version,
            "dropped": list(c.dropped),
            "redacted": list(c.redacted),
            **({"redaction": c.rules} if c.rules is not None else {}),  # the caller's rule, when not the defaults
            **intent.extra,
        },
    )
