"""The supervisor: one process per backlog run, the one writer of the backlog's stream.

It forks ``workers`` processes and hands each one item at a time, highest priority first,
never before the item's ``not_before`` or retry time. What it decides is recorded in the
backlog stream before it acts on it. Guarantees:

- **no item runs twice at once**: an item is taken only by taking its task's writer lock;
  a lock held by a live process whose item stream keeps growing is never taken;
- **stalls are judged on this process's monotonic clock**: an item whose stream has not
  grown for ``inactivity`` seconds (time spent waiting for a quota grant excepted) has a
  stalled holder; it is ended with SIGKILL only after its pid *and* start time match
  (``backlog.holder_ended``), then the item resumes from its task's record. A SIGSTOPped
  holder is a stalled one; SIGKILL needs no cooperation, so it never runs again;
- ``max_duration``: an item running longer is ended the same way
  (``backlog.item_timed_out``); its task's attempt in flight is unknown and blocks it;
- **resume, never re-run**: a worker resumes the item's task; an unknown effect, a pending
  approval or a call paused for review blocks the item (``backlog.item_blocked``, with
  the reason and the command) until a person resolves it and ``unblock``s it;
- **retries are recorded decisions**: a step that raised is scheduled again after an
  exponential backoff with jitter (``backlog.item_scheduled``), or failed after
  ``max_attempts`` (``backlog.item_failed``);
- **quotas**: every attempt's units are granted here first, counted from the record
  (``quota.reserved`` in the items' tasks); an exhausted window makes the workers wait
  (``backlog.quota_waiting``), an exhausted budget stops the run;
- **shutdown** (SIGTERM, SIGINT): no new item or attempt starts; running effects finish
  within ``grace``; then the holders left are ended; ``backlog.run_stopped`` says so;
- **one supervisor per backlog**: a run owns its backlog from ``backlog.run_started`` to
  ``backlog.run_stopped`` (:mod:`intentlog.backlog.runlease`); a second run is refused
  naming the holder, a dead one is taken over (recorded); a run that cannot show it still
  owns it (its heartbeat late, or another run started since) grants nothing;
- **workers that die at start** (:data:`START_DEATHS` in a row before answering anything)
  stop the run: :class:`WorkersDie` names the last exit.

The supervisor itself carries items to its slots and their answers back (the messages of
:mod:`intentlog.backlog.messages`); each concern is its own part: the record of its
decisions (:class:`~intentlog.backlog.journal.Journal`), which item next and retries
(:class:`~intentlog.backlog.schedule.Schedule`), stalls and overruns
(:class:`~intentlog.backlog.watchdog.Watchdog`), quota grants
(:class:`~intentlog.backlog.broker.QuotaBroker`).
"""

from __future__ import annotations

import os
import selectors
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from .._internal.procs import exit_text
from ..errors import IntentlogError
from . import leases
from .broker import QuotaBroker
from .engines import Engine, LocalEngine, Slot
from .inflight import Cancel
from .itemcache import read_item_task, read_reservations, read_returned_and_reserved
from .journal import Journal
from .messages import (
    Answer,
    Blocked,
    Died,
    Done,
    Failed,
    Grant,
    Leased,
    Quit,
    Reserve,
    Run,
    Stop,
    Stopped,
    Waiting,
    from_slot,
)  # fmt: skip
from .model import BacklogFold, BacklogLike, ItemRecord
from .procs import boot_id, end_holder, host_name, start_time
from .quota import Quota
from .runlease import BEAT, RunOwner
from .schedule import Schedule
from .watchdog import Watchdog

if TYPE_CHECKING:
    from ..task import Task

__all__ = ["START_DEATHS", "BacklogTakenOver", "Supervisor", "WorkersDie"]

#: seconds a run goes on without a heartbeat landing (its storage unreachable) before it gives up
OUTAGE = 60.0

#: workers in a row that exit before answering anything: the run stops (a step that cannot load, a crash at start)
START_DEATHS = 5

