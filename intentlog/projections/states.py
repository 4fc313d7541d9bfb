"""The work state's result types: what a call, a compilation and a task are, as the record proves them.

Frozen values with their JSON form (``intentlog status --json``); the next operations'
words (DESIGN §2). The fold that builds them is :mod:`intentlog.projections.workstate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .._internal.types import CompilationStage, NextOperation, ProviderEffect, Stage

__all__ = [
    "CHECK_AND_ACCEPT",
    "FINALIZE",
    "FIX_INPUTS",
    "NONE",
    "OPERATOR_DECIDES",
    "RECOMPILE",
    "RECONCILE_EFFECT",
    "REDECIDE",
    "REINTERPRET",
    "START_CALL",
    "START_NEXT_ATTEMPT",
    "WORK_STATE_VERSION",
    "CallState",
    "CompilationState",
    "WorkState",
]


# next operations (DESIGN §2); their type, :data:`~intentlog._internal.types.NextOperation`, lists exactly these words
START_CALL: Final[NextOperation] = "start call"
RECONCILE_EFFECT: Final[NextOperation] = "reconcile effect"
REINTERPRET: Final[NextOperation] = "reinterpret"
REDECIDE: Final[NextOperation] = "redecide"
FINALIZE: Final[NextOperation] = "finalize"
START_NEXT_ATTEMPT: Final[NextOperation] = "start next attempt"
FIX_INPUTS: Final[NextOperation] = "fix inputs"
RECOMPILE: Final[NextOperation] = "recompile"
CHECK_AND_ACCEPT: Final[NextOperation] = "check and accept"
OPERATOR_DECIDES: Final[NextOperation] = "operator decides"
NONE: Final[NextOperation] = "none"

WORK_STATE_VERSION: Final = "intentlog-workstate/1"


@dataclass(frozen=True, slots=True)
class CallState:
    """One call as the record proves it."""

    call_id: str
    key: str
    name: str | None
    stage: Stage
    next_operation: NextOperation
    provider_effect: ProviderEffect
    duplicate_effect_risk: bool
    attempts: int
    request_hash: str | None
    request: Mapping[str, Any] | None
    inputs: Mapping[str, str]
    resumes: str | None
    superseded_by: str | None
    result: Any
    response: Mapping[str, Any] | None
    reason: str | None
    first_seq: int
    last_seq: int
    since: str  # ts of the event that put the call in its stage
    interpreter: Mapping[str, Any] | None
    encoding: str | None = None  # how the observed response decodes back to the text send returned (if not UTF-8)
    interpret_error: str | None = None  # the latest attempt's latest interpretation failed with this
    reinterpretations: int = 0  # how many interpretations of stored bytes followed the first one
    observation_pending: bool = False  # served evidence is recorded in effect.reconciled, its observation not yet
    provider_dedup: bool = False  # an attempt's unknown effect was resolved by the provider's idempotency window
    # (seq, why) of the latest completion when it carries what its interpretation or observation does not:
    # the record contradicts itself there, and the protocol refuses to return its value
    forged: tuple[int, str] | None = None


@dataclass(frozen=True, slots=True)
class CompilationState:
    compilation_id: str
    stage: CompilationStage
    next_operation: NextOperation
    offered: tuple[Mapping[str, Any], ...]
    required: tuple[str, ...]
    missing: tuple[str, ...]
    package: Mapping[str, Any] | None
    selected: tuple[str, ...]
    error: str | None
    first_seq: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class WorkState:
    """The projection of one task. ``calls`` and ``compilations`` keep recording order."""

    task_id: str | None
    calls: Mapping[str, CallState]
    compilations: Mapping[str, CompilationState]
    keys: Mapping[str, str]  # key -> its latest call
    next_operation: NextOperation
    unresolved: tuple[str, ...]  # call and compilation ids needing action, in order
    accepted: bool
    events: int
    last_seq: int
    last_ts: str | None
    other_kinds: Mapping[str, int]  # kinds this projection does not interpret, counted
    anomalies: tuple[str, ...]  # protocol events it could not place (see 'intentlog verify')
    version: str = WORK_STATE_VERSION

    def call_for_key(self, key: str) -> CallState | None:
        cid = self.keys.get(key)
        return self.calls[cid] if cid is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "task": self.task_id,
            "next_operation": self.next_operation,
            "unresolved": list(self.unresolved),
            "accepted": self.accepted,
            "events": self.events,
            "last_seq": self.last_seq,
            "last_ts": self.last_ts,
            "calls": {cid: _call_json(c) for cid, c in self.calls.items()},
            "compilations": {k: _comp_json(c) for k, c in self.compilations.items()},
            "other_kinds": dict(self.other_kinds),
            "anomalies": list(self.anomalies),
        }


def _call_json(c: CallState) -> dict[str, Any]:
    return {
        "call": c.call_id,
        "key": c.key,
        "name": c.name,
        "stage": c.stage,
        "next_operation": c.next_operation,
        "provider_effect": c.provider_effect,
        "duplicate_effect_risk": c.duplicate_effect_risk,
        "attempts": c.attempts,
        "request_hash": c.request_hash,
        "inputs": dict(c.inputs),
        "resumes": c.resumes,
        "superseded_by": c.superseded_by,
        "reason": c.reason,
        "first_seq": c.first_seq,
        "last_seq": c.last_seq,
        "since": c.since,
    }


def _comp_json(c: CompilationState) -> dict[str, Any]:
    return {
        "compilation": c.compilation_id,
        "stage": c.stage,
        "next_operation": c.next_operation,
        "required": list(c.required),
        "missing": list(c.missing),
        "offered": [dict(o) for o in c.offered],
        "selected": list(c.selected),
        "package": dict(c.package) if c.package else None,
        "error": c.error,
    }

