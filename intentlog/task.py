"""Task: one stream handle and the operations users call on it.

A task's handle is shared process-wide (get it from :meth:`Ledger.task`). It takes the
task's exclusive writer lock at its first write and holds it until :meth:`close` (or the
end of a ``with`` block, or process exit). Reads take no lock.

``Task`` is the facade: the stream itself (writer, live fold, privileged append, batch,
lock) is its :class:`~intentlog.stream.TaskStream`, :attr:`Task.stream`, which the
effect protocol, approvals, checkpoints, sessions and fork are written against. Here are
the public checks (reserved kinds, argument types) and the delegation.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, final

from ._internal.args import check_path
from ._internal.types import EffectKwargs, PrepareKwargs, StreamLayout, spelled
from .errors import ReservedKind, UsageError, WrongType
from .eventlog import Event
from .eventlog.canonical import redact_value
from .eventlog.format import RESERVED_PREFIXES, check_kind, is_reserved
from .projections.workstate import WorkState
from .stream import TaskStream

if TYPE_CHECKING:
    from ._internal.types import Send, Unpack
    from .artifacts import ArtifactStore, Ref
    from .checkpoints import Checkpoint, Evidence
    from .compile import Package
    from .effects import Call
    from .eventlog.storage import StreamStorage
    from .ledgerstorage import LedgerStorage
    from .projections.operator import ApprovalState
    from .projections.status import TaskStatus

__all__ = ["RESERVED_PREFIXES", "Task", "TaskLedger"]


class TaskLedger(StreamLayout, Protocol):
    """What a task needs of the ledger that hands it out (a :class:`~intentlog.Ledger` is one).

    Its layout (where streams and the workspace are), its artifact store, its streams and
    the storage it lives in (a folder or an object store), where it lives (for messages), and the
    handle of another of its tasks (a fork's). The task never imports the ledger.
    """

    @property
    def artifacts(self) -> ArtifactStore: ...

    @property
    def streams(self) -> StreamStorage: ...

    @property
    def backend(self) -> LedgerStorage: ...

    @property
    def location(self) -> str: ...

    def task(self, task_id: str, *, wait: float = 0.0) -> Task: ...


@final
class Task:
    """One task stream. Durable-on-return appends, streaming reads, and the effect protocol."""

    def __init__(self, ledger: TaskLedger, task_id: str) -> None:
        self.ledger = ledger
        self.id = task_id
        #: the stream core the protocol is written against (writer, live fold, privileged append)
        self.stream = TaskStream(ledger, ledger.artifacts, task_id, storage=ledger.backend)
        self.path: Path = self.stream.path

    def __repr__(self) -> str:
        return f"<Task {self.id!r} in {str(self.ledger.root)!r}>"

    @property
    def wait(self) -> float:
        """Seconds the first write waits for another process's writer lock (0: refuse at once)."""
        return self.stream.wait

    @wait.setter
    def wait(self, seconds: float) -> None:
        self.stream.wait = seconds

    # -- writing -------------------------------------------------------------------

    def append(self, kind: str, data: Mapping[str, Any] | None = None, *, expected_seq: int | None = None) -> Event:
        """Append one event; it is durable (written and fdatasynced) when this returns.

        Credentials in ``data`` are recorded as ``[REDACTED]`` by the one redaction rule
        (names at any depth, values by their look; docs/effects.md, "Redaction"); the
        returned event holds what was recorded.
        Inside :meth:`batch` the sync is shared and happens when the batch ends. Kinds in
        intentlog's own namespaces (``call.``, ``attempt.`` …) are refused with
        :class:`~intentlog.errors.ReservedKind`: those are written by the matching
        methods only. Raises :class:`~intentlog.errors.NotSerializable` for data that is
        not exact JSON, :class:`~intentlog.errors.Conflict` when ``expected_seq`` is stale,
        :class:`~intentlog.errors.TaskBusy` when another process writes this task.
        """
        check_kind(kind)
        if is_reserved(kind):
            raise ReservedKind(kind)
        if expected_seq is not None and (isinstance(expected_seq, bool) or not isinstance(expected_seq, int)):
            raise WrongType(
                f"expected_seq must be an int (the next seq you read), not {type(expected_seq).__name__} "
                f"{expected_seq!r}; nothing was written"
            )
        if data is None:
            data = {}
        elif not isinstance(data, Mapping):
            from .errors import NotSerializable

            raise NotSerializable(f"event data must be a dict (a JSON object), not {type(data).__name__}", path="data")
        # the caller's own data: credentials by name at any depth and by look redacted (docs/effects.md,
        # "Redaction"); shapes alone the stream core replaces, as in every record
        clean, _ = redact_value(dict(data), shapes=False)
        return self.stream.append(kind, clean, expected_seq=expected_seq)

    def _append(self, kind: str, data: dict[str, Any], *, expected_seq: int | None = None, sync: bool = False) -> Event:
        """The privileged append (:meth:`TaskStream.append`): any kind, no public checks."""
        return self.stream.append(kind, data, expected_seq=expected_seq, sync=sync)

    @contextmanager
    def batch(self) -> Iterator[Task]:
        """Group commit: events appended inside share one sync, done when the block exits."""
        with self.stream.batch():
            yield self

    def sync(self) -> None:
        """Make every event appended so far durable (useful inside a batch)."""
        self.stream.sync()

    @property
    def next_seq(self) -> int:
        """The seq the next append will get (takes the writer lock)."""
        return self.stream.next_seq

    # -- reading -------------------------------------------------------------------

    def exists(self) -> bool:
        return self.stream.exists()

    def events(self, *, since: int = 0) -> Iterator[Event]:
        """Every trusted event in order, streaming in constant memory; takes no lock.

        Checks each line's parse, ``seq`` and ``prev`` as it goes. A torn tail (an append
        that never returned, or garbage after the last whole event, which the next writer
        quarantines) ends the iteration quietly; ``intentlog verify`` reports it. A whole
        event line that fails to chain (suspect: the line before may be edited) or a bad
        line followed by events raises :class:`~intentlog.errors.CorruptStream` naming it.
        """
        if isinstance(since, bool) or not isinstance(since, int):
            raise WrongType(f"events(since=...) takes a seq (an int >= 0), not {type(since).__name__} {since!r}")
        if since < 0:
            raise UsageError(f"events(since=...) takes a seq (an int >= 0), not {since!r}")
        return self.stream.events(since)

    def work_state(self) -> WorkState:
        """The work-state projection of this task, read fresh from disk (pure: appends nothing).

        What a full read gives; the view cache (:mod:`intentlog.viewcache`) lets it fold only
        the events after the last read, once the stream vouches for the cached entry.
        """
        return self.ledger.backend.work_state(self.stream)

    # -- artifacts -----------------------------------------------------------------

    def record_artifact(
        self, locator: str | os.PathLike[str], *, producer: str | None = None, media_type: str | None = None
    ) -> Ref:
        """Hash and store the file at ``locator`` (relative to the ledger's workspace) and record it.

        Appends ``artifact.recorded {locator, digest, size, producer, media_type}``. The
        bytes are durable in ``objects/`` before the event is. Recording a locator again
        after it changed keeps both versions.
        """
        from .artifacts import capture_locator

        check_path(locator, "locator")
        loc, ref = capture_locator(
            self.ledger.artifacts, self.ledger.workspace, os.fspath(locator), media_type=media_type
        )
        self.stream.append(
            "artifact.recorded",
            {
                "locator": loc,
                "digest": ref.digest,
                "size": ref.size,
                "producer": producer,
                "media_type": media_type,
            },
        )
        return ref

    # -- the effect protocol (intentlog.effects) ------------------------------------

    @spelled(PrepareKwargs)
    def prepare(self, key: str, request: Any, **options: Unpack[PrepareKwargs]) -> Call:
        """Record the intent of a call (``call.requested``, ``call.manifest``); sends nothing.

        The options (``inputs``, ``name``, ``drop``, ``redact``, ``dedup``): see
        :func:`intentlog.effects.prepare`; they are checked once, before anything is written.
        """
        from .effects.intent import check_key
        from .effects.options import EffectOptions
        from .effects.prepare import prepare_call

        opts = EffectOptions.of(options, PrepareKwargs, "Task.prepare")
        return prepare_call(self.stream, check_key(key), request, opts)

    @spelled(EffectKwargs)
    def effect(self, key: str, request: Any, send: Send, **options: Unpack[EffectKwargs]) -> Any:
        """Run the whole effect protocol for ``key``; running it again after a crash resumes.

        See :func:`intentlog.effects.effect` and DESIGN §5 for what happens in each stage;
        :meth:`intentlog.Call.run` for heartbeats (``intentlog.heartbeat``) and the
        ``inactivity_timeout`` / ``max_duration`` limits of a long effect. The options
        (:class:`~intentlog._internal.types.EffectKwargs`) are checked once, before anything is written.
        """
        from .effects.intent import check_not_async
        from .effects.options import EffectOptions
        from .effects.prepare import run_effect

        opts = EffectOptions.of(options, EffectKwargs, "Task.effect")
        check_not_async(send, opts.interpret, "task.effect", "task.aeffect")
        return run_effect(self.stream, key, request, send, opts)

    @spelled(EffectKwargs)
    async def aeffect(self, key: str, request: Any, send: Send, **options: Unpack[EffectKwargs]) -> Any:
        """:meth:`effect`, awaited, with an async ``send``: see :func:`intentlog.effects.aeffect`."""
        from .effects.options import EffectOptions
        from .effects.prepare import arun_effect

        opts = EffectOptions.of(options, EffectKwargs, "Task.aeffect")
        return await arun_effect(self.stream, key, request, send, opts)

    def reconcile(
        self,
        call_id: str,
        outcome: str,
        *,
        evidence: bytes | None = None,
        note: str | None = None,
        by: str | None = None,
    ) -> Event:
        """Record what happened to an unknown effect: ``served``, ``not_served`` or ``resend``."""
        from .effects import reconcile

        return reconcile(self.stream, call_id, outcome, evidence=evidence, note=note, by=by)

    def reinterpret(self, call_or_key: str, interpret: Callable[[bytes], Any]) -> Any:
        """Interpret a call's stored response again, beside the old; see :func:`.effects.reinterpret`."""
        from .effects import reinterpret

        return reinterpret(self.stream, call_or_key, interpret)

    def fail(self, call_id: str, reason: str, *, by: str | None = None) -> Event:
        """Record an operator's decision that a call has failed (``call.failed``)."""
        from .effects import fail_call

        return fail_call(self.stream, call_id, reason, by=by)

    def compile(
        self,
        compilation_id: str,
        offered: Sequence[Mapping[str, Any]],
        *,
        required: Iterable[str] = (),
        select: Callable[[list[dict[str, Any]]], Iterable[str]] | None = None,
    ) -> Package:
        """Compile a context package from offered items, recording inventory and outcome."""
        from .compile import compile_context

        return compile_context(self.stream, compilation_id, offered, required=required, select=select)

    @contextmanager
    def key(self, key: str) -> Iterator[str]:
        """Name the idempotency key of the effects made inside the block by integrations.

        Clients that make effects for you (``intentlog.http``) use this key instead of the
        request's hash and occurrence count. Nested blocks use the innermost key.
        """
        from .effects.intent import key_scope

        with key_scope(self.stream, key):
            yield key

    def current_key(self) -> str | None:
        """The key named by the innermost :meth:`key` block for this task, if any."""
        from .effects.intent import current_key

        return current_key(self.stream)

    def accept(self, *, note: str | None = None, by: str | None = None) -> Event:
        """Record that the task's outcome was checked and accepted (``task.accepted``)."""
        from .eventlog.redaction import scrub_note

        return self.stream.append("task.accepted", {"note": scrub_note(note), "by": by})

    def fail_task(self, reason: str, *, by: str | None = None) -> Event:
        """Record that the task is given up (``task.failed``): its operator state is *failed*.

        For a single call that failed use :meth:`fail`. A later :meth:`accept` supersedes
        it; to try again with changed input, :meth:`fork` the task.
        """
        from .errors import UsageError

        if not isinstance(reason, str) or not reason:
            raise UsageError(f"giving a task up needs a reason (a non-empty string), not {reason!r}")
        if by is not None and not isinstance(by, str):
            raise UsageError(f"by must be a string, not {type(by).__name__}")
        from .eventlog.redaction import scrub_note

        return self.stream.append("task.failed", {"reason": scrub_note(reason), "by": by})

    # -- checkpoints (intentlog.checkpoints) -----------------------------------------

    def checkpoint(
        self,
        phase: str,
        *,
        evidence: Iterable[Evidence] = (),
        outputs: Mapping[str, Evidence] | None = None,
        partial: bool = False,
        status: str | None = None,
        revision: str | None = None,
        changed_files: Sequence[str] = (),
        git: bool | str | os.PathLike[str] = False,
        note: str | None = None,
        by: str | None = None,
        turn: str | None = None,
        call: str | None = None,
    ) -> Event:
        """Record a named phase with its accepted evidence (``task.checkpoint``); durable on return.

        ``outputs`` labels evidence, ``partial`` marks it unfinished, ``git`` captures the
        revision and changed files: see :func:`intentlog.checkpoints.record_checkpoint`.
        """
        from .checkpoints import record_checkpoint

        return record_checkpoint(
            self.stream,
            phase,
            evidence=evidence,
            outputs=outputs,
            partial=partial,
            status=status,
            revision=revision,
            changed_files=changed_files,
            git=git,
            note=note,
            by=by,
            turn=turn,
            call=call,
        )

    def checkpoints(self, *, verify: bool = True) -> list[Checkpoint]:
        """Every checkpoint, oldest first, each with what checking its evidence found. Takes no lock."""
        from .checkpoints import checkpoints

        return checkpoints(self.stream, verify=verify)

    def latest_checkpoint(self, *, verified: bool = True, phase: str | None = None) -> Checkpoint | None:
        """The newest checkpoint whose evidence all verifies (skipped ones named in its ``skipped``), or None."""
        from .checkpoints import latest_checkpoint

        return latest_checkpoint(self.stream, verified=verified, phase=phase)

    # -- approvals (intentlog.approvals) ---------------------------------------------

    def request_approval(self, approval_id: str, question: str, *, binds: object = None) -> ApprovalState:
        """Ask a person to decide about ``binds`` (a Call, call id, Turn or digest); idempotent per binding.

        See :func:`intentlog.approvals.request_approval`.
        """
        from .approvals import request_approval

        return request_approval(self.stream, approval_id, question, binds=binds)

    def decide(
        self,
        approval_id: str,
        decision: str,
        *,
        by: str | None = None,
        note: str | None = None,
        request_hash: str | None = None,
    ) -> Event:
        """Record ``"approve"`` or ``"reject"`` for the approval's current request (``approval.decided``)."""
        from .approvals import decide

        return decide(self.stream, approval_id, decision, by=by, note=note, request_hash=request_hash)

    def approval(self, approval_id: str) -> ApprovalState:
        """One approval's state, read fresh from disk (takes no lock)."""
        from .approvals import approval

        return approval(self.stream, approval_id)

    def approvals(self) -> Mapping[str, ApprovalState]:
        """Every approval's state, by id, read fresh from disk (takes no lock)."""
        from .approvals import approvals

        return approvals(self.stream)

    def wait_for_approval(self, approval_id: str, *, timeout: float | None = None, poll: float = 1.0) -> ApprovalState:
        """Wait for a decision on the approval's current request, releasing the writer lock while waiting.

        See :func:`intentlog.approvals.wait_for_approval`.
        """
        from .approvals import wait_for_approval

        return wait_for_approval(self.stream, approval_id, timeout=timeout, poll=poll)

    # -- the idioms of durable execution (intentlog.idioms) --------------------------

    def value(self, name: str, fn: Callable[[], Any]) -> Any:
        """The value recorded under ``name``; runs ``fn()`` once and records its JSON result first if none is.

        Durable (synced) before it returns; a re-run returns the recorded value without
        calling ``fn``. See :mod:`intentlog.idioms.values`.
        """
        from .idioms.values import recorded_value

        return recorded_value(self.stream, name, fn)

    async def avalue(self, name: str, fn: Callable[[], Any]) -> Any:
        """:meth:`value` with an async ``fn`` (awaited once); the record is read and written off the event loop."""
        from .idioms.values import arecorded_value

        return await arecorded_value(self.stream, name, fn)

    def step(self, fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
        """Decorator: record each call's result under the function's name and its arguments' hash.

        ``@task.step`` or ``@task.step(name="fetch")``; sync or async functions; arguments
        must be JSON. See :mod:`intentlog.idioms.values`.
        """
        from .idioms.values import step

        return step(self.stream, fn, name=name)

    def sleep_for(self, duration: float | timedelta, *, name: str | None = None, block: bool = True) -> str:
        """Sleep ``duration`` durably: the wake time is recorded once; a re-run sleeps only what is left.

        Returns the recorded wake time (UTC ``ts`` text). ``block=False`` raises
        :class:`~intentlog.Suspended` instead of waiting. See :mod:`intentlog.idioms.sleep`.
        """
        from .idioms.sleep import sleep_for

        return sleep_for(self.stream, duration, name=name, block=block)

    def sleep_until(self, when: datetime, *, name: str | None = None, block: bool = True) -> str:
        """Sleep until ``when`` (a timezone-aware datetime), recorded once; see :meth:`sleep_for`."""
        from .idioms.sleep import sleep_until

        return sleep_until(self.stream, when, name=name, block=block)

    def _inbox(self) -> TaskStream:
        """The handle of this task's inbox stream (``<id>.inbox``), waiting up to 30 s for a sender's writer."""
        from .idioms.events import inbox_id

        return self.ledger.task(inbox_id(self.id), wait=30.0).stream

    def wait_for_event(
        self, name: str, *, timeout: float | None = None, poll: float = 1.0, block: bool = True
    ) -> Any:
        """The payload of event ``name`` once signalled (``ledger.signal``, ``intentlog signal``); recorded first.

        ``timeout`` (seconds, from the first run's recorded deadline): the timeout is
        recorded, then :class:`~intentlog.EventTimedOut` raised (again by every re-run).
        ``block=False`` raises :class:`~intentlog.Suspended` instead of waiting. See
        :mod:`intentlog.idioms.events`.
        """
        from .idioms.events import wait_for_event

        return wait_for_event(self.stream, name, inbox=self._inbox, timeout=timeout, poll=poll, block=block)

    def spawn(
        self, child_id: str, payload: Any = None, *, run: Callable[[Task], Any] | None = None,
        backlog: str | None = None,
    ) -> Task:  # fmt: skip
        """Spawn the child task ``child_id``: the link is recorded here before the child exists.

        The child id is the idempotency key (a re-run spawns nothing twice and loses no
        child). ``run``: called with the child's handle when the child has not returned a
        result yet; what it returns is recorded as the child's result (:meth:`finish`).
        ``backlog``: the child is an item of that backlog, run by its step on its workers
        (recorded in the link; not with ``run``). See :mod:`intentlog.idioms.children`.
        """
        from .idioms.children import hand_over, spawn

        spawn(self.ledger, self.stream, child_id, payload, hand=run is None, backlog=backlog)
        child = self.ledger.task(child_id)
        if run is not None:
            from .projections.idioms import idiom_state

            if not idiom_state(child.events()).returned:
                held = child.stream.writing
                try:
                    child.finish(run(child))
                finally:
                    if not held:
                        child.close()  # the child's writer, taken for its run, is not kept: it may be run elsewhere
            hand_over(self.stream, child_id)  # run here: a runner (a backlog) is handed it returned
        return child

    def finish(self, result: Any) -> Any:
        """Record this task's result (``task.returned``, JSON) once, for a parent's :meth:`join`; returns the first."""
        from .idioms.children import finish

        return finish(self.stream, result)

    def join(self, children: Iterable[str | Task] | None = None, *, wait: float = 0.0, poll: float = 1.0) -> Any:
        """The children's results by id, once every one returned (``task.joined`` recorded).

        Otherwise :class:`~intentlog.ChildrenPending` names each blocked child with its
        state and next step (after polling up to ``wait`` seconds). ``children``: ids or
        handles; None: every child this task spawned.
        """
        from .idioms.children import join

        ids = None if children is None else [c if isinstance(c, str) else c.id for c in children]
        return join(self.ledger, self.stream, ids, wait=wait, poll=poll)

    async def asleep_for(self, duration: float | timedelta, *, name: str | None = None, block: bool = True) -> str:
        """:meth:`sleep_for`, awaited: the pause is an ``asyncio.sleep``, the record read and written off the loop."""
        from .idioms.sleep import asleep_for

        return await asleep_for(self.stream, duration, name=name, block=block)

    async def asleep_until(self, when: datetime, *, name: str | None = None, block: bool = True) -> str:
        """:meth:`sleep_until`, awaited (see :meth:`asleep_for`)."""
        from .idioms.sleep import asleep_until

        return await asleep_until(self.stream, when, name=name, block=block)

    async def await_event(
        self, name: str, *, timeout: float | None = None, poll: float = 1.0, block: bool = True
    ) -> Any:
        """:meth:`wait_for_event`, awaited: each look at the inbox off the loop, each pause an ``asyncio.sleep``."""
        from .idioms.events import await_event

        return await await_event(self.stream, name, inbox=self._inbox, timeout=timeout, poll=poll, block=block)

    # -- fork and status -------------------------------------------------------------

    def fork(
        self, from_call: str, new_id: str | None = None, *, note: str | None = None, accept_risk: bool = False
    ) -> Task:
        """A new task reusing this one's record before ``from_call`` (a call id or key); this one is untouched.

        See :func:`intentlog.fork.fork_task`.
        """
        from .fork import fork_task

        return self.ledger.task(fork_task(self.ledger, self.id, from_call, new_id, note=note, accept_risk=accept_risk))

    def writer_pid(self) -> int | None:
        """The pid of the live process holding this task's writer lock (this one included), or None.

        Probes without taking the lock (``/proc/locks`` where there is one), so a writer
        starting at the same moment is never refused because of it; elsewhere a
        non-blocking shared ``flock`` is tried and released at once.
        """
        return self.stream.writer_pid()

    def status(self) -> TaskStatus:
        """The operator view (``intentlog status``), with *running* when a live process holds the writer lock.

        The checkpoint it names (and the phase) is the one :meth:`latest_checkpoint` returns.
        """
        from .checkpoints import evidence_check
        from .projections.status import task_status

        pid = self.writer_pid()
        return task_status(
            self.events(), task_id=self.id, running=pid is not None, evidence=evidence_check(self.stream)
        )

    # -- lifetime ------------------------------------------------------------------

    def close(self) -> None:
        """Sync pending events, close the stream and release the writer lock.

        In a forked child it only closes the descriptors inherited from the parent.
        """
        self.stream.close()

    def __enter__(self) -> Task:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
