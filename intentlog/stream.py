"""The task stream core: the one object the protocol features are written against.

A :class:`TaskStream` owns one task's stream in one process: the writer's lifecycle (its
lock, taken at the first write and held until :meth:`TaskStream.close`), the live work
state kept current by the handle's own appends, the privileged append (any kind, the
protocol's own namespaces included), group commit, the in-flight guard against running
one key twice at once, and reading. Effects, approvals, checkpoints, sessions and fork
take a ``TaskStream`` (or the :class:`~intentlog._internal.types.StreamLayout` and the store),
never the :class:`~intentlog.task.Task` facade or the ledger; ``Task`` is a thin facade
over it that adds the public checks (reserved kinds, argument types). Every append, the
stream's creation and the writer lock reach the disk through the stream seam
(:mod:`intentlog.eventlog.storage`): the writer holds a lease and appends through it, a
batch with ``sync=False`` and one ``sync`` at its end (group commit).
Where the stream lives is the ledger's :class:`TaskStorage` (:attr:`TaskStream.storage`): on
an object store the writer works through the stream seam alone and :meth:`TaskStream.events`
reads the stream through ``StreamStorage.read``; the stream core never asks which it has.

The contract (public inside the package, not re-exported to users):

- identity and places: :attr:`~TaskStream.id`, :attr:`~TaskStream.path`,
  :attr:`~TaskStream.layout` (root, tasks/, tmp/, quarantine/, workspace),
  :attr:`~TaskStream.store` (the artifact store), :attr:`~TaskStream.root`,
  :attr:`~TaskStream.wait` (seconds a writer waits for the lock);
- :attr:`~TaskStream.mutex`: the re-entrant lock threads sharing the handle take around
  a check-then-append (the live fold and the append are then one step);
- :meth:`~TaskStream.open_writer`, :meth:`~TaskStream.live`, :meth:`~TaskStream.append`,
  :meth:`~TaskStream.batch`, :meth:`~TaskStream.sync`, :attr:`~TaskStream.next_seq`,
  :meth:`~TaskStream.inflight`, :meth:`~TaskStream.close`, :attr:`~TaskStream.writing`;
- reading, lock-free: :meth:`~TaskStream.events`, :meth:`~TaskStream.exists`,
  :func:`read_events`, :func:`lock_holder`.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, final

from ._internal.nofollow import check_real_dir
from ._internal.procs import PROC_LOCKS, flock_writer
from .errors import CorruptStream, UsageError
from .eventlog import Event, StreamScan, StreamWriter
from .eventlog.canonical import dumps, redact_value
from .eventlog.damage import Checked, CheckedBytes
from .eventlog.format import FORMAT, TASK_CREATED, encode_data, encode_line, new_stream_id, utc_now
from .eventlog.redaction import redact_shapes, scrub_given_fields
from .eventlog.writer import SealedHead
from .projections.workstate import WorkStateFold

if TYPE_CHECKING:
    from ._internal.types import StreamLayout
    from .artifacts import ArtifactStore
    from .eventlog.storage import StreamStorage

__all__ = [
    "PROC_LOCKS", "AppendGate", "SendGate", "StreamSource", "TaskStorage", "TaskStream", "creation_record",
    "lock_holder", "read_events",
]  # fmt: skip

def _inline_blob(value: dict[Any, Any]) -> bool:
    """A blob carried inline (:func:`~intentlog.artifacts.inline.inline_ref`): bytes checked against their digest.

    Like a blob in ``objects/`` it is written by the recorder that made it (a canonical
    request, already redacted; a response, stored as served) and never edited afterwards.
    """
    return "digest" in value and ("inline" in value or "inline_b64" in value)


def as_recorded(value: Any) -> Any:
    """A caller's JSON ``value`` as it is recorded: credentials by name and by shape replaced, as ``task.append``'s.

    A recorder that returns what it recorded (a recorded value, an event's payload, a
    child's payload or result) records and returns this, so the first run sees exactly what
    every re-run reads from the record, and no credential a caller handed it is kept.
    """
    named, _ = redact_value(value)
    return redact_shapes(named, _inline_blob)


def _as_recorded(data: Mapping[str, Any]) -> tuple[dict[str, Any], bytes]:
    """Event data as the stream records it, and its JSON: credential shapes replaced (docs/effects.md, "Redaction").

    Each string is first tested cheaply (:func:`~intentlog.eventlog.redaction.may_hold_shape`);
    only data that changed is encoded again. Blobs carried inline are left as they are
    (:func:`_inline_blob`). Refuses what is not JSON
    (:class:`~intentlog.errors.NotSerializable`) before anything else.
    """
    clean = dict(data)
    data_json = encode_data(clean)  # refuses what is not JSON, a value nested too deep included
    scrubbed = redact_shapes(scrub_given_fields(clean), _inline_blob)
    if scrubbed is not clean:
        clean, data_json = scrubbed, encode_data(scrubbed)
    return clean, data_json


def lock_holder(lock_path: Path) -> int | None:
    """The pid holding an exclusive ``flock`` on ``lock_path``, or None; never takes or blocks on the lock.

    Reads :data:`PROC_LOCKS` where it exists. Elsewhere a non-blocking *shared* lock is
    tried and released at once (a writer starting in that instant with ``wait=0`` could
    be refused; give writers a small ``wait`` on such systems).
    """
    try:
        st = os.stat(lock_path)
    except FileNotFoundError:
        return None
    try:
        return flock_writer(st, PROC_LOCKS)  # the module global: a test points it elsewhere
    except OSError:
        pass  # no /proc/locks here: probe with a shared lock instead
    import fcntl

    try:
        fd = os.open(lock_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return int(os.pread(fd, 32, 0).split(b"\n", 1)[0] or b"-1")
            except ValueError:
                return -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def creation_record(task_id: str) -> bytes:
    """Line 0 of a new stream of ``task_id``, without its newline: what its writer would create it holding.

    For a stream created by someone other than its writer (a fence of a holder whose
    stream does not exist yet): a fresh stream id, so it is any writer's stream.
    """
    body = dumps({"format": FORMAT, "stream": new_stream_id(), "task": task_id})
    return encode_line(TASK_CREATED, body, None, 0, utc_now())[:-1]


def read_events(path: Path, tasks_dir: Path, since: int = 0) -> Iterator[Event]:
    """Every trusted event of the stream at ``path`` from ``since`` on, in constant memory; takes no lock.

    Never reads through a linked ``tasks/``. A torn tail ends the iteration quietly; a
    whole line that fails to chain, or a bad line followed by events, raises
    :class:`~intentlog.errors.CorruptStream` naming it. No stream (yet): no events.
    """
    check_real_dir(tasks_dir, what="task streams")
    scan = StreamScan(path)
    try:
        for ev in scan:
            if ev.seq >= since:
                yield ev
    except FileNotFoundError:
        return  # no stream (yet), or removed by gc before it could be opened: no events
    p = scan.problem
    if p is not None and (p.suspect or not p.torn):
        raise CorruptStream(str(path), p.line, p.reason)


class AppendGate(Protocol):
    """What a writer asks before each append, given to it when it is opened (:meth:`TaskStream.open_writer`).

    ``admit`` may raise to refuse the append (nothing is written, nothing more is asked),
    or return records the stream appends first, in order, through the same writer and
    without asking again: a runner fences its lease and reserves quota before
    ``attempt.started`` this way, the reservation recorded right before the attempt. It
    is asked before the stream's lock is taken (it may wait for a grant), and is dropped
    with the writer (:meth:`TaskStream.close`).
    """

    def admit(self, kind: str, data: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]: ...


class SendGate(Protocol):
    """A gate that is also asked at the last moment before a send (:meth:`TaskStream.before_send`).

    ``sending`` raises :class:`~intentlog.errors.NotSent` to keep the request from leaving
    (a quota grant past its deadline): the protocol records ``attempt.not_sent`` and the
    call's retry policy decides, as for any request that provably never left.
    """

    def sending(self, call: str, attempt: int) -> None: ...


class _CallGate:
    """A plain callable as a gate that adds no record (what assigning :attr:`TaskStream.before_append` gives)."""

    def __init__(self, fn: Callable[[str, Mapping[str, Any]], None]) -> None:
        self.fn = fn

    def admit(self, kind: str, data: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
        self.fn(kind, data)
        return ()


class TaskStorage(Protocol):
    """What a task's stream asks of the storage its ledger lives in (a folder or an object store).

    The ledger's :class:`~intentlog.ledgerstorage.LedgerStorage` is one; the stream core
    calls it and never asks which storage it has.
    """

    @property
    def writer_storage(self) -> StreamStorage | None:
        """What the writer leases, appends and reads through; None: the ledger's tasks/ folder and its lock files."""
        ...

    def sealed_head(self, task_id: str) -> SealedHead | None:
        """The head a seal the writer checks itself records for ``task_id`` (None: none to check at open)."""
        ...

    def has_stream(self, task_id: str) -> bool: ...

    def task_events(self, task_id: str, since: int) -> Iterator[Event]:
        """Every trusted event of the stream from ``since`` on (see :meth:`TaskStream.events`); takes no lock."""
        ...

    def lock_pid(self, task_id: str) -> int | None:
        """The pid of another live process holding the stream's writer lock, as this host can tell; else None."""
        ...


class StreamSource(Protocol):
    """What a feature taking "a task" accepts from its caller: a :class:`~intentlog.Task` or its stream."""

    @property
    def stream(self) -> TaskStream: ...


@final
class TaskStream:
    """One task's stream in this process: writer, live fold, privileged append, batch, guard, reads."""

    def __init__(self, layout: StreamLayout, store: ArtifactStore, task_id: str, *, storage: TaskStorage) -> None:
        self.layout = layout
        #: where the stream lives (the ledger's storage): the writer leases, appends and reads through it
        self.storage = storage
        self.store = store
        self.id = task_id
        self.root: Path = layout.root
        self.path: Path = layout.stream_path(task_id)
        self.wait = 0.0
        #: seconds a dead holder's stream must stand still before this writer takes its lease (object store)
        self.take_over_after: float | None = None
        #: taken around every check-then-append by threads sharing the handle (re-entrant)
        self.mutex = threading.RLock()
        _HANDLES.add(self)
        self._writer: StreamWriter | None = None
        self._fold: WorkStateFold | None = None
        #: what the last writer of this process checked, and its live fold then: the next open resumes from it
        self._checked: tuple[Checked | CheckedBytes, WorkStateFold] | None = None
        #: the open writer's events as it read and appended them, when its opener asked to keep them
        self._held: list[Event] | None = None
        #: what the last writer left as it closed (:meth:`take_left`)
        self._left: tuple[list[Event], str] | None = None
        self._running: set[str] = set()
        #: asked before every append of the open writer (see :class:`AppendGate`); given at open
        self.gate: AppendGate | None = None
        #: closes whose final sync failed: a group commit spanning one cannot call its events durable
        self.close_failures = 0

    def __repr__(self) -> str:
        return f"<TaskStream {self.id!r} in {str(self.root)!r}>"

    @property
    def stream(self) -> TaskStream:
        """This core itself (a :class:`~intentlog.task.Task` has the same attribute): features take either."""
        return self

    # -- the writer ----------------------------------------------------------------

    def open_writer(
        self,
        *,
        accept_damage: bool = False,
        accept_resend: bool = False,
        gate: AppendGate | None = None,
        keep_events: bool = False,
    ) -> StreamWriter:
        """The open writer, opening it (lock, tail check, seal check) on first use.

        ``gate``, when given, is asked before every append from then until :meth:`close`
        (:class:`AppendGate`); it is kept only once the writer is open.
        ``keep_events``: when this call opens the writer, it keeps every event its open
        read and every event appended through it until :meth:`close`, for
        :meth:`held_events` (a stream's events in memory for the writer's life: for short
        tasks, such as a backlog item's).
        In a forked child a writer inherited from the parent is dropped without touching
        the parent's lock, and a new one opened: it takes the lock properly, so the child
        gets :class:`~intentlog.errors.TaskBusy` while the parent holds it.
        """
        with self.mutex:
            w = self._writer
            if w is not None and not w.owned:
                w.abandon()
                self._writer = self._fold = w = None
                self._held = None
            if w is not None and w.is_open:
                if gate is not None:
                    self.gate = gate
                return w
            kept, self._checked, self._left = self._checked, None, None
            resume = kept[0] if kept is not None and not accept_damage else None
            # replayed into folds[0]: the kept fold when resuming, until the writer says to start afresh
            folds = [kept[1] if kept is not None and resume is not None else WorkStateFold(self.id)]
            # a resumed open replays only what was added: what it keeps is then incomplete, and never vouched for
            held: list[Event] | None = [] if keep_events else None

            def restart() -> None:  # the whole stream is checked after all: its events into a fresh fold
                folds[0] = WorkStateFold(self.id)
                if held is not None:
                    held.clear()

            def on_event(ev: Event) -> None:
                folds[0].apply(ev)
                # the record a repair writes at open is appended and then replayed: kept once
                if held is not None and not (held and held[-1] == ev):
                    held.append(ev)

            w = StreamWriter(
                path=self.path,
                task_id=self.id,
                quarantine_dir=self.layout.quarantine_dir,
                tmp_dir=self.layout.tmp_dir,
                on_event=on_event,
                seal=self.seal(),
                storage=self.storage.writer_storage,
            )
            w.open(
                wait=self.wait,
                replay=on_event,
                accept_damage=accept_damage,
                accept_resend=accept_resend,
                take_over_after=self.take_over_after,
                resume=resume,
                restart=restart,
            )
            fold = folds[0]
            self._writer, self._fold, self._held = w, fold, held
            if gate is not None:
                self.gate = gate
            return w

    def before_send(self, call: str, attempt: int) -> None:
        """Asked by the effect protocol right before ``call``'s ``attempt`` is sent, its ``attempt.started`` durable.

        A gate that answers ``sending`` (:class:`SendGate`) may raise
        :class:`~intentlog.errors.NotSent` there; nothing is sent then. Without one: nothing to ask.
        """
        sending = getattr(self.gate, "sending", None)
        if sending is not None:
            sending(call, attempt)

    @property
    def before_append(self) -> Callable[[str, Mapping[str, Any]], None] | None:
        """A plain callable asked ``(kind, data)`` before every append (a gate that adds no record); None: none."""
        g = self.gate
        return g.fn if isinstance(g, _CallGate) else None

    @before_append.setter
    def before_append(self, fn: Callable[[str, Mapping[str, Any]], None] | None) -> None:
        self.gate = None if fn is None else _CallGate(fn)

    def seal(self) -> SealedHead | None:
        """This task's entry in ``heads.json`` (the writer refuses a stream that contradicts it).

        None on an object store: its seals (heads/N.json) are checked by its own lease.
        """
        return self.storage.sealed_head(self.id)

    @property
    def writing(self) -> bool:
        """Whether this process holds the task's writer (its lock) right now."""
        with self.mutex:
            return self._writer is not None and self._writer.is_open

    def held_events(self) -> list[Event] | None:
        """Every event of the stream, from what this process's open writer read and appended: no read.

        Only when the writer was opened with ``keep_events`` and it vouches the list is the
        whole stream as it holds it: seqs 0..n-1 with n its next seq, the last one its
        head (a resumed open, which replays only what was added, never is). Events
        appended and not yet synced are in it, as a read of a folder stream sees them.
        None otherwise: the caller reads the stream (:meth:`events`).
        """
        with self.mutex:
            w, held = self._writer, self._held
            if w is None or not w.is_open or held is None or not _is_whole(held, w.next_seq, w.head):
                return None
            return list(held)

    def take_left(self) -> tuple[list[Event], str] | None:
        """What this handle's last writer left, as it closed: every event of the stream, and the stream's stamp then.

        Only when that writer was opened with ``keep_events``, held the whole stream (as
        :meth:`held_events` vouches) and vouches for every stored byte of it
        (``StreamWriter.left_stamp``: a folder's file facts as it let the lock go, a store's
        segments up to its release). A later append by anyone changes the stream's stamp
        (:meth:`~intentlog.eventlog.storage.StreamStorage.stamps`), so the pair is a cache
        line that goes stale like any. Given once (the events are not kept past it); None
        otherwise, and once a writer opens again.
        """
        with self.mutex:
            left, self._left = self._left, None
            return left

    @property
    def lock_fd(self) -> int | None:
        """On a folder, the descriptor through which this process holds the task's lock (None: not writing)."""
        with self.mutex:
            return None if self._writer is None else self._writer.lock_fd

    def live(self) -> WorkStateFold:
        """The work state kept current by this handle's own appends (opens the writer: the lock is held)."""
        self.open_writer()
        if self._fold is None:  # pragma: no cover - open_writer sets it
            raise RuntimeError("no live state")
        return self._fold

    def append(
        self,
        kind: str,
        data: Mapping[str, Any],
        *,
        expected_seq: int | None = None,
        sync: bool = False,
        defer: bool = False,
    ) -> Event:
        """The privileged append: any kind, the protocol's own included; durable on return (outside a batch).

        Data that is not exact JSON is refused before the lock or the disk is touched
        (:class:`~intentlog.errors.NotSerializable`). ``sync=True`` syncs even inside a
        batch; ``defer=True`` leaves the sync to the writer's next one (see
        :meth:`StreamWriter.append <intentlog.eventlog.writer.StreamWriter.append>`). The
        live fold sees the event before this returns.

        Every record passes :func:`_as_recorded` here, the one place all of them pass: what is
        a credential by its shape alone (a JWT, ``sk-…``, a webhook path …) never reaches the
        stream, whoever built the record.
        """
        if sync and defer:
            raise ValueError("an append is synced now (sync=True) or left to the next sync (defer=True), not both")
        clean, data_json = _as_recorded(data)
        gate = self.gate
        first = () if gate is None else [(k, *_as_recorded(d)) for k, d in gate.admit(kind, data)]
        with self.mutex:  # a close from another thread waits: it cannot end the writer between opening and append
            w = self.open_writer()
            for k, d, d_json in first:  # what the gate asked for, recorded right before the event
                w.append(k, d, data_json=d_json)
            return w.append(kind, clean, expected_seq=expected_seq, sync=sync, defer=defer, data_json=data_json)

    @contextmanager
    def batch(self) -> Iterator[TaskStream]:
        """Group commit: events appended inside share one sync, done when the block exits."""
        w = self.open_writer()
        with w.batch():
            yield self

    def sync(self) -> None:
        """Make every event appended so far durable (useful inside a batch)."""
        if self._writer is not None:
            self._writer.sync()

    @property
    def next_seq(self) -> int:
        """The seq the next append will get (takes the writer lock)."""
        return self.open_writer().next_seq

    @contextmanager
    def inflight(self, key: str) -> Iterator[None]:
        """Refuse to run one key twice at once inside this process (threads share the handle)."""
        with self.mutex:
            if key in self._running:
                raise UsageError(f"key {key!r} of task {self.id!r} is already running in this process")
            self._running.add(key)
        try:
            yield
        finally:
            with self.mutex:
                self._running.discard(key)

    def close(self) -> None:
        """Sync pending events, close the stream and release the writer lock.

        In a forked child it only closes the descriptors inherited from the parent.
        """
        with self.mutex:  # held until the lock is released: a thread waiting to append opens the next writer
            w, fold, held = self._writer, self._fold, self._held
            self._writer = self._fold = self._held = self._left = None
            self.gate = None  # given with the writer, gone with it
            self._checked = None
            if w is not None:
                try:
                    w.close()
                except BaseException:
                    self.close_failures += 1  # what that writer wrote since its last sync may not be durable
                    raise
                ck = w.last_checked
                if ck is not None and fold is not None and ck.seq >= RESUME_FROM and w.owned:
                    self._checked = (ck, fold)  # the next open checks only what was added since
                stamp = w.left_stamp
                if held is not None and ck is not None and stamp is not None and _is_whole(held, ck.seq, ck.head):
                    self._left = (held, stamp)  # the writer is gone: nothing appends to that list again

    # -- reading -------------------------------------------------------------------

    def exists(self) -> bool:
        return self.storage.has_stream(self.id)

    def events(self, since: int = 0) -> Iterator[Event]:
        """Every trusted event in order (see :func:`read_events`); takes no lock, checks no argument.

        On an object store the stream is read whole through :meth:`StreamStorage.read` and
        every line checked (any bad line is :class:`~intentlog.errors.CorruptStream`, a store
        keeps no torn tails). While this handle's writer is open, events from ``since`` on
        are read from the writer's nearest mark instead, on either storage: only the bytes
        after it, which must chain to the writer's own head
        (:meth:`~intentlog.eventlog.writer.StreamWriter.events_since`); the bytes before
        were checked by its open or appended by it; the events are those there when called.
        A follower of its own stream reads what was added, not the whole stream each time.
        """
        w = self._writer
        if w is not None and since > 0:
            got = w.events_since(since)
            if got is not None:
                return iter(got)
        return self.storage.task_events(self.id, since)

    def writer_pid(self) -> int | None:
        """The pid of the live process holding the writer lock (this one included), or None; never takes it."""
        if self.writing:
            return os.getpid()
        return self.storage.lock_pid(self.id)  # a lease on a store names no pid


def _is_whole(held: list[Event], count: int, head: str | None) -> bool:
    """Whether ``held`` is a whole stream of ``count`` events ending at ``head`` (seqs 0..count-1)."""
    if len(held) != count or (held and held[-1].digest != head):
        return False
    return all(ev.seq == i for i, ev in enumerate(held))


#: events a stream must hold for its checked state (and live fold) to be kept after its writer closes:
#: a shorter one is checked whole at the next open in a moment, and keeps no memory meanwhile
RESUME_FROM: Final = 256

#: every live handle, so that a forked child can renew their mutexes (see below)
_HANDLES: weakref.WeakSet[TaskStream] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A handle's mutex held by another thread at fork time (an append syncing) stays held forever in the child."""
    for h in list(_HANDLES):
        h.mutex = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
