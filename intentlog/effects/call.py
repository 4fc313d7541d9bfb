"""The call state machine: :class:`Call` runs or resumes one key, one flat step per recorded stage."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

from .._internal.commands import command, hint_root
from .._internal.types import Interpret, Lookup, RunKwargs, Send, spelled
from ..dedup import ProviderDedup
from ..errors import (
    CallFailed,
    EffectUnknown,
    IntentlogError,
    KeyReused,
    NotSent,
    ProviderFailure,
    RetryHandedBack,
    UsageError,
)
from ..eventlog.redaction import scrub_bytes
from ..projections.workstate import (
    FINALIZE,
    REDECIDE,
    REINTERPRET,
    START_NEXT_ATTEMPT,
    CallState,
)
from .adrive import drive_async
from .gate import check_gate
from .intent import Intent, append_intent, check_not_async, check_send, encode_text, refuse, scrub, unknown_effect
from .long import Long, TimedOut
from .options import EffectOptions
from .policy import DEFAULT_RETRY, DRIFT, NOT_SERVED, RetryPolicy, Served
from .reconcile import record_reconciliation
from .records import bare_ref, cap_text, check_ref, error_text, interpreter_id, keep_aside, load_ref, store_bytes
from .results import record_interpretation, reinterpret_hint, result_of, reversed_call_events
from .steps import PROCEED, SYNC, Ask, Deliver, Interpreting, Pause, Steps, drive
from .window import check_window, dedup_resend

if TYPE_CHECKING:
    from .._internal.types import Unpack
    from ..stream import TaskStream


@final
@dataclass(frozen=True, slots=True)
class _Run:
    """What one :meth:`Call.run` was given (the same for every step)."""

    send: Send
    interpret: Interpret | None
    policy: RetryPolicy
    lookup: Lookup | None
    long: Long


@final
@dataclass(frozen=True, slots=True)
class _Done:
    """The value a run returns (a wrapper: None is a value)."""

    value: Any


@final
class Call:
    """One intended effect under an idempotency key; :meth:`run` carries it out or resumes it."""

    def __init__(
        self,
        task: TaskStream,
        key: str,
        call_id: str,
        intent: Intent,
        *,
        fresh: bool,
        dedup: ProviderDedup | None = None,
        held: ExitStack | None = None,
    ) -> None:
        self.task = task
        self.dedup = dedup  # this run's declaration: with the manifest's, it may resolve an unknown effect
        self.key = key
        self.call_id = call_id
        self.request_hash = intent.canonical.digest
        self._intent = intent
        self._fresh = fresh  # prepared by this process: no resume record needed
        # effect(): the batch holding the unsynced intent, closed once attempt.started is synced
        self._held = held

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

    @spelled(RunKwargs)
    def run(self, send: Send, **options: Unpack[RunKwargs]) -> Any:
        """Carry out the call, or resume it from whatever the record proves.

        The options (:class:`~intentlog._internal.types.RunKwargs`): ``interpret``, ``retry``,
        ``lookup``, ``progress``, ``inactivity_timeout``, ``max_duration``,
        ``progress_interval`` and ``dedup``, checked once here, before anything is written.

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
        opts = EffectOptions.of(options, RunKwargs, "Call.run")
        check_send(send)
        check_not_async(send, opts.interpret, "Call.run", "call.arun")
        return drive(self.task, self.steps(send, opts))

    @spelled(RunKwargs)
    async def arun(self, send: Send, **options: Unpack[RunKwargs]) -> Any:
        """:meth:`run`, awaited: the same options, decisions, events and guarantees, with an async ``send``.

        ``send`` (and ``interpret``, ``lookup``) may be coroutine functions; a plain ``send``
        runs in a worker thread. The record's work runs off the event loop, in the task's
        disk thread, and concurrent calls of one task share their syncs (see
        :mod:`intentlog.effects.adrive` for cancellation).
        """
        opts = EffectOptions.of(options, RunKwargs, "Call.arun")
        check_send(send)
        return await drive_async(self.task, self.steps(send, opts))

    def steps(self, send: Send, options: EffectOptions) -> Steps[Any]:
        """The run's decisions as instructions for a driver (:func:`.steps.drive` here, :mod:`.adrive` awaited).

        ``send`` and ``options`` are checked by the caller; ``options.dedup``, when given,
        overrides the declaration this call was prepared with. Closing the generator before
        its end (a cancelled await) leaves the record as far as it got, and the key free again.
        """
        if options.dedup is not None:
            self.dedup = options.dedup
        run = _Run(send, options.interpret, options.retry or DEFAULT_RETRY, options.lookup, options.long())
        try:
            with self.task.inflight(self.key):
                while True:
                    st = self.state()
                    self.call_id = st.call_id
                    done = yield from self._step(st, run)
                    if done is not None:
                        return done.value
        finally:
            self._release()

    # -- the dispatch: one flat step per stage ----------------------------------------

    def _step(self, st: CallState, run: _Run) -> Steps[_Done | None]:
        """Carry the call one step on from the stage the record proves; a :class:`_Done` ends the run."""
        stage, nxt = st.stage, st.next_operation
        if stage in ("requested", "manifest_recorded"):
            yield from self._start(st, run)
            return None
        if nxt == START_NEXT_ATTEMPT:
            yield from self._next_attempt(st, run)
            return None
        self._release()  # every other step comes after the intent's sync
        if stage == "completed":
            return _Done(self._result(st))
        if stage == "effect_unknown":
            yield from self._unknown(st, run)
        elif nxt == REINTERPRET and st.observation_pending:
            yield from self._observe_evidence(st)
        elif nxt == REINTERPRET:
            yield from self._interpret(st, run.interpret, run.policy)
        elif nxt in (FINALIZE, REDECIDE) or stage == "failed":
            yield from self._conclude(st, run)
        else:
            raise refuse(self.task, st, f"the call is {stage}", st.reason or "")
        return None

    def _start(self, st: CallState, run: _Run) -> Steps[None]:
        """Requested or manifest recorded: gated; an earlier process's intent is resumed as a new linked call."""
        check_gate(self.task, self.key, self.request_hash, st)
        if not self._fresh:
            self._resume(st)
        else:
            yield from self._attempt(st, run.send, run.interpret, run.policy, run.long)

    def _next_attempt(self, st: CallState, run: _Run) -> Steps[None]:
        """Start the next attempt, unless the policy's attempts are used up (then the call fails)."""
        policy = run.policy
        if st.attempts >= policy.max_attempts and st.stage in ("retry_decided", "not_sent"):
            self._release()
            self._give_up(st, f"{st.attempts} attempts used, the policy allows {policy.max_attempts}")
            return
        check_gate(self.task, self.key, self.request_hash, st)
        if st.provider_dedup:
            check_window(self.task, st, self.dedup, self.key)
        yield from self._attempt(st, run.send, run.interpret, policy, run.long)

    def _unknown(self, st: CallState, run: _Run) -> Steps[None]:
        """An unknown effect: resent inside a provider's window, resolved by ``lookup``, or refused."""
        if dedup_resend(self.task, st, self.dedup, self.key):
            return
        if run.lookup is None or not (yield from self._ask(st, run.lookup)):
            raise refuse(
                self.task,
                st,
                "the effect of the last attempt is unknown",
                f"attempt {st.attempts} started and nothing after it was recorded, so the provider "
                "may have served it and resending risks a duplicate; reconcile it with "
                f"task.reconcile({st.call_id!r}, 'served' | 'not_served' | 'resend') or the command line",
            )

    def _conclude(self, st: CallState, run: _Run) -> Steps[None]:
        """Interpreted (finalize or redecide) or failed: a newer interpreter reads the stored bytes again first."""
        if self._can_reinterpret(st, run.interpret):  # a newer interpreter, the same stored bytes
            yield from self._reinterpret(st, run.interpret)  # type: ignore[arg-type]
        elif st.stage == "failed":
            raise CallFailed(st.call_id, st.key, (st.reason or "failed") + reinterpret_hint(st))
        else:
            yield from self._decide(st, run.policy)

    # -- the steps -------------------------------------------------------------------

    def _result(self, st: CallState) -> Any:
        return result_of(self.task, st)

    def _observe_evidence(self, st: CallState) -> Steps[None]:
        """Finish a reconciliation torn after ``effect.reconciled``: its evidence is in objects/, observe it."""
        if st.response is None:  # pragma: no cover - observation_pending means evidence is recorded
            raise IntentlogError(f"{st.call_id}: reconciled served without evidence")
        load_ref(self.task, st.response, f"the evidence of {st.call_id}'s reconciliation")  # present and intact
        self.task.append(
            "attempt.observed",
            {"call": st.call_id, "attempt": st.attempts, "response": bare_ref(st.response), "source": "reconciliation"},
        )
        yield SYNC

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
                append_intent(task, new_id, self.key, self._intent, name=st.name, resumes=st.call_id)
        self.call_id = new_id
        self._fresh = True

    def _errored(self, call_id: str, n: int, text: str, cause: BaseException) -> EffectUnknown:
        text = cap_text(scrub(text, self._intent.secrets))
        self.task.append("attempt.errored", {"call": call_id, "attempt": n, "error": text}, sync=True)
        exc = unknown_effect(
            self.task,
            call_id,
            self.key,
            text,
            "the request may have reached the provider; reconcile before any resend",
        )
        exc.__cause__ = cause
        return exc

    def _unstored(self, call_id: str, n: int, data: bytes, cause: BaseException) -> EffectUnknown:
        """The response could not be stored: keep its bytes aside, then report the effect unknown, saying where."""
        task = self.task
        kept = keep_aside(task, call_id, n, data)
        text = f"the response ({len(data)} bytes) could not be stored: {error_text(cause)}"
        if kept is not None:
            served = command(
                hint_root(task.layout.location), "reconcile", task.id, call_id, "--served", "--evidence", str(kept)
            )
            text += f"; its bytes are kept in {kept} (reconcile with them: {served})"
        else:
            text += "; no copy of its bytes could be written anywhere: ask the provider for them"
        try:
            return self._errored(call_id, n, text, cause)
        except (OSError, IntentlogError):  # the stream cannot take the event either: the record says unknown
            exc = unknown_effect(
                task,
                call_id,
                self.key,
                cap_text(scrub(text, self._intent.secrets)),
                "the provider served the request but the ledger could not record its answer; free space, "
                "then reconcile",
            )
            exc.__cause__ = cause
            return exc

    def _attempt(
        self, st: CallState, send: Send, interpret: Interpret | None, policy: RetryPolicy, long: Long
    ) -> Steps[None]:
        task = self.task
        n = st.attempts + 1
        yield PROCEED  # a caller that gave up (a cancelled await) leaves the intent only
        # durable before the send, together with the intent still pending in effect()'s batch
        task.append("attempt.started", {"call": st.call_id, "attempt": n})
        yield SYNC
        self._release()
        encoding: str | None = None
        try:
            task.before_send(st.call_id, n)  # the last moment before the request leaves (a grant's deadline)
            raw = yield Deliver(self.key, send, self._intent, st.call_id, n, long)
        except TimedOut as exc:
            raise exc.error from None
        except NotSent as exc:
            reason = scrub(exc.reason, self._intent.secrets)
            task.append("attempt.not_sent", {"call": st.call_id, "attempt": n, "reason": reason})
            if policy.retry_not_sent and n < policy.max_attempts:
                yield from self._retry(st.call_id, n, f"not sent: {reason}", policy)
            else:
                self._give_up(st, f"not sent: {reason}", attempt=n)
            return
        except ProviderFailure as exc:
            reason = scrub(exc.reason, self._intent.secrets)
            body = exc.body.encode("utf-8", "surrogateescape") if isinstance(exc.body, str) else bytes(exc.body)
            ref = store_bytes(task, scrub_bytes(body, self._intent.secrets, patterns=True))
            task.append(
                "attempt.observed",
                {"call": st.call_id, "attempt": n, "response": ref, "error": reason, "retryable": exc.retryable},
            )
            yield SYNC
            if isinstance(exc, KeyReused):  # the provider holds another request under this key
                self._give_up_id(st.call_id, f"{DRIFT}: the provider refused key {self.key!r}: {reason}", n)
                return
            yield from self._failure_decision(st.call_id, n, reason, exc, policy)
            return
        except Exception as exc:
            raise self._errored(st.call_id, n, f"send raised {error_text(exc)}", exc) from exc
        if isinstance(raw, str):
            data, encoding = encode_text(raw)
        elif isinstance(raw, (bytes, bytearray, memoryview)):
            data = bytes(raw)
        else:
            bad = TypeError(f"send must return bytes or str, not {type(raw).__name__}")
            raise self._errored(st.call_id, n, str(bad), bad) from bad
        data = scrub_bytes(data, self._intent.secrets)  # a credential the provider echoes is not stored
        try:
            ref = store_bytes(task, data)  # a blob is durable here, before the event that refers to it
        except (OSError, IntentlogError) as exc:  # the disk filled after the send: keep the paid-for bytes
            raise self._unstored(st.call_id, n, data, exc) from exc
        observed: dict[str, Any] = {"call": st.call_id, "attempt": n, "response": ref}
        if encoding is not None:  # text with lone surrogates: how to get the very same str back
            observed["encoding"] = encoding
        if interpret is None:  # nothing interprets the bytes: observation and completion share one sync
            with task.batch():
                task.append("attempt.observed", observed)
                yield from self._interpret(self.state(), None, policy)
            return
        task.append("attempt.observed", observed)
        yield SYNC  # durable before anything interprets it
        yield from self._interpret(self.state(), interpret, policy)

    def _failure_decision(
        self, call_id: str, n: int, reason: str, failure: ProviderFailure, policy: RetryPolicy
    ) -> Steps[None]:
        if policy.should_retry(failure) and n < policy.max_attempts:
            yield from self._retry(call_id, n, f"provider failure: {reason}", policy)
        else:
            self._give_up_id(call_id, f"provider failure: {reason}", n)

    def _interpret(self, st: CallState, interpret: Interpret | None, policy: RetryPolicy) -> Steps[None]:
        task = self.task
        n = st.attempts
        if st.response is None:  # pragma: no cover - observed always carries a response
            raise IntentlogError(f"{st.call_id}: observed without a response ref")
        if interpret is None:
            ref = bare_ref(check_ref(task, st.response, f"the response of {st.call_id}"))
            task.append("call.completed", {"call": st.call_id, "attempt": n, "result": {"raw": True, "response": ref}})
            return
        raw = load_ref(task, st.response, f"the response of {st.call_id}")
        with task.batch():
            error = yield from self._record_interpretation(st, interpret, raw)
            if error is not None:
                yield from self._decide(self.state(), policy, error=error)

    def _record_interpretation(
        self, st: CallState, interpret: Interpret, raw: bytes, *, reinterpretation: int | None = None
    ) -> Steps[str | None]:
        outcome = yield Interpreting(interpret, raw)
        return record_interpretation(
            self.task,
            st,
            interpret,
            raw,
            secrets=self._intent.secrets,
            reinterpretation=reinterpretation,
            outcome=outcome,
        )

    def _can_reinterpret(self, st: CallState, interpret: Interpret | None) -> bool:
        """The latest interpretation failed and ``interpret`` is another interpreter (name or version)."""
        if interpret is None or st.interpret_error is None or st.response is None:
            return False
        return dict(st.interpreter or {}) != interpreter_id(interpret)

    def _reinterpret(self, st: CallState, interpret: Interpret) -> Steps[str | None]:
        """Interpret the stored response again, beside the earlier interpretation; never sends."""
        raw = load_ref(self.task, st.response, f"the response of {st.call_id}")
        with self.task.batch():
            n = st.reinterpretations + 1
            return (yield from self._record_interpretation(st, interpret, raw, reinterpretation=n))

    def _decide(self, st: CallState, policy: RetryPolicy, *, error: str | None = None) -> Steps[None]:
        task = self.task
        n = st.attempts
        if st.next_operation == FINALIZE:
            task.append("call.completed", {"call": st.call_id, "attempt": n, "result": self._interpreted_result(st)})
            return
        if st.stage == "observed":  # a provider failure was observed; its decision was never recorded
            failure = self._observed_failure(st)
            yield from self._failure_decision(st.call_id, n, failure.reason, failure, policy)
            return
        error = error or st.reason
        reason = f"interpretation failed: {error}" if error else "interpretation failed"
        if policy.retry_on_interpret_error and n < policy.max_attempts:
            yield from self._retry(st.call_id, n, reason, policy)
        else:
            self._give_up(st, reason, attempt=n)

    def _interpreted_result(self, st: CallState) -> dict[str, Any]:
        """The completion's ``result`` for the latest interpretation: its value, or the ref of a large one."""
        for ev in reversed_call_events(self.task, st):
            if ev.kind == "attempt.interpreted":
                d = ev.data
                if "result_ref" in d:
                    return {"value_ref": d["result_ref"]}
                return {"value": d.get("result")}
        return {"value": None}  # pragma: no cover - FINALIZE means an interpretation is recorded

    def _observed_failure(self, st: CallState) -> ProviderFailure:
        for ev in reversed_call_events(self.task, st):
            if ev.kind == "attempt.observed":
                d = ev.data
                return ProviderFailure(str(d.get("error")), retryable=d.get("retryable") is True)
        return ProviderFailure(st.reason or "provider failure")  # pragma: no cover

    def _retry(self, call_id: str, n: int, reason: str, policy: RetryPolicy) -> Steps[None]:
        delay = None if policy.hand_back else policy.delay(n)
        self.task.append(
            "attempt.retry_decided",
            {"call": call_id, "attempt": n, "decision": "retry", "reason": reason, "delay": delay},
        )
        yield SYNC
        if delay is None:
            raise RetryHandedBack(call_id, self.key, n, reason)
        if delay > 0:
            yield Pause(delay, policy.sleep)

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

    def _ask(self, st: CallState, lookup: Callable[[str, str, int], Served | str | None]) -> Steps[bool]:
        """Ask the provider about the key; record the answer, never assume it."""
        answer = yield Ask(lookup, self.key, st.call_id, st.attempts)
        if answer is None or answer == "unknown":
            return False
        if isinstance(answer, Served):
            record_reconciliation(
                self.task,
                st,
                "served",
                None if answer.response is None else scrub_bytes(bytes(answer.response), self._intent.secrets),
                note="answered by lookup",
                by=None,
                source="lookup",
            )
        elif answer == NOT_SERVED:
            record_reconciliation(self.task, st, NOT_SERVED, None, note="answered by lookup", by=None, source="lookup")
        else:
            raise UsageError(f"lookup must return Served(...), 'not_served' or None, not {answer!r}")
        return True
