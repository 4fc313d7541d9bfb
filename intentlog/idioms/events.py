"""External events: a task waits for a named event; another process, machine or webhook signals it.

A signal never writes the task's own stream: it goes to the task's **inbox**, the stream
of the task ``<task id>.inbox`` (:data:`~intentlog.projections.idioms.INBOX_SUFFIX`), as
``task.signalled {event, id, payload, payload_hash, task}``. A sender holds the inbox's
writer only for that one append, so a signal is recorded while the task's own writer is
held -- by a process waiting for it, or by one still busy elsewhere in the script -- on a
folder (its own lock file) and on an object store (its own lease) alike.

:func:`wait_for_event` records ``task.event_awaited {event, deadline}`` once (the deadline
read from this machine's clock, once), then reads the inbox (reads take no lock) until the
event is there, and records it in the task's own stream as ``task.event_received {event,
id, payload, payload_hash, inbox_seq}`` before returning the payload: from then on the
task's record alone says what it received, and every re-run returns the same payload. At
the deadline it records ``task.event_timed_out {event, deadline}`` -- holding the inbox's
writer after a last look, so a signal racing the deadline is either received or refused,
never recorded for a wait that timed out -- and raises
:class:`~intentlog.idioms.errors.EventTimedOut` -- on this run and, from the record, on
every later one. An event already in the inbox when the deadline passes is received: the
record is checked before the clock.

Signalling is idempotent by the event id the sender gives (default: the payload's
digest): the same id with the same payload again records nothing and returns the
recorded signal; another payload under that id, or another id for a name already
signalled, is refused with :class:`~intentlog.idioms.errors.EventConflict` and nothing
is written. An event name is one event for the task's life (a task awaiting several of
a kind names them: ``review-1``, ``review-2``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from .._internal.digest import digest_bytes
from ..errors import NotSerializable, TaskBusy, UsageError
from ..eventlog.canonical import dumps
from ..eventlog.format import check_task_id, parse_utc
from ..eventlog.reader import MAX_LINE
from ..projections.idioms import (
    EVENT_AWAITED,
    EVENT_RECEIVED,
    EVENT_TIMED_OUT,
    INBOX_SUFFIX,
    SIGNALLED,
    EventWait,
    Signal,
    idiom_state,
    inbox_signals,
)
from ..stream import as_recorded
from . import state
from .errors import EventConflict, EventTimedOut, Suspended
from .names import check_name
from .suspend import blocks
from .times import recorded_ts

if TYPE_CHECKING:
    from ..stream import StreamSource, TaskStream

__all__ = ["TaskHandles", "await_event", "inbox_id", "signal", "wait_for_event"]

#: the clock (epoch seconds) and the pause between reads of the inbox; a test may replace them
_now = time.time
_pause = time.sleep
_apause = asyncio.sleep


def inbox_id(task_id: str) -> str:
    """The id of the task whose stream is ``task_id``'s inbox (``<task id>.inbox``)."""
    check_task_id(task_id)
    if task_id.endswith(INBOX_SUFFIX):
        raise UsageError(
            f"task {task_id!r} is an inbox (the stream of {task_id[: -len(INBOX_SUFFIX)]!r}'s signals): an inbox "
            f"neither waits for events nor receives signals; signal the task itself; nothing was written"
        )
    got = task_id + INBOX_SUFFIX
    if len(got) > 128:
        raise UsageError(
            f"task id {task_id!r} is too long for an inbox ({len(task_id)} characters): a task that waits for "
            f"events has an id of at most {128 - len(INBOX_SUFFIX)}; nothing was written"
        )
    return got


def _ts(epoch: float) -> str:
    return recorded_ts(epoch, "the wait's deadline (its timeout from now)")


def _payload(task_id: str, name: str, payload: Any) -> tuple[Any, str]:
    """The payload as recorded (read back from its JSON) and its digest; NotSerializable naming where."""
    try:
        raw = dumps(payload)
    except NotSerializable as exc:
        why = str(exc).split(": ", 1)[-1]
        raise NotSerializable(
            f"task {task_id!r}, event {name!r}: the payload is not exact JSON ({why}); nothing was written",
            path=exc.path,
        ) from exc
    return as_recorded(orjson.loads(raw)), digest_bytes(raw)


