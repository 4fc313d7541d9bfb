"""A worker process: takes one item at a time, holds its task's lock for the whole run, resumes it.

The lease is the item task's writer lock, taken once and held until the item is left;
``lease.acquired {epoch, pid, host, start_time, boot_id}`` is appended at the seq the
worker read (``expected_seq``), so two holders can never both record the same epoch.
Before every ``attempt.started`` a guard installed on the task's stream checks that this
process still holds the lock (``/proc/locks``) and asks the supervisor for the quota
units; the supervisor's answer may be "stop" (shutdown), and then nothing is sent. Only
then is ``quota.reserved {epoch, units}`` appended, synced together with the attempt.
A worker ignores SIGINT and SIGTERM (its supervisor decides) and dies with its supervisor.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any, Final

from ..errors import ApprovalPending, IntentlogError, ResumeRefused, TaskBusy
from ..eventlog.canonical import dumps
from ..projections.status import AWAITING_ACCEPTANCE, task_status
from ..task import Task
from . import leases
from .model import LedgerLike, blocking_reason
from .procs import boot_id, die_with_parent, host_name, start_time

__all__ = ["LeaseLost", "QuotaExhausted", "Stopping", "units", "worker_main"]

Step = Callable[[Task, Any], Any]

_PENDING_UNITS: dict[str, dict[str, float]] = {}
CALLS: Final = "calls"


class Stopping(IntentlogError):
    """The runner is shutting down: this attempt does not start (nothing was sent)."""


class LeaseLost(IntentlogError):
    """This process no longer holds the item task's writer lock: it must not write or send."""


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


class _Guard:
    """Installed as the item stream's ``before_append`` for one lease."""

    def __init__(self, task: Task, conn: Connection, epoch: int, item: str) -> None:
        self.task, self.conn, self.epoch, self.item = task, conn, epoch, item
        self.inside = False

    def __call__(self, kind: str, data: Mapping[str, Any]) -> None:
        if kind != "attempt.started" or self.inside:
            return
        self.check_lease()
        want = {CALLS: 1.0, **_PENDING_UNITS.pop(self.task.id, {})}
        self.conn.send(("reserve", self.item, want))
        answer = self.conn.recv()
        if answer[0] == "stop":
            raise Stopping(f"item {self.item!r}: the runner is stopping; the attempt did not start")
        if answer[0] == "exhausted":
            raise QuotaExhausted(f"item {self.item!r}: {answer[1]}; the attempt did not start")
        self.check_lease()
        self.inside = True
        try:
            self.task.stream.append("quota.reserved", {"epoch": self.epoch, "units": want, "call": data.get("call")})
        finally:
            self.inside = False

    def check_lease(self) -> None:
        holder = leases.holder(self.task)  # the folder's lock, or the store's lease (the store fences the put)
        if holder != os.getpid():
            raise LeaseLost(
                f"item {self.item!r}: lease epoch {self.epoch} is no longer held by this process "
                f"(the lock's holder is {holder}); nothing is written or sent"
            )


def _json_result(value: Any) -> Any:
    dumps(value)  # NotSerializable names the bad path
    return value


def _released(stream: Any, epoch: int) -> bool:
    last = None
    for ev in stream.events():
        last = ev
    return last is not None and last.kind == "lease.released" and last.data.get("epoch") == epoch


def run_item(task: Task, conn: Connection, item: str, backlog: str, payload: Any, step: Step) -> tuple[Any, ...]:
    """Lease, resume or block, run the step, record its result; the message for the supervisor."""
    stream = task.stream
    try:
        stream.open_writer()
    except TaskBusy as exc:
        return ("busy", item, str(exc))
    epoch = 1 + max((int(ev.data.get("epoch", 0)) for ev in task.events() if ev.kind == "lease.acquired"), default=0)
    me = os.getpid()
    lease = {
        "epoch": epoch, "pid": me, "host": host_name(), "start_time": start_time(me), "boot_id": boot_id(),
        "backlog": backlog, "item": item,
    }  # fmt: skip
    stream.append("lease.acquired", lease, expected_seq=stream.next_seq)
    conn.send(("leased", item, epoch, me))
    guard = _Guard(task, conn, epoch, item)
    try:
        st = task_status(task.events(), task_id=task.id)
        held = blocking_reason(st)
        if held is not None:
            return ("blocked", item, held[0], held[1], held[2])
        if any(ev.kind == "item.returned" for ev in task.events()):
            return ("done", item, None)
        stream.before_append = guard
        try:
            result = _json_result(step(task, payload))
        finally:
            stream.before_append = None
        with task.batch():  # the result, its acceptance and the release share one sync
            task.append("item.returned", {"result": result, "epoch": epoch})
            if task_status(task.events(), task_id=task.id).state == AWAITING_ACCEPTANCE:
                task.accept(by=f"backlog {backlog}", note="the step returned")
            stream.append("lease.released", {"epoch": epoch})
        return ("done", item, result)
    except (Stopping, QuotaExhausted) as exc:
        return ("stopped" if isinstance(exc, Stopping) else "exhausted", item, str(exc))
    except (ApprovalPending, ResumeRefused) as exc:
        st = task_status(task.events(), task_id=task.id)
        held = blocking_reason(st)
        if held is not None:
            return ("blocked", item, held[0], held[1], held[2])
        return ("error", item, f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # a step's own failure: the supervisor decides a retry, recorded
        st = task_status(task.events(), task_id=task.id)
        held = blocking_reason(st)
        if held is not None:
            return ("blocked", item, held[0], held[1], held[2])
        return ("error", item, f"{type(exc).__name__}: {exc}")
    finally:
        _PENDING_UNITS.pop(task.id, None)
        try:
            if stream.writing and not _released(stream, epoch):
                stream.append("lease.released", {"epoch": epoch})
        finally:
            task.close()


def worker_main(ledger: LedgerLike, conn: Connection, step: Step | str) -> None:
    """The worker's loop (a forked process): ``("item", item, task, backlog, payload)`` in, one answer out per item.

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
        _, item, task_id, backlog, payload = msg
        answer = run_item(ledger.task(task_id), conn, item, backlog, payload, fn)
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
