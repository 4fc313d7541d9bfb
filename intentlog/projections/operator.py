"""The operator's records, folded: approvals, checkpoints, the task's verdict, its fork origin.

A pure fold beside the work state (:mod:`intentlog.projections.workstate`): no clock, no
I/O. The work state says what each *call* proves; this says what people and verifiers
decided about the task:

* **approvals** -- ``approval.requested {approval, question, binds}`` and
  ``approval.decided {approval, decision, by, note, request_hash}``. A decision counts
  only if it came after the approval's latest request and names the hash that request
  binds (the bound call's manifest request hash, or a bound digest). It is *void* when the
  binding changed after it (a new request re-binds the approval), or when the bound key's
  latest call now records another request hash than the one approved.
* **checkpoints** -- ``task.checkpoint {phase, evidence, status, ...}``, in order; the
  latest one names the task's phase (their evidence is checked by
  :mod:`intentlog.checkpoints`, which reads bytes).
* **verdict** -- ``task.failed {reason, by}`` after the last ``task.accepted``: the task
  was given up.
* **fork** -- ``task.forked {from_task, from_call, upto_seq, from_head, from_stream}``.
* **backlog items** -- on a backlog's own stream, ``backlog.item_added``, ``item_blocked``,
  ``item_unblocked``, ``item_done`` and ``item_failed``: which items are still to do and
  which the backlog recorded as waiting for a person, so the stream's state never says
  *complete* while an item is blocked (an item task blocked but not yet recorded so by a
  run shows in that task's own state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from ..eventlog.format import Event
from .workstate import WorkState

__all__ = [
    "APPROVED",
    "OPERATOR_KINDS",
    "FAILED_STATUSES",
    "PENDING",
    "REJECTED",
    "VOID",
    "ApprovalState",
    "BacklogItems",
    "CheckpointRecord",
    "OperatorFold",
    "OperatorView",
    "approval_states",
    "checkpoint_record",
]

PENDING: Final = "pending"
APPROVED: Final = "approved"
REJECTED: Final = "rejected"
VOID: Final = "void"

#: Checkpoint statuses that mean a verifier refused the work: the task pauses for review.
FAILED_STATUSES: Final = frozenset({"failed", "rejected"})


@dataclass(frozen=True, slots=True)
class ApprovalState:
    """One approval as the record has it.

    ``status``: ``pending`` (no decision for the current binding; ``voided`` counts the
    decisions a re-request made void), ``approved``, ``rejected``, or ``void`` (the bound
    key's call now records another request: ``void_reason`` says which; request the
    approval again). ``binding`` is the hash a decision must name.
    """

    approval_id: str
    question: str
    binds: Mapping[str, Any]
    binding: str | None
    status: str
    decision: str | None
    by: str | None
    note: str | None
    requested_seq: int
    requested_ts: str
    decided_seq: int | None
    decided_ts: str | None
    voided: int
    void_reason: str | None

    @property
    def approved(self) -> bool:
        return self.status == APPROVED

    @property
    def decided(self) -> bool:
        """True when a decision for exactly the current request is recorded (approved or rejected)."""
        return self.status in (APPROVED, REJECTED)

    @property
    def awaiting(self) -> bool:
        """True while a person still has to decide (pending, or void and to be requested again)."""
        return self.status in (PENDING, VOID)

    def to_json(self) -> dict[str, Any]:
        return {
            "approval": self.approval_id,
            "question": self.question,
            "binds": dict(self.binds),
            "binding": self.binding,
            "status": self.status,
            "decision": self.decision,
            "by": self.by,
            "note": self.note,
            "requested_seq": self.requested_seq,
            "decided_seq": self.decided_seq,
            "voided": self.voided,
            "void_reason": self.void_reason,
        }


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """One ``task.checkpoint`` as recorded (its evidence not yet checked)."""

    seq: int
    ts: str
    phase: str
    status: str
    evidence: tuple[Mapping[str, Any], ...]
    revision: str | None
    changed_files: tuple[str, ...]
    note: str | None
    by: str | None
    turn: str | None
    call: str | None
    partial: bool = False  # its outputs are what an unfinished phase produced so far

    @property
    def outputs(self) -> Mapping[str, Mapping[str, Any]]:
        """The labelled evidence (refs carrying a string ``label``), by label, in record order."""
        return MappingProxyType({str(e["label"]): e for e in self.evidence if type(e.get("label")) is str})

    @property
    def failed(self) -> bool:
        """A verifier refused the work at this checkpoint (status ``failed`` or ``rejected``)."""
        return self.status in FAILED_STATUSES

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "ts": self.ts,
            "phase": self.phase,
            "status": self.status,
            "evidence": [
                {k: v for k, v in e.items() if k in ("digest", "size", "media_type", "label")} for e in self.evidence
            ],
            "revision": self.revision,
            "changed_files": list(self.changed_files),
            "note": self.note,
            "by": self.by,
            "turn": self.turn,
            "call": self.call,
            "partial": self.partial,
        }


def _opt_str(v: Any) -> str | None:
    return v if type(v) is str else None


def checkpoint_record(ev: Event) -> CheckpointRecord:
    """A :class:`CheckpointRecord` from a ``task.checkpoint`` event (fields of the wrong type read as absent)."""
    d = ev.data
    evidence = d.get("evidence")
    changed = d.get("changed_files")
    return CheckpointRecord(
        seq=ev.seq,
        ts=ev.ts,
        phase=str(d.get("phase")),
        status=str(d.get("status")),
        evidence=tuple(MappingProxyType(e) for e in evidence if type(e) is dict) if type(evidence) is list else (),
        revision=_opt_str(d.get("revision")),
        changed_files=tuple(f for f in changed if type(f) is str) if type(changed) is list else (),
        note=_opt_str(d.get("note")),
        by=_opt_str(d.get("by")),
        turn=_opt_str(d.get("turn")),
        call=_opt_str(d.get("call")),
        partial=d.get("partial") is True,
    )


@dataclass(slots=True)
class _Approval:
    aid: str
    question: str
    binds: dict[str, Any]
    binding: str | None
    seq: int
    ts: str
    decision: dict[str, Any] | None = None
    decided_seq: int | None = None
    decided_ts: str | None = None
    voided: int = 0


@dataclass(frozen=True, slots=True)
class BacklogItems:
    """A backlog stream's items as it recorded them: how many are still to do, which wait for a person.

    ``waiting`` holds ``(item, state, reason, command)`` of each item recorded blocked and
    not unblocked, done or failed since, in the order the items were added; ``state`` is the
    item's (``blocked``, ``awaiting approval``, ``paused for review``).
    """

    total: int
    open: int
    waiting: tuple[tuple[str, str, str, str], ...]


@dataclass(frozen=True, slots=True)
class OperatorView:
    """What the operator's records say about a task (see the module docstring)."""

    approvals: Mapping[str, ApprovalState]
    checkpoints: tuple[CheckpointRecord, ...]
    failed: str | None  # the reason, when the task's latest verdict is task.failed
    failed_by: str | None
    forked: Mapping[str, Any] | None
    phase: str | None  # the counted checkpoint's phase, else the latest event carrying a 'phase'
    current: CheckpointRecord | None = None  # the checkpoint that counts (:func:`counted_checkpoint`)
    backlog: BacklogItems | None = None  # a backlog's own stream: its items (None: not a backlog's stream)

    @property
    def latest_checkpoint(self) -> CheckpointRecord | None:
        """The checkpoint that counts: the newest whose evidence was not found defective."""
        return self.current

    @property
    def awaiting(self) -> tuple[ApprovalState, ...]:
        """Approvals a person still has to decide, in the order they were requested."""
        return tuple(a for a in self.approvals.values() if a.awaiting)


