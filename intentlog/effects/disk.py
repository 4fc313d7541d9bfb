"""One task's disk thread: the awaitable protocol's record work runs here, off the event loop, sharing its syncs.

An event loop must never wait on the disk, and calls started together should not pay
one ``fdatasync`` each. :class:`Disk` is one task's answer, shared by every coroutine
driving an effect of that task in this process:

- every job runs in one thread (the task's disk thread), in the order submitted, inside
  one batch held open for the thread's life: a job's appends are written at once and
  synced later, together (group commit);
- a job's answer reaches the loop only after a sync covering everything the job wrote:
  the jobs that finished while others were queued are made durable by one sync, done
  when the queue runs dry. A step of the protocol that yields :data:`~.steps.SYNC` parks
  until that sync and then goes on in the thread, so the loop only sees the instructions
  that need the outside world (send, interpret, pause, ask), each with everything before
  it durable -- ``attempt.started`` before its send, as in the synchronous form;
- a job cancelled before it starts never runs; a parked step cancelled meanwhile is not
  carried on (its driver closes it with a job of its own);
- the thread exists while some coroutine uses the disk (:meth:`Disk.using`) and ends when
  the last one is done.

A disk may instead be *shared* (:meth:`Disk.share`): its jobs then run on the process's
one shared disk thread (:class:`_Shared`) with every other shared task's, in the same
order per task and under the same rule (an answer only after a sync covering what its
job wrote); the streams written in a round are synced side by side in sync threads. A
backlog worker holding many items in flight shares its items' disks so that one thread,
not one per item, does their Python work.

A failed sync (the stream is poisoned) is thrown into every parked step at its ``yield``,
as the synchronous form's ``append(sync=True)`` would raise there, and fails every finished
job waiting on it: an answer whose record is not durable is never delivered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, final

from ..errors import IntentlogError, StreamPoisoned
from .steps import Instruction, Proceed, Steps, Sync

if TYPE_CHECKING:
    from ..stream import TaskStream

__all__ = ["Advanced", "Disk", "Job", "disk_of"]


@final
class Advanced:
    """Where a step stopped: at an instruction for the loop, or at the end (``done``, with the value)."""

    __slots__ = ("done", "instruction", "value")

    def __init__(self, instruction: Instruction | None, value: Any = None) -> None:
        self.instruction = instruction
        self.done = instruction is None
        self.value = value


@final
class Job:
    """One piece of record work for the disk thread: a function, or a protocol step run to its next instruction."""

    def __init__(
        self,
        fn: Callable[[], Any] | None = None,
        *,
        steps: Steps[Any] | None = None,
        answer: Any = None,
        error: BaseException | None = None,
        future: asyncio.Future[Any] | None = None,
        bare: bool = False,
    ) -> None:
        self.fn, self.steps, self.answer, self.error = fn, steps, answer, error
        self.bare = bare  # run outside the stream's batch (it opens or closes the writer itself)
        self.end = False  # on the shared disk thread: the disk is left, its stream's batch ends
        self.future = future
        self.loop = future.get_loop() if future is not None else None
        self.cancelled = False  # set by the loop: not started, or not carried on
        self.more = False  # parked at a SYNC: carry on after the next sync
        self.result: Any = None
        self.failure: BaseException | None = None

    def run(self) -> None:
        """Run in the disk thread until the job is done or parked at a SYNC."""
        if self.steps is None:
            try:
                self.result = self.fn() if self.fn is not None else None
            except BaseException as exc:  # handed to the awaiting coroutine
                self.failure = exc
            return
        try:
            ins = self.steps.send(self.answer) if self.error is None else self.steps.throw(self.error)
            while isinstance(ins, Proceed):
                # the caller gave up before the point of no return: stop short of it (the future is
                # cancelled at once by Task.cancel; the flag only once the loop ran its callbacks)
                if self.cancelled or (self.future is not None and self.future.cancelled()):
                    self.steps.close()
                    raise asyncio.CancelledError()
                ins = self.steps.send(None)
        except StopIteration as stop:
            self.result, self.more = Advanced(None, stop.value), False
        except BaseException as exc:  # the decision code raised: delivered once its record is durable
            self.failure, self.more = exc, False
        else:
            self.answer, self.error = None, None
            self.more = isinstance(ins, Sync)
            if not self.more:
                self.result = Advanced(ins)

    def synced(self, failure: BaseException | None) -> None:
        """The sync after this job ran is done (or failed with ``failure``)."""
        if failure is None:
            return
        if self.more:
            self.error = failure  # thrown into the step at its SYNC, as a failed append(sync=True) raises there
        else:
            self.result, self.failure = None, failure

    def deliver(self) -> None:
        """Hand the answer to the awaiting coroutine (nothing when it gave up waiting)."""
        fut, loop = self.future, self.loop
        if fut is None or loop is None:
            return
        try:
            loop.call_soon_threadsafe(_settle, fut, self.result, self.failure)
        except RuntimeError:  # pragma: no cover - the loop is closed: nobody waits
            pass


def _settle(fut: asyncio.Future[Any], result: Any, failure: BaseException | None) -> None:
    if fut.done():
        return
    if failure is not None:
        fut.set_exception(failure)
    else:
        fut.set_result(result)


@final
class Disk:
    """One task's disk thread and its group commit (see the module doc)."""

    def __init__(self, task: TaskStream) -> None:
        self._task = weakref.ref(task)
        self._lock = threading.Lock()
        self._users = 0
        self._jobs: queue.SimpleQueue[Job | None] | None = None
        self.syncs = 0  # shared syncs asked of the stream (each one fdatasync at most)
        self._close_failures = task.close_failures  # as of the last sync: a change since is a lost sync
        #: run on the process's shared disk thread (:class:`_Shared`) instead of a thread of its own;
        #: set only while no coroutine uses the disk, and only when no job of it ever blocks
        self.shared = False
        self._shard: _Shared | None = None  # the shared disk thread it keeps to, once chosen

    def share(self, on: bool) -> bool:
        """Run on the process's shared disk thread (``on``) or a thread of its own; only while unused.

        Returns the mode in force (unchanged while a coroutine uses the disk). Share only a
        disk whose jobs never block on anything but the disk (no gate waiting for an answer).
        """
        with self._lock:
            if self._users == 0 and self._jobs is None:
                self.shared = on
            return self.shared

    @contextmanager
    def using(self) -> Iterator[Disk]:
        """Keep the disk thread running while the block runs (started on first use)."""
        if self.shared:  # the process's shared disk thread runs as long as the process
            with self._lock:
                self._users += 1
            try:
                yield self
            finally:
                with self._lock:
                    self._users -= 1
                    left = self._users == 0
                if left:
                    task = self._task()
                    if task is not None:
                        end = Job()
                        end.end = True
                        _shared_for(self).post(self, task, end)
            return
        with self._lock:
            self._users += 1
            if self._jobs is None:
                task = self._task()
                if task is None:  # pragma: no cover - the caller holds the task
                    raise RuntimeError("the task is gone")
                jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
                _THREADS.run(lambda: self._serve(task, jobs))
                self._jobs = jobs
        try:
            yield self
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._jobs is not None:
                    self._jobs.put(None)  # the thread drains what is queued, syncs, and ends
                    self._jobs = None

    def post(self, job: Job) -> None:
        """Queue a job (only inside :meth:`using`)."""
        if self.shared:
            task = self._task()
            if task is None:  # pragma: no cover - the caller holds the task
                raise RuntimeError("the task is gone")
            _shared_for(self).post(self, task, job)
            return
        with self._lock:
            jobs = self._jobs
        if jobs is None:  # pragma: no cover - drivers post only while using the disk
            raise RuntimeError("the disk thread is not running")
        jobs.put(job)

    def call(self, fn: Callable[[], Any], *, bare: bool = False) -> asyncio.Future[Any]:
        """Run ``fn`` in the disk thread; the future resolves once what it wrote is durable.

        ``bare``: run it outside the stream's batch (a function that opens the writer with a
        gate of its own, or closes it): what it appends is synced by its own appends.
        """
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        job = Job(fn, future=fut, bare=bare)
        _cancel_with(fut, job)
        self.post(job)
        return fut

    def advance(self, steps: Steps[Any], answer: Any = None, error: BaseException | None = None) -> asyncio.Future[Any]:
        """Carry a protocol step on to its next outside instruction (an :class:`Advanced`), syncing on the way."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        job = Job(steps=steps, answer=answer, error=error, future=fut)
        _cancel_with(fut, job)
        self.post(job)
        return fut

    # -- the thread ------------------------------------------------------------------

    def _serve(self, task: TaskStream, jobs: queue.SimpleQueue[Job | None]) -> None:
        try:
            self._work(task, jobs)
        except (OSError, IntentlogError):  # the held batch's last sync on a poisoned stream: every job has its answer
            pass

    def _work(self, task: TaskStream, jobs: queue.SimpleQueue[Job | None]) -> None:
        ready: deque[Job] = deque()  # parked steps whose sync is done: carried on before new jobs
        parked: list[Job] = []  # ran since the last sync: delivered (or carried on) after the next
        with ExitStack() as held:
            batched = False
            while True:
                if ready:
                    job: Job | None = ready.popleft()
                else:
                    try:
                        job = jobs.get(block=not parked)
                    except queue.Empty:
                        self._flush(task, parked, ready)
                        parked = []
                        continue
                if job is None:
                    self._flush(task, parked, ready)
                    break
                if job.cancelled:
                    continue
                if not batched:
                    try:
                        held.enter_context(task.batch())  # opens the writer: its refusal is this job's answer
                    except BaseException as exc:
                        job.failure = exc
                        job.deliver()
                        continue
                    batched = True
                job.run()
                parked.append(job)

    def _flush(self, task: TaskStream, parked: list[Job], ready: deque[Job]) -> None:
        if not parked:
            return
        failure: BaseException | None = None
        try:
            self.syncs += 1
            task.sync()
            if task.close_failures != self._close_failures:
                # another thread closed the writer these jobs appended through, and that close's sync
                # failed: what they wrote may be lost, so none of it is durable (as a failed sync)
                self._close_failures = task.close_failures
                raise StreamPoisoned(str(task.path), "another thread closed the stream and its last sync failed")
        except BaseException as exc:  # a poisoned stream: nothing parked may be delivered as durable
            failure = exc
        for job in parked:
            job.synced(failure)
            if job.more:
                ready.append(job)
            else:
                job.deliver()


def _cancel_with(fut: asyncio.Future[Any], job: Job) -> None:
    """A cancelled await cancels its job (not started: never runs; parked: not carried on)."""

    def done(f: asyncio.Future[Any]) -> None:
        if f.cancelled():
            job.cancelled = True

    fut.add_done_callback(done)


@final
class _Threads:
    """Disk threads kept for the next disk: a thread whose disk is done waits for another's work.

    Starting a thread waits until it runs, which on a busy process (many tasks' effects in
    flight, each with its disk thread) costs the event loop milliseconds per effect; a
    kept thread is handed its work through a queue instead. At most :data:`_KEEP` wait.
    """

    def __init__(self) -> None:
        self.work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.idle = 0
        self.lock = threading.Lock()

    def run(self, fn: Callable[[], None]) -> None:
        with self.lock:
            if self.idle:
                self.idle -= 1
                self.work.put(fn)
                return
        threading.Thread(target=self._loop, args=(fn,), name="intentlog-disk", daemon=True).start()

    def _loop(self, fn: Callable[[], None]) -> None:
        while True:
            fn()
            with self.lock:
                if self.idle >= _KEEP:
                    return
                self.idle += 1
            fn = self.work.get()


_KEEP = 256
_THREADS = _Threads()


#: threads that sync the streams of one shared round side by side (their ``fdatasync`` calls overlap);
#: 1: the shared thread syncs them one after another itself
SYNC_THREADS = 16


@final
class _Shared:
    """One disk thread for every shared :class:`Disk` of this process: group commit across streams.

    The thread runs the queued jobs of every task in the order submitted (a task's jobs
    stay in its order; a step parked at a sync is carried on before new jobs), each job
    but a ``bare`` one inside its stream's batch, held open while the disk is used. When
    the queue runs dry, each stream written since is handed to one of
    :data:`SYNC_THREADS` threads, which syncs it and only then delivers the answers of
    the jobs that wrote it (or hands their steps back to be carried on): every answer still
    follows a sync covering what its job wrote, the syncs of many streams overlap, and the
    thread goes on running other tasks' jobs meanwhile. One thread does the Python work of
    every item, so a hundred items in flight do not hand the interpreter lock among a
    hundred threads; a job that blocks holds every shared task back, so only disks whose
    jobs never wait for anything but the disk are shared.
    """

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Disk, TaskStream, Job] | None] = queue.SimpleQueue()
        self.ready: deque[tuple[Disk, TaskStream, Job]] = deque()  # steps whose sync is done: carried on first
        self.lock = threading.Lock()
        self.started = False
        self.syncers: concurrent.futures.ThreadPoolExecutor | None = None

    def post(self, disk: Disk, task: TaskStream, job: Job) -> None:
        if not self.started:
            with self.lock:
                if not self.started:
                    self.syncers = concurrent.futures.ThreadPoolExecutor(
                        SYNC_THREADS, thread_name_prefix="intentlog-sync"
                    )
                    threading.Thread(target=self._work, name="intentlog-disk-shared", daemon=True).start()
                    self.started = True
        self.jobs.put((disk, task, job))

    def _work(self) -> None:
        held: dict[Disk, Any] = {}  # each used disk's stream batch, open until the disk is left
        written: dict[Disk, list[tuple[Disk, TaskStream, Job]]] = {}  # jobs run since their stream's last sync
        while True:
            if self.ready:
                entry: tuple[Disk, TaskStream, Job] | None = self.ready.popleft()
            else:
                try:
                    entry = self.jobs.get(block=not written)
                except queue.Empty:
                    for jobs in written.values():
                        self._sync(jobs)
                    written = {}
                    continue
            if entry is None:
                continue  # a sync thread's wake-up: a step was handed back
            disk, task, job = entry
            if job.cancelled:
                continue
            if job.end:  # the disk is left: its batch ends (nothing is pending: every job was answered)
                cm = held.pop(disk, None)
                if cm is not None:
                    try:
                        cm.__exit__(None, None, None)
                    except BaseException:  # a poisoned stream says so again: its jobs were told
                        pass
                continue
            if not job.bare and disk not in held:
                cm = task.batch()
                try:
                    cm.__enter__()  # opens the writer: its refusal is this job's answer
                except BaseException as exc:
                    job.failure = exc
                    job.deliver()
                    continue
                held[disk] = cm
            job.run()
            written.setdefault(disk, []).append(entry)

    def _sync(self, jobs: list[tuple[Disk, TaskStream, Job]]) -> None:
        if SYNC_THREADS > 1 and self.syncers is not None:
            self.syncers.submit(self._synced, jobs)
        else:
            self._synced(jobs)

    def _synced(self, jobs: list[tuple[Disk, TaskStream, Job]]) -> None:
        """One stream's sync, then its jobs answered (or their steps handed back to the disk thread)."""
        disk, task, _ = jobs[0]
        failure: BaseException | None = None
        try:
            disk.syncs += 1
            task.sync()
            if task.close_failures != disk._close_failures:
                disk._close_failures = task.close_failures
                raise StreamPoisoned(str(task.path), "another thread closed the stream and its last sync failed")
        except BaseException as exc:  # a poisoned stream: nothing of it may be delivered as durable
            failure = exc
        more = False
        for entry in jobs:
            job = entry[2]
            job.synced(failure)
            if job.more:
                self.ready.append(entry)
                more = True
            else:
                job.deliver()
        if more:
            self.jobs.put(None)  # wake the disk thread


