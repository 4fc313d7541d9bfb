"""The type aliases the package shares, defined once (and the one default the effect signature needs at import).

String-valued ``Literal`` types spell the words the record and the work state use, so a
typo is a type error while the on-disk and JSON words stay exactly as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, Union

if TYPE_CHECKING:
    from .effects.policy import Served
    from .eventlog.canonical import Redact

__all__ = [
    "DEFAULT_PROGRESS_INTERVAL",
    "JSON",
    "CompilationStage",
    "Digest",
    "Interpret",
    "Lookup",
    "NextOperation",
    "ProviderEffect",
    "RedactRule",
    "Send",
    "Stage",
    "StreamLayout",
]

#: Seconds between two recorded ``attempt.progress`` events of one attempt (beats in between are counted).
#: Here, not in :mod:`intentlog.effects.long`, so the ``Task`` facade spells the effect signature
#: without importing the protocol.
DEFAULT_PROGRESS_INTERVAL: Final = 1.0

#: A JSON value as the record holds it (exact JSON: no NaN, no non-string keys).
JSON = dict[str, Any] | list[Any] | str | int | float | bool | None

#: ``"blake3:" + 64 lowercase hex digits``.
Digest = str

#: A redaction rule as callers give it: key names, a predicate ``(path, key, value) -> bool``,
#: a :class:`~intentlog.Redact`, or None for the defaults.
RedactRule = Union[Iterable[str], Callable[[str, str, Any], bool], "Redact", None]

#: The provider call: the request value in, the raw response (bytes, or text) out.
Send = Callable[[Any], "bytes | str"]

#: Turns the stored response bytes into the call's value (exact JSON).
Interpret = Callable[[bytes], Any]

#: Asks the provider what became of an unknown effect: ``(key, call_id, attempt)`` -> a
#: :class:`~intentlog.Served`, ``"not_served"``, or None / ``"unknown"``.
Lookup = Callable[[str, str, int], "Served | str | None"]

#: A call's stage in the work state (DESIGN §6).
Stage = Literal[
    "requested",
    "manifest_recorded",
    "preparation_failed",
    "superseded",
    "failed",
    "retry_decided",
    "interpreted",
    "observed",
    "reconciled_not_served",
    "risk_accepted",
    "provider_dedup",
    "reconciled_served",
    "not_sent",
    "effect_unknown",
    "completed",
]

#: What is safe to do next (DESIGN §2).
NextOperation = Literal[
    "start call",
    "reconcile effect",
    "reinterpret",
    "redecide",
    "finalize",
    "start next attempt",
    "fix inputs",
    "recompile",
    "check and accept",
    "operator decides",
    "none",
]

#: A context compilation's stage.
CompilationStage = Literal["requested", "compiled", "failed"]

#: What the provider may have done for a call, across its attempts.
ProviderEffect = Literal["none", "unknown", "happened"]


class StreamLayout(Protocol):
    """Where a ledger keeps its streams and working folders (a :class:`~intentlog.Ledger` is one).

    The stream core and fork take this, never the ledger itself.
    """

    @property
    def root(self) -> Path: ...

    @property
    def tasks_dir(self) -> Path: ...

    @property
    def tmp_dir(self) -> Path: ...

    @property
    def quarantine_dir(self) -> Path: ...

    @property
    def workspace(self) -> Path: ...

    def stream_path(self, task_id: str) -> Path: ...
