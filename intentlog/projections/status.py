"""The operator's view of a task (``intentlog status``): a pure fold over its events.

An operator who finds a dead process needs, without reading code: the current phase,
the last verified outcome, the unresolved external action (which call, which key, since
when, what is at risk) and the safe next step spelled as the command that performs it.

The operator state, first that applies:

- ``running`` -- a live process holds the task's writer lock (not in the record: the
  caller probes the lock and passes ``running``; see :meth:`intentlog.Task.status`);
- ``failed`` -- ``task.failed`` recorded after the last ``task.accepted``: given up;
- ``awaiting approval`` -- an approval is requested and has no decision for its current
  request (never decided, or its decision was made void by a changed request);
- ``paused for review`` -- an operator must decide: an unknown effect (including a timed
  out attempt), retries exhausted or a call failed, a call served whose answer is lost,
  or the latest checkpoint failed verification (status ``failed`` / ``rejected``);
- ``interrupted`` also when the record says the task sleeps (``task.sleep_started``
  without ``task.woke``) or waits for an event (``task.event_awaited`` without an
  outcome): the reason names the recorded wake time or event, never the clock's view;
- ``interrupted`` also for a parent whose record spawned children it has not joined
  (``task.child_spawned`` without a ``task.joined`` naming them): it waits for them;
- ``complete`` also for a task that returned its result (``task.returned``, a child's
  ``task.finish``) with nothing unresolved: its parent joins it;
- ``queued`` -- nothing recorded yet but the task's creation (and, for a child, its link
  to its parent; for an inbox, the events signalled into it: an inbox is never run, its
  next step points at its task);
- ``interrupted`` -- unresolved work that is safe to continue by re-running the script;
- ``awaiting acceptance`` -- every call done; the results were not checked and accepted
  (``task.accepted``, or a checkpoint with status ``accepted`` after the last completion,
  such as a session's turn acceptance);
- ``complete``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from .._internal.commands import approval_commands, command, reconcile_step
from ..eventlog.format import Event
from .backlogs import BACKLOG_SUFFIX
from .idioms import CHILD_SPAWNED, INBOX_SUFFIX, JOINED, RETURNED, SIGNALLED, IdiomFold, IdiomState, open_waits
from .operator import ApprovalState, BacklogItems, CheckpointRecord, EvidenceCheck, OperatorFold, OperatorView
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

__all__ = [
    "ChildLine",
    "inbox_of",
    "open_children",
    "tree_lines",
    "waiting_for",
    "AWAITING_ACCEPTANCE",
    "acceptance_refusal",
    "DECIDE_APPROVAL",
    "REVIEW_CHECKPOINT",
    "RUN_SCRIPT",
    "TASK_NEXT_OPERATIONS",
    "WAIT",
    "AWAITING_APPROVAL",
    "COMPLETE",
    "FAILED",
    "INTERRUPTED",
    "OPERATOR_STATES",
    "PAUSED_FOR_REVIEW",
    "QUEUED",
    "RUNNING",
    "TaskStatus",
    "call_next_step",
    "next_step",
    "operator_state",
    "status_of",
    "task_next_operation",
    "task_status",
    "StatusFold",
    "taking_over",
]

QUEUED: Final = "queued"
RUNNING: Final = "running"
AWAITING_APPROVAL: Final = "awaiting approval"
PAUSED_FOR_REVIEW: Final = "paused for review"
INTERRUPTED: Final = "interrupted"
AWAITING_ACCEPTANCE: Final = "awaiting acceptance"
COMPLETE: Final = "complete"
FAILED: Final = "failed"
#: Every operator state, in the order they are tested.
OPERATOR_STATES: Final = (
    RUNNING,
    FAILED,
    AWAITING_APPROVAL,
    PAUSED_FOR_REVIEW,
    QUEUED,
    INTERRUPTED,
    AWAITING_ACCEPTANCE,
    COMPLETE,
)

#: The task-level next operations beyond the work state's own (DESIGN §2).
WAIT: Final = "wait"
DECIDE_APPROVAL: Final = "decide approval"
REVIEW_CHECKPOINT: Final = "review checkpoint"
RUN_SCRIPT: Final = "run the script"
#: Every word ``TaskStatus.next_operation`` takes: the work state's call operations, then these.
TASK_NEXT_OPERATIONS: Final = (
    NONE,
    WAIT,
    DECIDE_APPROVAL,
    REVIEW_CHECKPOINT,
    RUN_SCRIPT,
    RECONCILE_EFFECT,
    OPERATOR_DECIDES,
    "start call",
    "reinterpret",
    "redecide",
    "finalize",
    "start next attempt",
    FIX_INPUTS,
    RECOMPILE,
    CHECK_AND_ACCEPT,
)


@dataclass(frozen=True, slots=True)
class ChildLine:
    """One child of a task as its parent's status shows it: its id, its state and its own next step."""

    task: str
    state: str
    next_step: str

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "state": self.state, "next_step": self.next_step}


