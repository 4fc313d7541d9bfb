"""The operator's decisions about a call: reconcile an unknown effect, fail a call."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import (
    ResumeRefused,
    UnknownCall,
    UsageError,
)
from ..eventlog.redaction import scrub_bytes, scrub_text
from ..projections.workstate import (
    CallState,
)
from .policy import OUTCOMES
from .records import bare_ref

if TYPE_CHECKING:
    from ..eventlog import Event
    from ..stream import TaskStream

def record_reconciliation(
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
                "evidence": bare_ref(ref) if ref is not None else None,
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
    return record_reconciliation(
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
