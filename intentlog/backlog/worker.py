"""A worker process: takes one item at a time, holds its task's lock for the whole run, resumes it.

The lease is the item task's writer lock, taken once and held until the item is left;
``lease.acquired {epoch, pid, host, start_time, boot_id}`` is appended at the seq the
worker read (``expected_seq``), so two holders can never both record the same epoch.
The worker opens the item task's writer with a gate (:class:`~intentlog.stream.AppendGate`):
before every ``attempt.started`` it checks that this process still holds the lock
(``/proc/locks``) and asks the supervisor for the quota units; the supervisor's answer
may be "stop" (shutdown), and then nothing is sent. Only then does the stream append
``quota.reserved {epoch, units}`` right before the attempt, synced together with it.
A grant lapses (:data:`~.quota.GRANT_VALID` after the worker asked): the gate is asked
again right before the send, and a lapsed grant is not sent (``attempt.not_sent``).
A worker ignores SIGINT and SIGTERM (its supervisor decides) and dies with its supervisor.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from multiprocessing.connection import Connection
from typing import Any, Final

from .._internal.procs import PROC_LOCKS, flock_writer, holds_flock
from ..errors import IntentlogError, LeaseLost, NotSent, TaskBusy
from ..eventlog import Event
from ..eventlog.canonical import dumps
from ..idioms.errors import Suspended
from ..projections.status import AWAITING_ACCEPTANCE, ITEM_RETURNED, StatusFold, task_status
from ..task import Task
from . import leases
from .children import run_step
from .itemcache import entry_left
from .messages import (
    Answer,
    Blocked,
    Busy,
    Done,
    Exhausted,
    Failed,
    Grant,
    Reply,
    Reserve,
    Run,
    Spent,
    Stop,
    Stopped,
    Waiting,
)  # fmt: skip
from .model import BLOCKED, LedgerLike, StatusLike, blocking_reason, foreign_records, given_up, task_extras
from .permanent import permanent_reason
from .procs import boot_id, die_with_parent, host_name, start_time

__all__ = [
    "ItemGate", "LeaseLost", "QuotaExhausted", "Stopping", "failure_answer", "lease_item", "record_result",
    "release_item", "run_item", "units", "with_entry", "worker_main",
]  # fmt: skip

Step = Callable[[Task, Any], Any]

_PENDING_UNITS: dict[str, dict[str, float]] = {}
#: per item task: the status fold its result was recorded with, for its view-cache line (:func:`with_entry`)
_RESULT_FOLDS: dict[str, StatusFold] = {}
CALLS: Final = "calls"
#: seconds to an item waiting for an event's fallback look (the run takes it again as soon as its inbox holds it)
EVENT_POLL: Final = 10.0


class Stopping(IntentlogError):
    """The runner is shutting down: this attempt does not start (nothing was sent)."""


class QuotaExhausted(IntentlogError):
    """A budget that cannot reopen is spent: the attempt does not start (nothing was sent)."""


def units(task: Task, **amounts: float) -> None:
    """Declare the units (tokens, cost, ...) the next effect of ``task`` will spend, for its quota reservation.

    Outside a backlog run this does nothing. The units are reserved before that effect's
    ``attempt.started`` and are never given back.
    """
    for name, n in amounts.items():
        if not isinstance(n, (int, float)) or isinstance(n, bool) or n < 0:
            raise TypeError(f"units {name}={n!r}: a number of units is a non-negative int or float")
    _PENDING_UNITS[task.id] = {k: float(v) for k, v in amounts.items()}


class ItemGate:
    """The item stream's gate for one lease: fences the lease and reserves quota before each attempt."""

    def __init__(self, task: Task, conn: Connection, epoch: int, item: str, asks: bool = True) -> None:
        self.task, self.conn, self.epoch, self.item, self.asks = task, conn, epoch, item, asks
        self.locked: tuple[int, int] | None = None  # (dev, inode) of the lock file the kernel says we hold
        self._lock_path: str | None = None  # a folder's lock file, named once
        self.deadline: float | None = None  # when the last grant lapses, on this process's monotonic clock

    def admit(self, kind: str, data: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
        """Nothing to add but before ``attempt.started``: the lease checked, the units granted, then reserved.

        Raises :class:`LeaseLost`, :class:`Stopping` or :class:`QuotaExhausted` (the attempt is
        not appended, so nothing is sent).
        """
        if kind != "attempt.started":
            return ()
        self.check_lease()
        want = {CALLS: 1.0, **_PENDING_UNITS.pop(self.task.id, {})}
        answer = self.ask(want)
        if isinstance(answer, Stop):
            raise Stopping(f"item {self.item!r}: the runner is stopping; the attempt did not start")
        if isinstance(answer, Spent):
            raise QuotaExhausted(f"item {self.item!r}: {answer.reason}; the attempt did not start")
        if self.asks:  # the grant was waited for: the lease is checked again after the wait
            self.check_lease()
        return (("quota.reserved", {"epoch": self.epoch, "units": want, "call": data.get("call")}),)

    def sending(self, call: str, attempt: int) -> None:
        """Right before the send: a grant past its deadline is not sent (:class:`NotSent`; asked again)."""
        deadline, self.deadline = self.deadline, None  # one grant, one send
        if deadline is not None and (late := time.monotonic() - deadline) > 0:
            raise NotSent(
                f"the quota grant for item {self.item!r} lapsed {late:.3f} s before the send could start "
                "(a grant is valid for its window's margin); its units stay counted and the next attempt asks again"
            )

    def ask(self, want: dict[str, float]) -> Reply:
        """The supervisor's word on this attempt's units (:meth:`request`), and the grant's deadline.

        A grant that carries a validity sets the deadline :meth:`sending` checks, counted
        from before the grant was asked on this process's own clock, so it is never late.
        """
        self.deadline = None
        asked = time.monotonic()
        answer = self.request(want)
        if isinstance(answer, Grant) and answer.valid is not None:
            self.deadline = asked + answer.valid
        return answer

    def request(self, want: dict[str, float]) -> Reply:
        """Asked and waited for, or (no quota) only a "stop" the supervisor told unasked."""
        if self.asks:
            self.conn.send(Reserve("reserve", self.item, want))
            answer: Reply = self.conn.recv()
            return answer
        # no quota: the supervisor's only word is "stop", sent unasked once the run stops
        return self.conn.recv() if self.conn.poll() else Grant("grant")

    def _name_lock(self) -> str:
        path = self.task.path
        self._lock_path = str(path.with_name(path.name + ".lock"))
        return self._lock_path

    def check_lease(self) -> None:
        """Raise :class:`LeaseLost` unless this process still holds the item task's lease.

        On a store the lease is the stream's epoch and the store fences the next put itself
        (:func:`leases.holder`). On a folder the first check asks the kernel whether the
        writer's own lock descriptor holds the ``flock`` on the file at the lock's path
        (``/proc/self/fdinfo``: exact, and one small read however many locks the host
        holds; ``/proc/locks`` where that cannot be read) and remembers the lock file's
        device and inode; later checks ask
        only that the lock file is still that file and that this handle's writer is still
        open. That is the same fact: an ``flock`` is held by its open file until the file
        is closed or unlocked (only the writer's close does either), and an inode held open
        is never reused, so a lock file removed or replaced under the holder fails the
        comparison.
        """
        me = os.getpid()
        writing = self.task.stream.writing
        st: os.stat_result | None = None
        if self.task.ledger.backend.fences:
            where = str(self.task.path)
            holder = leases.holder(self.task)
        else:
            lock = where = self._lock_path or self._name_lock()
            try:
                st = os.stat(lock, follow_symlinks=False)
            except OSError:  # the lock file is gone: it excludes no one, whoever locked it
                holder, st = None, None
            else:
                if self.locked is not None and writing and (st.st_dev, st.st_ino) == self.locked:
                    return
                fd = self.task.stream.lock_fd if writing else None
                held = None if fd is None else holds_flock(fd, st)
                if held:  # the kernel's word on the writer's own descriptor: exact and small
                    holder = me
                elif held is not None:  # not through the writer's lock: who holds it, to say so
                    try:
                        other = flock_writer(st, PROC_LOCKS)
                    except OSError:
                        other = None
                    holder = None if other == me else other  # another descriptor of ours is not this lease
                else:
                    try:
                        holder = flock_writer(st, PROC_LOCKS, mine=writing)
                    except OSError:  # no /proc/locks here: the writer's own lock is all there is to ask
                        holder = me if writing else None  # the writer checks its lock file before each sync
        if holder != me or not writing:
            raise LeaseLost(
                self.task.id, where, self.epoch,
                why=f"of item {self.item!r} is no longer held by this process (the lock's holder is {holder})",
            )  # fmt: skip
        if st is not None:
            self.locked = (st.st_dev, st.st_ino)


_Guard = ItemGate  # its earlier name

def _json_result(value: Any) -> Any:
    dumps(value)  # NotSerializable names the bad path
    return value


_IDENT: dict[int, tuple[str, int | None, str | None]] = {}


def _ident() -> tuple[str, int | None, str | None]:
    """This process's host, start time and boot id (read once per process: none of them changes)."""
    me = os.getpid()
    got = _IDENT.get(me)
    if got is None:
        got = _IDENT[me] = (host_name(), start_time(me), boot_id())
    return got


def _events(task: Task) -> list[Event]:
    """The item task's events: what its open writer holds (no read), or read from its stream."""
    held = task.stream.held_events()
    return held if held is not None else list(task.events())


def _blocked(task: Task, item: str) -> Blocked | Failed | None:
    return settled_by_a_person(task_status(_events(task), task_id=task.id), item)


def settled_by_a_person(st: StatusLike, item: str) -> Blocked | Failed | None:
    """What the item's task's record says before its step may run: it needs a person, or it was given up.

    A task given up (``task.failed``) answers :class:`Failed` with ``given_up``: the item is
    failed at once with the person's reason and its step never runs again.
    """
    held = blocking_reason(st)
    if held is not None:
        return Blocked("blocked", item, *held)
    why = given_up(st)
    return None if why is None else Failed("error", item, why, True)


def lease_item(task: Task, guard: ItemGate, item: str, backlog: str) -> Answer | int:
    """Take the item's lease (its task's writer lock) and say whether its step may run: the epoch, or the answer.

    The task's events are looked at once (the lease's epoch, whether it needs a person or
    was given up, whether it already returned), from what the writer's open read.
    ``lease.acquired`` is appended at the seq read and made durable with the next durable
    record. With an answer (busy, blocked, done already) the lease
    is left to :func:`release_item`.
    """
    stream = task.stream
    try:
        # the writer keeps what it reads and appends: the item's later looks at its stream read nothing
        writer = stream.open_writer(gate=guard, keep_events=True)
    except TaskBusy as exc:
        return Busy("busy", item, str(exc))
    # a stream holding its creation record alone (a new item) has nothing more to look at
    evs = _events(task) if writer.next_seq > 1 else []
    foreign = foreign_records(task.id, evs)
    if foreign is not None:  # never adopt a task the backlog did not start: nothing is written into it
        task.close()
        return Blocked(
            "blocked", item, BLOCKED, f"{foreign}; nothing is run in it", "add the payload under another item id"
        )
    epoch = guard.epoch = 1 + max(
        (int(ev.data.get("epoch", 0)) for ev in evs if ev.kind == "lease.acquired"), default=0
    )
    me = os.getpid()
    host, started, boot = _ident()
    lease = {
        "epoch": epoch, "pid": me, "host": host, "start_time": started, "boot_id": boot,
        "backlog": backlog, "item": item,
    }  # fmt: skip
    # made durable with the next durable record (an attempt's start, or the result): until
    # then nothing outside acts on it, and the lock, not the record, is what excludes others
    stream.append("lease.acquired", lease, expected_seq=writer.next_seq, defer=True)
    # no message for the lease: the supervisor sees the stream grow (its progress) and gets the final answer
    if len(evs) > 1:  # a task holding only its creation record needs no person and has not returned
        settled = settled_by_a_person(task_status(evs, task_id=task.id), item)
        if settled is not None:
            return settled
        if task_extras(evs, task.id).returned:  # a result under one of the backlog's own leases
            return Done("done", item, None)
    guard.check_lease()  # the kernel's word once per lease; the checks before attempts compare with it
    return epoch


def record_result(task: Task, item: str, backlog: str, epoch: int, value: Any) -> Done:
    """Record the step's JSON result, the task's acceptance and the lease's release under one sync."""
    result = _json_result(value)
    fold = StatusFold(task.id)  # one fold, for the acceptance and then for the view-cache line
    with task.batch():  # the result, its acceptance and the release share one sync
        task.append(ITEM_RETURNED, {"result": result, "epoch": epoch})
        for ev in _events(task):  # held by the writer (no read) when it holds the whole stream
            fold.apply(ev)
        if fold.status().state == AWAITING_ACCEPTANCE:
            task.accept(by=f"backlog {backlog}", note="the step returned")
        task.stream.append("lease.released", {"epoch": epoch})
    held = task.stream.held_events()
    if held is not None and fold.folded(held[: fold.count]):  # what was appended since, folded on
        for ev in held[fold.count :]:
            fold.apply(ev)
        _RESULT_FOLDS[task.id] = fold
    return Done("done", item, result)  # its view-cache line is made once the writer closed: with_entry


def with_entry(task: Task, answer: Answer) -> Answer:
    """A ``Done`` with its task's view-cache line, made from what the writer left as it closed (no read)."""
    fold = _RESULT_FOLDS.pop(task.id, None)
    if not isinstance(answer, Done):
        return answer
    try:
        return answer._replace(entry=entry_left(task.stream, fold))
    except Exception:  # the line is for display only: the view reads the task instead
        return answer


def failure_answer(task: Task, item: str, exc: BaseException) -> Answer:
    """What an item whose step (or its resume) raised ``exc`` answers: waiting, stopped, exhausted, blocked, failed."""
    if isinstance(exc, Suspended):  # a sleep, a wait or a join released the worker: taken again when due
        return Waiting("waiting", item, exc.due(time.time(), event_poll=EVENT_POLL), exc.what, exc.event, exc.children)
    permanent = permanent_reason(exc)
    if permanent is not None:  # a retry would raise it again (a usage error, failed children): no retry
        return Failed("error", item, permanent, permanent=True)
    if isinstance(exc, Stopping):
        return Stopped("stopped", item, str(exc))
    if isinstance(exc, QuotaExhausted):
        return Exhausted("exhausted", item, str(exc))
    # a step's own failure (or a resume refused): the supervisor decides a retry, recorded
    return _blocked(task, item) or Failed("error", item, f"{type(exc).__name__}: {exc}")


def release_item(task: Task, epoch: int, released: bool, *, for_entry: bool = False) -> None:
    """Record ``lease.released`` unless done already (a writer whose lock was lost writes nothing), then close.

    ``for_entry``: the caller makes the item's view-cache line next (:func:`with_entry`), from
    what the writer left; otherwise that is dropped (the task handle outlives the item).
    """
    _PENDING_UNITS.pop(task.id, None)
    if not for_entry:
        _RESULT_FOLDS.pop(task.id, None)
    stream = task.stream
    try:
        if stream.writing and not released and epoch:
            try:
                stream.append("lease.released", {"epoch": epoch})
            except IntentlogError:
                pass  # a writer whose lock was lost (or whose write failed) writes nothing more
    finally:
        try:
            task.close()
        finally:
            if not for_entry:
                stream.take_left()


def run_item(
    task: Task, conn: Connection, item: str, backlog: str, payload: Any, step: Step, *, asks: bool = True
) -> Answer:
    """Lease, resume or block, run the step, record its result; the message for the supervisor.

    The task's stream is read once before the step (the lease's epoch, whether it needs a
    person, whether it already returned) and once after it (whether it awaits acceptance).
    With ``asks`` every attempt waits for the supervisor's grant; without, it only looks
    for a "stop" the supervisor sent unasked (a run with no quota).
    """
    guard = ItemGate(task, conn, 0, item, asks)  # its epoch is read once the lock is held
    epoch, released = 0, False
    answer: Answer
    try:
        leased = lease_item(task, guard, item, backlog)
        if not isinstance(leased, int):
            return leased
        epoch = leased
        # suspending: a sleep, a wait or a join records what it waits for and releases this worker
        value = run_step(task, backlog, item, step, payload)
        answer = record_result(task, item, backlog, epoch, value)
        released = True
    except Exception as exc:
        return failure_answer(task, item, exc)
    finally:
        release_item(task, epoch or guard.epoch, released, for_entry=released)
    return with_entry(task, answer)


def worker_main(ledger: LedgerLike, conn: Connection, step: Step | str) -> None:
    """The worker's loop (a forked process): a :class:`~.messages.Run` in, its :data:`~.messages.Answer` out.

    The ledger object is the parent's; a forked child owns none of its task handles, so
    every task it asks for is a new handle whose first write takes the lock properly.
    """
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fn = resolve_step(step) if isinstance(step, str) else step
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "quit":
            return
        if msg[0] == "stop":  # told after its item ended: nothing is running to stop
            continue
        run = Run(*msg)
        answer = run_item(ledger.task(run.task), conn, run.item, run.backlog, run.payload, fn, asks=run.asks)
        conn.send(answer)


def resolve_step(spec: str) -> Step:
    """``package.module:function`` to the function; UsageError naming what is missing."""
    import importlib

    from ..errors import UsageError

    mod, sep, name = spec.partition(":")
    if not sep or not mod or not name:
        raise UsageError(f"--step {spec!r} is not package.module:function")
    try:
        module = importlib.import_module(mod)
    except ImportError as exc:
        raise UsageError(f"--step {spec!r}: module {mod!r} cannot be imported ({exc})") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"--step {spec!r}: {mod} has no function {name!r}")
    return fn  # type: ignore[no-any-return]