#: at most this many seconds between two looks at every running item's stream (stalls are judged in seconds;
#: hundreds of items in flight answer many times a second, and each look costs a stat per item); never more
#: than a tenth of the run's ``inactivity`` or ``max_duration``, so a short limit is still judged on time
WATCH_EVERY = 0.25
#: seconds the run's end waits, all its idle worker processes together, for them to quit before ending them
#: (the backlog's lock is held meanwhile when the run ends idle)
QUIT_WAIT: Final = 2.0
#: the view-cache lines a run keeps for its closing view (each a few hundred bytes)
ENTRIES_KEPT: Final = 20_000


class WorkersDie(IntentlogError):
    """The run stopped: its workers kept exiting before they answered anything."""


class BacklogTakenOver(IntentlogError):
    """The run stopped: another run took the backlog over while this one stood still."""


@dataclass(eq=False)  # a slot is itself: compared (in, remove) by identity
class _Worker:
    proc: Slot
    conn: Connection
    item: str | None = None
    since: float = 0.0  # monotonic: when the item was handed over
    size: int = -1  # the item stream's size when last seen
    progress: float = 0.0  # monotonic: when it last grew (or a quota wait ended)
    waiting: tuple[str, dict[str, float]] | None = None  # a reservation not granted yet
    task: Task | None = None  # the item's task (read only: its stream's growth is its progress)
    asks: bool = True  # whether the item's worker asks for a grant before each attempt (else: told "stop")
    answered: bool = False  # whether it ever sent a message (a worker that dies before: a start death)
    lanes: int = 1  # items its process holds at once (an async step's lanes share one process)
    cancelled: float | None = None  # monotonic: when its item was told to cancel (a lane of many)
    verdict: tuple[str, str] | None = None  # why it was cancelled: (record kind, reason)


