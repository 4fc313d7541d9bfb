"""A worker process holding many items at once: an async step, each item one asyncio task on one event loop.

An ``async def step(task, payload)`` runs as one of up to ``in_flight`` items in one worker
process. The supervisor sees each item's place as a *lane*: its own pipe, speaking the
same messages as a one-item worker (:mod:`intentlog.backlog.messages`), plus
:class:`Cancel`. Each item keeps everything a one-item worker gives it:

- **its own lease**: the item task's writer lock, taken, recorded (``lease.acquired``) and
  checked before every ``attempt.started`` exactly as :mod:`intentlog.backlog.worker` does
  (the same gate), and released when the item is left;
- **its own order**: the step's effects go through ``task.aeffect``, whose record work runs
  off the loop (:mod:`intentlog.effects.disk`): ``quota.reserved`` and
  ``attempt.started`` durable before the send, the observation before its interpretation.
  With no quota to ask for, every item's record work (effect steps, result, release)
  runs on the process's one shared disk thread, and the streams written in a round are
  synced side by side in sync threads, each item answered after its own stream's sync:
  one thread does the Python work instead of one per item, and the ``fdatasync`` calls
  still overlap in the kernel. With a quota (its gate waits for a grant) an item keeps a
  disk thread of its own. The lease is taken in a pool thread;
- **its own quota answer**: with a quota, the gate (in the disk thread) sends ``Reserve``
  on the lane and waits for the reply the loop routes to it; with none, it only looks at
  whether the supervisor told the lane "stop";
- **its own end**: :class:`Cancel` cancels that item alone (a stalled or overrun item).
  Its asyncio task is cancelled where it awaits, the effect protocol records what
  happened (nothing, the intent only, or an unknown attempt: never resent), its lease is
  released and its writer closed, and the lane answers :class:`~.messages.Stopped`. Its
  neighbours go on. An item whose send ran in a thread (a plain ``send``) stops waiting
  for it; the thread's late answer is never recorded.

What cannot be cancelled is the loop itself: a step that blocks it (a blocking call in an
``async def``) or a stopped process stops every item. The supervisor, whose cancel goes
unanswered, ends the process (pid and start time) and settles every item it held as it
settles a killed worker's. Like a one-item worker, the process ignores SIGINT and SIGTERM
and dies with its supervisor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import re
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

from ..effects.disk import disk_of
from .children import arun_step
from .messages import Answer, Grant, Reply, Reserve, Run, Spent, Stop, Stopped
from .model import LedgerLike
from .procs import die_with_parent
from .worker import ItemGate, failure_answer, lease_item, record_result, release_item, resolve_step, with_entry

if TYPE_CHECKING:
    from ..task import Task

__all__ = ["CANCELLED", "Cancel", "lanes_main"]

AsyncStep = Callable[["Task", Any], Awaitable[Any]]

#: the reason a cancelled item's lane answers with (its :class:`~.messages.Stopped`)
CANCELLED: Final = "cancelled by the supervisor"

#: threads for the items' own record work (lease, result, release): their syncs overlap
_POOL_MAX: Final = 64


class Cancel(NamedTuple):
    """Supervisor to lane: cancel the item running there (stalled or overrun); it answers :class:`Stopped`."""

    kind: Literal["cancel"]
    item: str


class _Lane:
    """One item's place in the process: its pipe, the item running, and a reservation waiting for its reply."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()  # the loop and the item's disk thread both send
        self.item: str | None = None
        self.job: asyncio.Task[None] | None = None
        self.stop = False  # told "stop" unasked: no attempt starts
        self.reply: concurrent.futures.Future[Reply] | None = None
        self.closed = False

    def send(self, msg: tuple[Any, ...]) -> None:
        with self.lock:
            self.conn.send(msg)

    def answer(self, reply: Reply) -> None:
        """A reply to the reservation waiting, or a "stop" told unasked."""
        waiting, self.reply = self.reply, None
        if waiting is not None and not waiting.done():
            waiting.set_result(reply)
        elif isinstance(reply, Stop):
            self.stop = True


class _LaneGate(ItemGate):
    """The item stream's gate on a lane: asks from the task's disk thread, the loop routes the reply back."""

    def __init__(self, task: Task, lane: _Lane, item: str, asks: bool) -> None:
        super().__init__(task, lane.conn, 0, item, asks)
        self.lane = lane

    def request(self, want: dict[str, float]) -> Reply:
        lane = self.lane
        if not self.asks:
            return Stop("stop") if lane.stop else Grant("grant")
        waiting: concurrent.futures.Future[Reply] = concurrent.futures.Future()
        lane.reply = waiting  # before the send: the reply may come back at once
        lane.send(Reserve("reserve", self.item, want))
        return waiting.result()