def tree_lines(st: TaskStatus) -> list[tuple[str, str]]:
    """``(label, text)`` lines of the parent/child tree around a task: its parent, then each child."""
    out = [("parent", st.parent)] if st.parent is not None else []
    out += [("child", f"{c.task} [{c.state}]: {c.next_step}") for c in st.children]
    return out


@dataclass(frozen=True, slots=True)
class TaskStatus:
    task_id: str
    state: str  # one of OPERATOR_STATES
    phase: str | None
    last_outcome: str | None
    unresolved_action: str | None
    next_step: str
    work: WorkState
    operator: OperatorView | None = None
    running: bool = False
    reason: str | None = None  # why the state is what it is, when it is not obvious
    next_operation: str = NONE  # one word of TASK_NEXT_OPERATIONS, consistent with ``state``
    #: what the task's record says it waits for ("sleeping until <recorded time>", "waiting for event 'x'"), or None
    waiting: str | None = None
    #: the task that spawned this one (its record's ``task.spawned``), or None
    parent: str | None = None
    #: the children this task spawned, each with its own state and next step (filled by a reader of their streams)
    children: tuple[ChildLine, ...] = ()

    @property
    def awaiting_approvals(self) -> tuple[ApprovalState, ...]:
        return self.operator.awaiting if self.operator is not None else ()

    @property
    def checkpoint(self) -> CheckpointRecord | None:
        return self.operator.latest_checkpoint if self.operator is not None else None

    def to_json(self) -> dict[str, Any]:
        ops = self.operator
        cp = self.checkpoint
        return {
            "task": self.task_id,
            "state": self.state,
            "reason": self.reason,
            "running": self.running,
            "phase": self.phase,
            "last_outcome": self.last_outcome,
            "unresolved_action": self.unresolved_action,
            "next_operation": self.next_operation,
            "next_step": self.next_step,
            "waiting": self.waiting,
            "parent": self.parent,
            "children": [c.to_json() for c in self.children],
            "checkpoint": cp.to_json() if cp is not None else None,
            "approvals": [a.to_json() for a in ops.approvals.values()] if ops is not None else [],
            "forked_from": dict(ops.forked) if ops is not None and ops.forked is not None else None,
            "work_state": self.work.to_json(),
        }


_PAUSING = frozenset({"effect_unknown", "failed", "reconciled_served"})


def _paused_call(ws: WorkState) -> CallState | None:
    for cid in ws.unresolved:
        c = ws.calls.get(cid)
        if c is not None and c.stage in _PAUSING:
            return c
    return None


def _rejected(ws: WorkState, ops: OperatorView | None) -> tuple[ApprovalState, str] | None:
    """A rejected approval binding an unresolved call (its key, or its request hash as a digest), with
    that call's id: the protocol refuses to send it (never 'safe to start')."""
    if ops is None:
        return None
    calls = [ws.calls[cid] for cid in ws.unresolved if cid in ws.calls]
    for a in ops.approvals.values():
        if a.status != "rejected":
            continue
        for c in calls:
            if a.binds.get("key") == c.key or (
                "call" not in a.binds and c.request_hash is not None and a.binds.get("digest") == c.request_hash
            ):
                return a, c.call_id
    return None


#: what a view that did not fold the idiom records says of a task with an open sleep or wait
WAITING_UNFOLDED: Final = "sleeping or waiting for an event"


def open_children(idioms: IdiomState) -> tuple[str, ...]:
    """The children the record spawned and no ``task.joined`` names yet, in spawn order."""
    joined = {c for names in idioms.joined for c in names}
    return tuple(c for c in idioms.children if c not in joined)


def _children_text(n: int, names: tuple[str, ...] = ()) -> str:
    listed = f": {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}" if names else ""
    return f"waiting for {n} child task{'s' if n != 1 else ''} to be joined{listed}"


