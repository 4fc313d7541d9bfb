"""The caller's vocabulary for the protocol: the retry policy, a lookup's answer, outcome words."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from ..errors import (
    ProviderFailure,
    UsageError,
)

if TYPE_CHECKING:
    pass




DRIFT: Final = "DRIFT"
NOT_SERVED: Final = "not_served"
OUTCOMES: Final = ("served", "not_served", "resend")
PROVIDER_DEDUP: Final = "provider_dedup"
WRITE_SLACK: Final = 1.0  # seconds kept for the reconciliation's own write: its ts must stay inside the window


@final
@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Which failures get another attempt, how many, and how long to wait between them.

    Every try is an attempt in the record, followed by its ``attempt.retry_decided``.
    ``NotSent`` (the request provably never left) is retried when ``retry_not_sent``;
    a ``ProviderFailure`` when ``retry_on(failure)`` says so (default: its ``retryable``).
    An unknown effect is never retried: it needs reconciliation.

    ``hand_back=True``: instead of sleeping and sending again, :meth:`Call.run` records
    the decision with ``"delay": null``, syncs it and raises
    :class:`~intentlog.errors.RetryHandedBack`; the caller (an SDK with its own retry
    loop, the script, the next run) makes the next attempt, which the record allows.
    """

    max_attempts: int = 3
    backoff: float = 0.5
    factor: float = 2.0
    max_backoff: float = 30.0
    retry_not_sent: bool = True
    retry_on: Callable[[ProviderFailure], bool] | None = None
    retry_on_interpret_error: bool = False
    sleep: Callable[[float], None] = time.sleep
    hand_back: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise UsageError(f"RetryPolicy.max_attempts must be an integer of at least 1, not {self.max_attempts!r}")
        for name in ("backoff", "factor", "max_backoff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise UsageError(f"RetryPolicy.{name} must be a non-negative number, not {value!r}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after ``attempt`` (1-based) before the next one."""
        return float(min(self.max_backoff, self.backoff * self.factor ** max(0, attempt - 1)))

    def should_retry(self, failure: ProviderFailure) -> bool:
        return self.retry_on(failure) if self.retry_on is not None else failure.retryable


NO_RETRY: Final = RetryPolicy(max_attempts=1)
DEFAULT_RETRY: Final = RetryPolicy()


@final
@dataclass(frozen=True, slots=True)
class Served:
    """A ``lookup`` answer: the provider served the key; ``response`` are its bytes if known."""

    response: bytes | None = None

    def __post_init__(self) -> None:
        if self.response is not None and not isinstance(self.response, (bytes, bytearray)):
            raise UsageError(f"Served(response=...) takes the response bytes, not {type(self.response).__name__}")
