"""What the work-state fold keeps per call and compilation while folding (mutable; never handed out).

Only the fields the states need are kept, never whole event data. An attempt's record
is a set of bit flags (a set per attempt would cost a container per attempt).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .._internal.types import CompilationStage, ProviderEffect
from ..eventlog.format import Event

__all__ = [
    "DECIDED",
    "ERRORED",
    "INTERPRETED",
    "NOT_SENT",
    "OBSERVED",
    "RECONCILED",
    "STARTED",
    "TIMED_OUT",
    "CallRecord",
    "CompRecord",
    "attempt_effect",
    "call_from_json",
    "call_to_json",
    "comp_from_json",
    "comp_to_json",
    "worse",
]

# what an attempt's record holds, as bit flags (a set per attempt costs a container per attempt)
STARTED: Final = 1
NOT_SENT: Final = 2
ERRORED: Final = 4
OBSERVED: Final = 8
INTERPRETED: Final = 16
DECIDED: Final = 32
RECONCILED: Final = 64
TIMED_OUT: Final = 128


class CallRecord:
    """What the record says about one call (mutable while folding; never handed out)."""

    __slots__ = (
        "call_id",
        "completed",
        "dedup",
        "encoding",
        "error",
        "evidence",
        "failed",
        "first_seq",
        "flags",
        "forged",
        "inputs",
        "interpret_error",
        "interpretation",
        "interpreter",
        "key",
        "last_seq",
        "manifest",
        "n",
        "name",
        "outcome",
        "preparation_failed",
        "prior_effect",
        "reinterpretations",
        "request",
        "request_hash",
        "response",
        "result",
        "resumes",
        "retry",
        "since",
        "superseded_by",
        "timeout",
    )

    def __init__(self, call_id: str, key: str, name: str | None, ev: Event, resumes: str | None) -> None:
        self.call_id = call_id
        self.key = key
        self.name = name
        self.first_seq = self.last_seq = ev.seq  # the first and the latest event naming this call
        self.since = ev.ts
        self.resumes = resumes
        # only the fields the states need are kept, never whole event data: a long fold
        # then holds few containers, and the garbage collector has little to walk
        self.manifest = False
        self.request_hash: str | None = None
        self.request: dict[str, Any] | None = None
        self.inputs: dict[str, Any] | None = None
        # the latest attempt (earlier ones only count for what the provider may have done)
        self.n = 0  # attempts started
        self.flags = 0
        self.outcome: str | None = None  # reconciliation outcome
        self.retry: str | None = None  # "retry" | "fail"
        self.error: str | None = None  # the provider answered with this failure
        self.interpret_error: str | None = None
        self.prior_effect: ProviderEffect = "none"  # across the attempts before the latest
        self.completed = False
        self.result: Any = None
        self.failed: str | None = None
        self.preparation_failed: str | None = None
        self.superseded_by: str | None = None
        self.response: dict[str, Any] | None = None
        self.interpreter: dict[str, Any] | None = None
        self.timeout: str | None = None  # why the latest attempt timed out
        self.encoding: str | None = None  # the latest observation's text encoding, when not plain
        self.evidence: dict[str, Any] | None = None  # served evidence of the latest attempt's reconciliation
        self.reinterpretations = 0
        self.dedup = False  # some attempt was reconciled 'provider_dedup': later sends rely on the window
        # the data of the latest attempt's latest attempt.interpreted no completion consumed yet (its
        # token, projections/derive.py, is computed only when a completion needs it)
        self.interpretation: Mapping[str, Any] | None = None
        self.forged: tuple[int, str] | None = None



@dataclass(slots=True)
class CompRecord:
    cid: str
    first_seq: int
    last_seq: int
    offered: list[dict[str, Any]]
    required: list[str]
    stage: CompilationStage = "requested"
    missing: list[str] = field(default_factory=list)
    package: dict[str, Any] | None = None
    selected: list[str] = field(default_factory=list)
    error: str | None = None



_RANK: Final[dict[ProviderEffect, int]] = {"none": 0, "unknown": 1, "happened": 2}


def worse(a: ProviderEffect, b: ProviderEffect) -> ProviderEffect:
    """Across attempts, what the provider may have done: happened > unknown > none."""
    return a if _RANK[a] >= _RANK[b] else b


def attempt_effect(c: CallRecord) -> ProviderEffect:
    """What the provider may have done for the call's latest attempt."""
    if c.flags & OBSERVED or c.outcome == "served":
        return "happened"
    if c.flags & NOT_SENT or c.outcome == "not_served":
        return "none"
    return "unknown"


# -- a record as JSON, for a fold's snapshot (projections/workstate.py) ------------------

_CALL_FIELDS: Final = CallRecord.__slots__


def call_to_json(c: CallRecord) -> list[Any]:
    """The record's fields in slot order (JSON values; ``forged`` a list)."""
    return [getattr(c, name) for name in _CALL_FIELDS]


def call_from_json(values: list[Any]) -> CallRecord:
    """The record :func:`call_to_json` gave; ``ValueError`` for a list of the wrong length."""
    if type(values) is not list or len(values) != len(_CALL_FIELDS):
        raise ValueError("a call record of the wrong shape")
    c = CallRecord.__new__(CallRecord)
    for name, value in zip(_CALL_FIELDS, values, strict=True):
        setattr(c, name, value)
    if c.forged is not None:
        seq, why = c.forged
        c.forged = (int(seq), str(why))
    return c


def comp_to_json(c: CompRecord) -> list[Any]:
    return [c.cid, c.first_seq, c.last_seq, c.offered, c.required, c.stage, c.missing, c.package, c.selected, c.error]


def comp_from_json(values: list[Any]) -> CompRecord:
    if type(values) is not list or len(values) != 10:
        raise ValueError("a compilation record of the wrong shape")
    return CompRecord(*values)
