"""Task: one stream handle and the operations users call on it.

A task's handle is shared process-wide (get it from :meth:`Ledger.task`). It takes the
task's exclusive writer lock at its first write and holds it until :meth:`close` (or the
end of a ``with`` block, or process exit). Reads take no lock.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, final

from .errors import ReservedKind
from .eventlog import Event, StreamScan, StreamWriter
from .eventlog.format import RESERVED_PREFIXES, check_kind, encode_data, is_reserved
from .projections.workstate import WorkState, WorkStateFold, work_state

if TYPE_CHECKING:
    from .artifacts import Ref
    from .effects import Call, Package, RetryPolicy
    from .ledger import Ledger

__all__ = ["RESERVED_PREFIXES", "Task"]

_CURRENT_KEY: contextvars.ContextVar[tuple[Task, str] | None] = contextvars.ContextVar(
    "intentlog_current_key", default=None
)



@final
class Task:
    """One task stream. Durable-on-return appends, streaming reads, and the effect protocol."""

    def __init__(self, ledger: Ledger, task_id: str) -> None:
        self.ledger = ledger
        self.id = task_id
        self.path: Path = ledger.stream_path(task_id)
        self.wait = 0.0
        self._writer: StreamWriter | None = None
        self._fold: WorkStateFold | None = None
        self._mutex = threading.RLock()
        self._running: set[str] = set()

    def __repr__(self) -> str:
        return f"<Task {self.id!r} in {str(self.ledger.root)!r}>"

    # -- writing -------------------------------------------------------------------

    def _open_writer(self) -> StreamWriter:
        with self._mutex:
            w = self._writer
            if w is not None and w.is_open:
                return w
            fold = WorkStateFold(self.id)
            w = StreamWriter(
                path=self.path,
                task_id=self.id,
                quarantine_dir=self.ledger.quarantine_dir,
                tmp_dir=self.ledger.tmp_dir,
                on_event=fold.apply,
            )
            w.open(wait=self.wait, replay=fold.apply)
            self._writer, self._fold = w, fold
            return w

    def _live(self) -> WorkStateFold:
        """The work state kept current by this handle's own appends (writer lock held)."""
        self._open_writer()
        if self._fold is None:  # pragma: no cover - _open_writer sets it
            raise RuntimeError("no live state")
        return self._fold

    def append(self, kind: str, data: Mapping[str, Any] | None = None, *, expected_seq: int | None = None) -> Event:
        """Append one event; it is durable (written and fdatasynced) when this returns.

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
        if data is None:
            data = {}
        elif not isinstance(data, Mapping):
            from .errors import NotSerializable

            raise NotSerializable(f"event data must be a dict (a JSON object), not {type(data).__name__}", path="data")
        return self._append(kind, dict(data), expected_seq=expected_seq)

    def _append(self, kind: str, data: dict[str, Any], *, expected_seq: int | None = None, sync: bool = False) -> Event:
        data_json = encode_data(data)  # refuse bad data before the lock or the disk is touched
        return self._open_writer().append(kind, data, expected_seq=expected_seq, sync=sync, data_json=data_json)

    @contextmanager
    def _inflight(self, key: str) -> Iterator[None]:
        """Refuse to run one key twice at once inside this process (threads share the handle)."""
        from .errors import UsageError

        with self._mutex:
            if key in self._running:
                raise UsageError(f"key {key!r} of task {self.id!r} is already running in this process")
            self._running.add(key)
        try:
            yield
        finally:
            with self._mutex:
                self._running.discard(key)

    @contextmanager
    def batch(self) -> Iterator[Task]:
        """Group commit: events appended inside share one sync, done when the block exits."""
        w = self._open_writer()
        with w.batch():
            yield self

    def sync(self) -> None:
        """Make every event appended so far durable (useful inside a batch)."""
        if self._writer is not None:
            self._writer.sync()

    @property
    def next_seq(self) -> int:
        """The seq the next append will get (takes the writer lock)."""
        return self._open_writer().next_seq

    # -- reading -------------------------------------------------------------------

    def exists(self) -> bool:
        return self.path.exists()

    def events(self, *, since: int = 0) -> Iterator[Event]:
        """Every trusted event in order, streaming in constant memory; takes no lock.

        Checks each line's parse, ``seq`` and ``prev`` as it goes. An incomplete last line
        (an append that never returned) ends the iteration quietly; a complete line that
        fails its checks raises :class:`~intentlog.errors.CorruptStream` naming the line.
        """
        from .errors import CorruptStream

        if not self.path.exists():
            return
        scan = StreamScan(self.path)
        for ev in scan:
            if ev.seq >= since:
                yield ev
        p = scan.problem
        if p is not None and not p.incomplete:
            raise CorruptStream(str(self.path), p.line, p.reason)

    def work_state(self) -> WorkState:
        """The work-state projection of this task, read fresh from disk (pure: appends nothing)."""
        return work_state(self.events(), task_id=self.id)

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

        loc, ref = capture_locator(
            self.ledger.artifacts, self.ledger.workspace, os.fspath(locator), media_type=media_type
        )
        self._append(
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

    def prepare(
        self,
        key: str,
        request: Any,
        *,
        inputs: Mapping[str, str] | None = None,
        name: str | None = None,
        drop: Iterable[str] | None = None,
        redact: Any = None,
    ) -> Call:
        """Record the intent of a call (``call.requested``, ``call.manifest``); sends nothing."""
        from .effects import prepare

        return prepare(self, key, request, inputs=inputs, name=name, drop=drop, redact=redact)

    def effect(
        self,
        key: str,
        request: Any,
        send: Callable[[Any], bytes | str],
        *,
        interpret: Callable[[bytes], Any] | None = None,
        inputs: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        name: str | None = None,
        drop: Iterable[str] | None = None,
        redact: Any = None,
        lookup: Callable[..., Any] | None = None,
    ) -> Any:
        """Run the whole effect protocol for ``key``; running it again after a crash resumes.

        See :func:`intentlog.effects.effect` and DESIGN §5 for what happens in each stage.
        """
        from .effects import effect

        return effect(
            self,
            key,
            request,
            send,
            interpret=interpret,
            inputs=inputs,
            retry=retry,
            name=name,
            drop=drop,
            redact=redact,
            lookup=lookup,
        )

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

        return reconcile(self, call_id, outcome, evidence=evidence, note=note, by=by)

    def fail(self, call_id: str, reason: str, *, by: str | None = None) -> Event:
        """Record an operator's decision that a call has failed (``call.failed``)."""
        from .effects import fail_call

        return fail_call(self, call_id, reason, by=by)

    def compile(
        self,
        compilation_id: str,
        offered: Sequence[Mapping[str, Any]],
        *,
        required: Iterable[str] = (),
        select: Callable[[list[dict[str, Any]]], Iterable[str]] | None = None,
    ) -> Package:
        """Compile a context package from offered items, recording inventory and outcome."""
        from .effects import compile_context

        return compile_context(self, compilation_id, offered, required=required, select=select)

    @contextmanager
    def key(self, key: str) -> Iterator[str]:
        """Name the idempotency key of the effects made inside the block by integrations.

        Clients that make effects for you (``intentlog.http``) use this key instead of the
        request's hash and occurrence count. Nested blocks use the innermost key.
        """
        from .effects import _check_key

        _check_key(key)
        token = _CURRENT_KEY.set((self, key))
        try:
            yield key
        finally:
            _CURRENT_KEY.reset(token)

    def current_key(self) -> str | None:
        """The key named by the innermost :meth:`key` block for this task, if any."""
        cur = _CURRENT_KEY.get()
        return cur[1] if cur is not None and cur[0] is self else None

    def accept(self, *, note: str | None = None, by: str | None = None) -> Event:
        """Record that the task's outcome was checked and accepted (``task.accepted``)."""
        return self._append("task.accepted", {"note": note, "by": by})

    # -- lifetime ------------------------------------------------------------------

    def close(self) -> None:
        """Sync pending events, close the stream and release the writer lock."""
        with self._mutex:
            w, self._writer, self._fold = self._writer, None, None
        if w is not None:
            w.close()

    def __enter__(self) -> Task:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
