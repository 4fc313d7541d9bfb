"""The awaitable driver: the protocol's decisions (:mod:`.call`'s steps) carried out with an event loop.

:func:`drive_async` runs the very generators :func:`.steps.drive` runs; only how each
instruction is carried out differs:

- the decision code itself, and so every append, read and sync, runs in the task's disk
  thread (:mod:`.disk`): the loop never waits on the disk, and concurrent calls share
  their syncs; every instruction reaches the loop with everything before it durable;
- :class:`~.steps.Deliver` awaits an async ``send`` on the loop (a plain function runs in
  a worker thread); heartbeats are queued to the disk thread; ``inactivity_timeout`` and
  ``max_duration`` are watched by the loop, ``attempt.timed_out`` recorded by the disk thread;
- :class:`~.steps.Interpreting` runs ``interpret`` and awaits it when it is async;
- :class:`~.steps.Pause` awaits :func:`asyncio.sleep` for the default policy sleep;
- :class:`~.steps.Ask` awaits an async ``lookup`` (a plain one runs in a worker thread).

Cancellation (``task.cancel()``, :func:`asyncio.wait_for`) is honest: the step is closed
where it stood (the key is free again on return) and the record says what happened --
nothing, or the intent only, when the caller gave up before ``attempt.started`` was
written; an unknown effect from then on (never "not sent": the request may be out); the
observation, the interpretation or the completion when those were written.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import TYPE_CHECKING, Any

from .disk import Disk, Job, disk_of
from .long import HEARTBEAT, Beat, TimedOut, timed_out_error
from .steps import Ask, Deliver, Instruction, Interpreting, Outcome, Pause, Steps

if TYPE_CHECKING:
    from ..stream import TaskStream

__all__ = ["drive_async"]


async def drive_async(task: TaskStream, steps: Steps[Any]) -> Any:
    """Run ``steps`` to its end: record work in the disk thread, the outside world awaited on the loop."""
    disk = disk_of(task)
    with disk.using():
        answer: Any = None
        error: BaseException | None = None
        try:
            while True:
                advanced = await disk.advance(steps, answer, error)
                if advanced.done:
                    return advanced.value
                answer, error = None, None
                try:
                    answer = await _execute(task, disk, advanced.instruction)
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # thrown into the decision code at its yield, which decides
                    error = exc
        except asyncio.CancelledError:
            await _close(disk, steps)
            raise


async def _close(disk: Disk, steps: Steps[Any]) -> None:
    """Close the step in the disk thread (its key is free again) and wait for it, even when cancelled again."""
    closing = disk.call(steps.close)
    try:
        await asyncio.shield(closing)
    except BaseException:  # cancelled again, or the close failed: the step is closed all the same
        pass


async def _execute(task: TaskStream, disk: Disk, ins: Instruction | None) -> Any:
    if isinstance(ins, Deliver):
        return await _deliver(task, disk, ins)
    if isinstance(ins, Interpreting):
        try:
            value = ins.interpret(ins.raw)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # the interpreter is user code: its failure is recorded
            return Outcome(error=exc)
        return Outcome(value)
    if isinstance(ins, Pause):
        if ins.sleep is time.sleep:
            await asyncio.sleep(ins.seconds)
        else:
            await _call(ins.sleep, ins.seconds)
        return None
    if isinstance(ins, Ask):
        return await _call(ins.lookup, ins.key, ins.call_id, ins.attempt)
    raise RuntimeError(f"no instruction for the loop: {ins!r}")  # pragma: no cover - the disk thread syncs


async def _call(fn: Any, *args: Any) -> Any:
    """Await an async function; run a plain one in a worker thread (it may block); await what it returns."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    result = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _deliver(task: TaskStream, disk: Disk, ins: Deliver) -> Any:
    """Send (``attempt.started`` is durable): heartbeats queued to the disk thread, the limits watched here."""

    def record(kind: str, data: dict[str, Any]) -> None:
        disk.post(Job(lambda: task.append(kind, data)))  # in order, before the observation's job

    beat = Beat(task, ins.call_id, ins.attempt, ins.long, ins.intent.secrets, record=record)
    token = HEARTBEAT.set(beat)
    try:
        if ins.long.inactivity_timeout is None and ins.long.max_duration is None:
            return await _call(ins.send, ins.intent.request)
        return await _watch(task, disk, ins, beat)
    finally:
        HEARTBEAT.reset(token)
        beat.close()  # heartbeats after the send are not recorded


async def _watch(task: TaskStream, disk: Disk, ins: Deliver, beat: Beat) -> Any:
    """Await the send under its limits; a passed limit records ``attempt.timed_out`` and abandons the send."""
    sending = asyncio.ensure_future(_call(ins.send, ins.intent.request))
    try:
        while True:
            limit = beat.next_limit()
            timeout = None if limit is None else max(0.0, limit[0] - time.monotonic())
            done, _ = await asyncio.wait({sending}, timeout=timeout)
            if done:
                return sending.result()
            expired = await disk.call(beat.expire)  # unless a heartbeat moved the deadline meanwhile
            if expired is not None:
                raise TimedOut(timed_out_error(task, ins.key, beat, *expired))
    finally:
        if not sending.done():
            sending.cancel()  # its late answer is never recorded