class _Process:
    """The event loop's side: the lanes, their items, and the threads doing the items' record work."""

    def __init__(self, ledger: LedgerLike, conns: Sequence[Connection], step: AsyncStep) -> None:
        self.ledger, self.step = ledger, step
        self.lanes = [_Lane(c) for c in conns]
        self.pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(_POOL_MAX, max(2, len(conns))), thread_name_prefix="intentlog-item"
        )
        self.done: asyncio.Future[None] | None = None

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        for lane in self.lanes:
            loop.add_reader(lane.conn.fileno(), self.readable, lane)
        try:
            await self.done
        finally:
            for lane in self.lanes:
                if not lane.closed:
                    loop.remove_reader(lane.conn.fileno())
            jobs = [lane.job for lane in self.lanes if lane.job is not None]
            for job in jobs:
                job.cancel()
            if jobs:
                await asyncio.gather(*jobs, return_exceptions=True)
            self.pool.shutdown(wait=False)

    def readable(self, lane: _Lane) -> None:
        """Every message waiting on a lane: an item to run, a reply, a stop, a cancel, or the end."""
        try:
            while not lane.closed and lane.conn.poll():
                self.handle(lane, lane.conn.recv())
        except (EOFError, OSError):  # the supervisor is gone: nothing more is run, every item ends
            self.close(lane)
            if self.done is not None and not self.done.done():
                self.done.set_result(None)

    def handle(self, lane: _Lane, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "item":
            run = Run(*msg)
            lane.item, lane.stop, lane.reply = run.item, False, None
            lane.job = asyncio.get_running_loop().create_task(self.run_item(lane, run))
        elif kind in ("grant", "stop", "exhausted"):
            reply: Reply = Grant(*msg) if kind == "grant" else Stop("stop") if kind == "stop" else Spent(*msg)
            lane.answer(reply)
        elif kind == "cancel":
            if lane.job is not None and lane.item == msg[1]:
                lane.answer(Stop("stop"))  # a gate waiting for a grant starts nothing
                lane.job.cancel()
        elif kind == "quit":
            self.close(lane)
            if all(x.closed for x in self.lanes) and self.done is not None and not self.done.done():
                self.done.set_result(None)

    def close(self, lane: _Lane) -> None:
        if not lane.closed:
            lane.closed = True
            asyncio.get_running_loop().remove_reader(lane.conn.fileno())

    async def run_item(self, lane: _Lane, run: Run) -> None:
        answer = await self.item(lane, run)
        lane.item, lane.job = None, None
        if not lane.closed:
            try:
                lane.send(answer)
            except OSError:
                pass  # the supervisor is gone: the lane's reader ends the process

    async def item(self, lane: _Lane, run: Run) -> Answer:
        """One item: lease, the step (awaited here), the result and the release, each record job off the loop.

        Its lease is taken in a pool thread (taking a lock waits on the disk). With no quota
        to ask for (the gate never waits), the rest of its record work -- every effect step,
        its result and its release -- runs on the process's shared disk thread, whose group
        commit syncs the streams of every item that reached a durable point together side by
        side (:mod:`intentlog.effects.disk`). With a quota (the gate waits for the
        supervisor's grant) the item keeps a disk thread of its own and its result runs in a
        pool thread, so one item's wait holds no other back.
        A cancel reaching it while record work runs for it waits for that work to end
        (a lease taken is released; a result being recorded is recorded and answered).
        """
        task = self.ledger.task(run.task)
        guard = _LaneGate(task, lane, run.item, run.asks)
        disk = disk_of(task.stream)
        shared = disk.share(not run.asks)
        record = self.on_disk if shared else self.in_pool
        epoch, released, closed = 0, False, False
        with disk.using():
            try:
                try:
                    # in a pool thread always: taking a lock and reading the kernel's locks wait on the disk
                    leased: Answer | int = await self.in_pool(lease_item, task, guard, run.item, run.backlog)
                    if not isinstance(leased, int):
                        return leased
                    epoch = leased
                    # suspending: a sleep, a wait or a join records what it waits for and releases this lane
                    value = await arun_step(task, run.backlog, run.item, self.step, run.payload)
                except asyncio.CancelledError:
                    return Stopped("stopped", run.item, CANCELLED)
                except Exception as exc:
                    failed: Answer = await record(failure_answer, task, run.item, exc, whole=True, bare=True)
                    return failed
                if not shared:
                    released = True  # from here the pool thread records the result and releases, or answers the failure
                    answer: Answer = await record(_finish, task, run.item, run.backlog, epoch, value, whole=True)
                    return answer
                # on the shared disk: the result joins the round's group commit; the release follows it
                answer, released = await record(_result, task, run.item, run.backlog, epoch, value, whole=True)
                if released:  # durable now: its view-cache line (display only) made and the writer closed, one job
                    closed = True
                    answer = await record(_entry_and_close, task, answer, epoch, whole=True, bare=True)
                return answer
            finally:
                # even when cancelled: the lease released (or only the writer closed) before the lane answers
                if not closed and not (released and not shared):
                    await record(release_item, task, epoch or guard.epoch, released, whole=True, bare=True)

    async def in_pool(self, fn: Callable[..., Any], *args: Any, whole: bool = False, bare: bool = False) -> Any:
        """``fn(*args)`` in a pool thread. Cancelled meanwhile: the work is waited for, then the cancel is raised
        (``whole``: its result returned instead, the cancel dropped -- record work is never cut short)."""
        work = asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
        return await _uncut(work, whole)

    async def on_disk(self, fn: Callable[..., Any], *args: Any, whole: bool = False, bare: bool = False) -> Any:
        """``fn(*args)`` on the task's (shared) disk thread, answered once what it wrote is durable; a cancel
        as :meth:`in_pool` (``bare``: outside the stream's batch, for work that opens or closes the writer)."""
        disk = disk_of(args[0].stream)
        work = disk.call(functools.partial(fn, *args), bare=bare)
        return await _uncut(work, whole)


async def _uncut(work: asyncio.Future[Any], whole: bool) -> Any:
    """Await ``work`` to its end even when cancelled meanwhile; then raise the cancel (``whole``: return instead)."""
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            try:
                await asyncio.wait({work})
            except asyncio.CancelledError:
                continue
        if whole:
            return work.result()
        raise


def _result(task: Task, item: str, backlog: str, epoch: int, value: Any) -> tuple[Answer, bool]:
    """On the shared disk thread: the result recorded (synced by the round), or the failure answered; and
    whether the lease's release went with it."""
    try:
        return record_result(task, item, backlog, epoch, value), True
    except Exception as exc:  # a result that is not JSON, or its write failed: a failed run
        return failure_answer(task, item, exc), False


def _entry_and_close(task: Task, answer: Answer, epoch: int) -> Answer:
    """On the shared disk thread, once the result is durable: the writer closed, the answer with its view-cache line."""
    release_item(task, epoch, True, for_entry=True)
    return with_entry(task, answer)


def _finish(task: Task, item: str, backlog: str, epoch: int, value: Any) -> Answer:
    """In one pool thread: the result recorded, the lease released and the writer closed (or the failure answered)."""
    released = False
    try:
        answer: Answer = record_result(task, item, backlog, epoch, value)
        released = True
    except Exception as exc:  # a result that is not JSON, or its write failed: a failed run
        return failure_answer(task, item, exc)
    finally:
        release_item(task, epoch, released, for_entry=released)
    return with_entry(task, answer)


def lanes_main(ledger: LedgerLike, conns: Sequence[Connection], step: AsyncStep | str) -> None:
    """The worker's loop for an async step: one lane per connection, every item an asyncio task.

    Returns once every lane was told to quit or the supervisor is gone (then every item
    still running is cancelled, its lease released).
    """
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fn = resolve_step(step) if isinstance(step, str) else step
    if not asyncio.iscoroutinefunction(fn):
        from ..errors import UsageError

        raise UsageError(f"step {getattr(fn, '__name__', fn)!r} is not an async def: in_flight > 1 needs one")
    asyncio.run(_Process(ledger, conns, fn).main())


_IN_FLIGHT_QUOTA: Final = re.compile(r"in_flight=(\d+)\Z")


def check_in_flight(step: object, in_flight: object, quota: Any, engine: object) -> tuple[int, int | None, Any]:
    """Check a run's ``in_flight`` and take its ``in_flight=N`` quota out of ``quota``.

    Returns ``(in_flight, max_in_flight, the other quotas)``. ``in_flight`` > 1 needs an
    ``async def`` step (a ``package.module:function`` is imported here to see) and an
    engine that runs lanes (the local one). Raises :class:`~intentlog.errors.UsageError`
    before anything is written.
    """
    from ..errors import UsageError

    if not isinstance(in_flight, int) or isinstance(in_flight, bool) or in_flight < 1:
        raise UsageError(f"in_flight must be a positive int, not {in_flight!r}")
    if in_flight > 1:
        fn = resolve_step(step) if isinstance(step, str) else step
        if not asyncio.iscoroutinefunction(fn):
            raise UsageError(
                f"in_flight={in_flight}: step {getattr(fn, '__name__', fn)!r} is not an async def; "
                "items in flight share one process only on an event loop (use in_flight=1, or make the step async)"
            )
        if not (engine is None or engine == "local" or callable(getattr(engine, "spawn_lanes", None))):
            raise UsageError(
                f"in_flight={in_flight}: engine {getattr(engine, 'name', engine)!r} runs one item per slot; "
                "use engine 'local'"
            )
    specs = [quota] if isinstance(quota, str) else quota
    if not isinstance(specs, (list, tuple)):
        return in_flight, None, quota
    limit: int | None = None
    rest: list[Any] = []
    for q in specs:
        m = _IN_FLIGHT_QUOTA.match(q.strip()) if isinstance(q, str) else None
        if m is None:
            rest.append(q)
            continue
        n = int(m.group(1))
        if n < 1:
            raise UsageError(f"quota {q!r}: at most N items in flight needs N >= 1")
        limit = n if limit is None else min(limit, n)
    return in_flight, limit, (rest if limit is not None else quota)
