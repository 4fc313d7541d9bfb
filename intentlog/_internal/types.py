"""The type aliases the package shares, defined once (and the one default the effect signature needs at import).

String-valued ``Literal`` types spell the words the record and the work state use, so a
typo is a type error while the on-disk and JSON words stay exactly as they were.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypedDict, TypeVar, Union

if sys.version_info >= (3, 11):
    from typing import Unpack as Unpack
elif TYPE_CHECKING:  # 3.10 has no typing.Unpack: only the type checker needs it (annotations are not evaluated)
    from typing_extensions import Unpack as Unpack

if TYPE_CHECKING:
    from ..dedup import ProviderDedup
    from ..effects.policy import RetryPolicy, Served
    from ..eventlog.canonical import Redact

__all__ = [
    "DEFAULT_PROGRESS_INTERVAL",
    "EFFECT_DEFAULTS",
    "JSON",
    "CompilationStage",
    "Digest",
    "EffectKwargs",
    "Interpret",
    "Lookup",
    "NextOperation",
    "PrepareKwargs",
    "ProviderEffect",
    "RedactRule",
    "RunKwargs",
    "Send",
    "Stage",
    "StreamLayout",
    "TurnKwargs",
    "spelled",
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
    def location(self) -> str: ...

    @property
    def tasks_dir(self) -> Path: ...

    @property
    def tmp_dir(self) -> Path: ...

    @property
    def quarantine_dir(self) -> Path: ...

    @property
    def workspace(self) -> Path: ...

    def stream_path(self, task_id: str) -> Path: ...


# -- the effect options, as keyword arguments -----------------------------------------
#
# Every public spelling of the effect signature takes its options as ``**options:
# Unpack[...]`` of one of these (PEP 692), so a type checker sees each name and type, and
# passes them on unchanged; the boundary turns them into one checked
# :class:`~intentlog.effects.options.EffectOptions` (whose fields these mirror, pinned by a
# test). Each option is declared once, in the group it belongs to.


class _Named(TypedDict, total=False):
    name: str | None  # a label for people


class _Recorded(TypedDict, total=False):
    inputs: Mapping[str, str] | None  # named input digests, drift-checked with the request
    drop: Iterable[str] | None  # request keys left out of the hash
    redact: RedactRule  # what never reaches the record


class _Dedup(TypedDict, total=False):
    dedup: ProviderDedup | None  # the provider's idempotency window


class _Interpreted(TypedDict, total=False):
    interpret: Interpret | None  # bytes -> the call's value (None: the raw bytes)
    retry: RetryPolicy | None  # None: the default policy


class _Looked(TypedDict, total=False):
    lookup: Lookup | None  # asks the provider about an unknown effect


class _Long(TypedDict, total=False):
    progress: Callable[[Any], None] | None  # called with each heartbeat's info
    inactivity_timeout: float | None  # seconds without a heartbeat
    max_duration: float | None  # seconds in all
    progress_interval: float  # seconds between recorded heartbeats


class PrepareKwargs(_Recorded, _Named, _Dedup, total=False):
    """The options of :func:`~intentlog.effects.prepare` / :meth:`intentlog.Task.prepare`: what the intent records."""


class RunKwargs(_Interpreted, _Looked, _Long, _Dedup, total=False):
    """The options of :meth:`intentlog.Call.run`: how the attempts go (``dedup`` overrides the prepared one)."""


class EffectKwargs(PrepareKwargs, RunKwargs, total=False):
    """The options of :func:`~intentlog.effects.effect` / :meth:`intentlog.Task.effect` (and the awaited forms)."""


class TurnKwargs(_Named, _Interpreted, _Long, total=False):
    """The effect options of :meth:`intentlog.Session.turn` (the session holds its own redaction rule)."""


#: The options' defaults where not None.
EFFECT_DEFAULTS: Final[Mapping[str, object]] = {"progress_interval": DEFAULT_PROGRESS_INTERVAL}

_F = TypeVar("_F", bound=Callable[..., Any])


def spelled(
    options: type, defaults: Mapping[str, object] = EFFECT_DEFAULTS, *, rest: bool = False
) -> Callable[[_F], _F]:
    """Show ``**options`` as the keyword parameters it stands for, in the function's signature.

    ``options`` is the TypedDict of the function's ``**options: Unpack[...]``; the
    signature :func:`inspect.signature` reports (help, IDEs, documentation) lists its
    keys as keyword-only parameters with their annotations as written and their defaults
    (``defaults``, else None). With ``rest`` the function's ``**kwargs`` takes other
    keywords as well (they go elsewhere) and stays in the signature after the options.
    The function itself is returned unchanged (no wrapper).
    """
    hints: Mapping[str, Any] = options.__annotations__

    def apply(fn: _F) -> _F:
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        more = [p for p in sig.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD and rest]
        params += [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=defaults.get(name),
                annotation=getattr(hint, "__forward_arg__", hint),
            )
            for name, hint in hints.items()
        ]
        setattr(fn, "__signature__", sig.replace(parameters=params + more))  # noqa: B010 - a function attribute
        return fn

    return apply