def _same(task_id: str, name: str, got: Signal, event_id: str, payload_hash: str) -> Signal:
    """The recorded signal when this one repeats it; EventConflict when it contradicts it."""
    if got.event_id != event_id:
        raise EventConflict(
            task_id, name, f"it was already signalled with id {got.event_id!r} (inbox seq {got.seq}); one event per "
            "name: a second event needs its own name"
        )  # fmt: skip
    if got.payload_hash != payload_hash:
        raise EventConflict(
            task_id, name, f"id {event_id!r} was delivered before with another payload ({got.payload_hash}, now "
            f"{payload_hash}): a delivery under one id carries one payload"
        )  # fmt: skip
    return got


class TaskHandles(Protocol):
    """Where a sender finds a task's stream and its inbox's (a :class:`~intentlog.Ledger` is one)."""

    def task(self, task_id: str, *, wait: float = 0.0) -> StreamSource: ...


def _not_timed_out(task: TaskStream, name: str) -> None:
    """EventConflict when the task's own record (read without its lock) says its wait for ``name`` timed out."""
    waited = idiom_state(task.events()).waits.get(name)
    if waited is not None and waited.timed_out:
        raise EventConflict(
            task.id, name, f"the task stopped waiting for it at its deadline {waited.deadline} (recorded timed out)"
        )


def signal(
    ledger: TaskHandles, task_id: str, name: str, payload: Any, *, event_id: str | None = None, wait: float = 30.0
) -> tuple[Signal, bool]:
    """Record event ``name`` with ``payload`` in the task's inbox; (the recorded signal, whether this call wrote it).

    Checked before anything is written: the name, the id, the payload (exact JSON), and
    the record (a contradicting earlier signal, a wait that already timed out). The
    inbox's writer is taken (waiting up to ``wait`` seconds for another sender), the
    signal appended and synced, and the writer released before this returns.
    """
    check_name(name, "event")
    if event_id is not None:
        check_name(event_id, "event id")
    box_id = inbox_id(task_id)
    task = ledger.task(task_id).stream
    value, payload_hash = _payload(task.id, name, payload)
    eid = event_id if event_id is not None else "payload-" + payload_hash.removeprefix("blake3:")[:32]
    _not_timed_out(task, name)
    record = {"event": name, "id": eid, "payload": value, "payload_hash": payload_hash, "task": task.id}
    if len(dumps(record)) > MAX_LINE - 4096:  # refused before the inbox is made: nothing written, not even it
        raise NotSerializable(
            f"task {task.id!r}, event {name!r}: the payload is {len(dumps(value))} bytes of JSON, more than a stream "
            f"line may hold ({MAX_LINE} bytes with its envelope); store it as an artifact (Ledger.artifacts.put) and "
            "signal its ref; nothing was written",
            path="payload",
        )
    box = ledger.task(box_id, wait=wait).stream
    got = inbox_signals(box.events()).get(name)
    if got is not None:
        return _same(task.id, name, got, eid, payload_hash), False
    try:
        with box.mutex:
            box.open_writer()  # the inbox's lock (or lease): no other sender appends from here on
            got = inbox_signals(box.events()).get(name)
            if got is not None:  # another sender recorded it while this one waited for the writer
                return _same(task.id, name, got, eid, payload_hash), False
            _not_timed_out(task, name)  # again, under the writer a waiter's timeout is recorded under
            ev = box.append(SIGNALLED, record, sync=True)
    finally:
        box.close()  # a sender holds the inbox for one append only
    return Signal(name, eid, value, payload_hash, ev.seq), True


def _check_seconds(label: str, value: object) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf")
    ):
        raise UsageError(
            f"{label} must be a finite, non-negative number of seconds, not {value!r}; nothing was written"
        )


def _awaited(task: TaskStream, name: str, timeout: float | None) -> EventWait:
    with task.mutex:
        got = state.current(task).waits.get(name)
        if got is None:
            deadline = _ts(_now() + timeout) if timeout is not None else None
            state.record(task, EVENT_AWAITED, {"event": name, "deadline": deadline})
            got = state.current(task).waits[name]
        return got


