"""The ladder (DESIGN §6): the stage, next operation and provider effect of one call record.

A pure fold over events: one small handler per event kind, a frozen result, no clock, no
I/O, no provider query. Each call is classified by the last evidence recorded for it;
the dangerous rung is an attempt that started and left nothing after it — the effect is
*unknown* and only reconciliation may move it on. Memory grows with the number of calls
and compilations, not with the number of events.

The ladder, first rung that matches (stage -> next operation, provider effect):

- ``call.completed`` -> completed: none, happened
- ``call.preparation_failed`` -> preparation_failed: fix inputs, none
- ``call.resumed`` to a new call recorded with ``resumes`` -> superseded: none
- ``call.failed`` -> failed: operator decides, per its attempts
- no ``call.manifest`` -> requested: start call, none
- manifest, no attempt -> manifest_recorded: start call, none
- last attempt: retry decided -> retry_decided: start next attempt; decided ``fail`` ->
  failed; interpreted -> interpreted: finalize (redecide after an interpretation error);
  observed -> observed: reinterpret (redecide when the provider answered with a failure);
  reconciled ``not_served`` -> reconciled_not_served: start next attempt, none;
  ``resend`` -> risk_accepted: start next attempt, duplicate risk; ``provider_dedup`` ->
  provider_dedup: start next attempt (same key, inside the provider's window); ``served`` with
  evidence whose observation is not recorded yet (a kill between the two) -> observed:
  reinterpret (``observation_pending``; the bytes are in objects/); ``served`` without
  bytes -> reconciled_served: operator decides; ``attempt.not_sent`` -> not_sent: start
  next attempt; nothing after ``attempt.started`` (or only ``attempt.errored``,
  ``attempt.progress`` heartbeats, or ``attempt.timed_out``) -> effect_unknown: reconcile
  effect, **unknown**, duplicate risk (a timed-out attempt says so in its reason).

A later interpretation of the same stored bytes (``reinterpretation: n``) completes again
beside the first: the latest completion's result counts. ``call.requested`` carries the
request hash (and input digests), so ``request_hash`` is known from the first event.
Approvals are folded by the operator projection; here only which keys they ever bound
(:meth:`WorkStateFold.approvals_of`), so the protocol reads them only for those keys.

Compilations: requested -> recompile; failed -> fix inputs; compiled -> none. The task's
next operation is the first unresolved (latest-per-key) call's or compilation's, else
``check and accept`` once a call completed after the last ``task.accepted``, else none.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, Final

from .._internal.types import NextOperation, ProviderEffect, Stage
from .derive import completion_token, interpretation_token
from .records import INTERPRETED, NOT_SENT, OBSERVED, CallRecord, CompRecord, attempt_effect, worse
from .states import (
    CHECK_AND_ACCEPT,
    FINALIZE,
    FIX_INPUTS,
    NONE,
    OPERATOR_DECIDES,
    RECOMPILE,
    RECONCILE_EFFECT,
    REDECIDE,
    REINTERPRET,
    START_CALL,
    START_NEXT_ATTEMPT,
    CallState,
    CompilationState,
)

__all__ = ["FinishedCalls", "classify", "classify_comp", "ladder", "task_summary", "underived"]


def underived(c: CallRecord, attempt: Any, result: Any) -> str | None:
    """Why a completion's ``result`` is not what the events before it hold, or None when it is.

    ``{"value": V}`` must be, as canonical JSON bytes, the result of the latest
    ``attempt.interpreted`` of that attempt no completion consumed yet; ``{"value_ref":
    ref}`` must name the digest of its ``result_ref``; ``{"raw": true, "response": ref}``
    the digest of the response that attempt's ``attempt.observed`` stored. (The rule of
    verify's graph check, applied where the protocol reads the value back.)
    """
    if attempt != c.n or c.n == 0:
        return f"the completion names attempt {attempt!r}, but the latest started attempt is {c.n}"
    if type(result) is not dict:
        return "the completion carries no result object"
    if result.keys() == {"raw", "response"} and result["raw"] is True:
        ref, seen = result["response"], c.response
        digest = ref.get("digest") if type(ref) is dict else None
        if seen is None or digest != seen.get("digest"):
            return "the raw completion names another response than the one its attempt.observed stored"
        return None
    claimed = completion_token(result)
    if claimed is None:
        return f"the completion's result has the keys {sorted(result)}, not a value, a value_ref or a raw response"
    interpreted, c.interpretation = c.interpretation, None
    if interpreted is None:
        return "the completion carries a value no attempt.interpreted of its attempt recorded"
    interp = interpretation_token(interpreted)
    if interp is None:
        return "the completion carries a value, but its interpretation recorded an error"
    if interp.split(b" ", 1)[0] != claimed.split(b" ", 1)[0]:
        return "the completion carries its value inline where the interpretation stored it by ref, or the reverse"
    if interp != claimed:
        return "the completion's value differs from the result its attempt.interpreted recorded"
    return None


_NO_INPUTS: Final[Mapping[str, str]] = MappingProxyType({})


_Rung = tuple[Stage, NextOperation, ProviderEffect, bool, "str | None"]  # stage, next op, effect, risk, reason


def ladder(c: CallRecord, known: Mapping[str, CallRecord]) -> _Rung:
    """The ladder of DESIGN §6: each rung asks whether a particular event exists.

    A ``call.resumed`` whose new call was never requested with ``resumes`` naming it (the
    process died between the appends) does not supersede: the old call keeps its stage,
    and running again records the promised new call.
    """
    effect = worse(c.prior_effect, attempt_effect(c)) if c.n else "none"
    if c.completed:
        return "completed", NONE, "happened", False, None
    if c.preparation_failed is not None:
        return "preparation_failed", FIX_INPUTS, effect, False, c.preparation_failed
    new = known.get(c.superseded_by) if c.superseded_by is not None else None
    if new is not None and new.resumes == c.call_id:
        return "superseded", NONE, effect, False, None
    if c.failed is not None:
        return "failed", OPERATOR_DECIDES, effect, False, c.failed
    if not c.manifest:
        return "requested", START_CALL, effect, False, None
    if not c.n:
        return "manifest_recorded", START_CALL, effect, False, None
    a = c
    k = a.flags
    if a.retry == "retry":
        return "retry_decided", START_NEXT_ATTEMPT, effect, False, None
    if a.retry is not None:
        return "failed", OPERATOR_DECIDES, effect, False, None
    if k & INTERPRETED:
        return "interpreted", FINALIZE if a.interpret_error is None else REDECIDE, effect, False, a.interpret_error
    if k & OBSERVED:
        if a.error is not None:  # a failure answer: nothing to interpret, decide on it
            return "observed", REDECIDE, effect, False, a.error
        return "observed", REINTERPRET, effect, False, None
    if a.outcome == "not_served":
        return "reconciled_not_served", START_NEXT_ATTEMPT, effect, False, None
    if a.outcome == "resend":
        return "risk_accepted", START_NEXT_ATTEMPT, effect, True, None
    if a.outcome == "provider_dedup":  # the provider replays the first answer for the key within its window
        why = "the provider deduplicates the key within its window: the next attempt resends under the same key"
        return "provider_dedup", START_NEXT_ATTEMPT, effect, False, why
    if a.outcome == "served" and a.evidence is not None:  # the observation naming the evidence is still to come
        return "observed", REINTERPRET, effect, False, None
    if a.outcome == "served":
        lost = "served, but the response is lost: fail the call or resend accepting the duplicate risk"
        return "reconciled_served", OPERATOR_DECIDES, effect, False, lost
    if k & NOT_SENT:
        return "not_sent", START_NEXT_ATTEMPT, effect, False, None
    return "effect_unknown", RECONCILE_EFFECT, "unknown", True, a.timeout


def classify(c: CallRecord, known: Mapping[str, CallRecord]) -> CallState:
    """The :class:`CallState` of one call record."""
    stage, nxt, effect, risk, reason = ladder(c, known)
    inputs = c.inputs
    pending = c.evidence is not None and not c.flags & OBSERVED
    return CallState(
        call_id=c.call_id,
        key=c.key,
        name=c.name,
        stage=stage,
        next_operation=nxt,
        provider_effect=effect,
        duplicate_effect_risk=risk,
        attempts=c.n,
        request_hash=c.request_hash,
        request=c.request,
        inputs=MappingProxyType(dict(inputs)) if inputs else _NO_INPUTS,
        resumes=c.resumes,
        superseded_by=c.superseded_by if stage == "superseded" else None,
        result=c.result,
        response=c.evidence if pending else c.response,
        reason=reason,
        first_seq=c.first_seq,
        last_seq=c.last_seq,
        since=c.since,
        interpreter=c.interpreter,
        encoding=c.encoding,
        interpret_error=c.interpret_error if c.flags & INTERPRETED else None,
        reinterpretations=c.reinterpretations,
        observation_pending=pending,
        provider_dedup=c.dedup,
        forged=c.forged if c.completed else None,
    )


class FinishedCalls(Mapping[str, CallState]):
    """The calls of a finished fold, each classified on first access.

    Only :func:`work_state` makes one: its fold is private and done, so the records behind
    this mapping never change again and classifying late gives what classifying early
    would. A 100k-event task then pays for the states a caller reads, not for all of them.
    """

    __slots__ = ("_done", "_records")

    def __init__(self, records: Mapping[str, CallRecord]) -> None:
        self._records = records
        self._done: dict[str, CallState] = {}

    def __getitem__(self, cid: str) -> CallState:
        state = self._done.get(cid)
        if state is None:
            state = classify(self._records[cid], self._records)
            self._done[cid] = state
        return state

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, cid: object) -> bool:
        return cid in self._records

    def __repr__(self) -> str:
        return f"<calls {list(self._records)}>"


def classify_comp(c: CompRecord) -> CompilationState:
    nxt: NextOperation = RECOMPILE if c.stage == "requested" else FIX_INPUTS if c.stage == "failed" else NONE
    return CompilationState(
        compilation_id=c.cid,
        stage=c.stage,
        next_operation=nxt,
        offered=tuple(MappingProxyType(o) for o in c.offered),
        required=tuple(c.required),
        missing=tuple(c.missing),
        package=c.package,
        selected=tuple(c.selected),
        error=c.error,
        first_seq=c.first_seq,
        last_seq=c.last_seq,
    )


def task_summary(
    known: Mapping[str, CallRecord],
    keys: Mapping[str, str],
    comps: Mapping[str, CompRecord],
    last_completed: int,
    last_accepted: int,
) -> tuple[NextOperation, tuple[str, ...], bool]:
    """The task's next operation, its unresolved calls and compilations in order, and whether it is accepted.

    The next operation is the first unresolved (latest-per-key) call's or compilation's,
    else ``check and accept`` once a call completed after the last ``task.accepted``.
    """
    pending: list[tuple[int, str, NextOperation]] = []
    for cid in keys.values():  # only the latest call of each key can be unresolved
        c = known[cid]
        nxt = ladder(c, known)[1]
        if nxt != NONE:
            pending.append((c.first_seq, cid, nxt))
    for comp in comps.values():
        cnxt = classify_comp(comp).next_operation
        if cnxt != NONE:
            pending.append((comp.first_seq, comp.cid, cnxt))
    pending.sort()
    accepted = last_completed >= 0 and last_accepted > last_completed
    if pending:
        nxt = pending[0][2]
    elif last_completed >= 0 and not accepted:
        nxt = CHECK_AND_ACCEPT
    else:
        nxt = NONE
    return nxt, tuple(p[1] for p in pending), accepted
