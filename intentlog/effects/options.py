"""The effect options, checked once: every spelling of the effect signature ends in one :class:`EffectOptions`.

:func:`~intentlog.effects.effect`, :meth:`intentlog.Task.effect`, :func:`prepare` /
:meth:`intentlog.Task.prepare`, :meth:`Call.run`, :meth:`intentlog.Session.turn` (and
the awaited forms) take their options as ``**options: Unpack[...]`` of the TypedDicts in
:mod:`intentlog._internal.types` (so a reader and a type checker see every name and type) and
turn them into one :class:`EffectOptions` with :meth:`EffectOptions.of`, where each value
is checked, once, before anything is written. Everything below the boundary takes the
checked options and checks nothing again. A test pins the TypedDicts' names and
annotations, the dataclass fields and every public signature to each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from .._internal.types import DEFAULT_PROGRESS_INTERVAL, PrepareKwargs, RunKwargs
from ..dedup import check as check_dedup
from ..errors import UsageError
from .intent import NOT_CALLABLE, check_name, check_rules
from .long import Long
from .policy import RetryPolicy

if TYPE_CHECKING:
    from .._internal.types import Interpret, Lookup, RedactRule
    from ..dedup import ProviderDedup

__all__ = ["PREPARE_OPTIONS", "RUN_OPTIONS", "EffectOptions"]


@final
@dataclass(frozen=True, slots=True)
class EffectOptions:
    """How one effect is prepared and run (every field optional; see :func:`~intentlog.effects.effect`).

    Made by :meth:`of` at a public boundary, which checks every value; code that builds
    one itself (a session, the HTTP transport) gives values it has checked already.
    """

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

    @classmethod
    def of(cls, given: Mapping[str, Any], allowed: type, where: str) -> EffectOptions:
        """The options a public spelling was given, checked: the one check before anything is written.

        ``allowed`` is the spelling's TypedDict (its keys are the names it takes); a name
        outside it raises :class:`TypeError` as Python does for an unexpected keyword
        argument of ``where``. A bad value raises :class:`~intentlog.errors.UsageError`,
        the long-effect limits first (they were always refused before anything else).
        """
        names: Mapping[str, Any] = allowed.__annotations__
        for name in given:
            if name not in names:
                raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
        opts = cls(**given)
        Long.of(opts.progress, opts.inactivity_timeout, opts.max_duration, opts.progress_interval)
        check_name(opts.name)
        if opts.interpret is not None and not callable(opts.interpret):
            raise UsageError(NOT_CALLABLE)
        if opts.retry is not None and not isinstance(opts.retry, RetryPolicy):
            raise UsageError(
                f"retry must be a RetryPolicy, not {type(opts.retry).__name__}: e.g. RetryPolicy(max_attempts=3)"
            )
        if opts.lookup is not None and not callable(opts.lookup):
            raise UsageError(
                "lookup must be a callable (key, call_id, attempt) -> Served | 'not_served' | None, "
                f"not {opts.lookup!r}"
            )
        check_rules(opts.drop, opts.redact)
        check_dedup(opts.dedup)
        return opts

    def long(self) -> Long:
        """The long-effect limits, as numbers of seconds (checked by :meth:`of`; not checked again)."""
        return Long(
            self.progress, _seconds(self.inactivity_timeout), _seconds(self.max_duration), float(self.progress_interval)
        )


def _seconds(value: float | None) -> float | None:
    return None if value is None else float(value)


#: The options :func:`prepare` takes, and those :meth:`Call.run` takes (``dedup`` is both).
PREPARE_OPTIONS: Final = tuple(PrepareKwargs.__annotations__)
RUN_OPTIONS: Final = tuple(RunKwargs.__annotations__)
