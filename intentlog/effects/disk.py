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

A failed sync (the stream is poisoned) is thrown into every parked step at its ``yield``,
as the synchronous form's ``append(sync=True)`` would raise there, and fails every finished
job waiting on it: an answer whose record is not durable is never delivered.
"""

from __future__ import annotations

import asyncio
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
    ) -> None:
        self.fn, self.steps, self.answer, self.error = fn, steps, answer, error
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

    @contextmanager
    def using(self) -> Iterator[Disk]:
        """Keep the disk thread running while the block runs (started on first use)."""
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
        with self._lock:
            jobs = self._jobs
        if jobs is None:  # pragma: no cover - drivers post only while using the disk
            raise RuntimeError("the disk thread is not running")
        jobs.put(job)

    def call(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``fn`` in the disk thread; the future resolves once what it wrote is durable."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        job = Job(fn, future=fut)
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
    global _DISKS_LOCK, _THREADS
    _DISKS.clear()
    _DISKS_LOCK = threading.Lock()
    _THREADS = _Threads()  # the parent's kept threads are not in the child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