def waiting_for(idioms: IdiomState | None, ws: WorkState | None = None) -> str | None:
    """What the record says the task waits for: the recorded wake time or event (never the clock), else None.

    Then children it spawned and has not joined (``waiting for N child tasks to be joined``).
    Without ``idioms`` (a listing, gc), the work state's kind counts still tell that the
    task waits (:func:`.idioms.open_waits`), not for what; and that it spawned children
    and joined none.
    """
    if idioms is None:
        if ws is None:
            return None
        if open_waits(ws.other_kinds):
            return WAITING_UNFOLDED
        spawned = ws.other_kinds.get(CHILD_SPAWNED, 0)
        return _children_text(spawned) if spawned and not ws.other_kinds.get(JOINED, 0) else None
    s, w = idioms.sleeping, idioms.waiting
    if w is not None and (s is None or w.seq > s.seq):
        return f"waiting for event {w.name!r}" + (f" until {w.deadline}" if w.deadline is not None else "")
    if s is not None:
        return f"sleeping until {s.until}"
    kids = open_children(idioms)
    return _children_text(len(kids), kids) if kids else None


def _returned(ws: WorkState, idioms: IdiomState | None) -> bool:
    """The task recorded its result for its parent (``task.returned``)."""
    return idioms.returned if idioms is not None else ws.other_kinds.get(RETURNED, 0) > 0


#: a backlog item task's result, recorded by the worker that ran its step
ITEM_RETURNED: Final = "item.returned"


def _item_returned(ws: WorkState) -> bool:
    """A backlog item's step returned in this task (``item.returned``): it ran, whether or not it made a call."""
    return ws.other_kinds.get(ITEM_RETURNED, 0) > 0


def inbox_of(task_id: str, ws: WorkState) -> str | None:
    """The task whose inbox this stream is (``<task>.inbox`` holding signalled events), else None."""
    if task_id.endswith(INBOX_SUFFIX) and ws.other_kinds.get(SIGNALLED, 0) and not ws.calls:
        return task_id[: -len(INBOX_SUFFIX)] or None
    return None


def _waiting_step(task_id: str, idioms: IdiomState | None, ws: WorkState) -> str | None:
    """The safe next step of a task that waits (not running): re-run the script, signalling first if it awaits one."""
    what = waiting_for(idioms, ws)
    if what is None:
        return None
    if idioms is None:
        return f"see what it waits for: {command(None, 'status', task_id)}; then re-run the script (or signal it)"
    if what.startswith("waiting for") and "child task" in what and idioms.waiting is None and idioms.sleeping is None:
        return (
            "re-run the script once its children returned (it joins them); each child's state: "
            + command(None, "status", task_id)
        )
    w = idioms.waiting
    if w is not None and what.startswith("waiting"):
        signal = command(None, "signal", task_id, w.name) + " --payload JSON"
        return (
            f"signal it: {signal}; then re-run the script (it continues from the event"
            + (f", or records the timeout after {w.deadline})" if w.deadline is not None else ")")
        )
    return f"re-run the script: it is {what} (recorded) and continues then, at once if that time has passed"


def _why(
    ws: WorkState, ops: OperatorView | None, running: bool, idioms: IdiomState | None = None
) -> tuple[str, str | None]:
    waiting = waiting_for(idioms, ws)
    if running:
        return RUNNING, "a live process holds the task's writer lock" + (f" ({waiting})" if waiting else "")
    if ops is not None and ops.failed is not None:
        return FAILED, ops.failed
    items = ops.backlog if ops is not None else None
    if items is not None and items.waiting:
        item, _, why, _ = items.waiting[0]
        more = f" and {len(items.waiting) - 1} more" if len(items.waiting) > 1 else ""
        state = AWAITING_APPROVAL if all(w[1] == AWAITING_APPROVAL for w in items.waiting) else PAUSED_FOR_REVIEW
        return state, f"backlog item {item!r} waits for a person ({why}){more}"
    if ops is not None and ops.awaiting:
        a = ops.awaiting[0]
        return AWAITING_APPROVAL, f"approval {a.approval_id!r}: {a.question}"
    rejected = _rejected(ws, ops)
    if rejected is not None:
        r = rejected[0]
        return PAUSED_FOR_REVIEW, f"approval {r.approval_id!r} rejected by {r.by or 'someone'}" + (
            f": {r.note}" if r.note else ""
        )
    c = _paused_call(ws)
    if c is not None:
        what = {"effect_unknown": "unknown effect", "failed": "call failed", "reconciled_served": "answer lost"}
        return PAUSED_FOR_REVIEW, f"{what[c.stage]}: {c.call_id} (key {c.key!r})" + (
            f": {c.reason}" if c.reason else ""
        )
    cp = ops.latest_checkpoint if ops is not None else None
    if cp is not None and cp.failed:
        return PAUSED_FOR_REVIEW, f"failed verification: checkpoint {cp.phase!r} is {cp.status}" + (
            f" ({cp.note})" if cp.note else ""
        )
    if waiting is not None:
        return INTERRUPTED, waiting
    if not ws.unresolved and _returned(ws, idioms):
        return COMPLETE, "returned its result with task.finish"
    if not ws.calls and not ws.compilations and (ops is None or (not ops.approvals and not ops.checkpoints)):
        if _item_returned(ws):  # a step that returned without a call: it ran, nothing is left
            return COMPLETE, "its backlog item's step returned (no call recorded)"
        return QUEUED, None
    if ws.unresolved:
        return INTERRUPTED, None
    if items is not None and items.open:
        return INTERRUPTED, f"{items.open} of the backlog's {items.total} item(s) not done yet"
    if ws.next_operation == CHECK_AND_ACCEPT and not _accepted_by_checkpoint(ws, ops):
        return AWAITING_ACCEPTANCE, None
    return COMPLETE, None


