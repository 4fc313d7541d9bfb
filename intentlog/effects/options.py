"""The effect options, defined once: every spelling of the effect signature takes these names, types and defaults.

:func:`~intentlog.effects.effect`, :meth:`intentlog.Task.effect`, :func:`prepare` /
:meth:`intentlog.Task.prepare`, :meth:`Call.run` and :meth:`intentlog.Session.turn` list
their options as keyword parameters (so a reader and a type checker see them), and each
passes them on as one :class:`EffectOptions`; a test pins every spelling's names,
annotations and defaults to the fields here, so they cannot drift apart again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final, final

from .._types import DEFAULT_PROGRESS_INTERVAL
from .long import Long

if TYPE_CHECKING:
    from .._types import Interpret, Lookup, RedactRule
    from ..dedup import ProviderDedup
    from .policy import RetryPolicy

__all__ = ["PREPARE_OPTIONS", "RUN_OPTIONS", "EffectOptions"]


@final
@dataclass(frozen=True, slots=True)
class EffectOptions:
    """How one effect is prepared and run (every field optional; see :func:`~intentlog.effects.effect`)."""

    # preparing: what the intent records
    inputs: Mapping[str, str] | None = None  # named input digests, drift-checked with the request
    name: str | None = None  # a label for people
    drop: Iterable[str] | None = None  # request keys left out of the hash
    redact: RedactRule = None  # what never reaches the record
    dedup: ProviderDedup | None = None  # the provider's idempotency window
    # running: how the attempts go
    interpret: Interpret | None = None  # bytes -> the call's value (None: the raw bytes)
    retry: RetryPolicy | None = None  # None: the default policy
    lookup: Lookup | None = None  # asks the provider about an unknown effect
    progress: Callable[[Any], None] | None = None  # called with each heartbeat's info
    inactivity_timeout: float | None = None  # seconds without a heartbeat
    max_duration: float | None = None  # seconds in all
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL  # seconds between recorded heartbeats

    def long(self) -> Long:
        """The long-effect limits, checked (:class:`~intentlog.errors.UsageError` for a bad one)."""
        return Long.of(self.progress, self.inactivity_timeout, self.max_duration, self.progress_interval)


#: The options :func:`prepare` takes, and those :meth:`Call.run` takes (``dedup`` is both).
PREPARE_OPTIONS: Final = ("inputs", "name", "drop", "redact", "dedup")
RUN_OPTIONS: Final = tuple(f.name for f in fields(EffectOptions) if f.name not in PREPARE_OPTIONS[:-1])
