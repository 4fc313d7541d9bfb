"""The effect protocol (DESIGN §5): record intent before every effect, resume only what is provably safe.

For a new key, :func:`effect` appends, in order and each durable before what it guards:

1. ``call.requested`` and 2. ``call.manifest`` (canonical, redacted request stored as an
   artifact; its hash and the named input digests) — before any attempt;
3. ``attempt.started`` — fdatasynced **before** ``send`` is called;
4. the raw response bytes (inline when small, else a blob in ``objects/``) and
   ``attempt.observed`` — synced before anything interprets them;
5. ``attempt.interpreted`` (interpreter name and version, result), 6.
   ``attempt.retry_decided`` when not accepted at once, 7. ``call.completed``.

Running the same code again *is* resume: for a key already in the record, the stage the
work-state projection gives decides what happens (see :meth:`Call.run`). Syncs are shared
where the order allows: intent and ``attempt.started`` share one, the observation has its
own, interpretation and completion share the last — three syncs for a small effect (two
without an interpreter: nothing reads the bytes, so observation and completion share one).
``effect`` never holds a group commit open across ``send``.

Long effects: inside ``send``, :func:`heartbeat` records ``attempt.progress`` (rate
limited) and resets the inactivity timer; with ``inactivity_timeout`` or ``max_duration``
the send runs in a daemon worker thread and a passed limit records ``attempt.timed_out``
(synced) and raises :class:`EffectUnknown` -- the effect is unknown, reconciled, never
resent blind, and the abandoned worker's late answer is never recorded.

Gates before every attempt: the rebuilt request's hash and inputs equal the recorded
ones (from ``call.requested`` on), and every approval that bound the key is approved for
that hash. Stored bytes are reinterpreted by a newer interpreter, beside the old record.

Provider deduplication (:class:`~intentlog.ProviderDedup`, recorded in the manifest): an
unknown effect whose first attempt started less than ``window - margin`` ago is resent
under the same key after a synced ``effect.reconciled {outcome: "provider_dedup"}``;
every later send of that call checks the window again. A ``send`` raising
:class:`~intentlog.errors.KeyReused` fails the call as drift.

Guarantees: no ``send`` without a durable ``attempt.started`` before it; no interpretation
of bytes that are not durable; no resend of an attempt whose effect is unknown unless a
reconciliation is recorded (``provider_dedup`` included, only inside the declared window);
no resumed call whose rebuilt request differs from the manifest. Credentials named by the
redaction rule never reach the record (error texts are scrubbed of their values too). Not
exactly-once, unless the provider deduplicates within a declared window: an unknown
effect is refused or reconciled, never guessed. No line grows past the inline threshold with recorded payloads:
large requests, responses, evidence and interpreted values are refs into ``objects/``.
"""

from __future__ import annotations

import contextvars
import functools
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import orjson

from . import dedup as _dedup
from ._diff import first_difference
from ._digest import is_digest
from .artifacts.inline import INLINE_MAX, inline_bytes, inline_ref
from .dedup import ProviderDedup, age_of
from .dedup import check as check_dedup
from .errors import (
    ApprovalPending,
    ApprovalRejected,
    ApprovalVoid,
    CallFailed,
    CorruptStream,
    EffectUnknown,
    IntentlogError,
    KeyReused,
    NotSent,
    NotSerializable,
    PreparationFailed,
    ProviderFailure,
    ReinterpretFailed,
    RequiredContextMissing,
    ResumeRefused,
    RetryHandedBack,
    UnknownCall,
    UsageError,
)
from .eventlog.canonical import CANON_V1, Canonical, canonicalize, dumps, resolve_rules, scrub_value, secrets_in
from .eventlog.redaction import scrub_bytes, scrub_text
from .projections.workstate import (
    FINALIZE,
    NONE,
    RECONCILE_EFFECT,
    REDECIDE,
    REINTERPRET,
    START_CALL,
    START_NEXT_ATTEMPT,
    CallState,
)

if TYPE_CHECKING:
    from .eventlog import Event
    from .stream import TaskStream

__all__ = [
    "DEFAULT_PROGRESS_INTERVAL",
    "DRIFT",
    "NO_RETRY",
    "Call",
    "Package",
    "RetryPolicy",
    "Served",
    "compile_context",
    "current_heartbeat",
    "decode_text",
    "effect",
    "fail_call",
    "heartbeat",
    "prepare",
    "reconcile",
    "reinterpret",
]

DRIFT: Final = "DRIFT"
NOT_SERVED: Final = "not_served"
OUTCOMES: Final = ("served", "not_served", "resend")
PROVIDER_DEDUP: Final = "provider_dedup"
_WRITE_SLACK: Final = 1.0  # seconds kept for the reconciliation's own write: its ts must stay inside the window

Send = Callable[[Any], "bytes | str"]
Interpret = Callable[[bytes], Any]


@final
@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which failures get another attempt, how many, and how long to wait between them.

    Every try is an attempt in the record, followed by its ``attempt.retry_decided``.
    ``NotSent`` (the request provably never left) is retried when ``retry_not_sent``;
    a ``ProviderFailure`` when ``retry_on(failure)`` says so (default: its ``retryable``).
    An unknown effect is never retried: it needs reconciliation.

    ``hand_back=True``: instead of sleeping and sending again, :meth:`Call.run` records
    the decision with ``"delay": null``, syncs it and raises
    :class:`~intentlog.errors.RetryHandedBack`; the caller (an SDK with its own retry
    loop, the script, the next run) makes the next attempt, which the record allows.
    """

    max_attempts: int = 3
    backoff: float = 0.5
    factor: float = 2.0
    max_backoff: float = 30.0
    retry_not_sent: bool = True
    retry_on: Callable[[ProviderFailure], bool] | None = None
    retry_on_interpret_error: bool = False
    sleep: Callable[[float], None] = time.sleep
    hand_back: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise UsageError(f"RetryPolicy.max_attempts must be an integer of at least 1, not {self.max_attempts!r}")
        for name in ("backoff", "factor", "max_backoff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise UsageError(f"RetryPolicy.{name} must be a non-negative number, not {value!r}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after ``attempt`` (1-based) before the next one."""
        return float(min(self.max_backoff, self.backoff * self.factor ** max(0, attempt - 1)))

    def should_retry(self, failure: ProviderFailure) -> bool:
        return self.retry_on(failure) if self.retry_on is not None else failure.retryable


NO_RETRY: Final = RetryPolicy(max_attempts=1)
DEFAULT_RETRY: Final = RetryPolicy()


@final
@dataclass(frozen=True, slots=True)
class Served:
    """A ``lookup`` answer: the provider served the key; ``response`` are its bytes if known."""

    response: bytes | None = None

    def __post_init__(self) -> None:
        if self.response is not None and not isinstance(self.response, (bytes, bytearray)):
            raise UsageError(f"Served(response=...) takes the response bytes, not {type(self.response).__name__}")


@final
@dataclass(frozen=True, slots=True)
class Package:
    """A compiled context package: its digest is what a call's ``inputs`` bind to."""

    compilation_id: str
    digest: str
    size: int
    selected: tuple[str, ...]


# -- helpers -----------------------------------------------------------------------


def _store(task: TaskStream, data: bytes, media_type: str | None = None) -> dict[str, Any]:
    """A ref for ``data``: inline in the event when small (DESIGN §3), else a durable blob."""
    if len(data) <= INLINE_MAX:
        return inline_ref(data, media_type=media_type)
    return task.store.put(data, media_type=media_type).to_json()


def _keep_aside(task: TaskStream, call_id: str, n: int, data: bytes) -> str | None:
    """Write response bytes the store refused to ``quarantine/`` or, failing that, the system's temp folder.

    Returns the path of a durable copy (fsynced, its folder too), or None when no place took
    them. The file is named ``unstored.<task>.<call>.<attempt>.<digest prefix>``; it is
    evidence for a reconciliation, not part of the record. ``quarantine/`` is never swept
    (``tmp/`` may be) and travels with the ledger.
    """
    import tempfile

    from ._digest import digest_bytes
    from ._fsutil import makedirs_durable, publish_bytes

    name = f"unstored.{task.id}.{call_id}.{n}.{digest_bytes(data)[7:23]}"
    for folder in (Path(task.layout.quarantine_dir), Path(tempfile.gettempdir()) / "intentlog-unstored"):
        try:
            makedirs_durable(folder)
            publish_bytes(data, folder / name, tmp_dir=folder)
        except OSError:
            continue
        return str(folder / name)
    return None


