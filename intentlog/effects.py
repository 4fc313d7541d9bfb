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

Guarantees: no ``send`` without a durable ``attempt.started`` before it; no interpretation
of bytes that are not durable; no resend of an attempt whose effect is unknown unless a
reconciliation is recorded; no resumed call whose rebuilt request differs from the
manifest. Credentials named by the redaction rule never reach the record (error texts are
scrubbed of their values too). Not exactly-once: an unknown effect is refused or
reconciled, never guessed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from ._digest import is_digest
from .artifacts.inline import INLINE_MAX, inline_bytes, inline_ref
from .errors import (
    CallFailed,
    EffectUnknown,
    IntentlogError,
    NotSent,
    NotSerializable,
    PreparationFailed,
    ProviderFailure,
    RequiredContextMissing,
    ResumeRefused,
    UnknownCall,
    UsageError,
)
from .eventlog.canonical import DEFAULT_DROP, DEFAULT_REDACT, REDACTED, Canonical, RedactHook, canonicalize, dumps
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
    from .task import Task

__all__ = [
    "DRIFT",
    "NO_RETRY",
    "Call",
    "Package",
    "RetryPolicy",
    "Served",
    "compile_context",
    "effect",
    "fail_call",
    "prepare",
    "reconcile",
]

DRIFT: Final = "DRIFT"
NOT_SERVED: Final = "not_served"
OUTCOMES: Final = ("served", "not_served", "resend")

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
    """

    max_attempts: int = 3
    backoff: float = 0.5
    factor: float = 2.0
    max_backoff: float = 30.0
    retry_not_sent: bool = True
    retry_on: Callable[[ProviderFailure], bool] | None = None
    retry_on_interpret_error: bool = False
    sleep: Callable[[float], None] = time.sleep

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


@final
@dataclass(frozen=True, slots=True)
class Package:
    """A compiled context package: its digest is what a call's ``inputs`` bind to."""

    compilation_id: str
    digest: str
    size: int
    selected: tuple[str, ...]


# -- helpers -----------------------------------------------------------------------


def _store(task: Task, data: bytes, media_type: str | None = None) -> dict[str, Any]:
    """A ref for ``data``: inline in the event when small (DESIGN §3), else a durable blob."""
    if len(data) <= INLINE_MAX:
        return inline_ref(data, media_type=media_type)
    return task.ledger.artifacts.put(data, media_type=media_type).to_json()


def _bare(ref: Mapping[str, Any]) -> dict[str, Any]:
    return {k: ref[k] for k in ("digest", "size", "media_type") if k in ref}


def _load(task: Task, ref: Mapping[str, Any]) -> bytes:
    data = inline_bytes(ref)
    if data is not None:
        return data
    return task.ledger.artifacts.get(str(ref["digest"]))


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _interpreter_id(fn: Callable[..., Any]) -> dict[str, Any]:
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    version = getattr(fn, "version", None) or getattr(fn, "__version__", None)
    return {"name": name, "version": None if version is None else str(version)}


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


def _secret_strings(
    value: Any, path: str, drop: frozenset[str], redact: RedactHook | frozenset[str], out: set[str]
) -> None:
    """Collect the string values the redaction rule removes, to scrub them from error texts."""
    if type(value) is dict:
        for k, v in value.items():
            sub = f"{path}.{k}"
            if not isinstance(k, str) or k in drop:
                continue
            hit = redact(sub, k, v) if callable(redact) else (k.lower() in redact)
            if hit:
                _leaves(v, out)
            else:
                _secret_strings(v, sub, drop, redact, out)
    elif type(value) in (list, tuple):
        for i, v in enumerate(value):
            _secret_strings(v, f"{path}[{i}]", drop, redact, out)


