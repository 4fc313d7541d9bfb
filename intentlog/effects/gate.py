"""The approval gate: no attempt starts unless every approval binding the call approves its current request."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._internal.commands import approval_commands, hint_root
from ..errors import ApprovalPending, ApprovalRejected, ApprovalVoid
from ..projections.operator import APPROVED, PENDING, REJECTED, approval_states
from ..projections.workstate import CallState

if TYPE_CHECKING:
    from ..stream import TaskStream

__all__ = ["check_gate"]


def check_gate(task: TaskStream, key: str, current: str, st: CallState) -> None:
    """Refuse to start an attempt unless every approval that bound this key, or bound this request's
    hash as a digest, approves its current request.

    Pending raises :class:`ApprovalPending`, rejected :class:`ApprovalRejected` (who and
    why), a decision on another request hash :class:`ApprovalVoid` (both hashes named).
    Raised before anything is appended, so a refused call sends nothing.
    """
    fold = task.live()
    by_key = fold.approvals_of(key)
    by_digest = tuple(a for a in fold.approvals_about(current) if a not in by_key)  # about this request's bytes
    if not by_key and not by_digest:
        return

    states = approval_states(task.events(), fold.result())
    for aid in (*by_key, *by_digest):
        a = states[aid]
        binds_key = key if aid in by_digest else a.binds.get("key")
        if binds_key != key or a.binding != current:
            what = f"key {binds_key!r}" if binds_key != key else "this key"
            why = a.void_reason or (
                f"it now binds {what} with request {a.binding}, not this call's request {current}"
            )
            raise ApprovalVoid(
                call_id=st.call_id, key=key, approval_id=aid, binding=a.binding, request_hash=current, why=why
            )
        if a.status == REJECTED:
            raise ApprovalRejected(
                call_id=st.call_id,
                key=key,
                approval_id=aid,
                decision=a.decision or "reject",
                by=a.by,
                note=a.note,
            )
        if a.status == PENDING:
            decisions = approval_commands(task.id, aid, hint_root(task.layout.location))
            raise ApprovalPending(task.id, aid, None, commands=decisions)
        if a.status != APPROVED:
            raise ApprovalVoid(
                call_id=st.call_id,
                key=key,
                approval_id=aid,
                binding=a.binding,
                request_hash=current,
                why=a.void_reason or f"it is {a.status}",
            )
