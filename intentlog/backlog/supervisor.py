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
  within ``grace``; then the holders left are ended; ``backlog.run_stopped`` says so.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..eventlog.format import Event
from . import leases
from .engines import Engine, LocalEngine, Slot
from .itemcache import read_item_task, read_reservations, read_returned_and_reserved
from .messages import Answer, Blocked, Died, Done, Failed, Grant, Leased, Quit, Reserve, Run, Spent, Stop, from_slot
from .model import BacklogFold, BacklogLike, ItemRecord, task_extras
from .procs import boot_id, end_holder, host_name, start_time
from .quota import Quota, QuotaBook

if TYPE_CHECKING:
    from ..task import Task

__all__ = ["Supervisor"]

#: Records that may wait for the next sync (about a second): each is derivable from the item tasks.
_LAZY = frozenset({"backlog.item_done", "backlog.item_blocked", "backlog.holder_died", "backlog.quota_waiting"})


@dataclass
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


@dataclass
class _Foreign:
    """An item whose task lock another process (not one of ours) holds."""

    size: int
    progress: float


@dataclass
class Supervisor:
    backlog: BacklogLike
    step: Callable[[Task, Any], Any] | str
    workers: int
    quotas: tuple[Quota, ...]
    until_idle: bool
    inactivity: float
    max_duration: float | None
    grace: float
    backoff: float
    max_backoff: float
    poll: float
    fold: BacklogFold = field(default_factory=BacklogFold)
    pool: list[_Worker] = field(default_factory=list)
    stopping: str | None = None
    settled: dict[str, str] = field(default_factory=dict)
    foreign: dict[str, _Foreign] = field(default_factory=dict)
    exhausted: str | None = None
    waiting_logged: str | None = None
    last_close: float = 0.0
    batch: ExitStack | None = None
    batching: bool = False  # in the loop: records ride in a batch synced about once a second
    engine: Engine = field(default_factory=LocalEngine)
    #: the items not yet settled, in run order, for the fold they were listed from
    pending: deque[ItemRecord] = field(default_factory=deque)
    pending_of: BacklogFold | None = None
    pending_count: int = -1
    #: the backlog stream's size when this process last let its lock go (-1: unknown)
    closed_size: int = -1

    # -- the record ----------------------------------------------------------------

    def record(self, kind: str, data: dict[str, Any]) -> Event:
        """Append to the backlog stream; decisions and ends of holders are durable on return.

        The rest (an item done or blocked, a worker that died, a quota wait) may ride in
        the open batch, synced within about a second: each of them is found again in the
        item tasks at the next start if a crash loses it.
        """
        durable = kind not in _LAZY
        if self.batching:
            self.begin()
        ev = self.backlog.task.stream.append(kind, data, sync=durable)
        if ev.seq == self.fold.seq + 1:
            self.fold.apply(ev)
        else:  # another process (add, unblock) appended while this one did not hold the lock: fold it all again
            self.fold = BacklogFold()
            for e in self.backlog.task.events():
                self.fold.apply(e)
        return ev

    def begin(self) -> None:
        if self.batch is None:
            es = ExitStack()
            es.enter_context(self.backlog.task.batch())
            self.batch = es

    def end(self) -> None:
        """Sync what the open batch holds (the backlog's lock stays held)."""
        es, self.batch = self.batch, None
        if es is not None:
            es.close()

    def refresh(self) -> None:
        """Read the backlog stream again when another process (add, unblock) appended to it.

        Not read when nothing says so: while this process holds the writer, the writer's
        count (it read the stream whole when it opened) equals the fold's; otherwise the
        stream's size equals the one seen when the fold was last current (appends only grow it).
        """
        stream = self.backlog.task.stream
        if stream.writing:
            if stream.next_seq - 1 == self.fold.seq:
                return
            size = -1
        else:
            size = _size(stream.path)  # before the read: an append racing it makes the next look read again
            if self.closed_size >= 0 and size == self.closed_size:
                return
        f = BacklogFold()
        for ev in self.backlog.task.events():
            f.apply(ev)
        if f.seq != self.fold.seq:
            self.fold = f
        self.closed_size = size

    def release_backlog_lock(self, *, now: bool = False) -> None:
        """Let ``add`` and ``unblock`` in: the backlog's lock is held at most about a second at a time.

        On a store that bound is what keeps a live supervisor's lease from being taken as
        stale (``add``, ``unblock`` and the next ``run`` take a lease whose stream stood still
        for 5 s): ``now`` gives it back at once, before work that reads for long.
        """
        if now or time.monotonic() - self.last_close > 1.0:
            self.end()
            self.refresh()  # what others appended before this process took the lock last
            t = self.backlog.task
            if t.stream.writing:
                self.closed_size = _size(t.stream.path)  # exact: the lock is still held
            t.close()
            self.last_close = time.monotonic()

    # -- start -----------------------------------------------------------------------

    def run(self) -> None:
        # signal handlers can only be set from the main thread; elsewhere the caller stops the run
        main = threading.current_thread() is threading.main_thread()
        old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.stopping = signal.Signals(signum).name

        for s in old:
            signal.signal(s, on_signal)
        try:
            leases.claim_stale(self.backlog.task)  # on a store: a SIGKILLed supervisor's lease, taken back
            self.refresh()
            me = os.getpid()
            self.record(
                "backlog.run_started",
                {
                    "pid": me, "host": host_name(), "start_time": start_time(me), "boot_id": boot_id(),
                    "workers": self.workers, "quota": [q.spec() for q in self.quotas],
                },
            )  # fmt: skip
            self.book = QuotaBook(tuple(self.quotas))
            self.scan_items()
            self.loop()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.shutdown()

    def scan_items(self) -> None:
        """Each item's task, read whole only if it changed since the cache: done and blocked items settled,
        quota reservations counted.

        The cache (:mod:`intentlog.backlog.itemcache`) only says where to look: an item the
        backlog has not recorded done is recorded done only after its task, read whole,
        holds its ``item.returned``; with a quota, what was spent is read from every item
        task's stream, never from the cache.
        """
        reservations: list[tuple[float, dict[str, float]]] = []
        self.release_backlog_lock(now=True)  # reading every item task can take longer than a lease may stand still
        ordered = self.fold.ordered()
        need = [rec.task for rec in ordered if not (rec.done or rec.failed is not None)]
        got = read_returned_and_reserved(self.backlog.ledger, self.backlog.name, need)
        spent = read_reservations(self.backlog.ledger, [rec.task for rec in ordered]) if self.quotas else {}
        for rec in ordered:
            returned = got.get(rec.task, (False, ()))[0]
            reservations.extend(spent.get(rec.task, ()))  # a settled item's units were spent too
            if rec.done or rec.failed is not None:
                self.settled[rec.item] = "done" if rec.done else "failed"
                continue
            if returned and read_item_task(self.backlog.ledger, rec.task).extras.returned:
                self.record("backlog.item_done", {"item": rec.item, "task": rec.task, "found": "in the task's record"})
                self.settled[rec.item] = "done"
                self.release_backlog_lock()
        self.book.load(reservations)

    # -- the loop --------------------------------------------------------------------

    def loop(self) -> None:
        while True:
            if self.stopping is not None:
                return
            self.spawn()
            ready = wait([w.conn for w in self.pool], timeout=self.poll)
            # one sync for what this turn records: each record is also derivable from the
            # item tasks (a lost one is found again at the next start), except quota
            # grants, which are recorded by the worker in its task before its attempt
            self.batching = True  # the batch opens with this turn's first record (a quiet turn opens nothing)
            for w in list(self.pool):
                if w.conn in ready:
                    self.receive(w)
            self.grant_waiting()
            self.watch()
            self.dispatch()
            self.release_backlog_lock()
            if self.exhausted is not None and not any(w.item for w in self.pool):
                return
            if self.until_idle and self.idle():
                self.refresh()  # an item added meanwhile (by another process) is run before the run calls it idle
                if self.idle():
                    return

    def spawn(self) -> None:
        while len(self.pool) < self.workers:
            self.end()
            self.backlog.task.close()  # a forked child must not inherit the backlog's lock
            self.last_close = time.monotonic()
            slot, conn = self.engine.spawn(self.backlog.ledger, self.step)
            self.pool.append(_Worker(slot, conn))

    def busy_items(self) -> set[str]:
        return {w.item for w in self.pool if w.item is not None}

    def is_settled(self, rec: ItemRecord) -> bool:
        return rec.done or rec.failed is not None or self.settled.get(rec.item) in ("done", "failed")

    def unsettled(self) -> deque[ItemRecord]:
        """The items not done or failed, in run order: listed once per fold (and per item added), pruned from the front.

        Order depends only on what ``backlog.item_added`` says (priority, seq), so the list
        is rebuilt only when the fold is replaced or grows; an item settled out of order is
        skipped until it reaches the front.
        """
        if self.pending_of is not self.fold or self.pending_count != len(self.fold.items):
            self.pending = deque(r for r in self.fold.ordered() if not self.is_settled(r))
            self.pending_of, self.pending_count = self.fold, len(self.fold.items)
        pending = self.pending
        while pending and self.is_settled(pending[0]):
            pending.popleft()
        return pending

    def candidates(self) -> Iterator[ItemRecord]:
        """The items that may start now, in run order (lazily: dispatch stops once no worker is free)."""
        now = time.time()
        busy = self.busy_items()
        for rec in self.unsettled():
            if rec.item in busy or rec.blocked is not None or self.is_settled(rec):
                continue
            due = rec.due()
            if due is not None and due > now:
                continue
            yield rec

    def dispatch(self) -> None:
        if self.stopping is not None or self.exhausted is not None:
            return
        free = [w for w in self.pool if w.item is None]
        if not free:
            return
        for rec in self.candidates():
            if not free:
                return
            t = self.backlog.ledger.task(rec.task)
            if leases.held_elsewhere(t):
                self.watch_foreign(rec, t)
                continue
            self.foreign.pop(rec.item, None)
            w = free.pop(0)
            w.item, w.since, w.progress = rec.item, time.monotonic(), time.monotonic()
            w.task = t
            w.size = leases.progress(t)
            w.asks = self.asks()
            w.conn.send(Run("item", rec.item, rec.task, self.backlog.name, rec.payload, w.asks))

    def asks(self) -> bool:
        """Whether a worker must ask for a grant before each attempt.

        With no quota every grant would be a yes until the run stops, so a local worker is
        not asked to wait for one: it reserves its units in its task as ever, and the
        supervisor sends it "stop" once, unasked, when the run stops taking attempts (the
        worker looks for it before each attempt). Other engines relay the asking form.
        """
        return bool(self.quotas) or getattr(self.engine, "name", None) != "local"

    def tell_stop(self) -> None:
        """Send "stop" to every worker running an item that does not ask: it starts no attempt after it reads it."""
        for w in self.pool:
            if w.item is not None and not w.asks:
                try:
                    w.conn.send(Stop("stop"))
                except OSError:
                    pass  # a worker that is gone starts nothing
                w.asks = True  # told once

    def watch_foreign(self, rec: ItemRecord, t: Task) -> None:
        """A lock held by a process that is not ours: taken only after it stalls and is ended (pid + start time)."""
        size, now = leases.progress(t), time.monotonic()
        seen = self.foreign.get(rec.item)
        if seen is None or seen.size != size:
            self.foreign[rec.item] = _Foreign(size, now)
            return
        if now - seen.progress < self.inactivity:
            return
        if leases.on_store(t):  # a lease on a store names no pid: the stalled holder is fenced, on any host
            if leases.fence(t) is not None:
                self.record("backlog.holder_ended", {"item": rec.item, "task": rec.task, "fenced": True,
                            "reason": f"stalled: its stream did not grow for {self.inactivity:g} s; lease taken"})
            self.foreign.pop(rec.item, None)
            return
        holder = t.writer_pid()
        lease = task_extras(t.events()).lease
        if holder is None or lease is None or lease.pid != holder or lease.host != host_name():
            return  # not provably the recorded holder on this host: never guessed at
        if end_holder(lease.pid, lease.start_time):
            self.record(
                "backlog.holder_ended",
                {
                    "item": rec.item, "task": rec.task, "pid": lease.pid, "start_time": lease.start_time,
                    "epoch": lease.epoch, "reason": f"stalled: its stream did not grow for {self.inactivity:g} s",
                },
            )  # fmt: skip
            self.foreign.pop(rec.item, None)

    # -- messages ----------------------------------------------------------------------

    def receive(self, w: _Worker) -> None:
        try:
            msg = from_slot(w.conn.recv())
        except (EOFError, OSError):
            self.lost(w, f"worker {w.proc.pid} exited ({w.proc.exitcode})")
            return
        if isinstance(msg, Leased):
            w.progress = time.monotonic()
        elif isinstance(msg, Died):  # the engine runs the item again elsewhere: it resumes, never re-runs
            rec = self.fold.items[msg.item]
            self.record(
                "backlog.holder_died", {"item": msg.item, "task": rec.task, "pid": msg.pid, "reason": msg.reason}
            )
        elif isinstance(msg, Reserve):
            w.waiting = (msg.item, dict(msg.units))
            self.grant(w)
        else:
            self.finished(w, msg)

    def grant(self, w: _Worker) -> None:
        assert w.waiting is not None
        item, want = w.waiting
        if self.stopping is not None:
            w.conn.send(Stop("stop"))
            w.waiting = None
            return
        now = time.time()
        blocked = self.book.check(want, now)
        if blocked is None:
            self.book.reserve(want, now)
            w.conn.send(Grant("grant", now))
            w.waiting = None
            w.progress = time.monotonic()
            self.waiting_logged = None
            return
        q, until = blocked
        if until is None:
            why = f"quota {q.spec()} is spent and cannot reopen"
            self.exhausted = why
            self.record("backlog.quota_exhausted", {"quota": q.spec(), "item": item})
            self.record("backlog.quota_waiting", {"quota": q.spec(), "until": None, "reason": why})
            w.conn.send(Spent("exhausted", why))
            w.waiting = None
            return
        if self.waiting_logged != q.name:
            self.waiting_logged = q.name
            self.record(
                "backlog.quota_waiting",
                {"quota": q.spec(), "until": until, "used": self.book.used(q, now), "reason": "window full"},
            )

    def grant_waiting(self) -> None:
        for w in self.pool:
            if w.waiting is not None:
                self.grant(w)
                if w.waiting is not None:
                    w.progress = time.monotonic()  # waiting for a grant is not a stall

    def finished(self, w: _Worker, msg: Answer) -> None:
        item = msg.item
        w.item, w.waiting = None, None
        rec = self.fold.items[item]
        if isinstance(msg, Done):
            self.record("backlog.item_done", {"item": item, "task": rec.task})
            self.settled[item] = "done"
        elif isinstance(msg, Blocked):
            self.record(
                "backlog.item_blocked",
                {"item": item, "task": rec.task, "state": msg.state, "reason": msg.reason, "command": msg.command},
            )
        elif isinstance(msg, Failed):
            self.failed_attempt(rec, str(msg.reason))
        # Busy: another process took the lock first: watched as a foreign holder next time;
        # Stopped, Exhausted: the attempt did not start; the item stays queued

    def failed_attempt(self, rec: ItemRecord, why: str) -> None:
        n = rec.failures + 1
        if rec.max_attempts is not None and n >= rec.max_attempts:
            self.record(
                "backlog.item_failed",
                {"item": rec.item, "task": rec.task, "failures": n, "reason": f"{n} failed attempt(s); last: {why}"},
            )
            self.settled[rec.item] = "failed"
            return
        base = min(self.max_backoff, self.backoff * (2 ** (n - 1)))
        delay = base * random.uniform(0.5, 1.0)
        self.record(
            "backlog.item_scheduled",
            {
                "item": rec.item, "task": rec.task, "failures": n, "delay": round(delay, 3),
                "not_before": time.time() + delay, "reason": why,
            },
        )  # fmt: skip

    def lost(self, w: _Worker, why: str) -> None:
        """A worker died on its own (or was ended): its item resumes, never re-runs; a new worker replaces it."""
        self.pool.remove(w)
        w.proc.join(timeout=1.0)
        if w.item is not None:
            rec = self.fold.items[w.item]
            self.record("backlog.holder_died", {"item": w.item, "task": rec.task, "pid": w.proc.pid, "reason": why})

    # -- stalls and timeouts -----------------------------------------------------------

    def watch(self) -> None:
        now = time.monotonic()
        for w in list(self.pool):
            if w.item is None:
                if not w.proc.is_alive():
                    self.pool.remove(w)
                continue
            rec = self.fold.items[w.item]
            size = leases.progress(w.task) if w.task is not None else -1
            if size != w.size:
                w.size, w.progress = size, now
            reason = None
            kind = "backlog.holder_ended"
            hard = rec.max_duration if rec.max_duration is not None else self.max_duration
            limit = rec.inactivity if rec.inactivity is not None else self.inactivity
            if hard is not None and now - w.since > hard:
                reason, kind = f"timed out: running longer than {hard:g} s", "backlog.item_timed_out"
            elif now - w.progress > limit:
                reason = f"stalled: its stream did not grow for {limit:g} s"
            if reason is None:
                continue
            if not leases.end_or_fence(self.backlog.ledger.task(rec.task), w.proc.pid, w.proc.started):
                continue  # cannot prove it is ours: never take the item
            self.pool.remove(w)
            w.proc.join(timeout=1.0)
            self.record(
                kind,
                {"item": rec.item, "task": rec.task, "pid": w.proc.pid, "start_time": w.proc.started, "reason": reason},
            )
            if kind == "backlog.item_timed_out":
                self.failed_attempt(self.fold.items[rec.item], reason)

    # -- idle and shutdown -------------------------------------------------------------

    def idle(self) -> bool:
        """No item can progress without a person: nothing running; every item done, failed or blocked."""
        if any(w.item for w in self.pool) or self.foreign:
            return False
        # blocked items: awaiting approval, reconciliation or review: a person first, then unblock
        return all(rec.blocked is not None or self.is_settled(rec) for rec in self.unsettled())

    def shutdown(self) -> None:
        """Stop taking items; let running ones reach their next attempt or end within the grace; record it."""
        self.end()
        self.batching = False
        why = self.stopping or ("quota" if self.exhausted else "idle")
        if self.stopping is not None:
            self.record("backlog.run_stopping", {"signal": self.stopping, "grace": self.grace})
        deadline = time.monotonic() + (self.grace if self.stopping is not None else 5.0)
        if self.stopping is None:
            self.stopping = why  # a worker asking for a grant from here on is told to stop
        self.tell_stop()
        while any(w.item for w in self.pool) and time.monotonic() < deadline:
            ready = wait([w.conn for w in self.pool if w.item], timeout=self.poll)
            for w in list(self.pool):
                if w.conn in ready:
                    self.receive(w)
            self.grant_waiting()
            self.release_backlog_lock()  # as on every turn: a grace longer than a store's stale limit keeps the lease
        ended = []
        for w in self.pool:
            if w.item is None:
                try:
                    w.conn.send(Quit("quit"))
                except OSError:
                    pass
        for w in self.pool:
            if w.item is None:
                w.proc.join(timeout=2.0)
            if w.proc.is_alive() and w.proc.pid is not None:
                end_holder(w.proc.pid, w.proc.started)
                if w.item is not None:
                    ended.append({"item": w.item, "pid": w.proc.pid})
        self.pool.clear()
        self.engine.close()
        self.end()
        self.record("backlog.run_stopped", {"reason": why, "ended": ended, "quota": self.exhausted})
        self.backlog.task.close()


def _size(path: os.PathLike[str] | str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1
