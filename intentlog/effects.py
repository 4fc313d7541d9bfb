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
work-state projection gives decides what happens (see :func:`Call.run`). Syncs are shared
where the order allows: intent and ``attempt.started`` share one, the observation has its
own, interpretation and completion share the last — three syncs for a small effect.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from ._digest import check_digest
from .artifacts.inline import INLINE_MAX, inline_bytes, inline_ref
from .errors import (
    CallFailed,
    EffectUnknown,
    IntentlogError,
    InvalidDigest,
    NotSent,
    NotSerializable,
    PreparationFailed,
    ProviderFailure,
    RequiredContextMissing,
    ResumeRefused,
    UnknownCall,
    UsageError,
)
from .eventlog.canonical import Canonical, canonicalize, dumps
from .projections.workstate import (
    FINALIZE,
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


def _check_inputs(inputs: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, digest in (inputs or {}).items():
        if not isinstance(name, str):
            raise UsageError(f"input names must be strings, not {name!r}")
        out[name] = check_digest(digest)
    return out


@dataclass(frozen=True, slots=True)
class _Intent:
    canonical: Canonical
    inputs: dict[str, str]
    request: Any


def _build(request: Any, inputs: Mapping[str, str] | None, drop: Iterable[str] | None, redact: Any) -> _Intent:
    """Build and canonicalise the request; any failure is a preparation failure."""
    value = request() if callable(request) else request
    return _Intent(canonicalize(value, drop=drop, redact=redact), _check_inputs(inputs), value)


def _drift(state: CallState, intent: _Intent) -> str | None:
    """What differs between the recorded manifest and the rebuilt request, or None."""
    if state.request_hash is None:
        return None
    if state.request_hash != intent.canonical.digest:
        return f"the rebuilt request hashes to {intent.canonical.digest}, the manifest recorded {state.request_hash}"
    if dict(state.inputs) != intent.inputs:
        return f"the input digests {intent.inputs} differ from the manifest's {dict(state.inputs)}"
    return None


def _refuse(state: CallState, reason: str, detail: str = "") -> ResumeRefused:
    cls = EffectUnknown if state.next_operation == RECONCILE_EFFECT else ResumeRefused
    return cls(
        call_id=state.call_id,
        key=state.key,
        reason=reason,
        next_operation=state.next_operation,
        detail=detail,
    )


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

    def __repr__(self) -> str:
        return f"<Call {self.call_id} key={self.key!r} task={self.task.id!r}>"

    def state(self) -> CallState:
        """The projected state of this key's latest call, as this handle's record has it."""
        fold = self.task._live()
        cid = fold.latest_call(self.key) or self.call_id
        return fold.call_state(cid)

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
        reinterprets the stored bytes; *interpreted* finalizes or redecides; *retry
        decided*, *not sent* and *reconciled not served* start the next attempt; *failed*
        raises :class:`CallFailed`. Without ``interpret`` the result is the raw response
        bytes. ``send`` may raise :class:`NotSent` (never left; safe to retry) or
        :class:`ProviderFailure` (the provider answered with a failure); any other
        exception leaves the effect unknown and is re-raised as :class:`EffectUnknown`.
        """
        policy = retry or DEFAULT_RETRY
        task = self.task
        with task._inflight(self.key):
            while True:
                st = self.state()
                self.call_id = st.call_id
                stage = st.stage
                if stage == "completed":
                    return self._result(st)
                if stage in ("requested", "manifest_recorded"):
                    if not self._fresh:
                        self._resume(st)
                        continue
                    self._attempt(st, send, interpret, policy)
                elif st.next_operation == START_NEXT_ATTEMPT:
                    if st.attempts >= policy.max_attempts and stage in ("retry_decided", "not_sent"):
                        self._give_up(st, f"{st.attempts} attempts used, the policy allows {policy.max_attempts}")
                        continue
                    self._attempt(st, send, interpret, policy)
                elif stage == "effect_unknown":
                    if lookup is None or not self._ask(st, lookup):
                        raise _refuse(
                            st,
                            "the effect of the last attempt is unknown",
                            "an attempt started and nothing after it was recorded; resending risks a "
                            f"duplicate: reconcile it (intentlog reconcile {task.id} {st.call_id} "
                            "--served/--not-served)",
                        )
                elif st.next_operation == REINTERPRET:
                    self._interpret(st, interpret, policy)
                elif st.next_operation in (FINALIZE, REDECIDE):
                    self._decide(st, policy)
                elif stage == "failed":
                    raise CallFailed(st.call_id, st.key, st.reason or "failed")
                else:
                    raise _refuse(st, f"stage {stage}", st.reason or "")

    # -- the steps -------------------------------------------------------------------

    def _result(self, st: CallState) -> Any:
        if isinstance(st.result, dict) and st.result.get("raw") is True:
            if st.response is None:  # pragma: no cover - a completed raw call always observed
                raise IntentlogError(f"{st.call_id}: completed raw but no response is recorded")
            return _load(self.task, st.response)
        return st.result.get("value") if isinstance(st.result, dict) else st.result

    def _resume(self, st: CallState) -> None:
        """Drift was checked at prepare; link the old call to a new one and continue there."""
        task = self.task
        fold = task._live()
        new_id = f"call-{fold.call_count + 1}"
        with task.batch():
            task._append("call.resumed", {"call": st.call_id, "new_call": new_id, "key": self.key})
            _append_intent(task, new_id, self.key, self._intent, name=None, resumes=st.call_id)
        self.call_id = new_id
        self._fresh = True

    def _attempt(self, st: CallState, send: Send, interpret: Interpret | None, policy: RetryPolicy) -> None:
        task = self.task
        n = st.attempts + 1
        # durable before the send, together with any intent still pending in a batch
        task._append("attempt.started", {"call": st.call_id, "attempt": n}, sync=True)
        try:
            raw = send(self._intent.request)
        except NotSent as exc:
            task._append("attempt.not_sent", {"call": st.call_id, "attempt": n, "reason": exc.reason})
            if policy.retry_not_sent and n < policy.max_attempts:
                self._retry(st.call_id, n, f"not sent: {exc.reason}", policy)
            else:
                self._give_up(st, f"not sent: {exc.reason}", attempt=n)
            return
        except ProviderFailure as exc:
            ref = _store(task, bytes(exc.body))
            task._append(
                "attempt.observed",
                {
                    "call": st.call_id,
                    "attempt": n,
                    "response": ref,
                    "error": exc.reason,
                    "retryable": exc.retryable,
                },
                sync=True,
            )
            if policy.should_retry(exc) and n < policy.max_attempts:
                self._retry(st.call_id, n, f"provider failure: {exc.reason}", policy)
            else:
                self._give_up(st, f"provider failure: {exc.reason}", attempt=n)
            return
        except Exception as exc:
            task._append("attempt.errored", {"call": st.call_id, "attempt": n, "error": _error_text(exc)}, sync=True)
            raise EffectUnknown(
                call_id=st.call_id,
                key=self.key,
                reason=f"send raised {_error_text(exc)}",
                next_operation=RECONCILE_EFFECT,
                detail="the request may have reached the provider; reconcile before any resend",
            ) from exc
        data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        ref = _store(task, data)
        task._append("attempt.observed", {"call": st.call_id, "attempt": n, "response": ref}, sync=True)
        self._interpret(self.state(), interpret, policy)

    def _interpret(self, st: CallState, interpret: Interpret | None, policy: RetryPolicy) -> None:
        task = self.task
        n = st.attempts
        if st.response is None:  # pragma: no cover - observed always carries a response
            raise IntentlogError(f"{st.call_id}: observed without a response ref")
        if interpret is None:
            task._append("call.completed", {"call": st.call_id, "attempt": n, "result": {"raw": True}})
            return
        raw = _load(task, st.response)
        ident = _interpreter_id(interpret)
        try:
            value = interpret(raw)
            dumps({"v": value})
        except Exception as exc:
            with task.batch():
                task._append(
                    "attempt.interpreted",
                    {"call": st.call_id, "attempt": n, "interpreter": ident, "error": _error_text(exc)},
                )
                self._decide(self.state(), policy, error=_error_text(exc))
            return
        with task.batch():
            task._append(
                "attempt.interpreted",
                {"call": st.call_id, "attempt": n, "interpreter": ident, "result": value},
            )
            task._append("call.completed", {"call": st.call_id, "attempt": n, "result": {"value": value}})

    def _decide(self, st: CallState, policy: RetryPolicy, *, error: str | None = None) -> None:
        task = self.task
        n = st.attempts
        if st.next_operation == FINALIZE:
            value = self._interpreted_value(st)
            task._append("call.completed", {"call": st.call_id, "attempt": n, "result": {"value": value}})
            return
        reason = f"interpretation failed: {error}" if error else "interpretation failed"
        if policy.retry_on_interpret_error and n < policy.max_attempts:
            self._retry(st.call_id, n, reason, policy)
        else:
            self._give_up(st, reason, attempt=n)

    def _interpreted_value(self, st: CallState) -> Any:
        for ev in _reversed_call_events(self.task, st):
            if ev.kind == "attempt.interpreted":
                return ev.data.get("result")
        return None

    def _retry(self, call_id: str, n: int, reason: str, policy: RetryPolicy) -> None:
        delay = policy.delay(n)
        self.task._append(
            "attempt.retry_decided",
            {"call": call_id, "attempt": n, "decision": "retry", "reason": reason, "delay": delay},
        )
        self.task.sync()
        if delay > 0:
            policy.sleep(delay)

    def _give_up(self, st: CallState, reason: str, *, attempt: int | None = None) -> None:
        task = self.task
        n = attempt if attempt is not None else st.attempts
        with task.batch():
            task._append(
                "attempt.retry_decided",
                {"call": st.call_id, "attempt": n, "decision": "fail", "reason": reason, "delay": None},
            )
            task._append("call.failed", {"call": st.call_id, "reason": reason, "by": None})

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

    For a new key: ``call.requested`` then ``call.manifest``, durable on return (shared
    with the send's sync inside :func:`effect`). For a key already recorded, the rebuilt
    request's hash and input digests must equal the manifest's, else
    :class:`ResumeRefused` with reason ``DRIFT`` and nothing is appended. A request that
    cannot be built or serialized appends ``call.preparation_failed`` (the message, never
    the value) and raises :class:`PreparationFailed`.
    """
    _check_key(key)
    if name is not None and not isinstance(name, str):
        raise UsageError(f"a call name must be a string, not {name!r}")
    fold = task._live()
    try:
        intent: _Intent | None = _build(request, inputs, drop, redact)
        error = None
    except (NotSerializable, InvalidDigest, UsageError) as exc:
        intent, error = None, _error_text(exc)
    except Exception as exc:  # building the request is user code: any failure is recorded
        intent, error = None, _error_text(exc)
    existing = fold.latest_call(key)
    st = fold.call_state(existing) if existing is not None else None
    if st is not None and st.stage != "preparation_failed":
        if intent is None:
            raise _refuse(st, DRIFT, f"the request cannot be rebuilt: {error}")
        drift = _drift(st, intent)
        if drift is not None:
            raise ResumeRefused(
                call_id=st.call_id,
                key=key,
                reason=DRIFT,
                next_operation=st.next_operation if st.next_operation != START_CALL else "use a new key",
                detail=f"{drift}; a changed request needs a new key",
            )
        return Call(task, key, st.call_id, intent, fresh=False)
    call_id = f"call-{fold.call_count + 1}"
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
    """:func:`prepare` then :meth:`Call.run`, with the intent and ``attempt.started`` sharing one sync."""
    with task.batch():
        call = prepare(task, key, request, inputs=inputs, name=name, drop=drop, redact=redact)
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
    st = _state_of(task, call_id)
    allowed = st.stage == "effect_unknown" or (outcome == "resend" and st.stage == "reconciled_served")
    if not allowed:
        raise ResumeRefused(
            call_id=call_id,
            key=st.key,
            reason=f"nothing to reconcile: the call is {st.stage}",
            next_operation=st.next_operation,
        )
    return _record_reconciliation(
        task, st, outcome, bytes(evidence) if evidence is not None else None, note=note, by=by, source="operator"
    )


def fail_call(task: Task, call_id: str, reason: str, *, by: str | None = None) -> Event:
    """Record an operator's decision that an unresolved call has failed."""
    st = _state_of(task, call_id)
    if st.stage in ("completed", "superseded", "failed", "preparation_failed"):
        raise ResumeRefused(
            call_id=call_id, key=st.key, reason=f"the call is already {st.stage}", next_operation=st.next_operation
        )
    return task._append("call.failed", {"call": call_id, "reason": reason, "by": by})


# -- context compilation ----------------------------------------------------------


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
    ``size`` (else estimated from its serialized ``content``), ``lineage`` and
    ``content``. Appends ``context.compilation_requested`` (inventory without content),
    then ``context.compiled`` (package ref, selected ids) or
    ``context.compilation_failed`` with the missing required ids (required - offered),
    raising :class:`RequiredContextMissing`.
    """
    _check_key(compilation_id)
    items: list[dict[str, Any]] = []
    inventory: list[dict[str, Any]] = []
    for i, item in enumerate(offered):
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            raise UsageError(f"offered item {i} must be a mapping with a string 'id'")
        size = item.get("size")
        estimated = not isinstance(size, int)
        inventory.append(
            {
                "id": item["id"],
                "required": bool(item.get("required", False)),
                "size": size if isinstance(size, int) else len(dumps(item.get("content"))),
                "estimated": estimated,
                "lineage": item.get("lineage"),
            }
        )
        items.append(dict(item))
    need = sorted({*required, *(i["id"] for i in inventory if i["required"])})
    offered_ids = {i["id"] for i in inventory}
    missing = [r for r in need if r not in offered_ids]
    with task.batch():
        task._append(
            "context.compilation_requested",
            {"compilation": compilation_id, "offered": inventory, "required": need},
        )
        if missing:
            task._append(
                "context.compilation_failed",
                {"compilation": compilation_id, "error": "RequiredContextMissing", "missing": missing},
            )
    if missing:
        raise RequiredContextMissing(compilation_id, missing)
    chosen = list(select(items)) if select is not None else [i["id"] for i in items]
    unknown = [c for c in chosen if c not in offered_ids]
    if unknown:
        with task.batch():
            task._append(
                "context.compilation_failed",
                {"compilation": compilation_id, "error": f"selected ids not offered: {unknown}", "missing": []},
            )
        raise PreparationFailed(compilation_id, compilation_id, f"selected ids not offered: {unknown}")
    for r in need:
        if r not in chosen:
            chosen.append(r)
    by_id = {i["id"]: i for i in items}
    package = dumps(
        {"compilation": compilation_id, "items": [{"id": c, "content": by_id[c].get("content")} for c in chosen]}
    )
    ref = _store(task, package, "application/json")
    task._append("context.compiled", {"compilation": compilation_id, "package": ref, "selected": chosen})
    return Package(compilation_id, str(ref["digest"]), len(package), tuple(chosen))