#: shared disk threads per process; each shared disk keeps to one of them (its order is that thread's).
#: One measured best (bench/backlog.py --in-flight: 4 threads gave back most of the CPU one saves)
SHARED_THREADS = 1
_SHARED: list[_Shared] = []
_SHARED_LOCK = threading.Lock()


def _shared_for(disk: Disk) -> _Shared:
    """The shared disk thread ``disk`` keeps to, chosen once, round robin (a task's jobs keep one order)."""
    got = disk._shard
    if got is None or got not in _SHARED:  # a disk from before a fork: choose again
        with _SHARED_LOCK:
            while len(_SHARED) < max(1, SHARED_THREADS):
                _SHARED.append(_Shared())
            got = _SHARED[_next_shard() % len(_SHARED)]
            disk._shard = got
    return got


_SHARDS_GIVEN = [0]


def _next_shard() -> int:
    n = _SHARDS_GIVEN[0]
    _SHARDS_GIVEN[0] = n + 1
    return n

_DISKS: weakref.WeakKeyDictionary[TaskStream, Disk] = weakref.WeakKeyDictionary()
_DISKS_LOCK = threading.Lock()


def disk_of(task: TaskStream) -> Disk:
    """The task's :class:`Disk` in this process (one per stream core)."""
    with _DISKS_LOCK:
        disk = _DISKS.get(task)
        if disk is None:
            disk = _DISKS[task] = Disk(task)
        return disk


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's disk threads: forget them (a new one starts on first use)."""
    global _DISKS_LOCK, _THREADS, _SHARED_LOCK
    _DISKS.clear()
    _DISKS_LOCK = threading.Lock()
    _THREADS = _Threads()  # the parent's kept threads are not in the child
    _SHARED.clear()  # nor its shared disk threads
    _SHARED_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