def _accepted_by_checkpoint(ws: WorkState, ops: OperatorView | None) -> bool:
    """An accepted checkpoint after the last completion accepts the work so far (a session's accepted turns do)."""
    cp = ops.latest_checkpoint if ops is not None else None
    if cp is None or cp.status != "accepted":
        return False
    done = [c.last_seq for c in ws.calls.values() if c.stage == "completed"]
    return not done or cp.seq > max(done)


def acceptance_refusal(st: TaskStatus) -> str | None:
    """Why ``accept`` must refuse this task (None: it is *awaiting acceptance*, so accepting means something).

    Accepting is an irreversible verdict on the record; it is refused when there is
    nothing to accept: unresolved work, a task given up, an already accepted (or never
    started) task, a running one.
    """
    if st.state == AWAITING_ACCEPTANCE:
        return None
    if st.state == COMPLETE:
        return f"task {st.task_id!r} is complete: its results were already accepted; nothing to accept"
    if st.state == FAILED:
        return f"task {st.task_id!r} was given up ({st.reason}); nothing to accept"
    if st.state == QUEUED:
        return f"task {st.task_id!r} has recorded no result yet; nothing to accept"
    why = f" ({st.reason})" if st.reason else ""
    return f"task {st.task_id!r} is {st.state}{why}: nothing to accept yet; next step: {st.next_step}"


def operator_state(
    ws: WorkState, ops: OperatorView | None = None, *, running: bool = False, idioms: IdiomState | None = None
) -> str:
    """One word for the task as an operator sees it (see the module docstring for the order)."""
    return _why(ws, ops, running, idioms)[0]


def task_next_operation(
    ws: WorkState, ops: OperatorView | None = None, *, running: bool = False, idioms: IdiomState | None = None
) -> str:
    """The task's next operation as one word of :data:`TASK_NEXT_OPERATIONS`, derived from its state.

    It always agrees with :func:`operator_state`: ``failed`` and ``complete`` -> ``none``;
    ``awaiting acceptance`` -> ``check and accept``; otherwise the operation of what holds
    the task (the lock, the approval, the paused call or checkpoint, the first unresolved item).
    """
    state = operator_state(ws, ops, running=running, idioms=idioms)
    if state == RUNNING:
        return WAIT
    if state in (FAILED, COMPLETE):
        return NONE
    if state == AWAITING_APPROVAL:
        return DECIDE_APPROVAL
    if state == AWAITING_ACCEPTANCE:
        return CHECK_AND_ACCEPT
    if state == QUEUED:
        return RUN_SCRIPT
    items = ops.backlog if ops is not None else None
    if state == PAUSED_FOR_REVIEW:
        c = _paused_call(ws)
        if c is None and items is not None and items.waiting:
            return OPERATOR_DECIDES
        return c.next_operation if c is not None else REVIEW_CHECKPOINT
    if not ws.unresolved:  # sleeping or waiting for an event, or a backlog's items still to run: a run continues it
        return RUN_SCRIPT
    first = ws.unresolved[0]
    c = ws.calls.get(first)
    return c.next_operation if c is not None else ws.compilations[first].next_operation