#: Why a checkpoint's evidence does not verify (empty: it does); the store-side check is
#: :func:`intentlog.checkpoints.evidence_check`.
EvidenceCheck = Callable[[CheckpointRecord], Sequence[str]]


def counted_checkpoint(
    records: Sequence[CheckpointRecord], problems: EvidenceCheck | None = None
) -> tuple[CheckpointRecord | None, tuple[tuple[int, str, str], ...]]:
    """The one rule for which checkpoint counts: the newest whose evidence ``problems`` finds sound.

    Returns it (None when every one is defective, or there is none) and the newer ones passed
    over as ``(seq, phase, why)``, newest first. Without ``problems`` (a pure projection that
    cannot read the store), the evidence is taken as recorded and the newest one counts.
    """
    skipped: list[tuple[int, str, str]] = []
    for r in reversed(records):
        why = tuple(problems(r)) if problems is not None else ()
        if not why:
            return r, tuple(skipped)
        skipped.append((r.seq, r.phase, "; ".join(why)))
    return None, tuple(skipped)


#: The records of a backlog's own stream that say where its items stand.
BACKLOG_ITEM_KINDS: Final = frozenset(
    {
        "backlog.item_added", "backlog.item_blocked", "backlog.item_unblocked", "backlog.item_done",
        "backlog.item_failed",
    }
)  # fmt: skip

