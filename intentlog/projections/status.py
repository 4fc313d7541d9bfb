"""The operator's view of a task (``intentlog status``): a pure fold over its events.

An operator who finds a dead process needs, without reading code: the current phase,
the last verified outcome, the unresolved external action (which call, which key, since
when, what is at risk) and the safe next step spelled as the command that performs it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..eventlog.format import Event
from .workstate import (
    CHECK_AND_ACCEPT,
    FIX_INPUTS,
    NONE,
    OPERATOR_DECIDES,
    RECOMPILE,
    RECONCILE_EFFECT,
    CallState,
    WorkState,
    WorkStateFold,
)

__all__ = ["TaskStatus", "next_step", "operator_state", "task_status"]


@dataclass(frozen=True, slots=True)
class TaskStatus:
    task_id: str
    state: str  # queued | interrupted | paused for review | awaiting acceptance | complete
    phase: str | None
    last_outcome: str | None
    unresolved_action: str | None
    next_step: str
    work: WorkState

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task_id,
            "state": self.state,
            "phase": self.phase,
            "last_outcome": self.last_outcome,
            "unresolved_action": self.unresolved_action,
            "next_step": self.next_step,
            "work_state": self.work.to_json(),
        }


_PAUSING = frozenset({"effect_unknown", "failed", "reconciled_served"})


def operator_state(ws: WorkState) -> str:
    """One word for the task as an operator sees it."""
    if not ws.calls and not ws.compilations:
        return "queued"
    for cid in ws.unresolved:
        c = ws.calls.get(cid)
        if c is not None and c.stage in _PAUSING:
            return "paused for review"
    if ws.unresolved:
        return "interrupted"
    if ws.next_operation == CHECK_AND_ACCEPT:
        return "awaiting acceptance"
    return "complete"


def next_step(task_id: str, ws: WorkState) -> str:
    """The safe next step, spelled as the command or call that performs it."""
    if not ws.unresolved:
        if ws.next_operation == CHECK_AND_ACCEPT:
            return f"check the results, then: intentlog accept {task_id}"
        return "nothing: the task is complete" if ws.calls else "run the script: nothing has been recorded yet"
    first = ws.unresolved[0]
    c = ws.calls.get(first)
    if c is None:
        comp = ws.compilations[first]
        if comp.next_operation == RECOMPILE:
            return f"re-run the script: compilation {first} is recompiled (no external effect)"
        return f"offer the missing context {', '.join(comp.missing) or '(see error)'} and re-run the script"
    return _call_step(task_id, c)


def _call_step(task_id: str, c: CallState) -> str:
    op = c.next_operation
    if op == RECONCILE_EFFECT:
        return (
            f"find out whether the provider served key {c.key!r}, then record it: "
            f"intentlog reconcile {task_id} {c.call_id} --served --evidence RESPONSE_FILE | --not-served"
        )
    if op == OPERATOR_DECIDES:
        return (
            f"decide: intentlog fail {task_id} {c.call_id} --reason TEXT, or resend accepting the duplicate "
            f"risk: intentlog reconcile {task_id} {c.call_id} --resend --note TEXT"
        )
    if op == FIX_INPUTS:
        return f"fix the request for key {c.key!r} ({c.reason}) and re-run the script"
    if op == NONE:
        return "nothing"
    return f"re-run the script: task.effect({c.key!r}, ...) will {op} (the record proves it safe)"


def _outcome(c: CallState) -> str:
    return f"{c.call_id} (key {c.key!r}) completed at {c.since}"


def _action(c: CallState) -> str:
    risk = "a duplicate effect (paid twice)" if c.duplicate_effect_risk else "nothing outside the process"
    return (
        f"{c.call_id} (key {c.key!r}) {c.stage.replace('_', ' ')} since {c.since}, "
        f"attempt {c.attempts}; provider effect {c.provider_effect}; at risk: {risk}"
    )


def task_status(events: Iterable[Event], *, task_id: str) -> TaskStatus:
    """Fold a task's events into its operator view. Pure: no clock, no I/O."""
    fold = WorkStateFold(task_id)
    phase: str | None = None
    for ev in events:
        fold.apply(ev)
        p = ev.data.get("phase")
        if isinstance(p, str):
            phase = p
    ws = fold.result()
    completed = [c for c in ws.calls.values() if c.stage == "completed"]
    last = max(completed, key=lambda c: c.last_seq) if completed else None
    action: str | None = None
    for cid in ws.unresolved:
        c = ws.calls.get(cid)
        if c is not None and (c.stage in _PAUSING or c.provider_effect == "unknown"):
            action = _action(c)
            break
    state = operator_state(ws)
    return TaskStatus(
        task_id=task_id,
        state=state,
        phase=phase,
        last_outcome=_outcome(last) if last else None,
        unresolved_action=action,
        next_step=next_step(task_id, ws),
        work=ws,
    )
