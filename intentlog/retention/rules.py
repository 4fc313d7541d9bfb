"""What gc never deletes: tasks a person must act on (:func:`protected_by`), tasks marked kept (:class:`KeepMark`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from ..projections.idioms import open_waits
from ..projections.status import AWAITING_APPROVAL, FAILED, INTERRUPTED, PAUSED_FOR_REVIEW, TaskStatus

__all__ = ["KeepMark", "protected_by"]

#: Operator states that hold a task's stream: a person must act on it first.
_HOLDING_STATES: Final = frozenset({PAUSED_FOR_REVIEW, AWAITING_APPROVAL})


def protected_by(st: TaskStatus, unjoined: Sequence[str] = ()) -> str | None:
    """Why no policy may delete this task's stream, or None.

    The one rule, derived from the task's operator state (:func:`intentlog.projections.status.status_of`,
    the projection ``tasks`` and ``status`` show), so gc never disagrees with them:

    * **paused for review** or **awaiting approval**: a person decides, from this record
      (an unknown effect, a failed call, a served call whose response is lost, a failed
      checkpoint, an undecided approval); the detail names the command that decides it;
    * **interrupted while sleeping or waiting for an event** (an open ``task.sleep_started``
      or ``task.event_awaited``): its script continues from this record;
    * **a parent waiting for children**: ``unjoined``, the children its record spawned
      (``task.child_spawned``) and no ``task.joined`` names yet
      (:func:`~intentlog.projections.status.open_children`), whatever its state but
      *failed*: its script continues from this record and joins them (the children are
      kept with it, rule ``unit``: :func:`intentlog.retention.scan.join_unit`);
    * **interrupted with an external effect at stake**: an unresolved call whose provider
      effect is unknown (a resend accepted but not made) or happened but not yet turned
      into a result (observed, interpreted): without the stream, re-running would pay twice.

    Everything else may expire by age or size: queued, interrupted with no external
    effect yet, awaiting acceptance, complete, and **failed** -- an operator gave the task
    up (``intentlog fail TASK``), which is how a task paused on a failed call is released.
    """
    if st.state in _HOLDING_STATES:
        return f"{st.state}: {st.reason}; next: {st.next_step}"
    if unjoined and st.state != FAILED:
        shown = ", ".join(repr(c) for c in unjoined[:5]) + (", ..." if len(unjoined) > 5 else "")
        return (
            f"{st.state}: spawned {len(unjoined)} child task(s) it has not joined ({shown}): its script continues "
            f"from this record and joins them; next: {st.next_step}"
        )
    if st.state != INTERRUPTED:
        return None
    ws = st.work
    if open_waits(ws.other_kinds):  # its script continues from this record when due or signalled
        return f"interrupted while {st.waiting or 'sleeping or waiting for an event'}; next: {st.next_step}"
    for cid in ws.unresolved:
        pending = ws.calls.get(cid)
        if pending is not None and pending.provider_effect in ("unknown", "happened"):
            return (
                f"interrupted with a paid-for effect at stake: {cid} (key {pending.key!r}) is "
                f"{pending.stage.replace('_', ' ')}, provider effect {pending.provider_effect}; next: {st.next_step}"
            )
    return None


@final
@dataclass(frozen=True, slots=True)
class KeepMark:
    """An operator's mark that a task must never be collected (``keep.json`` in a folder, the gc log on a store)."""

    task: str
    since: str
    note: str | None

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "since": self.since, "note": self.note}