#: The kinds :class:`OperatorFold` folds; any other event matters to it only when its data has a ``phase``.
OPERATOR_KINDS: Final = frozenset(
    {"task.checkpoint", "approval.requested", "approval.decided", "task.accepted", "task.failed", "task.forked"}
    | BACKLOG_ITEM_KINDS
)


@dataclass(slots=True)
class OperatorFold:
    """Feed events to :meth:`apply`; :meth:`result` with the task's work state gives the view."""

    _approvals: dict[str, _Approval] = field(default_factory=dict)
    _checkpoints: list[CheckpointRecord] = field(default_factory=list)
    _accepted: int = -1
    _failed: tuple[int, str, str | None] | None = None
    _forked: dict[str, Any] | None = None
    _phase: str | None = None
    #: a backlog's items: item -> [open, state, reason, command] (state None: not waiting for a person)
    _items: dict[str, list[Any]] | None = None

    def apply(self, ev: Event) -> None:
        kind, d = ev.kind, ev.data
        if kind not in OPERATOR_KINDS:
            if "phase" in d:
                p = d["phase"]
                if type(p) is str:
                    self._phase = p
            return
        if kind == "task.checkpoint":
            self._checkpoints.append(checkpoint_record(ev))
        elif kind == "approval.requested":
            self._on_requested(ev, d)
        elif kind == "approval.decided":
            self._on_decided(ev, d)
        elif kind == "task.accepted":
            self._accepted = ev.seq
        elif kind == "task.failed":
            self._failed = (ev.seq, str(d.get("reason")), _opt_str(d.get("by")))
        elif kind == "task.forked":
            self._forked = dict(d)
        else:
            self._on_item(kind, d)
        p = d.get("phase")
        if type(p) is str and kind != "task.checkpoint":
            self._phase = p

    def _on_item(self, kind: str, d: dict[str, Any]) -> None:
        item = d.get("item")
        if type(item) is not str:
            return
        items = self._items if self._items is not None else {}
        self._items = items
        if kind == "backlog.item_added":
            items.setdefault(item, [True, None, None, None])
            return
        rec = items.get(item)
        if rec is None:
            return
        if kind == "backlog.item_blocked":
            state = d.get("state")
            rec[1:] = [state if type(state) is str else "blocked", str(d.get("reason")), str(d.get("command"))]
        elif kind == "backlog.item_unblocked":
            rec[1:] = [None, None, None]
        else:  # done or failed: settled
            rec[:] = [False, None, None, None]

    def _on_requested(self, ev: Event, d: dict[str, Any]) -> None:
        aid = d.get("approval")
        if type(aid) is not str:
            return
        binds = d.get("binds")
        binds = binds if type(binds) is dict else {}
        binding = binds.get("request_hash") if "call" in binds else binds.get("digest")
        prior = self._approvals.get(aid)
        a = _Approval(aid, str(d.get("question")), binds, _opt_str(binding), ev.seq, ev.ts)
        if prior is not None:
            a.voided = prior.voided + (1 if prior.decision is not None else 0)
        self._approvals[aid] = a

    def _on_decided(self, ev: Event, d: dict[str, Any]) -> None:
        aid = d.get("approval")
        a = self._approvals.get(aid) if type(aid) is str else None
        if a is None or d.get("request_hash") != a.binding or a.decision is not None:
            return  # a decision for nothing, for another request, or a second one: not counted (verify reports it)
        a.decision = dict(d)
        a.decided_seq = ev.seq
        a.decided_ts = ev.ts

    def snapshot(self) -> dict[str, Any]:
        """The fold's state as JSON values; :meth:`from_snapshot` resumes it exactly."""
        return {
            "approvals": [
                [a.aid, a.question, a.binds, a.binding, a.seq, a.ts, a.decision, a.decided_seq, a.decided_ts, a.voided]
                for a in self._approvals.values()
            ],
            "checkpoints": [_checkpoint_json(c) for c in self._checkpoints],
            "accepted": self._accepted,
            "failed": None if self._failed is None else list(self._failed),
            "forked": self._forked,
            "phase": self._phase,
            "items": None if self._items is None else [[k, *v] for k, v in self._items.items()],
        }

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any]) -> OperatorFold:
        """The fold :meth:`snapshot` described; ``ValueError`` (or ``KeyError``/``TypeError``) for anything else."""
        approvals = [_Approval(*v) for v in snap["approvals"]]
        failed = snap["failed"]
        items = snap["items"]
        return cls(
            _approvals={a.aid: a for a in approvals},
            _checkpoints=[_checkpoint_from(v) for v in snap["checkpoints"]],
            _accepted=int(snap["accepted"]),
            _failed=None if failed is None else (int(failed[0]), str(failed[1]), failed[2]),
            _forked=snap["forked"],
            _phase=snap["phase"],
            _items=None if items is None else {str(v[0]): list(v[1:5]) for v in items},
        )

    def result(self, ws: WorkState | None = None, *, evidence: EvidenceCheck | None = None) -> OperatorView:
        """The view; with ``ws``, approvals whose bound key now records another request are void.

        ``evidence`` checks a checkpoint's evidence against the store; the checkpoint that counts
        (its phase, its status) is then chosen by :func:`counted_checkpoint`, the same rule
        :func:`intentlog.checkpoints.latest_checkpoint` applies.
        """
        approvals = {aid: _approval_state(a, ws) for aid, a in self._approvals.items()}
        failed = self._failed if self._failed is not None and self._failed[0] > self._accepted else None
        current, _ = counted_checkpoint(self._checkpoints, evidence)
        phase = current.phase if current is not None else self._phase
        return OperatorView(
            approvals=MappingProxyType(approvals),
            checkpoints=tuple(self._checkpoints),
            failed=failed[1] if failed else None,
            failed_by=failed[2] if failed else None,
            forked=MappingProxyType(self._forked) if self._forked is not None else None,
            phase=phase,
            current=current,
            backlog=self._backlog_items(),
        )

    def _backlog_items(self) -> BacklogItems | None:
        if self._items is None:
            return None
        waiting = tuple((k, v[1], v[2], v[3]) for k, v in self._items.items() if v[0] and v[1] is not None)
        return BacklogItems(len(self._items), sum(1 for v in self._items.values() if v[0]), waiting)


