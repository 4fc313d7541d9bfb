"""Durable sleep: the wake time is recorded once, and every run waits for that same time.

``task.sleep_for(duration)`` / ``task.sleep_until(when)`` append ``task.sleep_started
{sleep, until, seconds}`` (synced) with the wake time read once from this machine's clock,
then block until it. A re-run after a crash finds the record and sleeps only what is
left (the recorded wake time wins over a new duration or time); a re-run after the wake
time continues at once. Waking appends ``task.woke {sleep}``. A projection never reads
the clock: ``intentlog status`` shows the recorded wake time ("sleeping until …").

A sleep is named: ``name=`` or, by default, ``sleep-<n>`` for the n-th unnamed sleep this
process asks of the task (a re-run asks them in the same order). A script that sleeps a
varying number of times, or reopens a task in one process, names its sleeps.

``block=False`` records the sleep and, when it is not yet due, raises
:class:`~intentlog.idioms.errors.Suspended` instead of waiting: a backlog worker releases
the item and it is taken again when due (a backlog worker runs its step inside
:func:`~intentlog.idioms.suspend.suspending`, so every sleep there suspends).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import threading
import time
import weakref
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..eventlog.format import parse_utc
from ..projections.idioms import SLEEP_STARTED, WOKE, Sleep
from . import state
from .errors import Suspended
from .names import check_name
from .suspend import blocks
from .times import recorded_ts

if TYPE_CHECKING:
    from ..stream import TaskStream

__all__ = ["asleep_for", "asleep_until", "sleep_for", "sleep_until"]

#: the clock (epoch seconds) and the pauses (blocking, awaited); a test may replace them
_now = time.time
_pause = time.sleep
_apause = asyncio.sleep
#: the longest single pause: the wall clock is read again after it (a clock step is noticed)
_STEP = 60.0

_UNNAMED: weakref.WeakKeyDictionary[TaskStream, int] = weakref.WeakKeyDictionary()
_UNNAMED_LOCK = threading.Lock()


def _name(task: TaskStream, name: str | None) -> str:
    if name is not None:
        return check_name(name, "sleep")
    with _UNNAMED_LOCK:
        n = _UNNAMED.get(task, 0) + 1
        _UNNAMED[task] = n
    return f"sleep-{n}"


def _ts(epoch: float) -> str:
    return recorded_ts(epoch, "the sleep's wake time")


def _seconds(duration: object) -> float:
    if isinstance(duration, _dt.timedelta):
        duration = duration.total_seconds()
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 0 <= duration < float("inf"):
        raise UsageError(
            f"a sleep takes a finite, non-negative number of seconds or a timedelta, not {duration!r}; nothing was "
            "written"
        )
    return float(duration)


def _when(when: object) -> float:
    if not isinstance(when, _dt.datetime) or when.tzinfo is None:
        raise UsageError(
            f"sleep_until takes a timezone-aware datetime (datetime.now(timezone.utc) + ...), not {when!r}; nothing "
            "was written"
        )
    return when.timestamp()


def _start(task: TaskStream, name: str, until: float, seconds: float | None) -> Sleep:
    """The sleep as recorded: the record's when there is one, else this one, recorded now."""
    with task.mutex:
        got = state.current(task).sleeps.get(name)
        if got is None:
            state.record(task, SLEEP_STARTED, {"sleep": name, "until": _ts(until), "seconds": seconds})
            got = state.current(task).sleeps[name]
        return got


def _left(task: TaskStream, s: Sleep, block: bool) -> float:
    """Seconds left of the sleep (0: due); ``Suspended`` when it may not block and is not due."""
    left = max(0.0, parse_utc(s.until).timestamp() - _now())
    if left > 0 and not blocks(block):
        raise Suspended(task.id, until=s.until)
    return left


def _woke(task: TaskStream, s: Sleep) -> None:
    with task.mutex:
        if not state.current(task).sleeps[s.name].woke:
            state.record(task, WOKE, {"sleep": s.name})


def _wait(task: TaskStream, s: Sleep, block: bool) -> None:
    if s.woke:
        return
    while (left := _left(task, s, block)) > 0:
        _pause(min(left, _STEP))
    _woke(task, s)


async def _await(task: TaskStream, s: Sleep, block: bool) -> None:
    if s.woke:
        return
    while (left := _left(task, s, block)) > 0:
        await _apause(min(left, _STEP))
    await asyncio.to_thread(_woke, task, s)


def sleep_for(task: TaskStream, duration: float | _dt.timedelta, *, name: str | None = None, block: bool = True) -> str:
    """Sleep ``duration`` (seconds or a timedelta) from the first run's record; return the wake time recorded."""
    seconds = _seconds(duration)
    sleep_name = _name(task, name)
    s = _start(task, sleep_name, _now() + seconds, seconds)
    _wait(task, s, block)
    return s.until


def sleep_until(task: TaskStream, when: _dt.datetime, *, name: str | None = None, block: bool = True) -> str:
    """Sleep until ``when`` (aware), or the time the first run recorded; return the wake time recorded."""
    until = _when(when)
    sleep_name = _name(task, name)
    s = _start(task, sleep_name, until, None)
    _wait(task, s, block)
    return s.until


async def asleep_for(
    task: TaskStream, duration: float | _dt.timedelta, *, name: str | None = None, block: bool = True
) -> str:
    """:func:`sleep_for`, awaited: the record read and written off the event loop, the pause an ``asyncio.sleep``."""
    seconds = _seconds(duration)
    sleep_name = _name(task, name)
    s = await asyncio.to_thread(_start, task, sleep_name, _now() + seconds, seconds)
    await _await(task, s, block)
    return s.until


async def asleep_until(task: TaskStream, when: _dt.datetime, *, name: str | None = None, block: bool = True) -> str:
    """:func:`sleep_until`, awaited (see :func:`asleep_for`)."""
    until = _when(when)
    sleep_name = _name(task, name)
    s = await asyncio.to_thread(_start, task, sleep_name, until, None)
    await _await(task, s, block)
    return s.until