def next_step(
    task_id: str,
    ws: WorkState,
    ops: OperatorView | None = None,
    *,
    running: bool = False,
    idioms: IdiomState | None = None,
) -> str:
    """The safe next step, spelled as the command or call that performs it."""
    if running:
        return "wait: a process is writing this task (or stop it, then look again)"
    if operator_state(ws, ops, idioms=idioms) == INTERRUPTED:
        step = _waiting_step(task_id, idioms, ws)
        if step is not None:
            return step
    if ops is not None and ops.failed is not None:
        return (
            f"nothing: the task was given up ({ops.failed}); to try again from a call: "
            f"intentlog fork {task_id} --from CALL"
        )
    items = ops.backlog if ops is not None else None
    if items is not None and (items.waiting or (items.open and not ws.unresolved)):
        return _backlog_step(task_id, items)
    if ops is not None and ops.awaiting:
        a = ops.awaiting[0]
        if a.status == "void":
            return f"re-run the script: approval {a.approval_id!r} is void ({a.void_reason}) and is requested again"
        approve, reject = approval_commands(task_id, a.approval_id)
        return f"decide: {approve}, or {reject}; then re-run the script (it resumes from the decision)"
    rejected = _rejected(ws, ops)
    if rejected is not None:
        r, call_id = rejected
        return (
            f"nothing is sent: approval {r.approval_id!r} was rejected; change the request (a new key) and "
            f"request approval again, or give up: intentlog fail {task_id} {call_id} --reason WHY"
        )
    if _paused_call(ws) is None:
        cp = ops.latest_checkpoint if ops is not None else None
        if cp is not None and cp.failed:
            return (
                f"review checkpoint {cp.phase!r} ({cp.status}): fix the work and re-run the script, or fork: "
                f"intentlog fork {task_id} --from CALL"
            )
    if not ws.unresolved:
        if _returned(ws, idioms):
            return "nothing: the task returned its result (its parent joins it)"
        box = inbox_of(task_id, ws)
        if box is not None:
            return f"nothing to run: this is the inbox of task {box!r}; see it: {command(None, 'status', box)}"
        if ws.next_operation == CHECK_AND_ACCEPT and not _accepted_by_checkpoint(ws, ops):
            return f"check the results, then: intentlog accept {task_id}"
        recorded = ws.calls or _item_returned(ws) or (ops is not None and (ops.checkpoints or ops.approvals))
        return "nothing: the task is complete" if recorded else "run the script: nothing has been recorded yet"
    if not ws.unresolved:  # interrupted while it sleeps or waits for an event: the script continues it
        return RUN_SCRIPT
    first = ws.unresolved[0]
    c = ws.calls.get(first)
    if c is None:
        comp = ws.compilations[first]
        if comp.next_operation == RECOMPILE:
            return f"re-run the script: compilation {first} is recompiled (no external effect)"
        return f"offer the missing context {', '.join(comp.missing) or '(see error)'} and re-run the script"
    return _call_step(task_id, c)


def _backlog_step(task_id: str, items: BacklogItems) -> str:
    """A backlog stream's next step: its items that wait for a person, else a run for those still to do."""
    name = task_id.removesuffix(BACKLOG_SUFFIX)
    if items.waiting:
        return (
            f"settle each item that waits for a person (why, and its command: intentlog backlog {name}), "
            f"then put it back in the queue: intentlog unblock {name} ITEM"
        )
    return f"run its items: intentlog run {name} --step MODULE:FUNCTION"


#: the commands that write the task they name, and so meet its writer lease (each takes ``--take-over-after``)
_WRITES_TASK: Final = re.compile(r"\bintentlog (reconcile|fail|approve|reject|accept|fork)\b")


def taking_over(step: str) -> str:
    """``step`` with every command that writes the task taking its lease now (``--take-over-after 0``).

    What a person runs once the lease's holder is gone: on an object store the take-over is
    a lease of the next epoch, recorded on the stream, and the old holder is fenced (its
    next append refused); a folder's lock died with its holder (the option does nothing).
    """
    return _WRITES_TASK.sub(r"intentlog \1 --take-over-after 0", step)


