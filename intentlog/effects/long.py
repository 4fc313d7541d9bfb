"""Long effects: heartbeats (``attempt.progress``), the inactivity and duration limits, the send worker."""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._internal.types import DEFAULT_PROGRESS_INTERVAL
from ..errors import (
    EffectUnknown,
    UsageError,
)
from ..eventlog.canonical import scrub_value
from .intent import unknown_effect

if TYPE_CHECKING:
    from .._internal.types import Send
    from ..stream import TaskStream
    from .intent import Intent


HEARTBEAT: contextvars.ContextVar[Beat | None] = contextvars.ContextVar("intentlog_heartbeat", default=None)


def _limit(value: float | None, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise UsageError(f"{name} must be a positive number of seconds (or None), not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Long:
    """How one run watches a long ``send``: the progress callback and the two limits."""

    progress: Callable[[Any], None] | None = None
    inactivity_timeout: float | None = None
    max_duration: float | None = None
    interval: float = DEFAULT_PROGRESS_INTERVAL

    @classmethod
    def of(
        cls,
        progress: Callable[[Any], None] | None,
        inactivity_timeout: float | None,
        max_duration: float | None,
        interval: float,
    ) -> Long:
        if progress is not None and not callable(progress):
            raise UsageError(f"progress must be a callable taking the heartbeat's info, not {progress!r}")
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 <= interval < math.inf:
            raise UsageError(f"progress_interval must be a non-negative number of seconds, not {interval!r}")
        return cls(
            progress,
            _limit(inactivity_timeout, "inactivity_timeout"),
            _limit(max_duration, "max_duration"),
            float(interval),
        )


class TimedOut(Exception):
    """Internal: ``attempt.timed_out`` is durable; carries the EffectUnknown to raise."""

    def __init__(self, error: EffectUnknown) -> None:
        super().__init__(str(error))
        self.error = error


class Beat:
    """The heartbeat channel of one attempt: records progress, moves the inactivity deadline.

    One lock orders heartbeats and the timeout: ``attempt.progress`` is never written after
    ``attempt.timed_out``, and once the attempt is closed (returned, raised, timed out)
    heartbeats are ignored.
    """

    def __init__(
        self,
        task: TaskStream,
        call_id: str,
        attempt: int,
        long: Long,
        secrets: frozenset[str] = frozenset(),
        *,
        record: Callable[[str, dict[str, Any]], Any] | None = None,
    ) -> None:
        self.task = task
        # how attempt.progress is appended: here, or queued to the disk thread (an awaited send)
        self.record = record if record is not None else task.append
        self.secrets = secrets  # scrubbed from the info recorded, with the default redaction rules
        self.call_id = call_id
        self.attempt = attempt
        self.long = long
        self.lock = threading.Lock()
        self.closed = False
        self.started = self.last_beat = time.monotonic()
        self.last_record = -math.inf
        self.pending = 0

    def __call__(self, info: Mapping[str, Any] | None = None) -> bool:
        if info is not None and not isinstance(info, Mapping):
            raise UsageError(f"heartbeat info must be a dict (a JSON object) or None, not {type(info).__name__}")
        with self.lock:
            if self.closed:
                return False
            now = time.monotonic()
            self.last_beat = now
            self.pending += 1
            if now - self.last_record >= self.long.interval:
                self.record(
                    "attempt.progress",
                    {
                        "call": self.call_id,
                        "attempt": self.attempt,
                        "beats": self.pending,
                        "elapsed": round(now - self.started, 3),
                        "info": scrub_value(dict(info), secrets=self.secrets) if info is not None else None,
                    },
                )
                self.last_record = now
                self.pending = 0
        if self.long.progress is not None:
            self.long.progress(info)
        return True

    def next_limit(self) -> tuple[float, str, float] | None:
        """The earliest deadline (monotonic time), which limit it is, and its length."""
        limits: list[tuple[float, str, float]] = []
        with self.lock:
            if self.long.inactivity_timeout is not None:
                t = self.long.inactivity_timeout
                limits.append((self.last_beat + t, "inactivity", t))
            if self.long.max_duration is not None:
                t = self.long.max_duration
                limits.append((self.started + t, "max_duration", t))
        return min(limits) if limits else None

    def expire(self) -> tuple[str, float, float] | None:
        """Record ``attempt.timed_out`` if a deadline has passed: (limit, its length, seconds elapsed)."""
        with self.lock:
            if self.closed:  # pragma: no cover - only the waiting thread closes before expiring
                return None
            now = time.monotonic()
            due = [
                (name, t)
                for name, t, start in (
                    ("inactivity", self.long.inactivity_timeout, self.last_beat),
                    ("max_duration", self.long.max_duration, self.started),
                )
                if t is not None and now >= start + t
            ]
            if not due:
                return None  # a heartbeat moved the deadline while the waiter woke up
            limit, timeout = due[0]
            after = round(now - self.started, 3)
            self.closed = True
            self.task.append(
                "attempt.timed_out",
                {"call": self.call_id, "attempt": self.attempt, "after": after, "limit": limit, "timeout": timeout},
                sync=True,
            )
            return limit, timeout, after

    def close(self) -> None:
        with self.lock:
            self.closed = True


def heartbeat(info: Mapping[str, Any] | None = None) -> bool:
    """Report progress from inside a ``send``: resets the inactivity timeout, may record ``attempt.progress``.

    ``info`` is a small JSON object (tokens so far, a phase name) recorded with the
    heartbeat. Returns False, recording nothing, outside a running send or after its
    attempt ended or timed out. Works in the thread running ``send`` (and in threads
    started with a copy of its context); elsewhere use :func:`current_heartbeat`.
    """
    beat = HEARTBEAT.get()
    return beat(info) if beat is not None else False


def current_heartbeat() -> Callable[..., bool] | None:
    """The heartbeat function of the send running in this context, to hand to threads that ``send`` starts."""
    return HEARTBEAT.get()


def send_with_heartbeat(
    task: TaskStream, key: str, send: Send, intent: Intent, call_id: str, n: int, long: Long
) -> bytes | str:
    """Call ``send`` with a heartbeat in scope; in a watched worker thread when a limit is set.

    Raises what ``send`` raises, or :class:`TimedOut` once ``attempt.timed_out`` is durable.
    """
    beat = Beat(task, call_id, n, long, intent.secrets)
    try:
        if long.inactivity_timeout is None and long.max_duration is None:
            token = HEARTBEAT.set(beat)
            try:
                return send(intent.request)
            finally:
                HEARTBEAT.reset(token)
        return _watch(task, key, send, intent.request, beat)
    finally:
        beat.close()  # heartbeats from threads that outlive the send are not recorded


def _watch(task: TaskStream, key: str, send: Send, request: Any, beat: Beat) -> bytes | str:
    outcome: list[Any] = []  # [("ok", value)] or [("error", exc)], written once by the worker
    done = threading.Event()

    def work() -> None:
        HEARTBEAT.set(beat)
        try:
            outcome.append(("ok", send(request)))
        except BaseException as exc:  # handed to the waiting thread, which decides
            outcome.append(("error", exc))
        finally:
            done.set()

    ctx = contextvars.copy_context()
    name = f"intentlog-send-{task.id}-{beat.call_id}-{beat.attempt}"
    worker = threading.Thread(target=ctx.run, args=(work,), name=name, daemon=True)
    worker.start()
    while True:
        limit = beat.next_limit()
        if limit is None:  # pragma: no cover - _watch runs only with a limit
            done.wait()
            break
        when, _, _ = limit
        if done.wait(timeout=max(0.0, when - time.monotonic())):
            break
        expired = beat.expire()  # records attempt.timed_out, unless a heartbeat moved the deadline
        if expired is not None:
            raise TimedOut(timed_out_error(task, key, beat, *expired))
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value  # type: ignore[no-any-return]


def timed_out_error(task: TaskStream, key: str, beat: Beat, limit: str, timeout: float, after: float) -> EffectUnknown:
    what = "without a heartbeat" if limit == "inactivity" else "in all"
    return unknown_effect(
        task,
        beat.call_id,
        key,
        f"attempt {beat.attempt} timed out after {after:.1f} s {what} (limit {limit} {timeout:g} s)",
        "the provider may still serve the request and its late answer is not recorded; reconcile "
        f"with task.reconcile({beat.call_id!r}, ...) or the command line before any resend",
    )
