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
    LedgerError,
    NotALedger,
    NotSent,
    NotSerializable,
    OutsideWorkspace,
    PreparationFailed,
    ProviderFailure,
    RequiredContextMissing,
    ReservedKind,
    ResumeRefused,
    StreamPoisoned,
    TaskBusy,
    UnknownCall,
    UsageError,
)
from .eventlog import CANON_VERSION, Event, canonicalize, request_hash
from .ledger import Ledger
from .ledger import open_ledger as open
from .projections import CallState, CompilationState, WorkState, work_state
from .task import Task

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .effects import NO_RETRY, Call, Package, RetryPolicy, Served

_LAZY = {"NO_RETRY", "Call", "Package", "RetryPolicy", "Served"}


def __getattr__(name: str) -> Any:
    """The effect protocol's names load on first use: a script that only appends never pays for them."""
    if name in _LAZY:
        from . import effects

        return getattr(effects, name)
    if name == "http":
        import importlib

        return importlib.import_module(".http", __name__)
    raise AttributeError(f"module 'intentlog' has no attribute {name!r}")

__all__ = [
    "CANON_VERSION",
    "NO_RETRY",
    "ArtifactError",
    "ArtifactMissing",
    "ArtifactStore",
    "Call",
    "CallFailed",
    "CallState",
    "CompilationState",
    "Conflict",
    "CorruptStream",
    "DigestMismatch",
    "EffectUnknown",
    "Event",
    "IntentlogError",
    "InvalidDigest",
    "InvalidTaskId",
    "Ledger",
    "LedgerError",
    "NotALedger",
    "NotSent",
    "NotSerializable",
    "OutsideWorkspace",
    "Package",
    "PreparationFailed",
    "ProviderFailure",
    "Ref",
    "RequiredContextMissing",
    "ReservedKind",
    "ResumeRefused",
    "RetryPolicy",
    "Served",
    "StreamPoisoned",
    "Task",
    "TaskBusy",
    "UnknownCall",
    "UsageError",
    "WorkState",
    "__version__",
    "canonicalize",
    "open",
    "request_hash",
    "work_state",
]