def _checkpoint_json(c: CheckpointRecord) -> list[Any]:
    return [
        c.seq,
        c.ts,
        c.phase,
        c.status,
        [dict(e) for e in c.evidence],
        c.revision,
        list(c.changed_files),
        c.note,
        c.by,
        c.turn,
        c.call,
        c.partial,
    ]


def _checkpoint_from(v: list[Any]) -> CheckpointRecord:
    if type(v) is not list or len(v) != 12 or type(v[11]) is not bool:
        raise ValueError("a checkpoint of the wrong shape")
    seq, ts, phase, status, evidence, revision, changed, note, by, turn, call, partial = v
    return CheckpointRecord(
        int(seq),
        ts,
        phase,
        status,
        tuple(MappingProxyType(e) for e in evidence),
        revision,
        tuple(changed),
        note,
        by,
        turn,
        call,
        partial,
    )


def _approval_state(a: _Approval, ws: WorkState | None) -> ApprovalState:
    void_reason: str | None = None
    key = a.binds.get("key")
    if ws is not None and "call" in a.binds and type(key) is str:
        latest = ws.call_for_key(key)
        if latest is not None and latest.request_hash is not None and latest.request_hash != a.binding:
            void_reason = (
                f"key {key!r} now records request {latest.request_hash} ({latest.call_id}), "
                f"not the {a.binding} this approval binds"
            )
    d = a.decision
    if void_reason is not None:
        status = VOID
    elif d is None:
        status = PENDING
    else:
        status = APPROVED if d.get("decision") == "approve" else REJECTED
    return ApprovalState(
        approval_id=a.aid,
        question=a.question,
        binds=MappingProxyType(a.binds),
        binding=a.binding,
        status=status,
        decision=_opt_str(d.get("decision")) if d else None,
        by=_opt_str(d.get("by")) if d else None,
        note=_opt_str(d.get("note")) if d else None,
        requested_seq=a.seq,
        requested_ts=a.ts,
        decided_seq=a.decided_seq,
        decided_ts=a.decided_ts,
        voided=a.voided,
        void_reason=void_reason,
    )


def approval_states(events: Iterable[Event], ws: WorkState | None = None) -> Mapping[str, ApprovalState]:
    """Every approval of a task's events, by id. Pure."""
    fold = OperatorFold()
    for ev in events:
        fold.apply(ev)
    return fold.result(ws).approvals