class Supervisor:
    """One run of a backlog: its slots, what they are told and what they answer."""

    def __init__(
        self,
        backlog: BacklogLike,
        step: Callable[[Task, Any], Any] | str,
        *,
        workers: int,
        quotas: tuple[Quota, ...],
        until_idle: bool,
        inactivity: float,
        max_duration: float | None,
        grace: float,
        backoff: float,
        max_backoff: float,
        poll: float,
        engine: Engine | None = None,
        clock: Callable[[], float] = time.monotonic,
        in_flight: int = 1,
        max_in_flight: int | None = None,
    ) -> None:
        self.backlog, self.step = backlog, step
        #: items one worker process holds at once (an async step), and at most how many run at once in all
        self.in_flight, self.max_in_flight = in_flight, max_in_flight
        self.workers, self.until_idle, self.grace, self.poll = workers, until_idle, grace, poll
        self.engine: Engine = LocalEngine() if engine is None else engine
        self.journal = Journal(backlog)
        self.schedule = Schedule(self.journal, backoff=backoff, max_backoff=max_backoff)
        self.watchdog = Watchdog(self.journal, inactivity=inactivity, max_duration=max_duration)
        self.broker = QuotaBroker(self.journal, quotas, clock=clock)
        self.owner = RunOwner(self.journal, clock=clock)
        self.pool: list[_Worker] = []
        #: the view-cache lines of the item tasks done in this run, as their workers left them (display only;
        #: the first ENTRIES_KEPT: a few MB at most, the closing view reads the others whole)
        self.entries: list[Any] = []
        #: why the run stops taking items and attempts (a signal's name, "idle", "quota"), once it does
        self.stopping: str | None = None
        #: SIGTERMs and SIGINTs received: the first stops the run within its grace, a second ends the grace now
        self.signals = 0
        #: workers in a row that exited before answering anything, and the last one's exit
        self.start_deaths, self.last_death = 0, ""
        #: what ends the run with an error once it is shut down (workers dying at start, the lease lost)
        self.failure: IntentlogError | None = None
        #: the slots' connections, watched by one selector kept across turns (hundreds of lanes)
        self.selector = selectors.DefaultSelector()
        self.registered: set[Connection] = set()
        self.watched = -WATCH_EVERY  # monotonic: the last look at the running items
        limits = [x / 10 for x in (inactivity, max_duration) if x is not None and x > 0]
        self.watch_every = min([WATCH_EVERY, *limits])

    @property
    def fold(self) -> BacklogFold:
        """The backlog stream as folded now (see :meth:`Journal.refresh`)."""
        return self.journal.fold

    # -- start -----------------------------------------------------------------------

    def run(self) -> None:
        # signal handlers can only be set from the main thread; elsewhere the caller stops the run
        main = threading.current_thread() is threading.main_thread()
        old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.signals += 1
            if self.stopping is None:
                self.stopping = signal.Signals(signum).name

        leases.claim_stale(self.backlog.task)  # on a store: a SIGKILLed supervisor's lease, taken back
        me = os.getpid()
        try:
            self.owner.start(  # BacklogBusy while another supervisor runs it: nothing written
                {
                    "pid": me, "host": host_name(), "start_time": start_time(me), "boot_id": boot_id(),
                    "workers": self.workers, "quota": [q.spec() for q in self.broker.quotas],
                    **({"in_flight": self.in_flight} if self.in_flight > 1 else {}),
                    **({"max_in_flight": self.max_in_flight} if self.max_in_flight is not None else {}),
                }
            )  # fmt: skip
        except BaseException:
            self.journal.close()
            self.engine.close()
            raise
        for s in old:
            signal.signal(s, on_signal)
        try:
            self.scan_items()
            self.loop()
        finally:
            try:
                self.shutdown()  # still under this run's handlers: a second signal ends the grace, never the run
            finally:
                for s, h in old.items():
                    signal.signal(s, h)
                self.owner.end()
        if self.failure is None and self.owner.lost is not None:  # found only at the end (past its grace)
            self.failure = BacklogTakenOver(self.owner.lost)
        if self.failure is not None:
            raise self.failure

    def scan_items(self) -> None:
        """Each item's task, read whole only if it changed since the cache: done and blocked items settled,
        quota reservations counted.

        The cache (:mod:`intentlog.backlog.itemcache`) only says where to look: an item the
        backlog has not recorded done is recorded done only after its task, read whole,
        holds its ``item.returned``; with a quota, what was spent is read from every item
        task's stream, never from the cache.
        """
        reservations: list[tuple[float, dict[str, float]]] = []
        self.journal.release(now=True)  # reading every item task can take longer than a lease may stand still
        ordered = self.fold.ordered()
        need = [rec.task for rec in ordered if not (rec.done or rec.failed is not None)]
        got = read_returned_and_reserved(self.backlog.ledger, self.backlog.name, need)
        spent = read_reservations(self.backlog.ledger, [rec.task for rec in ordered]) if self.broker.quotas else {}
        settled = self.schedule.settled
        for rec in ordered:
            returned = got.get(rec.task, (False, ()))[0]
            reservations.extend(spent.get(rec.task, ()))  # a settled item's units were spent too
            if rec.done or rec.failed is not None:
                settled[rec.item] = "done" if rec.done else "failed"
                continue
            if returned and read_item_task(self.backlog.ledger, rec.task).extras.returned:
                self.journal.record(
                    "backlog.item_done", {"item": rec.item, "task": rec.task, "found": "in the task's record"}
                )
                settled[rec.item] = "done"
                self.journal.release()
        self.broker.load(reservations)

    # -- the loop --------------------------------------------------------------------

    def loop(self) -> None:
        while True:
            if self.stopping is not None:
                return
            self.heartbeat()
            if self.stopping is not None:
                return
            self.spawn()
            if self.stopping is not None:
                return
            ready = self.ready(min(self.poll, BEAT))  # a poll longer than a beat would look dead to others (STALE)
            # one sync for what this turn records: each record is also derivable from the
            # item tasks (a lost one is found again at the next start), except quota
            # grants, which are recorded by the worker in its task before its attempt
            self.journal.batching = True  # the batch opens with this turn's first record (a quiet turn opens nothing)
            for w in list(self.pool):
                if w.conn in ready:
                    self.receive(w)
            self.grant_waiting()
            now = time.monotonic()
            if now - self.watched >= self.watch_every:
                self.watched = now
                self.watch()
            self.dispatch()
            self.journal.release()
            if self.broker.exhausted is not None and not any(w.item for w in self.pool):
                return
            if self.until_idle and self.idle():
                # the last look is made under the backlog's lock, held to the end's record: an item added
                # before ``run_stopped`` is run by this run, one added after it waits for the next
                self.journal.hold()
                self.journal.refresh()
                if self.idle():
                    return

    def ready(self, timeout: float) -> set[Connection]:
        """The slots' connections with something to read (a message, or EOF) within ``timeout`` seconds."""
        conns = {w.conn for w in self.pool}
        for c in self.registered - conns:  # first: a closed connection's descriptor may be reused by a new one
            try:
                self.selector.unregister(c)
            except (KeyError, ValueError, OSError):
                pass
        for c in conns - self.registered:
            try:
                self.selector.register(c, selectors.EVENT_READ)
            except (KeyError, ValueError, OSError):  # closed already: its worker's end is found by the watch
                conns.discard(c)
        self.registered = conns
        return {key.fileobj for key, _ in self.selector.select(timeout)}  # type: ignore[misc]

    def heartbeat(self) -> None:
        """Show the run still holds its backlog; a lease taken over (fenced) stops the run, granting nothing more."""
        try:
            self.owner.beat()
        except (IntentlogError, OSError):
            # the store unreachable, or the stream's lease lost to an add that found it standing
            # still: granting stops once the last heartbeat is older than FRESH; the next turn
            # leases the stream again and tries once more, for up to OUTAGE s
            try:
                self.journal.close()
            except (IntentlogError, OSError):
                pass
            if self.owner.clock() - self.owner.landed > OUTAGE:
                raise
            return
        if self.owner.lost is not None:
            self.failure = BacklogTakenOver(self.owner.lost)
            self.stopping = "taken over"

    def spawn(self) -> None:
        if self.start_deaths >= START_DEATHS:
            if self.stopping is None:
                self.failure = WorkersDie(
                    f"backlog {self.backlog.name!r}: {self.start_deaths} workers in a row exited before answering "
                    f"anything (the last: {self.last_death}); the run is stopped: check that the step loads and "
                    "runs in a new process (python -c 'import MODULE'), then run again"
                )
                self.stopping = "workers die at start"
            return
        while len({id(w.proc) for w in self.pool}) < self.workers:
            self.journal.close()  # a forked child must not inherit the backlog's lock
            if self.in_flight > 1:
                spawn_lanes = getattr(self.engine, "spawn_lanes")  # noqa: B009 - checked by the run
                for slot, conn in spawn_lanes(self.backlog.ledger, self.step, self.in_flight):
                    self.pool.append(_Worker(slot, conn, lanes=self.in_flight))
            else:
                slot, conn = self.engine.spawn(self.backlog.ledger, self.step)
                self.pool.append(_Worker(slot, conn))

    def dispatch(self) -> None:
        if self.stopping is not None or self.broker.exhausted is not None:
            return
        free = self.free_lanes()
        if not free:
            return
        for rec in self.schedule.candidates({w.item for w in self.pool if w.item is not None}):
            if not free:
                return
            t = self.backlog.ledger.task(rec.task)
            if leases.held_elsewhere(t):
                self.watchdog.watch_foreign(rec, t)
                continue
            self.watchdog.mine(rec.item)
            w = free.pop(0)
            w.item, w.since, w.progress = rec.item, time.monotonic(), time.monotonic()
            w.task = t
            w.size = leases.progress(t)
            w.asks = self.asks()
            try:
                w.conn.send(Run("item", rec.item, rec.task, self.backlog.name, rec.payload, w.asks))
            except OSError:  # the worker died before it was handed anything (at start): the item stays queued
                w.item, w.task = None, None  # the watch removes the dead worker and counts a start death

    def free_lanes(self) -> list[_Worker]:
        """The slots free to take an item, the processes' lanes interleaved (items spread over the processes),
        no more than the run's ``max_in_flight`` allows."""
        by_proc: dict[int, list[_Worker]] = {}
        busy = 0
        for w in self.pool:
            if w.item is None:
                by_proc.setdefault(id(w.proc), []).append(w)
            else:
                busy += 1
        room = len(self.pool) if self.max_in_flight is None else max(0, self.max_in_flight - busy)
        free: list[_Worker] = []
        groups = list(by_proc.values())
        depth = max((len(g) for g in groups), default=0)
        for i in range(depth):
            free.extend(g[i] for g in groups if i < len(g))
        return free[:room]

    def asks(self) -> bool:
        """Whether a worker must ask for a grant before each attempt.

        With no quota every grant would be a yes until the run stops, so a local worker is
        not asked to wait for one: it reserves its units in its task as ever, and the
        supervisor sends it "stop" once, unasked, when the run stops taking attempts (the
        worker looks for it before each attempt). Other engines relay the asking form.
        """
        return bool(self.broker.quotas) or getattr(self.engine, "name", None) != "local"

    def tell_stop(self) -> None:
        """Send "stop" to every worker running an item that does not ask: it starts no attempt after it reads it."""
        for w in self.pool:
            if w.item is not None and not w.asks:
                try:
                    w.conn.send(Stop("stop"))
                except OSError:
                    pass  # a worker that is gone starts nothing
                w.asks = True  # told once

    # -- messages ----------------------------------------------------------------------

    def receive(self, w: _Worker) -> None:
        try:
            msg = from_slot(w.conn.recv())
        except (EOFError, OSError):
            w.proc.join(timeout=5.0)  # its end of the pipe closed: it is ending; how it ended is the message
            self.lost(w, f"worker {w.proc.pid} {exit_text(w.proc.exitcode)}")
            return
        w.answered = True
        self.start_deaths = 0
        if isinstance(msg, Leased):
            w.progress = time.monotonic()
        elif isinstance(msg, Died):  # the engine runs the item again elsewhere: it resumes, never re-runs
            rec = self.fold.items[msg.item]
            self.journal.record(
                "backlog.holder_died", {"item": msg.item, "task": rec.task, "pid": msg.pid, "reason": msg.reason}
            )
        elif isinstance(msg, Reserve):
            w.waiting = (msg.item, dict(msg.units))
            self.broker.asked(msg.item)  # a grant's deadline counts from here
            self.grant(w)
        else:
            self.finished(w, msg)

    def grant(self, w: _Worker) -> None:
        """Answer the worker's reservation: "stop" once the run stops, else the broker's grant or refusal (or wait)."""
        assert w.waiting is not None
        item, want = w.waiting
        if self.stopping is None and not self.owner.fresh():
            return  # not shown to hold the backlog now: it waits (a run taken over has stopped granting)
        until = self.owner.fresh_until()
        reply = Stop("stop") if self.stopping is not None else self.broker.answer(item, want, until=until)
        if reply is None:
            return  # the window is full: it waits
        w.conn.send(reply)
        w.waiting = None
        if isinstance(reply, Grant):
            w.progress = time.monotonic()

    def grant_waiting(self) -> None:
        for w in self.pool:
            if w.waiting is not None:
                self.grant(w)
                if w.waiting is not None:
                    w.progress = time.monotonic()  # waiting for a grant is not a stall

    def finished(self, w: _Worker, msg: Answer) -> None:
        item = msg.item
        cancelled, verdict = w.cancelled, w.verdict
        w.item, w.waiting, w.cancelled, w.verdict = None, None, None, None
        self.schedule.inbox.forget(item)  # a waiter answered: watched again from what it recorded now
        rec = self.fold.items[item]
        if cancelled is not None and verdict is not None and isinstance(msg, Stopped):
            self.ended(w, rec, verdict, cancelled=True)
        elif isinstance(msg, Done):
            self.journal.record("backlog.item_done", {"item": item, "task": rec.task})
            self.schedule.settled[item] = "done"
            if msg.entry is not None and len(self.entries) < ENTRIES_KEPT:
                self.entries.append(msg.entry)
        elif isinstance(msg, Blocked):
            self.journal.record(
                "backlog.item_blocked",
                {"item": item, "task": rec.task, "state": msg.state, "reason": msg.reason, "command": msg.command},
            )
        elif isinstance(msg, Failed):
            self.schedule.failed_attempt(rec, str(msg.reason), given_up=msg.given_up, permanent=msg.permanent)
        elif isinstance(msg, Waiting):
            self.schedule.suspended(rec, msg.until, msg.reason, event=msg.event, children=msg.children)
        # Busy: another process took the lock first: watched as a foreign holder next time;
        # Stopped, Exhausted: the attempt did not start; the item stays queued

    def lost(self, w: _Worker, why: str) -> None:
        """A worker died on its own (or was ended): its item resumes, never re-runs; a new worker replaces it."""
        self.pool.remove(w)
        w.proc.join(timeout=1.0)
        self.died(w)
        if w.item is not None:
            rec = self.fold.items[w.item]
            self.journal.record(
                "backlog.holder_died", {"item": w.item, "task": rec.task, "pid": w.proc.pid, "reason": why}
            )

    def died(self, w: _Worker) -> None:
        """Count a worker that exited before answering anything: :data:`START_DEATHS` in a row stop the run.

        A process's lanes count once: the first of them to be found gone counts its death.
        """
        if any(x.proc is w.proc for x in self.pool):
            return  # another lane of the same process is still to be found gone
        if not w.answered:
            self.start_deaths += 1
            self.last_death = f"worker {w.proc.pid} {exit_text(w.proc.exitcode)}"

    # -- stalls and timeouts -----------------------------------------------------------

    def watch(self) -> None:
        """End (or fence) the holders the watchdog finds stalled or overrun, provably ours only; record it.

        An item on a lane of many (an async step) is cancelled alone: its lane answers once
        the item let its lease go, and the verdict is recorded then. A process that leaves
        a cancel unanswered for ``grace`` seconds has an event loop that stopped responding:
        it is ended, and every item it held is settled as a stalled holder's.
        """
        now = time.monotonic()
        for w in list(self.pool):
            if w not in self.pool:
                continue  # removed with its process this turn
            if w.item is None:
                if not w.proc.is_alive():
                    self.pool.remove(w)
                    self.died(w)
                continue
            rec = self.fold.items[w.item]
            if w.cancelled is not None:
                if now - w.cancelled > self.grace:
                    self.end_process(w)
                continue
            size = leases.progress(w.task) if w.task is not None else -1
            if size != w.size:
                w.size, w.progress = size, now
            verdict = self.watchdog.overdue(rec, w.since, w.progress, now)
            if verdict is None:
                continue
            if w.lanes > 1:
                try:
                    w.conn.send(Cancel("cancel", rec.item))
                except OSError:
                    pass  # the process is gone: its lanes' pipes say so
                w.cancelled, w.verdict = now, verdict
                continue
            if not leases.end_or_fence(self.backlog.ledger.task(rec.task), w.proc.pid, w.proc.started):
                continue  # cannot prove it is ours: never take the item
            self.pool.remove(w)
            w.proc.join(timeout=1.0)
            self.ended(w, rec, verdict)

    def ended(self, w: _Worker, rec: ItemRecord, verdict: tuple[str, str], *, cancelled: bool = False) -> None:
        """Record a stalled or overrun holder ended (or its item cancelled); an overrun is a failed attempt."""
        kind, reason = verdict
        data: dict[str, Any] = {
            "item": rec.item, "task": rec.task, "pid": w.proc.pid, "start_time": w.proc.started, "reason": reason,
        }  # fmt: skip
        if cancelled:
            data["cancelled"] = True
        self.journal.record(kind, data)
        if kind == "backlog.item_timed_out":
            self.schedule.failed_attempt(self.fold.items[rec.item], reason)

    def end_process(self, w: _Worker) -> None:
        """End a lane's process whose event loop left a cancel unanswered: each of its items settled as stalled."""
        lanes = [x for x in self.pool if x.proc is w.proc]
        busy = [x for x in lanes if x.item is not None]
        gone = w.proc.pid is not None and end_holder(w.proc.pid, w.proc.started)
        if self.backlog.ledger.backend.fences:  # on a store each item's lease is fenced too, wherever it runs
            fenced = [leases.fence(self.backlog.ledger.task(self.fold.items[x.item].task)) for x in busy if x.item]
            gone = gone or all(f is not None for f in fenced)
        if not gone:
            return  # cannot prove it is ours: never take its items
        for x in lanes:
            self.pool.remove(x)
        w.proc.join(timeout=1.0)
        self.died(w)
        why = f"its worker's event loop did not answer a cancel within {self.grace:g} s"
        for x in busy:
            assert x.item is not None
            rec = self.fold.items[x.item]
            kind, reason = x.verdict or ("backlog.holder_ended", "stalled")
            self.ended(x, rec, (kind, f"{reason}; {why}"))

    # -- idle and shutdown -------------------------------------------------------------

    def idle(self) -> bool:
        """No item can progress without a person: nothing running; every item done, failed or blocked.

        An item another process held counts as running only while it is held, not settled or
        blocked in the record (what the other process did is read, never waited for), and its
        stream grew within ``inactivity`` (a holder this run can neither end nor fence, stalled
        on another host, cannot progress without a person). On a store a stalled holder is never
        a reason to end: the next dispatch fences it and takes the item, whichever of the two
        looks saw the stall first.
        """
        if any(w.item for w in self.pool):
            return False
        now = time.monotonic()
        fences = self.backlog.ledger.backend.fences
        for item, seen in list(self.watchdog.foreign.items()):
            rec = self.fold.items.get(item)
            if now - seen.progress >= self.watchdog.inactivity:
                if fences and rec is not None and not self.schedule.is_settled(rec) and rec.blocked is None:
                    return False  # stalled, and fenced by the next dispatch (watch_foreign), which takes the item
                continue  # stalled where this run cannot end it (or settled meanwhile): not progressing
            if rec is None or self.schedule.is_settled(rec) or rec.blocked is not None:
                self.watchdog.mine(item)
            elif not leases.held_elsewhere(self.backlog.ledger.task(rec.task)):
                self.watchdog.mine(item)  # let go: the next turn hands it out (it resumes), so not idle yet
                return False
            else:
                return False  # held by a process whose stream grows
        return self.schedule.waits_for_a_person(set(self.watchdog.foreign))

    def shutdown(self) -> None:
        """Stop taking items; let running ones reach their next attempt or end within the grace; record it.

        A second SIGTERM or SIGINT ends the grace at once. Whatever happens meanwhile (a record
        that cannot be written: a full disk), every worker is ended before this returns or
        raises: the items still held are ended as a grace that ran out ends them.
        """
        why = self.stopping or ("quota" if self.broker.exhausted else "idle")
        signalled = self.stopping is not None
        deadline = time.monotonic() + (self.grace if signalled else 5.0)
        signals = self.signals
        if self.stopping is None:
            self.stopping = why  # a worker asking for a grant from here on is told to stop
        try:
            self.journal.end()
            self.journal.batching = False
            self.tell_stop()  # before the record says so: whoever reads "stopping" finds every worker told
            if signalled and self.owner.lost is None:
                self.journal.record("backlog.run_stopping", {"signal": self.stopping, "grace": self.grace})
            # a signal beyond the one that stopped the run (or two before it) ends the grace now
            while any(w.item for w in self.pool) and time.monotonic() < deadline and self.signals == signals < 2:
                # still the backlog's holder while its items finish: a run elsewhere must not judge it gone (STALE)
                try:
                    self.heartbeat()
                except (IntentlogError, OSError):
                    pass  # unreachable past OUTAGE: it grants nothing more (not fresh), and still ends its workers
                ready = wait([w.conn for w in self.pool if w.item], timeout=min(self.poll, BEAT))
                for w in list(self.pool):
                    if w.conn in ready:
                        self.receive(w)
                self.grant_waiting()
                self.journal.release()  # as on every turn: a grace longer than a store's stale limit keeps the lease
        finally:
            ended = self.end_workers()
        self.journal.end()
        if self.owner.mine():  # under the lease: a run taken over never records the end of the next one's
            self.journal.record("backlog.run_stopped", {"reason": why, "ended": ended, "quota": self.broker.exhausted})
        self.backlog.task.close()

    def end_workers(self) -> list[dict[str, Any]]:
        """Idle workers told to quit, the others ended (by pid and start time), every pipe closed; who was ended."""
        ended: list[dict[str, Any]] = []
        for w in self.pool:
            if w.item is None:
                try:
                    w.conn.send(Quit("quit"))
                except OSError:
                    pass
        procs: dict[int, list[_Worker]] = {}
        for w in self.pool:
            procs.setdefault(id(w.proc), []).append(w)
        deadline = time.monotonic() + QUIT_WAIT  # told to quit together, waited for together
        try:
            for lanes in procs.values():
                proc = lanes[0].proc
                if all(w.item is None for w in lanes):
                    proc.join(timeout=max(0.0, deadline - time.monotonic()))
                if proc.is_alive() and proc.pid is not None:
                    end_holder(proc.pid, proc.started)
                    ended.extend({"item": w.item, "pid": proc.pid} for w in lanes if w.item is not None)
        finally:
            for w in self.pool:
                try:
                    w.conn.close()
                except OSError:
                    pass
            self.pool.clear()
            self.selector.close()
            self.engine.close()
        return ended