def _leaves(value: Any, out: set[str]) -> None:
    if isinstance(value, str):
        if len(value) >= 4:
            out.add(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if len(str(value)) >= 4:
            out.add(str(value))
    elif isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _leaves(v, out)


def _scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every redacted value replaced: an exception message can quote a credential."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


@dataclass(frozen=True, slots=True)
class _Intent:
    canonical: Canonical
    inputs: dict[str, str]
    request: Any
    secrets: frozenset[str]


def _build(request: Any, inputs: Mapping[str, str] | None, drop: Iterable[str] | None, redact: Any) -> _Intent:
    """Build and canonicalise the request; any failure is a preparation failure."""
    value = request() if callable(request) else request
    canonical = canonicalize(value, drop=drop, redact=redact)
    found: set[str] = set()
    if canonical.redacted:  # the values taken out, to scrub them from any error text recorded later
        drop_set = DEFAULT_DROP if drop is None else frozenset(drop)
        rule: RedactHook | frozenset[str]
        if redact is None:
            rule = DEFAULT_REDACT
        elif callable(redact):
            rule = redact
        else:
            rule = frozenset(k.lower() for k in redact)
        _secret_strings(value, "$", drop_set, rule, found)
    return _Intent(canonical, _check_inputs(inputs), value, frozenset(found))


def _drift(state: CallState, intent: _Intent) -> str | None:
    """What differs between the recorded manifest and the rebuilt request, or None."""
    if state.request_hash is None:
        return None
    if state.request_hash != intent.canonical.digest:
        return f"the rebuilt request hashes to {intent.canonical.digest}, the manifest recorded {state.request_hash}"
    if dict(state.inputs) != intent.inputs:
        recorded, now = dict(state.inputs), intent.inputs
        names = sorted(n for n in {*recorded, *now} if recorded.get(n) != now.get(n))
        return f"the input digests differ from the manifest's for {', '.join(names)}"
    return None


def _refuse(state: CallState, reason: str, detail: str = "", next_operation: str | None = None) -> ResumeRefused:
    nxt = next_operation or state.next_operation
    cls = EffectUnknown if state.next_operation == RECONCILE_EFFECT else ResumeRefused
    return cls(call_id=state.call_id, key=state.key, reason=reason, next_operation=nxt, detail=detail)


# -- prepare -----------------------------------------------------------------------


@final
class Call:
    """One intended effect under an idempotency key; :meth:`run` carries it out or resumes it."""

    def __init__(self, task: Task, key: str, call_id: str, intent: _Intent, *, fresh: bool) -> None:
        self.task = task
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
        fold = self.task._live()
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
    ) -> Any:
        """Carry out the call, or resume it from whatever the record proves.

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
        policy = retry or DEFAULT_RETRY
        task = self.task
        try:
            with task._inflight(self.key):
                while True:
                    st = self.state()
                    self.call_id = st.call_id
                    stage = st.stage
                    nxt = st.next_operation
                    if stage in ("requested", "manifest_recorded"):
                        if not self._fresh:
                            self._resume(st)
                            continue
                        self._attempt(st, send, interpret, policy)
                        continue
                    if nxt == START_NEXT_ATTEMPT:
                        if st.attempts >= policy.max_attempts and stage in ("retry_decided", "not_sent"):
                            self._release()
                            self._give_up(st, f"{st.attempts} attempts used, the policy allows {policy.max_attempts}")
                            continue
                        self._attempt(st, send, interpret, policy)
                        continue
                    self._release()
                    if stage == "completed":
                        return self._result(st)
                    if stage == "effect_unknown":
                        if lookup is None or not self._ask(st, lookup):
                            raise _refuse(
                                st,
                                "the effect of the last attempt is unknown",
                                f"attempt {st.attempts} started and nothing after it was recorded, so the provider "
                                "may have served it and resending risks a duplicate; reconcile it with "
                                f"task.reconcile({st.call_id!r}, 'served' | 'not_served' | 'resend') "
                                f"or 'intentlog reconcile {task.id} {st.call_id}'",
                            )
                    elif nxt == REINTERPRET:
                        self._interpret(st, interpret, policy)
                    elif nxt in (FINALIZE, REDECIDE):
                        self._decide(st, policy)
                    elif stage == "failed":
                        raise CallFailed(st.call_id, st.key, st.reason or "failed")
                    else:
                        raise _refuse(st, f"the call is {stage}", st.reason or "")
        finally:
            self._release()

    # -- the steps -------------------------------------------------------------------

    def _result(self, st: CallState) -> Any:
        result = st.result
        if isinstance(result, dict) and result.get("raw") is True:
            # the observation's ref carries small bytes inline; the completion's names them
            ref = st.response if st.response is not None else result.get("response")
            if not isinstance(ref, Mapping):  # pragma: no cover - a completed raw call always observed
                raise IntentlogError(f"{st.call_id}: completed raw but no response is recorded")
            return _load(self.task, ref)
        return result.get("value") if isinstance(result, dict) else result

    def _resume(self, st: CallState) -> None:
        """Drift was checked at prepare; link the old call to a new one and continue there."""
        task = self.task
        with task._mutex:
            fold = task._live()
            promised = fold.pending_resume(st.call_id)  # a resume torn after its call.resumed
            new_id = promised or fold.next_call_id()
            with task.batch():
                if promised is None:
                    task._append("call.resumed", {"call": st.call_id, "new_call": new_id, "key": self.key})
                _append_intent(task, new_id, self.key, self._intent, name=st.name, resumes=st.call_id)
        self.call_id = new_id
        self._fresh = True

    def _errored(self, call_id: str, n: int, text: str, cause: BaseException) -> EffectUnknown:
        text = _scrub(text, self._intent.secrets)
        self.task._append("attempt.errored", {"call": call_id, "attempt": n, "error": text}, sync=True)
        exc = EffectUnknown(
            call_id=call_id,
            key=self.key,
            reason=text,
            next_operation=RECONCILE_EFFECT,
            detail="the request may have reached the provider; reconcile before any resend",
        )
        exc.__cause__ = cause
        return exc

    def _attempt(self, st: CallState, send: Send, interpret: Interpret | None, policy: RetryPolicy) -> None:
        task = self.task
        n = st.attempts + 1
        # durable before the send, together with the intent still pending in effect()'s batch
        task._append("attempt.started", {"call": st.call_id, "attempt": n}, sync=True)
        self._release()
        try:
            raw = send(self._intent.request)
        except NotSent as exc:
            reason = _scrub(exc.reason, self._intent.secrets)
            task._append("attempt.not_sent", {"call": st.call_id, "attempt": n, "reason": reason})
            if policy.retry_not_sent and n < policy.max_attempts:
                self._retry(st.call_id, n, f"not sent: {reason}", policy)
            else:
                self._give_up(st, f"not sent: {reason}", attempt=n)
            return
        except ProviderFailure as exc:
            reason = _scrub(exc.reason, self._intent.secrets)
            body = exc.body.encode("utf-8", "surrogateescape") if isinstance(exc.body, str) else bytes(exc.body)
            ref = _store(task, body)
            task._append(
                "attempt.observed",
                {"call": st.call_id, "attempt": n, "response": ref, "error": reason, "retryable": exc.retryable},
                sync=True,
            )
            self._failure_decision(st.call_id, n, reason, exc, policy)
            return
        except Exception as exc:
            raise self._errored(st.call_id, n, f"send raised {_error_text(exc)}", exc) from exc
        if isinstance(raw, str):
            try:
                data = raw.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise self._errored(st.call_id, n, "send returned text that is not valid UTF-8", exc) from exc
        elif isinstance(raw, (bytes, bytearray, memoryview)):
            data = bytes(raw)
        else:
            bad = TypeError(f"send must return bytes or str, not {type(raw).__name__}")
            raise self._errored(st.call_id, n, str(bad), bad) from bad
        ref = _store(task, data)  # a blob is durable here, before the event that refers to it
        observed = {"call": st.call_id, "attempt": n, "response": ref}
        if interpret is None:  # nothing interprets the bytes: observation and completion share one sync
            with task.batch():
                task._append("attempt.observed", observed)
                self._interpret(self.state(), None, policy)
            return
        task._append("attempt.observed", observed, sync=True)  # durable before anything interprets it
        self._interpret(self.state(), interpret, policy)

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
            task._append(
                "call.completed",
                {"call": st.call_id, "attempt": n, "result": {"raw": True, "response": _bare(st.response)}},
            )
            return
        raw = _load(task, st.response)
        ident = _interpreter_id(interpret)
        error: str | None = None
        with task.batch():
            try:
                value = interpret(raw)
            except Exception as exc:  # the interpreter is user code: its failure is recorded
                error = _scrub(_error_text(exc), self._intent.secrets)
            else:
                try:  # a value that is not exact JSON is refused before anything is written
                    task._append(
                        "attempt.interpreted",
                        {"call": st.call_id, "attempt": n, "interpreter": ident, "result": value},
                    )
                except NotSerializable as exc:
                    error = f"the interpreter returned a value that is not JSON: {exc}"
            if error is not None:
                task._append(
                    "attempt.interpreted",
                    {"call": st.call_id, "attempt": n, "interpreter": ident, "error": error},
                )
                self._decide(self.state(), policy, error=error)
                return
            task._append("call.completed", {"call": st.call_id, "attempt": n, "result": {"value": value}})

    def _decide(self, st: CallState, policy: RetryPolicy, *, error: str | None = None) -> None:
        task = self.task
        n = st.attempts
        if st.next_operation == FINALIZE:
            value = self._interpreted_value(st)
            task._append("call.completed", {"call": st.call_id, "attempt": n, "result": {"value": value}})
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

    def _interpreted_value(self, st: CallState) -> Any:
        for ev in _reversed_call_events(self.task, st):
            if ev.kind == "attempt.interpreted":
                return ev.data.get("result")
        return None  # pragma: no cover - FINALIZE means an interpretation is recorded

    def _observed_failure(self, st: CallState) -> ProviderFailure:
        for ev in _reversed_call_events(self.task, st):
            if ev.kind == "attempt.observed":
                d = ev.data
                return ProviderFailure(str(d.get("error")), retryable=d.get("retryable") is True)
        return ProviderFailure(st.reason or "provider failure")  # pragma: no cover

    def _retry(self, call_id: str, n: int, reason: str, policy: RetryPolicy) -> None:
        delay = policy.delay(n)
        self.task._append(
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
            task._append(
                "attempt.retry_decided",
                {"call": call_id, "attempt": n, "decision": "fail", "reason": reason, "delay": None},
            )
            task._append("call.failed", {"call": call_id, "reason": reason, "by": None})

    def _ask(self, st: CallState, lookup: Callable[[str, str, int], Served | str | None]) -> bool:
        """Ask the provider about the key; record the answer, never assume it."""
        answer = lookup(self.key, st.call_id, st.attempts)
        if answer is None or answer == "unknown":
            return False
        if isinstance(answer, Served):
            _record_reconciliation(
                self.task, st, "served", answer.response, note="answered by lookup", by=None, source="lookup"
            )
        elif answer == NOT_SERVED:
            _record_reconciliation(self.task, st, NOT_SERVED, None, note="answered by lookup", by=None, source="lookup")
        else:
            raise UsageError(f"lookup must return Served(...), 'not_served' or None, not {answer!r}")
        return True


def _reversed_call_events(task: Task, st: CallState) -> list[Event]:
    out = [ev for ev in task.events(since=st.first_seq) if ev.data.get("call") == st.call_id]
    out.reverse()
    return out


def _append_intent(
    task: Task, call_id: str, key: str, intent: _Intent, *, name: str | None, resumes: str | None
) -> None:
    requested: dict[str, Any] = {"call": call_id, "key": key, "name": name}
    if resumes is not None:
        requested["resumes"] = resumes
    task._append("call.requested", requested)
    c = intent.canonical
    task._append(
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
        },
    )


def prepare(
    task: Task,
    key: str,
    request: Any,
    *,
    inputs: Mapping[str, str] | None = None,
    name: str | None = None,
    drop: Iterable[str] | None = None,
    redact: Any = None,
) -> Call:
    """Record the intent of a call, or bind to the key's existing call after a drift check.

    For a new key: ``call.requested`` then ``call.manifest``, durable on return (inside
    :func:`effect` they share the sync of ``attempt.started``). ``request`` is the
    request value or a callable building it. For a key already recorded, the rebuilt
    request's hash and input digests must equal the manifest's, else
    :class:`ResumeRefused` with reason ``DRIFT`` and nothing is appended. A request that
    cannot be built or serialized, or a malformed input digest, appends
    ``call.requested`` and ``call.preparation_failed`` (the error message, never the
    value) and raises :class:`PreparationFailed`.
    """
    _check_key(key)
    _check_name(name)
    try:
        intent: _Intent | None = _build(request, inputs, drop, redact)
        error = None
    except Exception as exc:  # building the request is user code: any failure is recorded
        intent, error = None, _error_text(exc)
    with task._mutex:  # threads sharing the handle must not take the same call id
        fold = task._live()
        existing = fold.latest_call(key)
        st = fold.call_state(existing) if existing is not None else None
        if st is not None and st.stage != "preparation_failed":
            if intent is None:
                raise _refuse(st, DRIFT, f"the request cannot be rebuilt ({error}), so it cannot be checked")
            drift = _drift(st, intent)
            if drift is not None:
                nxt = "use a new key" if st.next_operation in (START_CALL, NONE) else st.next_operation
                raise _refuse(st, DRIFT, f"{drift}; a changed request needs a new key", next_operation=nxt)
            return Call(task, key, st.call_id, intent, fresh=False)
        call_id = fold.next_call_id()
        if intent is None:
            with task.batch():
                task._append("call.requested", {"call": call_id, "key": key, "name": name})
                task._append("call.preparation_failed", {"call": call_id, "key": key, "error": error})
            raise PreparationFailed(call_id, key, error or "unknown error")
        with task.batch():
            _append_intent(task, call_id, key, intent, name=name, resumes=None)
        return Call(task, key, call_id, intent, fresh=True)


def effect(
    task: Task,
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
) -> Any:
    """:func:`prepare` then :meth:`Call.run`; the intent and ``attempt.started`` share one sync.

    The batch that defers the intent's sync ends as soon as ``attempt.started`` is synced
    (or the run takes any other path), so it is never held across ``send``.
    """
    _check_key(key)  # refused before the stream is opened (or created)
    _check_name(name)
    if not callable(send) or (interpret is not None and not callable(interpret)):
        raise UsageError("send (and interpret, when given) must be callables")
    held = ExitStack()
    held.enter_context(task.batch())
    try:
        call = prepare(task, key, request, inputs=inputs, name=name, drop=drop, redact=redact)
    except BaseException:
        held.close()
        raise
    call._held = held
    return call.run(send, interpret=interpret, retry=retry, lookup=lookup)


# -- operators -----------------------------------------------------------------------


def _record_reconciliation(
    task: Task,
    st: CallState,
    outcome: str,
    evidence: bytes | None,
    *,
    note: str | None,
    by: str | None,
    source: str,
) -> Event:
    with task.batch():
        ref = _store(task, evidence) if evidence is not None else None
        ev = task._append(
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
            task._append(
                "attempt.observed",
                {"call": st.call_id, "attempt": st.attempts, "response": ref, "source": "reconciliation"},
            )
    return ev


def _state_of(task: Task, call_id: str) -> CallState:
    fold = task._live()
    try:
        return fold.call_state(call_id)
    except KeyError:
        raise UnknownCall(task.id, call_id) from None


def reconcile(
    task: Task,
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
    return _record_reconciliation(
        task, st, outcome, bytes(evidence) if evidence is not None else None, note=note, by=by, source="operator"
    )


def fail_call(task: Task, call_id: str, reason: str, *, by: str | None = None) -> Event:
    """Record an operator's decision that an unresolved call has failed (``call.failed``)."""
    if not isinstance(reason, str) or not reason:
        raise UsageError(f"a failure needs a reason (a non-empty string), not {reason!r}")
    st = _state_of(task, call_id)
    if st.stage in ("completed", "superseded", "failed", "preparation_failed"):
        raise ResumeRefused(
            call_id=call_id, key=st.key, reason=f"the call is already {st.stage}", next_operation=st.next_operation
        )
    return task._append("call.failed", {"call": call_id, "reason": reason, "by": by})


# -- context compilation ----------------------------------------------------------


def _compilation_failed(task: Task, compilation_id: str, error: str, missing: list[str]) -> None:
    task._append("context.compilation_failed", {"compilation": compilation_id, "error": error, "missing": missing})


def compile_context(
    task: Task,
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
        if size is None:
            try:
                size = len(dumps(item.get("content")))
            except IntentlogError as exc:
                problems.append(f"item {item_id!r}: {exc}")
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
        task._append(
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
    task._append("context.compiled", {"compilation": compilation_id, "package": ref, "selected": chosen})
    return Package(compilation_id, str(ref["digest"]), len(package), tuple(chosen))