def _call_step(task_id: str, c: CallState) -> str:
    op = c.next_operation
    if op == RECONCILE_EFFECT:
        return reconcile_step(task_id, c.call_id, c.key)
    if op == OPERATOR_DECIDES and c.stage == "failed":
        # the call is over; what is left to decide is the task's fate
        return (
            f"{c.call_id} (key {c.key!r}) failed ({c.reason or 'see intentlog log'}): give the task up with "
            f"intentlog fail {task_id} --reason TEXT, or fork it before this call and re-run with changed "
            f"input: intentlog fork {task_id} --from {c.call_id}"
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


def call_next_step(task_id: str, c: CallState) -> str:
    """The safe next step for one call, spelled as the command that performs it.

    The very text ``status`` prints as the next step when ``c`` is the task's first
    unresolved call (the report shows it beside every unresolved call).
    """
    return _call_step(task_id, c)


def _outcome(c: CallState) -> str:
    return f"{c.call_id} (key {c.key!r}) completed at {c.since}"


def _action(c: CallState) -> str:
    risk = "a duplicate effect (paid twice)" if c.duplicate_effect_risk else "nothing outside the process"
    why = f" ({c.reason})" if c.reason and c.stage in ("effect_unknown", "provider_dedup") else ""
    return (
        f"{c.call_id} (key {c.key!r}) {c.stage.replace('_', ' ')}{why} since {c.since}, "
        f"attempt {c.attempts}; provider effect {c.provider_effect}; at risk: {risk}"
    )


def task_status(
    events: Iterable[Event], *, task_id: str, running: bool = False, evidence: EvidenceCheck | None = None
) -> TaskStatus:
    """Fold a task's events into its operator view. Pure: no clock, no I/O of its own.

    ``running``: whether a live process holds the task's writer lock; the caller probes
    it (:meth:`intentlog.Task.status` does), since a projection reads only the record.
    ``evidence``: the caller's check of a checkpoint's evidence against the store; the
    checkpoint that counts is then the one :func:`intentlog.checkpoints.latest_checkpoint` returns.
    """
    fold = StatusFold(task_id)
    for ev in events:
        fold.apply(ev)
    return fold.status(running=running, evidence=evidence)


class StatusFold:
    """:func:`task_status` fed one event at a time: :meth:`status` after any prefix, the fold going on after it.

    ``count`` and ``last`` (the last event's digest) name the prefix folded, so a caller
    handed a list of events can tell whether this fold is of exactly that list.
    """

    __slots__ = ("_idioms", "_ops", "_task_id", "_ws", "count", "last")

    def __init__(self, task_id: str) -> None:
        self._task_id = task_id
        self._ws = WorkStateFold(task_id)
        self._ops = OperatorFold()
        self._idioms = IdiomFold()
        self.count = 0
        self.last: str | None = None

    def apply(self, ev: Event) -> None:
        self._ws.apply(ev)
        self._ops.apply(ev)
        self._idioms.apply(ev)
        self.count += 1
        self.last = ev.digest

    def folded(self, events: list[Event]) -> bool:
        """Whether this fold is of exactly ``events`` (their number and the last one's digest)."""
        return self.count == len(events) and (self.last if events else None) == (events[-1].digest if events else None)

    def status(self, *, running: bool = False, evidence: EvidenceCheck | None = None) -> TaskStatus:
        """The operator view of the events folded so far (more may be folded afterwards)."""
        ws = self._ws.result()
        ops = self._ops.result(ws, evidence=evidence)
        return status_of(self._task_id, ws, ops, running=running, idioms=self._idioms.result())


def status_of(
    task_id: str, ws: WorkState, ops: OperatorView, *, running: bool = False, idioms: IdiomState | None = None
) -> TaskStatus:
    """The operator view from an already folded work state and operator view (what gc and the views share).

    ``idioms``: the task's idiom records (:mod:`.idioms`), when the caller folded them: a
    sleep or a wait is then named (``waiting``), from the recorded time, never the clock.
    """
    completed = [c for c in ws.calls.values() if c.stage == "completed"]
    last = max(completed, key=lambda c: c.last_seq) if completed else None
    action: str | None = None
    for cid in ws.unresolved:
        c = ws.calls.get(cid)
        if c is not None and (c.stage in _PAUSING or c.provider_effect == "unknown"):
            action = _action(c)
            break
    state, reason = _why(ws, ops, running, idioms)
    box = inbox_of(task_id, ws)
    if box is not None and state == QUEUED:
        reason = f"the inbox of task {box!r}: the events signalled to it wait here until it receives them"
    return TaskStatus(
        task_id=task_id,
        state=state,
        phase=ops.phase,
        last_outcome=_outcome(last) if last else None,
        unresolved_action=action,
        next_step=next_step(task_id, ws, ops, running=running, idioms=idioms),
        work=ws,
        operator=ops,
        running=running,
        reason=reason,
        next_operation=NONE if box is not None and state == QUEUED else task_next_operation(
            ws, ops, running=running, idioms=idioms
        ),
        waiting=waiting_for(idioms, ws),
    )