def _receive(task: TaskStream, name: str, got: Signal) -> EventWait:
    with task.mutex:
        state.record(
            task,
            EVENT_RECEIVED,
            {"event": name, "id": got.event_id, "payload": got.payload, "payload_hash": got.payload_hash,
             "inbox_seq": got.seq},
        )  # fmt: skip
        return state.current(task).waits[name]


def _time_out(task: TaskStream, name: str, w: EventWait, inbox: Callable[[], TaskStream]) -> EventWait:
    """At the deadline: a last look and the timeout recorded **under the inbox's writer**.

    A sender checks the task's record again under that same writer before it appends, so
    a signal and a timeout are ordered: the signal lands first and is received here, or
    the timeout is recorded first and the sender is refused (``EventConflict``) -- never a
    signal recorded for a wait that timed out. The inbox is created when it does not exist
    yet (its first record, as a sender's first signal would make it). An inbox held by
    another sender past the writer's wait leaves the wait open: the next look tries again.
    """
    box = inbox()
    try:
        with box.mutex:
            try:
                box.open_writer()
            except TaskBusy:
                return w
            got = inbox_signals(box.events()).get(name)
            if got is not None:
                return _receive(task, name, got)
            with task.mutex:
                state.record(task, EVENT_TIMED_OUT, {"event": name, "deadline": w.deadline})
                return state.current(task).waits[name]
    finally:
        box.close()


def _look(task: TaskStream, name: str, box_id: str, w: EventWait, inbox: Callable[[], TaskStream]) -> EventWait:
    """One look at the inbox: the event received or the timeout recorded when either is due; the wait as recorded."""
    got = inbox_signals(task.storage.task_events(box_id, 0)).get(name)
    if got is not None:
        return _receive(task, name, got)
    if w.deadline is not None and _now() >= parse_utc(w.deadline).timestamp():
        return _time_out(task, name, w, inbox)
    with task.mutex:
        return state.current(task).waits[name]


def _settled(task: TaskStream, w: EventWait, block: bool, poll: float) -> tuple[bool, Any]:
    """(True, payload) once received; EventTimedOut once timed out; else (False, the pause before the next look)."""
    if w.received:
        return True, w.payload
    if w.timed_out:
        raise EventTimedOut(task.id, w.name, w.deadline or "?")
    if not block:
        raise Suspended(task.id, event=w.name)
    left = poll if w.deadline is None else min(poll, parse_utc(w.deadline).timestamp() - _now())
    return False, max(left, 0.01)


def _checked(task: TaskStream, name: str, timeout: float | None, poll: float) -> str:
    check_name(name, "event")
    _check_seconds("timeout", timeout)
    _check_seconds("poll", poll)
    return inbox_id(task.id)


def wait_for_event(
    task: TaskStream,
    name: str,
    *,
    inbox: Callable[[], TaskStream],
    timeout: float | None = None,
    poll: float = 1.0,
    block: bool = True,
) -> Any:
    """The payload of event ``name``, once signalled (see the module docstring); durable before it returns.

    ``timeout``: seconds from the first run's wait (recorded as a deadline), None: none.
    ``block=False``: raise :class:`~intentlog.idioms.errors.Suspended` instead of waiting.
    ``inbox``: the handle of the task's inbox stream (its writer is taken to record a timeout).
    """
    box_id = _checked(task, name, timeout, poll)
    block = blocks(block)
    w = _awaited(task, name, timeout)
    while True:
        if w.open:
            w = _look(task, name, box_id, w, inbox)
        done, value = _settled(task, w, block, poll)
        if done:
            return value
        _pause(value)


async def await_event(
    task: TaskStream,
    name: str,
    *,
    inbox: Callable[[], TaskStream],
    timeout: float | None = None,
    poll: float = 1.0,
    block: bool = True,
) -> Any:
    """:func:`wait_for_event`, awaited: each look runs off the event loop, each pause is an ``asyncio.sleep``."""
    box_id = _checked(task, name, timeout, poll)
    block = blocks(block)
    w = await asyncio.to_thread(_awaited, task, name, timeout)
    while True:
        if w.open:
            w = await asyncio.to_thread(_look, task, name, box_id, w, inbox)
        done, value = _settled(task, w, block, poll)
        if done:
            return value
        await _apause(value)