def _bare(ref: Mapping[str, Any]) -> dict[str, Any]:
    return {k: ref[k] for k in ("digest", "size", "media_type") if k in ref}


def _check_ref(task: TaskStream, ref: Any, what: str) -> Mapping[str, Any]:
    """``ref`` if it is an artifact ref; a damaged one is an :class:`IntentlogError` naming it, never a KeyError."""
    if not isinstance(ref, Mapping) or not is_digest(ref.get("digest")):
        raise IntentlogError(
            f"{task.path}: {what} is not an artifact ref ({{'digest': 'blake3:...', 'size': N}}) but "
            f"{str(ref)[:80]}: the record was damaged or edited; run 'intentlog verify' and restore the "
            "stream from a copy"
        )
    return ref


def _load(task: TaskStream, ref: Any, what: str = "a recorded ref") -> bytes:
    """The bytes of a recorded ref (inline, or from objects/); a damaged ref is an :class:`IntentlogError`."""
    ref = _check_ref(task, ref, what)
    data = inline_bytes(ref)
    if data is not None:
        return data
    return task.store.get(str(ref["digest"]))


#: The longest error text recorded (characters); the rest is cut, with a note, so lines stay small.
ERROR_TEXT_MAX: Final = 2000


def _cap(text: str) -> str:
    """``text`` cut to :data:`ERROR_TEXT_MAX` characters (after scrubbing, so no secret is cut in half)."""
    if len(text) <= ERROR_TEXT_MAX:
        return text
    return f"{text[:ERROR_TEXT_MAX]}... ({len(text) - ERROR_TEXT_MAX} more characters not recorded)"


def _value_record(task: TaskStream, value: Any) -> dict[str, Any]:
    """How a completion records an interpreted value: ``{"value": v}``, or ``{"value_ref": ref}`` when large.

    Raises :class:`NotSerializable` (or RecursionError) for a value that is not exact JSON.
    """
    data = dumps(value)
    if len(data) <= INLINE_MAX:
        return {"value": value}
    return {"value_ref": _bare(task.store.put(data, media_type="application/json").to_json())}


