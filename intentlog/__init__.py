"""intentlog: resumable, not merely restartable.

Every task writes an fsync'd, hash-chained JSONL stream; every request and response is
kept in a BLAKE3 content-addressed store; pure projections say, from the record alone,
what was done, what is unknown and what is safe next.

    import intentlog
    task = intentlog.open("evidence").task("chapter-16")
    review = task.effect("review-p7", request, send=client.send, interpret=parse_review)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .artifacts import ArtifactStore, Ref
from .errors import (
    ApprovalConflict,
    ApprovalPending,
    ApprovalRejected,
    ApprovalVoid,
    ArtifactError,
    ArtifactMissing,
    CallFailed,
    Conflict,
    CorruptStream,
    DigestMismatch,
    EffectUnknown,
    IntentlogError,
    InvalidDigest,
    InvalidTaskId,
    KeyReused,
    LedgerError,
    LinkRefused,
    NotALedger,
    NotSent,
    NotSerializable,
    OutsideWorkspace,
    PreparationFailed,
    ProviderFailure,
    ReinterpretFailed,
    RequiredContextMissing,
    ReservedKind,
    ResumeRefused,
    RetryHandedBack,
    StreamPoisoned,
    TaskBusy,
    UnknownApproval,
    UnknownCall,
    UsageError,
    WrongType,
)
from .eventlog import CANON_VERSION, Event, Redact, canonicalize, request_hash
from .ledger import Ledger, RepairReport
from .ledger import open_ledger as open
from .projections import CallState, CompilationState, WorkState, work_state
from .task import Task

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .backlog import Backlog, PayloadChanged, StillBlocked
    from .checkpoints import Checkpoint
    from .compile import Package
    from .dedup import ProviderDedup
    from .effects import NO_RETRY, Call, RetryPolicy, Served, heartbeat
    from .idioms.errors import ChildrenPending, EventConflict, EventTimedOut, Suspended
    from .ledgerreads import Revision, Revisions
    from .projections.operator import ApprovalState
    from .sessions import Session, Turn

# name -> the module that defines it, loaded on first use
_LAZY = {
    "NO_RETRY": "effects",
    "Call": "effects",
    "Package": "compile",
    "RetryPolicy": "effects",
    "Served": "effects",
    "heartbeat": "effects",
    "Session": "sessions",
    "Turn": "sessions",
    "Checkpoint": "checkpoints",
    "Revision": "ledgerreads",
    "Revisions": "ledgerreads",
    "ProviderDedup": "dedup",
    "ApprovalState": "projections.operator",
    "Backlog": "backlog",
    "PayloadChanged": "backlog",
    "StillBlocked": "backlog",
    "ChildrenPending": "idioms.errors",
    "EventConflict": "idioms.errors",
    "EventTimedOut": "idioms.errors",
    "Suspended": "idioms.errors",
}


def __getattr__(name: str) -> Any:
    """The effect protocol's names (and sessions, checkpoints) load on first use: a script that only appends never
    pays for them."""
    import importlib

    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(f".{module}", __name__), name)
    if name == "http":
        return importlib.import_module(".http", __name__)
    raise AttributeError(f"module 'intentlog' has no attribute {name!r}")


__all__ = [
    "CANON_VERSION",
    "NO_RETRY",
    "ApprovalConflict",
    "ApprovalPending",
    "ApprovalRejected",
    "ApprovalState",
    "ApprovalVoid",
    "ArtifactError",
    "ArtifactMissing",
    "ArtifactStore",
    "Backlog",
    "Call",
    "CallFailed",
    "CallState",
    "Checkpoint",
    "ChildrenPending",
    "CompilationState",
    "Conflict",
    "CorruptStream",
    "DigestMismatch",
    "EffectUnknown",
    "Event",
    "EventConflict",
    "EventTimedOut",
    "IntentlogError",
    "InvalidDigest",
    "InvalidTaskId",
    "KeyReused",
    "Ledger",
    "LedgerError",
    "LinkRefused",
    "NotALedger",
    "NotSent",
    "NotSerializable",
    "OutsideWorkspace",
    "Package",
    "PayloadChanged",
    "PreparationFailed",
    "ProviderDedup",
    "ProviderFailure",
    "Redact",
    "Ref",
    "ReinterpretFailed",
    "RepairReport",
    "RequiredContextMissing",
    "ReservedKind",
    "ResumeRefused",
    "RetryHandedBack",
    "RetryPolicy",
    "Revision",
    "Revisions",
    "Served",
    "Session",
    "StillBlocked",
    "StreamPoisoned",
    "Suspended",
    "Task",
    "TaskBusy",
    "Turn",
    "UnknownApproval",
    "UnknownCall",
    "UsageError",
    "WorkState",
    "WrongType",
    "__version__",
    "canonicalize",
    "heartbeat",
    "open",
    "request_hash",
    "work_state",
]