def _loads(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise IntentlogError(f"a stored result is not JSON ({exc}); run 'intentlog verify'") from exc


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _interpreter_id(fn: Callable[..., Any]) -> dict[str, Any]:
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    version = getattr(fn, "version", None) or getattr(fn, "__version__", None)
    return {"name": name, "version": None if version is None else str(version)}


def _check_rules(drop: Any, redact: Any) -> None:
    """Refuse a malformed drop/redact rule before anything is written."""
    resolve_rules(drop, redact)


def _check_run_args(send: Any, interpret: Any, retry: Any, lookup: Any) -> None:
    """Refuse misuse before anything is written: a half-run protocol is worse than none."""
    if not callable(send) or (interpret is not None and not callable(interpret)):
        raise UsageError("send (and interpret, when given) must be callables")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise UsageError(f"retry must be a RetryPolicy, not {type(retry).__name__}: e.g. RetryPolicy(max_attempts=3)")
    if lookup is not None and not callable(lookup):
        raise UsageError(
            f"lookup must be a callable (key, call_id, attempt) -> Served | 'not_served' | None, not {lookup!r}"
        )


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > 512:
        raise UsageError(f"an idempotency key must be a non-empty string of at most 512 characters, not {key!r}")
    return key


def _check_name(name: object) -> None:
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


def _scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` as it may be recorded: known secrets and credential-looking values replaced (docs/effects.md)."""
    return scrub_text(text, secrets)


class _BuildFailed(Exception):
    """Internal: the request was built but cannot be canonicalised; ``text`` is the scrubbed error."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True, slots=True)
class _Intent:
    canonical: Canonical
    inputs: dict[str, str]
    request: Any
    secrets: frozenset[str]
    # fields the manifest carries besides the protocol's own (a session turn's message refs)
    extra: Mapping[str, Any] = field(default_factory=dict)
    # the request's hash under the first canonicalisation, computed only to compare with a record made by it
    legacy_digest: Callable[[], str] | None = None

    def matches(self, recorded: str) -> bool:
        """Whether ``recorded`` (a manifest's request hash) is this request's hash, under today's rules or
        :data:`~intentlog.eventlog.canonical.CANON_V1`'s (a record made before the rules grew)."""
        if recorded == self.canonical.digest:
            return True
        return self.legacy_digest is not None and recorded == self.legacy_digest()


def _build(request: Any, inputs: Mapping[str, str] | None, drop: Iterable[str] | None, redact: Any) -> _Intent:
    """Build and canonicalise the request; any failure is a preparation failure."""
    value = request() if callable(request) else request
    try:
        canonical = canonicalize(value, drop=drop, redact=redact)
    except Exception as exc:  # the error may quote the request: scrub what the rule finds in it
        raise _BuildFailed(_scrub(_error_text(exc), secrets_of(value, drop=drop, redact=redact))) from exc
    legacy = functools.partial(_legacy_digest, value, drop, redact)
    return _Intent(canonical, _check_inputs(inputs), value, canonical.secrets, legacy_digest=legacy)


def _legacy_digest(value: Any, drop: Iterable[str] | None, redact: Any) -> str:
    return canonicalize(value, drop=drop, redact=redact, version=CANON_V1).digest


def secrets_of(value: Any, *, drop: Iterable[str] | None, redact: Any) -> frozenset[str]:
    """The credential values the redaction rule finds in ``value``, to scrub them wherever the call records them.

    Never raises for a value that cannot be recorded (what is not JSON is skipped; a value
    nested too deep yields nothing, and is refused where it would be recorded).
    """
    try:
        return secrets_in(value, drop=drop, redact=redact)
    except IntentlogError:
        return frozenset()


def _drift(task: TaskStream, state: CallState, intent: _Intent) -> str | None:
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


def _recorded_difference(task: TaskStream, state: CallState, intent: _Intent) -> str | None:
    """The first path where the manifest's stored request differs from the rebuilt one (None: not found)."""
    try:
        recorded = orjson.loads(_load(task, state.request))
        return first_difference(recorded, orjson.loads(intent.canonical.data))
    except (IntentlogError, orjson.JSONDecodeError, RecursionError):
        return None


def _refuse(state: CallState, reason: str, detail: str = "", next_operation: str | None = None) -> ResumeRefused:
    nxt = next_operation or state.next_operation
    cls = EffectUnknown if state.next_operation == RECONCILE_EFFECT else ResumeRefused
    return cls(call_id=state.call_id, key=state.key, reason=reason, next_operation=nxt, detail=detail)


def _encode_text(text: str) -> tuple[bytes, str | None]:
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


# -- long effects: heartbeats and timeouts ---------------------------------------------

#: Seconds between two recorded ``attempt.progress`` events of one attempt (beats in between are counted).
DEFAULT_PROGRESS_INTERVAL: Final = 1.0

_HEARTBEAT: contextvars.ContextVar[_Beat | None] = contextvars.ContextVar("intentlog_heartbeat", default=None)


def _limit(value: float | None, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise UsageError(f"{name} must be a positive number of seconds (or None), not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class _Long:
    """How one run watches a long ``send``: the progress callback and the two limits."""

    progress: Callable[[Any], None] | None = None
    inactivity_timeout: float | None = None
    max_duration: float | None = None
    interval: float = DEFAULT_PROGRESS_INTERVAL

    @classmethod
    def of(
        cls,
        progress: Callable[[Any], None] | None,
        inactivity_timeout: float | None,
        max_duration: float | None,
        interval: float,
    ) -> _Long:
        if progress is not None and not callable(progress):
            raise UsageError(f"progress must be a callable taking the heartbeat's info, not {progress!r}")
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 <= interval < math.inf:
            raise UsageError(f"progress_interval must be a non-negative number of seconds, not {interval!r}")
        return cls(
            progress,
            _limit(inactivity_timeout, "inactivity_timeout"),
            _limit(max_duration, "max_duration"),
            float(interval),
        )


class _TimedOut(Exception):
    """Internal: ``attempt.timed_out`` is durable; carries the EffectUnknown to raise."""

    def __init__(self, error: EffectUnknown) -> None:
        super().__init__(str(error))
        self.error = error


class _Beat:
    """The heartbeat channel of one attempt: records progress, moves the inactivity deadline.

    One lock orders heartbeats and the timeout: ``attempt.progress`` is never written after
    ``attempt.timed_out``, and once the attempt is closed (returned, raised, timed out)
    heartbeats are ignored.
    """

    def __init__(
        self, task: TaskStream, call_id: str, attempt: int, long: _Long, secrets: frozenset[str] = frozenset()
    ) -> None:
        self.task = task
        self.secrets = secrets  # scrubbed from the info recorded, with the default redaction rules
        self.call_id = call_id
        self.attempt = attempt
        self.long = long
        self.lock = threading.Lock()
        self.closed = False
        self.started = self.last_beat = time.monotonic()
        self.last_record = -math.inf
        self.pending = 0

    def __call__(self, info: Mapping[str, Any] | None = None) -> bool:
        if info is not None and not isinstance(info, Mapping):
            raise UsageError(f"heartbeat info must be a dict (a JSON object) or None, not {type(info).__name__}")
        with self.lock:
            if self.closed:
                return False
            now = time.monotonic()
            self.last_beat = now
            self.pending += 1
            if now - self.last_record >= self.long.interval:
                self.task.append(
                    "attempt.progress",
                    {
                        "call": self.call_id,
                        "attempt": self.attempt,
                        "beats": self.pending,
                        "elapsed": round(now - self.started, 3),
                        "info": scrub_value(dict(info), secrets=self.secrets) if info is not None else None,
                    },
                )
                self.last_record = now
                self.pending = 0
        if self.long.progress is not None:
            self.long.progress(info)
        return True

    def next_limit(self) -> tuple[float, str, float] | None:
        """The earliest deadline (monotonic time), which limit it is, and its length."""
        limits: list[tuple[float, str, float]] = []
        with self.lock:
            if self.long.inactivity_timeout is not None:
                t = self.long.inactivity_timeout
                limits.append((self.last_beat + t, "inactivity", t))
            if self.long.max_duration is not None:
                t = self.long.max_duration
                limits.append((self.started + t, "max_duration", t))
        return min(limits) if limits else None

    def expire(self) -> tuple[str, float, float] | None:
        """Record ``attempt.timed_out`` if a deadline has passed: (limit, its length, seconds elapsed)."""
        with self.lock:
            if self.closed:  # pragma: no cover - only the waiting thread closes before expiring
                return None
            now = time.monotonic()
            due = [
                (name, t)
                for name, t, start in (
                    ("inactivity", self.long.inactivity_timeout, self.last_beat),
                    ("max_duration", self.long.max_duration, self.started),
                )
                if t is not None and now >= start + t
            ]
            if not due:
                return None  # a heartbeat moved the deadline while the waiter woke up
            limit, timeout = due[0]
            after = round(now - self.started, 3)
            self.closed = True
            self.task.append(
                "attempt.timed_out",
                {"call": self.call_id, "attempt": self.attempt, "after": after, "limit": limit, "timeout": timeout},
                sync=True,
            )
            return limit, timeout, after

    def close(self) -> None:
        with self.lock:
            self.closed = True


def heartbeat(info: Mapping[str, Any] | None = None) -> bool:
    """Report progress from inside a ``send``: resets the inactivity timeout, may record ``attempt.progress``.

    ``info`` is a small JSON object (tokens so far, a phase name) recorded with the
    heartbeat. Returns False, recording nothing, outside a running send or after its
    attempt ended or timed out. Works in the thread running ``send`` (and in threads
    started with a copy of its context); elsewhere use :func:`current_heartbeat`.
    """
    beat = _HEARTBEAT.get()
    return beat(info) if beat is not None else False


def current_heartbeat() -> Callable[..., bool] | None:
    """The heartbeat function of the send running in this context, to hand to threads that ``send`` starts."""
    return _HEARTBEAT.get()


# -- prepare -----------------------------------------------------------------------


@final
class Call:
    """One intended effect under an idempotency key; :meth:`run` carries it out or resumes it."""

    def __init__(
        self,
        task: TaskStream,
        key: str,
        call_id: str,
        intent: _Intent,
        *,
        fresh: bool,
        dedup: ProviderDedup | None = None,
    ) -> None:
        self.task = task
        self.dedup = dedup  # this run's declaration: with the manifest's, it may resolve an unknown effect
        self.key = key
        self.call_id = call_id
        self.request_hash = intent.canonical.digest
        self._intent = intent
        self._fresh = fresh  # prepared by this process: no resume record needed
        # effect(): the batch holding the unsynced intent, closed once attempt.started is synced
        self._held: ExitStack | None = None

    def __repr__(self) -> str:
        return f"<Call {self.call_id} key={self.key!r} task={self.task.id!r}>"

    def state(self) -> CallState:
        """The projected state of this key's latest call, as this handle's record has it."""
        fold = self.task.live()
        cid = fold.latest_call(self.key) or self.call_id
        return fold.call_state(cid)

    def _release(self) -> None:
        """End the batch that effect() opened (a no-op sync once attempt.started was synced)."""
        held, self._held = self._held, None
        if held is not None:
            held.close()

    def run(
        self,
        send: Send,
        *,
        interpret: Interpret | None = None,
        retry: RetryPolicy | None = None,
        lookup: Callable[[str, str, int], Served | str | None] | None = None,
        progress: Callable[[Any], None] | None = None,
        inactivity_timeout: float | None = None,
        max_duration: float | None = None,
        progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
        dedup: ProviderDedup | None = None,
    ) -> Any:
        """Carry out the call, or resume it from whatever the record proves.

        ``dedup``: the provider's idempotency window (:class:`~intentlog.ProviderDedup`),
        overriding the one given to :func:`prepare` for this run; see :meth:`_dedup_resend`.

        Long effects: inside ``send``, :func:`heartbeat` (``intentlog.heartbeat(info)``)
        reports progress. Heartbeats are recorded as ``attempt.progress {call, attempt,
        beats, elapsed, info}`` at most once per ``progress_interval`` seconds (the beats in
        between are counted), and each is passed to ``progress(info)`` when given. With
        ``inactivity_timeout`` (seconds without a heartbeat; every heartbeat resets it)
        or ``max_duration`` (seconds in all), ``send`` runs in a daemon worker thread
        while this thread waits; when a limit passes, ``attempt.timed_out {call, attempt,
        after, limit, timeout}`` is recorded and :class:`EffectUnknown` raised: the
        provider may still serve the request, so the call needs reconciliation and is never
        resent blind. The worker is abandoned: its late heartbeats and its late answer are
        not recorded (a late answer enters the record only through
        :meth:`Task.reconcile`).

        By the stage of the key's latest call: *completed* returns the recorded result and
        sends nothing; *requested/manifest recorded* by an earlier process appends
        ``call.resumed`` and runs a new linked call; *effect unknown* raises
        :class:`EffectUnknown` (or asks ``lookup`` and records its answer); *observed*
        reinterprets the stored bytes; *interpreted* finalizes or redecides; an observed
        provider failure is redecided by the policy; *retry decided*, *not sent*,
        *reconciled not served* and *risk accepted* start the next attempt; *failed*
        raises :class:`CallFailed`. Without ``interpret`` the result is the raw response
        bytes. ``send`` may raise :class:`NotSent` (never left; safe to retry) or
        :class:`ProviderFailure` (the provider answered with a failure); any other
        exception leaves the effect unknown and is re-raised as :class:`EffectUnknown`.
        Refusals (:class:`ResumeRefused`, :class:`EffectUnknown`) append nothing.
        """
        _check_run_args(send, interpret, retry, lookup)
        long = _Long.of(progress, inactivity_timeout, max_duration, progress_interval)
        if check_dedup(dedup) is not None:
            self.dedup = dedup
        return self._run(send, interpret=interpret, retry=retry, lookup=lookup, long=long)

    def _run(
        self,
        send: Send,
        *,
        interpret: Interpret | None,
        retry: RetryPolicy | None,
        lookup: Callable[[str, str, int], Served | str | None] | None,
        long: _Long,
    ) -> Any:
        policy = retry or DEFAULT_RETRY
        task = self.task
        try:
            with task.inflight(self.key):
                while True:
                    st = self.state()
                    self.call_id = st.call_id
                    stage = st.stage
                    nxt = st.next_operation
                    if stage in ("requested", "manifest_recorded"):
                        self._gate(st)
                        if not self._fresh:
                            self._resume(st)
                            continue
                        self._attempt(st, send, interpret, policy, long)
                        continue
                    if nxt == START_NEXT_ATTEMPT:
                        if st.attempts >= policy.max_attempts and stage in ("retry_decided", "not_sent"):
                            self._release()
                            self._give_up(st, f"{st.attempts} attempts used, the policy allows {policy.max_attempts}")
                            continue
                        self._gate(st)
                        if st.provider_dedup:
                            self._check_window(st)
                        self._attempt(st, send, interpret, policy, long)
                        continue
                    self._release()
                    if stage == "completed":
                        return self._result(st)
                    if stage == "effect_unknown":
                        if self._dedup_resend(st):
                            continue
                        if lookup is None or not self._ask(st, lookup):
                            raise _refuse(
                                st,
                                "the effect of the last attempt is unknown",
                                f"attempt {st.attempts} started and nothing after it was recorded, so the provider "
                                "may have served it and resending risks a duplicate; reconcile it with "
                                f"task.reconcile({st.call_id!r}, 'served' | 'not_served' | 'resend') "
                                f"or 'intentlog reconcile {task.id} {st.call_id}'",
                            )
                    elif nxt == REINTERPRET and st.observation_pending:
                        self._observe_evidence(st)
                    elif nxt == REINTERPRET:
                        self._interpret(st, interpret, policy)
                    elif nxt in (FINALIZE, REDECIDE) or stage == "failed":
                        if self._can_reinterpret(st, interpret):  # a newer interpreter, the same stored bytes
                            self._reinterpret(st, interpret)  # type: ignore[arg-type]
                        elif stage == "failed":
                            raise CallFailed(st.call_id, st.key, (st.reason or "failed") + _reinterpret_hint(st))
                        else:
                            self._decide(st, policy)
                    else:
                        raise _refuse(st, f"the call is {stage}", st.reason or "")
        finally:
            self._release()

    # -- the steps -------------------------------------------------------------------

    def _gate(self, st: CallState) -> None:
        """Refuse to start an attempt unless every approval that bound this key, or bound this request's
        hash as a digest, approves its current request.

        Pending raises :class:`ApprovalPending`, rejected :class:`ApprovalRejected` (who and
        why), a decision on another request hash :class:`ApprovalVoid` (both hashes named).
        Raised before anything is appended, so a refused call sends nothing.
        """
        task = self.task
        fold = task.live()
        current = self._intent.canonical.digest
        by_key = fold.approvals_of(self.key)
        by_digest = tuple(a for a in fold.approvals_about(current) if a not in by_key)  # about this request's bytes
        if not by_key and not by_digest:
            return
        from .projections.operator import APPROVED, PENDING, REJECTED, approval_states

        states = approval_states(task.events(), fold.result())
        for aid in (*by_key, *by_digest):
            a = states[aid]
            binds_key = self.key if aid in by_digest else a.binds.get("key")
            if binds_key != self.key or a.binding != current:
                what = f"key {binds_key!r}" if binds_key != self.key else "this key"
                why = a.void_reason or (
                    f"it now binds {what} with request {a.binding}, not this call's request {current}"
                )
                raise ApprovalVoid(
                    call_id=st.call_id, key=self.key, approval_id=aid, binding=a.binding, request_hash=current, why=why
                )
            if a.status == REJECTED:
                raise ApprovalRejected(
                    call_id=st.call_id,
                    key=self.key,
                    approval_id=aid,
                    decision=a.decision or "reject",
                    by=a.by,
                    note=a.note,
                )
            if a.status == PENDING:
                raise ApprovalPending(task.id, aid, None)
            if a.status != APPROVED:
                raise ApprovalVoid(
                    call_id=st.call_id,
                    key=self.key,
                    approval_id=aid,
                    binding=a.binding,
                    request_hash=current,
                    why=a.void_reason or f"it is {a.status}",
                )

    def _result(self, st: CallState) -> Any:
        return _result_of(self.task, st)

    def _observe_evidence(self, st: CallState) -> None:
        """Finish a reconciliation torn after ``effect.reconciled``: its evidence is in objects/, observe it."""
        if st.response is None:  # pragma: no cover - observation_pending means evidence is recorded
            raise IntentlogError(f"{st.call_id}: reconciled served without evidence")
        _load(self.task, st.response, f"the evidence of {st.call_id}'s reconciliation")  # present and intact
        self.task.append(
            "attempt.observed",
            {"call": st.call_id, "attempt": st.attempts, "response": _bare(st.response), "source": "reconciliation"},
            sync=True,
        )

    def _resume(self, st: CallState) -> None:
        """Drift was checked at prepare; link the old call to a new one and continue there."""
        task = self.task
        with task.mutex:
            fold = task.live()
            promised = fold.pending_resume(st.call_id)  # a resume torn after its call.resumed
            new_id = promised or fold.next_call_id()
            with task.batch():
                if promised is None:
                    task.append("call.resumed", {"call": st.call_id, "new_call": new_id, "key": self.key})
                _append_intent(task, new_id, self.key, self._intent, name=st.name, resumes=st.call_id)
        self.call_id = new_id
        self._fresh = True

    def _errored(self, call_id: str, n: int, text: str, cause: BaseException) -> EffectUnknown:
        text = _cap(_scrub(text, self._intent.secrets))
        self.task.append("attempt.errored", {"call": call_id, "attempt": n, "error": text}, sync=True)
        exc = EffectUnknown(
            call_id=call_id,
            key=self.key,
            reason=text,
            next_operation=RECONCILE_EFFECT,
            detail="the request may have reached the provider; reconcile before any resend",
        )
        exc.__cause__ = cause
        return exc

    def _unstored(self, call_id: str, n: int, data: bytes, cause: BaseException) -> EffectUnknown:
        """The response could not be stored: keep its bytes aside, then report the effect unknown, saying where."""
        task = self.task
        kept = _keep_aside(task, call_id, n, data)
        text = f"the response ({len(data)} bytes) could not be stored: {_error_text(cause)}"
        if kept is not None:
            text += (
                f"; its bytes are kept in {kept} (reconcile with them: intentlog reconcile {task.id} {call_id} "
                f"--served --evidence {kept})"
            )
        else:
            text += "; no copy of its bytes could be written anywhere: ask the provider for them"
        try:
            return self._errored(call_id, n, text, cause)
        except (OSError, IntentlogError):  # the stream cannot take the event either: the record says unknown
            exc = EffectUnknown(
                call_id=call_id,
                key=self.key,
                reason=_cap(_scrub(text, self._intent.secrets)),
                next_operation=RECONCILE_EFFECT,
                detail="the provider served the request but the ledger could not record its answer; free space, "
                "then reconcile",
            )
            exc.__cause__ = cause
            return exc

    def _attempt(
        self, st: CallState, send: Send, interpret: Interpret | None, policy: RetryPolicy, long: _Long
    ) -> None:
        task = self.task
        n = st.attempts + 1
        # durable before the send, together with the intent still pending in effect()'s batch
        task.append("attempt.started", {"call": st.call_id, "attempt": n}, sync=True)
        self._release()
        encoding: str | None = None
        try:
            raw = self._send(send, st.call_id, n, long)
        except _TimedOut as exc:
            raise exc.error from None
        except NotSent as exc:
            reason = _scrub(exc.reason, self._intent.secrets)
            task.append("attempt.not_sent", {"call": st.call_id, "attempt": n, "reason": reason})
            if policy.retry_not_sent and n < policy.max_attempts:
                self._retry(st.call_id, n, f"not sent: {reason}", policy)
            else:
                self._give_up(st, f"not sent: {reason}", attempt=n)
            return
        except ProviderFailure as exc:
            reason = _scrub(exc.reason, self._intent.secrets)
            body = exc.body.encode("utf-8", "surrogateescape") if isinstance(exc.body, str) else bytes(exc.body)
            ref = _store(task, scrub_bytes(body, self._intent.secrets, patterns=True))
            task.append(
                "attempt.observed",
                {"call": st.call_id, "attempt": n, "response": ref, "error": reason, "retryable": exc.retryable},
                sync=True,
            )
            if isinstance(exc, KeyReused):  # the provider holds another request under this key
                self._give_up_id(st.call_id, f"{DRIFT}: the provider refused key {self.key!r}: {reason}", n)
                return
            self._failure_decision(st.call_id, n, reason, exc, policy)
            return
        except Exception as exc:
            raise self._errored(st.call_id, n, f"send raised {_error_text(exc)}", exc) from exc
        if isinstance(raw, str):
            data, encoding = _encode_text(raw)
        elif isinstance(raw, (bytes, bytearray, memoryview)):
            data = bytes(raw)
        else:
            bad = TypeError(f"send must return bytes or str, not {type(raw).__name__}")
            raise self._errored(st.call_id, n, str(bad), bad) from bad
        data = scrub_bytes(data, self._intent.secrets)  # a credential the provider echoes is not stored
        try:
            ref = _store(task, data)  # a blob is durable here, before the event that refers to it
        except (OSError, IntentlogError) as exc:  # the disk filled after the send: keep the paid-for bytes
            raise self._unstored(st.call_id, n, data, exc) from exc
        observed: dict[str, Any] = {"call": st.call_id, "attempt": n, "response": ref}
        if encoding is not None:  # text with lone surrogates: how to get the very same str back
            observed["encoding"] = encoding
        if interpret is None:  # nothing interprets the bytes: observation and completion share one sync
            with task.batch():
                task.append("attempt.observed", observed)
                self._interpret(self.state(), None, policy)
            return
        task.append("attempt.observed", observed, sync=True)  # durable before anything interprets it
        self._interpret(self.state(), interpret, policy)

    def _send(self, send: Send, call_id: str, n: int, long: _Long) -> bytes | str:
        """Call ``send`` with a heartbeat in scope; in a watched worker thread when a limit is set.

        Raises what ``send`` raises, or :class:`_TimedOut` once ``attempt.timed_out`` is durable.
        """
        beat = _Beat(self.task, call_id, n, long, self._intent.secrets)
        try:
            if long.inactivity_timeout is None and long.max_duration is None:
                token = _HEARTBEAT.set(beat)
                try:
                    return send(self._intent.request)
                finally:
                    _HEARTBEAT.reset(token)
            return self._watch(send, beat, long)
        finally:
            beat.close()  # heartbeats from threads that outlive the send are not recorded

    def _watch(self, send: Send, beat: _Beat, long: _Long) -> bytes | str:
        outcome: list[Any] = []  # [("ok", value)] or [("error", exc)], written once by the worker
        done = threading.Event()
        request = self._intent.request

        def work() -> None:
            _HEARTBEAT.set(beat)
            try:
                outcome.append(("ok", send(request)))
            except BaseException as exc:  # handed to the waiting thread, which decides
                outcome.append(("error", exc))
            finally:
                done.set()

        ctx = contextvars.copy_context()
        name = f"intentlog-send-{self.task.id}-{beat.call_id}-{beat.attempt}"
        worker = threading.Thread(target=ctx.run, args=(work,), name=name, daemon=True)
        worker.start()
        while True:
            limit = beat.next_limit()
            if limit is None:  # pragma: no cover - _watch runs only with a limit
                done.wait()
                break
            when, _, _ = limit
            if done.wait(timeout=max(0.0, when - time.monotonic())):
                break
            expired = beat.expire()  # records attempt.timed_out, unless a heartbeat moved the deadline
            if expired is not None:
                raise _TimedOut(self._timed_out_error(beat, *expired))
        kind, value = outcome[0]
        if kind == "error":
            raise value
        return value  # type: ignore[no-any-return]

    def _timed_out_error(self, beat: _Beat, limit: str, timeout: float, after: float) -> EffectUnknown:
        what = "without a heartbeat" if limit == "inactivity" else "in all"
        return EffectUnknown(
            call_id=beat.call_id,
            key=self.key,
            reason=f"attempt {beat.attempt} timed out after {after:.1f} s {what} (limit {limit} {timeout:g} s)",
            next_operation=RECONCILE_EFFECT,
            detail="the provider may still serve the request and its late answer is not recorded; reconcile "
            f"with task.reconcile({beat.call_id!r}, ...) or 'intentlog reconcile {self.task.id} {beat.call_id}' "
            "before any resend",
        )

    def _failure_decision(
        self, call_id: str, n: int, reason: str, failure: ProviderFailure, policy: RetryPolicy
    ) -> None:
        if policy.should_retry(failure) and n < policy.max_attempts:
            self._retry(call_id, n, f"provider failure: {reason}", policy)
        else:
            self._give_up_id(call_id, f"provider failure: {reason}", n)

    def _interpret(self, st: CallState, interpret: Interpret | None, policy: RetryPolicy) -> None:
        task = self.task
        n = st.attempts
        if st.response is None:  # pragma: no cover - observed always carries a response
            raise IntentlogError(f"{st.call_id}: observed without a response ref")
        if interpret is None:
            ref = _bare(_check_ref(task, st.response, f"the response of {st.call_id}"))
            task.append("call.completed", {"call": st.call_id, "attempt": n, "result": {"raw": True, "response": ref}})
            return
        raw = _load(task, st.response, f"the response of {st.call_id}")
        with task.batch():
            error = self._record_interpretation(st, interpret, raw)
            if error is not None:
                self._decide(self.state(), policy, error=error)

    def _record_interpretation(
        self, st: CallState, interpret: Interpret, raw: bytes, *, reinterpretation: int | None = None
    ) -> str | None:
        return _record_interpretation(
            self.task, st, interpret, raw, secrets=self._intent.secrets, reinterpretation=reinterpretation
        )

    def _can_reinterpret(self, st: CallState, interpret: Interpret | None) -> bool:
        """The latest interpretation failed and ``interpret`` is another interpreter (name or version)."""
        if interpret is None or st.interpret_error is None or st.response is None:
            return False
        return dict(st.interpreter or {}) != _interpreter_id(interpret)

    def _reinterpret(self, st: CallState, interpret: Interpret) -> str | None:
        """Interpret the stored response again, beside the earlier interpretation; never sends."""
        raw = _load(self.task, st.response, f"the response of {st.call_id}")
        with self.task.batch():
            return self._record_interpretation(st, interpret, raw, reinterpretation=st.reinterpretations + 1)

    def _decide(self, st: CallState, policy: RetryPolicy, *, error: str | None = None) -> None:
        task = self.task
        n = st.attempts
        if st.next_operation == FINALIZE:
            task.append("call.completed", {"call": st.call_id, "attempt": n, "result": self._interpreted_result(st)})
            return
        if st.stage == "observed":  # a provider failure was observed; its decision was never recorded
            failure = self._observed_failure(st)
            self._failure_decision(st.call_id, n, failure.reason, failure, policy)
            return
        error = error or st.reason
        reason = f"interpretation failed: {error}" if error else "interpretation failed"
        if policy.retry_on_interpret_error and n < policy.max_attempts:
            self._retry(st.call_id, n, reason, policy)
        else:
            self._give_up(st, reason, attempt=n)

    def _interpreted_result(self, st: CallState) -> dict[str, Any]:
        """The completion's ``result`` for the latest interpretation: its value, or the ref of a large one."""
        for ev in _reversed_call_events(self.task, st):
            if ev.kind == "attempt.interpreted":
                d = ev.data
                if "result_ref" in d:
                    return {"value_ref": d["result_ref"]}
                return {"value": d.get("result")}
        return {"value": None}  # pragma: no cover - FINALIZE means an interpretation is recorded

    def _observed_failure(self, st: CallState) -> ProviderFailure:
        for ev in _reversed_call_events(self.task, st):
            if ev.kind == "attempt.observed":
                d = ev.data
                return ProviderFailure(str(d.get("error")), retryable=d.get("retryable") is True)
        return ProviderFailure(st.reason or "provider failure")  # pragma: no cover

    def _retry(self, call_id: str, n: int, reason: str, policy: RetryPolicy) -> None:
        if policy.hand_back:
            self.task.append(
                "attempt.retry_decided",
                {"call": call_id, "attempt": n, "decision": "retry", "reason": reason, "delay": None},
                sync=True,
            )
            raise RetryHandedBack(call_id, self.key, n, reason)
        delay = policy.delay(n)
        self.task.append(
            "attempt.retry_decided",
            {"call": call_id, "attempt": n, "decision": "retry", "reason": reason, "delay": delay},
            sync=True,
        )
        if delay > 0:
            policy.sleep(delay)

    def _give_up(self, st: CallState, reason: str, *, attempt: int | None = None) -> None:
        self._give_up_id(st.call_id, reason, attempt if attempt is not None else st.attempts)

    def _give_up_id(self, call_id: str, reason: str, n: int) -> None:
        task = self.task
        with task.batch():
            task.append(
                "attempt.retry_decided",
                {"call": call_id, "attempt": n, "decision": "fail", "reason": reason, "delay": None},
            )
            task.append("call.failed", {"call": call_id, "reason": reason, "by": None})

    def _window(self, st: CallState) -> tuple[ProviderDedup, float] | None:
        """The declaration relied on and the first attempt's age (s), when a resend may rely on the provider.

        Both this run's declaration and the manifest's must exist; of the two, the one
        with the shorter usable window (``window - margin``) is relied on. The age is this
        machine's clock minus the recorded ``ts`` of the call's first ``attempt.started``.
        None when there is no declaration, the timestamp is unreadable or in the future.
        """
        if self.dedup is None:
            return None
        recorded: ProviderDedup | None = None
        first_ts: str | None = None
        for ev in self.task.events(since=st.first_seq):
            if ev.data.get("call") != st.call_id:
                continue
            if ev.kind == "call.manifest":
                recorded = ProviderDedup.from_json(ev.data.get("dedup"))
            elif ev.kind == "attempt.started" and first_ts is None:
                first_ts = ev.ts
                break
        if recorded is None or first_ts is None:
            return None
        relied = min((recorded, self.dedup), key=lambda d: d.usable_s)
        age = age_of(first_ts, _dedup.clock())
        if age is None or age < 0:
            return None
        return relied, age

    def _dedup_resend(self, st: CallState) -> bool:
        """Resolve an unknown effect through the provider's idempotency window, or leave it (False, nothing appended).

        Inside the window (the first attempt started less than ``window - margin`` ago,
        less a second for the write itself), ``effect.reconciled {outcome:
        "provider_dedup", window_s, margin_s, age_s}`` is synced and the next attempt
        resends under the same key: the provider replays its first answer, or performs
        the effect once if the first send never reached it.
        """
        found = self._window(st)
        if found is None:
            return False
        relied, age = found
        if not age + _WRITE_SLACK < relied.usable_s:
            return False
        self.task.append(
            "effect.reconciled",
            {
                "call": st.call_id,
                "attempt": st.attempts,
                "outcome": PROVIDER_DEDUP,
                "evidence": None,
                "note": f"resent under key {self.key!r}: the provider deduplicates it for {relied.window_s:g} s",
                "by": None,
                "source": PROVIDER_DEDUP,
                "window_s": relied.window_s,
                "margin_s": relied.margin_s,
                "age_s": round(age, 6),
            },
            sync=True,
        )
        return True

    def _check_window(self, st: CallState) -> None:
        """Before any send that relies on the provider's deduplication: still inside its window, or refused."""
        found = self._window(st)
        if found is not None and found[1] + _WRITE_SLACK < found[0].usable_s:
            return
        raise ResumeRefused(
            call_id=st.call_id,
            key=self.key,
            reason="the provider's idempotency window has passed (or is not declared by this run)",
            next_operation="operator decides",
            detail="an earlier attempt was resolved by provider deduplication, and a send now could be a second "
            f"effect; fail the call (task.fail({st.call_id!r}, ...) or 'intentlog fail {self.task.id} "
            f"{st.call_id}') or run again with the declaration inside the window",
        )

    def _ask(self, st: CallState, lookup: Callable[[str, str, int], Served | str | None]) -> bool:
        """Ask the provider about the key; record the answer, never assume it."""
        answer = lookup(self.key, st.call_id, st.attempts)
        if answer is None or answer == "unknown":
            return False
        if isinstance(answer, Served):
            _record_reconciliation(
                self.task,
                st,
                "served",
                None if answer.response is None else scrub_bytes(bytes(answer.response), self._intent.secrets),
                note="answered by lookup",
                by=None,
                source="lookup",
            )
        elif answer == NOT_SERVED:
            _record_reconciliation(self.task, st, NOT_SERVED, None, note="answered by lookup", by=None, source="lookup")
        else:
            raise UsageError(f"lookup must return Served(...), 'not_served' or None, not {answer!r}")
        return True


def _record_interpretation(
    task: TaskStream,
    st: CallState,
    interpret: Interpret,
    raw: bytes,
    *,
    secrets: Iterable[str],
    reinterpretation: int | None = None,
) -> str | None:
    """Run ``interpret`` over ``raw``; append ``attempt.interpreted`` and, when it succeeded, ``call.completed``.

    Returns the recorded error text, or None on success. A value that is not exact JSON
    (or nests too deep to walk) is a recorded interpretation error; a large value goes to
    objects/ as canonical JSON and both events carry its ref (``result_ref`` /
    ``{"value_ref": ref}``), so no line grows past the inline threshold.
    ``reinterpretation`` (1, 2, ...) marks both events of a later interpretation of the
    same stored bytes.
    """
    head: dict[str, Any] = {"call": st.call_id, "attempt": st.attempts, "interpreter": _interpreter_id(interpret)}
    tail: dict[str, Any] = {} if reinterpretation is None else {"reinterpretation": reinterpretation}
    error: str | None = None
    try:
        value = interpret(raw)
    except Exception as exc:  # the interpreter is user code: its failure is recorded
        error = _cap(_scrub(_error_text(exc), secrets))
    else:
        try:  # a value that is not exact JSON is refused before anything is written
            result = _value_record(task, value)
        except (NotSerializable, RecursionError) as exc:
            why = "nests too deep to record" if isinstance(exc, RecursionError) else f"is not JSON: {exc}"
            error = _cap(f"the interpreter returned a value that {why}")
    if error is not None:
        task.append("attempt.interpreted", {**head, "error": error, **tail})
        return error
    if "value_ref" in result:
        task.append("attempt.interpreted", {**head, "result_ref": result["value_ref"], **tail})
    else:
        task.append("attempt.interpreted", {**head, "result": value, **tail})
    task.append("call.completed", {"call": st.call_id, "attempt": st.attempts, "result": result, **tail})
    return None


def _check_derived(task: TaskStream, st: CallState) -> None:
    """Refuse a completion the record does not derive (the fold saw it contradict its interpretation)."""
    if st.forged is not None:
        seq, why = st.forged
        raise CorruptStream(
            str(task.path),
            seq + 1,
            f"{st.call_id} (key {st.key!r}): {why}",
            hint="the record contradicts itself, so its value is not returned; nothing was appended or sent. "
            "Run 'intentlog verify' and restore the stream from a copy or git",
        )


def _result_of(task: TaskStream, st: CallState) -> Any:
    """What a completed call returns: the raw response bytes, or the (latest) interpreted value.

    Never a value the record does not derive: a completion that contradicts the
    interpretation (or observation) it completes raises :class:`CorruptStream` naming its line.
    """
    _check_derived(task, st)
    result = st.result
    if isinstance(result, dict) and result.get("raw") is True:
        # the observation's ref carries small bytes inline; the completion's names them
        ref = st.response if st.response is not None else result.get("response")
        if not isinstance(ref, Mapping):  # pragma: no cover - a completed raw call always observed
            raise IntentlogError(f"{st.call_id}: completed raw but no response is recorded")
        return _load(task, ref)
    if isinstance(result, dict) and "value_ref" in result:  # a large value, stored as canonical JSON
        return _loads(_load(task, result["value_ref"], f"the result of {st.call_id}"))
    return result.get("value") if isinstance(result, dict) else result


def _reinterpret_hint(st: CallState) -> str:
    """For a call failed by its interpretation: how to read its stored bytes again without a send."""
    if st.interpret_error is None or st.response is None:
        return ""
    return (
        "; its response is stored, so a fixed interpreter reads it without a send: give it another identity "
        f"(a new 'version' attribute) and run again, or call task.reinterpret({st.call_id!r}, interpret)"
    )


def _reinterpretable(st: CallState) -> bool:
    """Stored bytes a new interpreter may read: a completion, or an interpretation that failed."""
    if st.response is None:
        return False
    return st.stage == "completed" or (st.interpret_error is not None and st.stage in ("interpreted", "failed"))


def reinterpret(task: TaskStream, call_or_key: str, interpret: Interpret) -> Any:
    """Run ``interpret`` over a call's stored response bytes and record the new interpretation beside the old.

    ``call_or_key`` is a call id or a key (its latest call). The call must be completed, or
    have an interpretation that failed. Appends ``attempt.interpreted`` and, when it
    succeeds, ``call.completed``, both with ``reinterpretation: n`` (1, 2, ...), durable
    on return; earlier events are never replaced, and the work state (and a re-run) then
    return the latest completion's value, which this returns too. Never sends. Raises
    :class:`UnknownCall` for a call or key the task does not have, :class:`ResumeRefused`
    for a call with nothing to reinterpret (appending nothing), and
    :class:`ReinterpretFailed` when the interpreter fails (its failure is recorded; the
    earlier result stands). Error texts are scrubbed of nothing the request marked secret
    (the request is not rebuilt here): interpreters should not quote credentials.
    """
    if not callable(interpret):
        raise UsageError(f"interpret must be a callable taking the response bytes, not {interpret!r}")
    if not isinstance(call_or_key, str) or not task.exists():
        raise UnknownCall(task.id, str(call_or_key))
    with task.mutex:
        fold = task.live()
        cid = call_or_key if call_or_key in fold.result().calls else fold.latest_call(call_or_key)
        if cid is None:
            raise UnknownCall(task.id, call_or_key)
        st = fold.call_state(cid)
        _check_derived(task, st)
        if not _reinterpretable(st):
            raise _refuse(
                st,
                f"nothing to reinterpret: the call is {st.stage}",
                "only a completed call, or one whose interpretation failed, has stored bytes to interpret again",
            )
        raw = _load(task, st.response, f"the response of {st.call_id}")
        n = st.reinterpretations + 1
        with task.batch():
            error = _record_interpretation(task, st, interpret, raw, secrets=(), reinterpretation=n)
        if error is not None:
            raise ReinterpretFailed(st.call_id, st.key, n, error)
        done = fold.call_state(cid)
        return _result_of(task, done)


def _reversed_call_events(task: TaskStream, st: CallState) -> list[Event]:
    out = [ev for ev in task.events(since=st.first_seq) if ev.data.get("call") == st.call_id]
    out.reverse()
    return out


def _append_intent(
    task: TaskStream, call_id: str, key: str, intent: _Intent, *, name: str | None, resumes: str | None
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
            "request": _store(task, c.data, "application/json"),
            "inputs": intent.inputs,
            "canon": c.version,
            "dropped": list(c.dropped),
            "redacted": list(c.redacted),
            **({"redaction": c.rules} if c.rules is not None else {}),  # the caller's rule, when not the defaults
            **intent.extra,
        },
    )


def prepare(
    task: TaskStream,
    key: str,
    request: Any,
    *,
    inputs: Mapping[str, str] | None = None,
    name: str | None = None,
    drop: Iterable[str] | None = None,
    redact: Any = None,
    dedup: ProviderDedup | None = None,
) -> Call:
    """Record the intent of a call, or bind to the key's existing call after a drift check.

    For a new key: ``call.requested`` then ``call.manifest``, durable on return (inside
    :func:`effect` they share the sync of ``attempt.started``). ``request`` is the
    request value or a callable building it. For a key already recorded, the rebuilt
    request's hash and input digests must equal the manifest's, else
    :class:`ResumeRefused` with reason ``DRIFT`` and nothing is appended. A request that
    cannot be built or serialized, or a malformed input digest, appends
    ``call.requested`` and ``call.preparation_failed`` (the error message, never the
    value) and raises :class:`PreparationFailed`. ``dedup`` (a :class:`ProviderDedup`)
    is recorded in the manifest and lets :meth:`Call.run` resolve an unknown effect inside
    the provider's window.
    """
    check_dedup(dedup)
    return _prepare(task, key, request, inputs=inputs, name=name, drop=drop, redact=redact, dedup=dedup)


_EXTRA_FIELDS: Final = frozenset({"messages", "dedup"})


def _prepare(
    task: TaskStream,
    key: str,
    request: Any,
    *,
    inputs: Mapping[str, str] | None = None,
    name: str | None = None,
    drop: Iterable[str] | None = None,
    redact: Any = None,
    extra: Mapping[str, Any] | None = None,
    secrets: frozenset[str] = frozenset(),
    dedup: ProviderDedup | None = None,
) -> Call:
    """:func:`prepare`, with ``extra`` manifest fields (a session turn's ``messages``: refs, not part of the hash).

    ``extra`` goes into this call's manifest and into the manifest of any call that resumes
    it; the drift check compares the request hash and inputs only.
    """
    _check_key(key)
    _check_name(name)
    _check_rules(drop, redact)
    if extra and not set(extra) <= _EXTRA_FIELDS:  # pragma: no cover - internal callers only
        raise UsageError(f"extra manifest fields must be among {sorted(_EXTRA_FIELDS)}, not {sorted(extra)}")
    try:
        intent: _Intent | None = _build(request, inputs, drop, redact)
        error = None
    except _BuildFailed as exc:
        intent, error = None, exc.text
    except Exception as exc:  # building the request is user code: any failure is recorded, scrubbed
        intent, error = None, _scrub(_error_text(exc), ())
    if dedup is not None:
        extra = {**(extra or {}), "dedup": dedup.to_json()}
    if intent is not None and (extra or secrets):
        intent = replace(intent, secrets=intent.secrets | secrets, extra=dict(extra or {}))
    with task.mutex:  # threads sharing the handle must not take the same call id
        fold = task.live()
        existing = fold.latest_call(key)
        st = fold.call_state(existing) if existing is not None else None
        if st is not None and st.stage != "preparation_failed":
            if intent is None:
                raise _refuse(st, DRIFT, f"the request cannot be rebuilt ({error}), so it cannot be checked")
            drift = _drift(task, st, intent)
            if drift is not None:
                nxt = "use a new key" if st.next_operation in (START_CALL, NONE) else st.next_operation
                raise _refuse(st, DRIFT, f"{drift}; a changed request needs a new key", next_operation=nxt)
            return Call(task, key, st.call_id, intent, fresh=False, dedup=dedup)
        call_id = fold.next_call_id()
        if intent is None:
            with task.batch():
                task.append("call.requested", {"call": call_id, "key": key, "name": name})
                task.append("call.preparation_failed", {"call": call_id, "key": key, "error": error})
            raise PreparationFailed(call_id, key, error or "unknown error")
        with task.batch():
            _append_intent(task, call_id, key, intent, name=name, resumes=None)
        return Call(task, key, call_id, intent, fresh=True, dedup=dedup)


def effect(
    task: TaskStream,
    key: str,
    request: Any,
    send: Send,
    *,
    interpret: Interpret | None = None,
    inputs: Mapping[str, str] | None = None,
    retry: RetryPolicy | None = None,
    name: str | None = None,
    drop: Iterable[str] | None = None,
    redact: Any = None,
    lookup: Callable[[str, str, int], Served | str | None] | None = None,
    progress: Callable[[Any], None] | None = None,
    inactivity_timeout: float | None = None,
    max_duration: float | None = None,
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
    dedup: ProviderDedup | None = None,
) -> Any:
    """:func:`prepare` then :meth:`Call.run`; the intent and ``attempt.started`` share one sync.

    The batch that defers the intent's sync ends as soon as ``attempt.started`` is synced
    (or the run takes any other path), so it is never held across ``send``. ``progress``,
    ``inactivity_timeout``, ``max_duration`` and ``progress_interval``: see :meth:`Call.run`.
    """
    return _run_effect(
        task,
        key,
        request,
        send,
        interpret=interpret,
        inputs=inputs,
        retry=retry,
        name=name,
        drop=drop,
        redact=redact,
        lookup=lookup,
        long=_Long.of(progress, inactivity_timeout, max_duration, progress_interval),
        dedup=dedup,
    )


def _run_effect(
    task: TaskStream,
    key: str,
    request: Any,
    send: Send,
    *,
    interpret: Interpret | None = None,
    inputs: Mapping[str, str] | None = None,
    retry: RetryPolicy | None = None,
    name: str | None = None,
    drop: Iterable[str] | None = None,
    redact: Any = None,
    lookup: Callable[[str, str, int], Served | str | None] | None = None,
    long: _Long | None = None,
    extra: Mapping[str, Any] | None = None,
    secrets: frozenset[str] = frozenset(),
    dedup: ProviderDedup | None = None,
) -> Any:
    """:func:`effect` for the package's own callers (sessions), with ``extra`` manifest fields.

    ``secrets`` are further strings to scrub from recorded error texts (a session's
    messages are hashed apart from the envelope, so their credentials are found there).
    """
    _check_key(key)  # refused before the stream is opened (or created)
    _check_name(name)
    _check_run_args(send, interpret, retry, lookup)
    _check_rules(drop, redact)
    check_dedup(dedup)
    held = ExitStack()
    held.enter_context(task.batch())
    try:
        call = _prepare(
            task,
            key,
            request,
            inputs=inputs,
            name=name,
            drop=drop,
            redact=redact,
            extra=extra,
            secrets=secrets,
            dedup=dedup,
        )
    except BaseException:
        held.close()
        raise
    call._held = held
    return call._run(send, interpret=interpret, retry=retry, lookup=lookup, long=long or _Long())


# -- operators -----------------------------------------------------------------------


def _record_reconciliation(
    task: TaskStream,
    st: CallState,
    outcome: str,
    evidence: bytes | None,
    *,
    note: str | None,
    by: str | None,
    source: str,
) -> Event:
    # the evidence goes to objects/ (durable) before the event naming it, whatever its size: a crash
    # between effect.reconciled and its attempt.observed must not leave a 'served' without its bytes
    ref = task.store.put(evidence).to_json() if evidence is not None else None
    with task.batch():
        ev = task.append(
            "effect.reconciled",
            {
                "call": st.call_id,
                "attempt": st.attempts,
                "outcome": outcome,
                "evidence": _bare(ref) if ref is not None else None,
                "note": note,
                "by": by,
                "source": source,
            },
        )
        if ref is not None:
            task.append(
                "attempt.observed",
                {"call": st.call_id, "attempt": st.attempts, "response": ref, "source": "reconciliation"},
            )
    return ev


def _state_of(task: TaskStream, call_id: str) -> CallState:
    if not task.exists():  # a refusal must not create the task it refuses
        raise UnknownCall(task.id, call_id)
    fold = task.live()
    try:
        return fold.call_state(call_id)
    except KeyError:
        raise UnknownCall(task.id, call_id) from None


def reconcile(
    task: TaskStream,
    call_id: str,
    outcome: str,
    *,
    evidence: bytes | None = None,
    note: str | None = None,
    by: str | None = None,
) -> Event:
    """Record what an operator learned about an unknown effect (``effect.reconciled``).

    ``served`` with ``evidence`` (the response bytes) continues as *observed*: the next
    run reinterprets them and sends nothing. ``served`` without bytes leaves the call for
    an operator (fail it, or ``resend`` accepting the duplicate risk). ``not_served``
    makes the next attempt safe. ``resend`` records that the operator accepts the risk.
    """
    if outcome not in OUTCOMES:
        raise UsageError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
    if evidence is not None and outcome != "served":
        raise UsageError("evidence goes with outcome 'served' only")
    if evidence is not None and not isinstance(evidence, (bytes, bytearray)):
        raise UsageError(f"evidence must be the response bytes, not {type(evidence).__name__}")
    for label, text in (("note", note), ("by", by)):
        if text is not None and not isinstance(text, str):
            raise UsageError(f"{label} must be a string, not {type(text).__name__}")
    st = _state_of(task, call_id)
    # an effect whose response was lost can still be resent (risk accepted) or get its bytes later
    allowed = st.stage == "effect_unknown" or (
        st.stage == "reconciled_served" and (outcome == "resend" or evidence is not None)
    )
    if not allowed:
        raise ResumeRefused(
            call_id=call_id,
            key=st.key,
            reason=f"nothing to reconcile: the call is {st.stage}",
            next_operation=st.next_operation,
            detail="only an attempt whose effect is unknown is reconciled",
        )
    note = scrub_text(note) if note is not None else None  # an operator's text can quote a credential
    evidence = scrub_bytes(bytes(evidence), (), patterns=True) if evidence is not None else None
    return _record_reconciliation(
        task, st, outcome, bytes(evidence) if evidence is not None else None, note=note, by=by, source="operator"
    )


def fail_call(task: TaskStream, call_id: str, reason: str, *, by: str | None = None) -> Event:
    """Record an operator's decision that an unresolved call has failed (``call.failed``)."""
    if not isinstance(reason, str) or not reason:
        raise UsageError(f"a failure needs a reason (a non-empty string), not {reason!r}")
    st = _state_of(task, call_id)
    if st.stage in ("completed", "superseded", "failed", "preparation_failed"):
        raise ResumeRefused(
            call_id=call_id, key=st.key, reason=f"the call is already {st.stage}", next_operation=st.next_operation
        )
    return task.append("call.failed", {"call": call_id, "reason": scrub_text(reason), "by": by})


# -- context compilation ----------------------------------------------------------


def _compilation_failed(task: TaskStream, compilation_id: str, error: str, missing: list[str]) -> None:
    task.append("context.compilation_failed", {"compilation": compilation_id, "error": error, "missing": missing})


def compile_context(
    task: TaskStream,
    compilation_id: str,
    offered: Sequence[Mapping[str, Any]],
    *,
    required: Iterable[str] = (),
    select: Callable[[list[dict[str, Any]]], Iterable[str]] | None = None,
) -> Package:
    """Compile a context package, recording the offered inventory and the outcome.

    Each offered item is a mapping with ``id`` and optionally ``required`` (bool),
    ``size`` (else estimated from its serialized ``content``, and marked so), ``lineage``
    and ``content``. Appends ``context.compilation_requested`` (the inventory, without
    content, and the required ids), then either ``context.compiled`` (package ref and
    selected ids; the package bytes are durable first) or ``context.compilation_failed``:
    with the missing required ids (required - offered) and
    :class:`RequiredContextMissing` raised, or with the error message of a ``select``
    that raised or chose ids never offered, or of content that is not JSON, and
    :class:`PreparationFailed` raised. Malformed arguments (an item without a string id,
    a duplicate id, a bad size) raise :class:`UsageError` and write nothing.
    Compiling has no external effect: recompiling under the same id is always safe.
    """
    _check_key(compilation_id)
    if isinstance(required, str):
        raise UsageError(f"required must be a collection of ids, not the string {required!r}")
    items: list[dict[str, Any]] = []
    inventory: list[dict[str, Any]] = []
    problems: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(offered):
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            raise UsageError(f"offered item {i} must be a mapping with a string 'id'")
        item_id = item["id"]
        if item_id in seen:
            raise UsageError(f"offered item {i}: id {item_id!r} is offered twice")
        seen.add(item_id)
        size = item.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise UsageError(f"offered item {item_id!r}: size must be a non-negative integer, not {size!r}")
        estimated = size is None
        try:  # checked whether or not a size was given: the package holds the content
            content_size = len(dumps(item.get("content")))
        except IntentlogError as exc:
            problems.append(f"item {item_id!r}: {exc}")
            content_size = None
        if size is None:
            size = content_size
        inventory.append(
            {
                "id": item_id,
                "required": bool(item.get("required", False)),
                "size": size,
                "estimated": estimated,
                "lineage": item.get("lineage"),
            }
        )
        items.append(dict(item))
    need = sorted({*required, *(i["id"] for i in inventory if i["required"])})
    missing = [r for r in need if r not in seen]
    with task.batch():
        task.append(
            "context.compilation_requested",
            {"compilation": compilation_id, "offered": inventory, "required": need},
        )
        if missing:
            _compilation_failed(task, compilation_id, "RequiredContextMissing", missing)
        elif problems:
            _compilation_failed(task, compilation_id, "; ".join(problems), [])
    if missing:
        raise RequiredContextMissing(compilation_id, missing)
    if problems:
        raise PreparationFailed(compilation_id, compilation_id, "; ".join(problems))
    try:
        chosen = list(select(items)) if select is not None else [i["id"] for i in items]
    except Exception as exc:  # user code: the failure is recorded, then raised
        error = f"select raised {_error_text(exc)}"
        _compilation_failed(task, compilation_id, error, [])
        raise PreparationFailed(compilation_id, compilation_id, error) from exc
    unknown = [c for c in chosen if not isinstance(c, str) or c not in seen]
    if unknown:
        error = f"selected ids not offered: {', '.join(map(repr, unknown))}"
        _compilation_failed(task, compilation_id, error, [])
        raise PreparationFailed(compilation_id, compilation_id, error)
    chosen = list(dict.fromkeys(chosen))  # once each, in the order chosen; required ones always
    chosen += [r for r in need if r not in chosen]
    by_id = {i["id"]: i for i in items}
    package = dumps(
        {"compilation": compilation_id, "items": [{"id": c, "content": by_id[c].get("content")} for c in chosen]}
    )
    ref = _store(task, package, "application/json")
    task.append("context.compiled", {"compilation": compilation_id, "package": ref, "selected": chosen})
    return Package(compilation_id, str(ref["digest"]), len(package), tuple(chosen))
