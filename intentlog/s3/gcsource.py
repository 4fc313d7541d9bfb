"""Retention's storage on an object store: the same gc and keep, through the storage seams.

:class:`StoreGc` is the store's :class:`~intentlog.retention.storage.GcStorage`; the plan,
the apply and the keep marks are :mod:`intentlog.retention`'s, written once.

**Reading for a plan.** Each stream is read whole through :class:`~intentlog.s3.ObjectStreams`
(its tail first: the tail's segment, offset and lease epoch are the stream's identity, what
"unchanged since the plan" means there), every line checked; the task's record, its
classification and the digests it names go through the same code as a folder's
(:func:`~intentlog.retention.scan.classify`, :func:`~intentlog.retention.scan.settle`), so
a store and a folder holding the same streams and objects give the same plan.

What differs, by nature: a task is *busy* when its stream's lease is held (a ``lease`` or
a holder's ``data`` segment is its tail), not when a lock file is locked; an object's time
is the store's last-modified time of the object or of its latest touch (a re-put of
bytes already there, :mod:`intentlog.s3.objects`); the keep marks are ``gc.kept`` /
``gc.released`` events in the store's gc log (:mod:`intentlog.s3.retire`): a store
replaces nothing, so each decision is appended under the log's lease, and the marks in
force are the log's latest decision per task; there is no view cache, so a preview reads
every stream, like the plan an apply carries out. What is left of a stream gc deleted
(segment 0 gone: an interrupted apply, a fenced holder's late put) is not a task: the plan
leaves it out and the next apply removes it.

**Carrying out a plan** (docs/scale-out.md, *Retention on the store*):

1. **The gc log's lease** (:mod:`intentlog.s3.retire`) is the store's gc lock: a second gc
   or ``keep`` is refused (:class:`GcRefused`); ``take_over_after`` takes it from a gc that
   was killed (its lease stays recorded as held).
2. **Sweep** what a killed gc left: its dying markers; what is left of streams the log
   records deleting (segment 0 gone); and streams it had leased for deletion
   (``gc.leased``) and not yet deleted; and every touch but each object's latest.
   Recorded as ``gc.swept``.
3. **Re-plan** under the lease (every stream read) and check it against the preview.
4. ``gc.started``: every task and blob about to go, durable before anything is deleted.
5. **Lease every expired stream** (a writer holding it: skipped, as a folder skips a locked
   task), check it is the planned one (its lease epoch is the planned tail's plus one and
   it holds as many records: nothing was appended since), copy out inline bytes a kept task
   needs, then record ``gc.leased`` (each stream and the epoch gc holds it at).
6. **Retire** each leased stream: every number a fenced holder may put at is kept, the rest
   deleted (from the first delete on, what is left is no stream for any reader).
7. **Objects**: each behind a dying marker, spared when a writer touched it since the plan.
8. ``gc.finished``.

A stream gc holds the lease of is never appended to by anyone else: a writer's put at a
number gc's lease took is refused, and no writer leases or takes over gc's lease (its holder
token starts with ``GC_HOLDER``). A *fenced* holder (its lease taken before gc came) puts at
the number of the take-over lease that fenced it, which gc keeps for ever
(:func:`~intentlog.s3.retire.delete_stream`): refused, before and after gc. Before its
deletes gc proves it still holds the gc log's lease (``gc.heartbeat``, see
:class:`_Heartbeat`): a stalled gc whose lease was taken over stops.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..errors import CorruptStream, GcRefused, IntentlogError, LeaseLost, LedgerError, TaskBusy
from ..eventlog.format import Event
from ..eventlog.gclog import (
    GC_FINISHED,
    GC_KEPT,
    GC_LEASED,
    GC_LEASING,
    GC_RELEASED,
    GC_STARTED,
    GC_SWEPT,
    GcDeletion,
    check_shape,
    fold_deletions,
)
from ..eventlog.remote import events_in
from ..eventlog.writer import StreamWriter
from ..projections.backlogs import BACKLOG_SUFFIX, unfinished_item_tasks
from ..projections.status import status_of
from ..refs import INLINE, walk
from ..retention.backlogs import BacklogNeeds
from ..retention.policy import GcPolicy
from ..retention.report import ExpiredBlob, ExpiredTask
from ..retention.rules import KeepMark, protected_by
from ..retention.scan import (
    Progress,
    Scan,
    TaskInfo,
    UnitSettler,
    classify,
    collect_digests,
    fold_for_gc,
)
from ..retention.storage import Evacuate
from .objects import ObjectArtifacts
from .probe import require_fencing
from .retire import (
    LOG_STREAM,
    compact_touches,
    delete_stream,
    leftovers,
    log_streams,
    object_times,
    orphans,
    read_log,
    retire_object,
    stale_markers,
)
from .streams import GC_HOLDER, ObjectLease, ObjectStreams

if TYPE_CHECKING:
    from ..eventlog.storage import StreamLease
    from . import ObjectStorage

__all__ = ["BEAT_AFTER", "LOG_FILE", "StoreGc", "log_writer", "marks_in"]

GC_HEARTBEAT: Final = "gc.heartbeat"
#: a delete more than this many seconds (gc's monotonic clock) after gc last proved its lease proves it again first
BEAT_AFTER: Final = 1.0
#: and at least once per this many deletes
BEAT_EVERY: Final = 32
#: where a store's apply is recorded, as a result names it (the keys of the gc log's stream)
LOG_FILE: Final = f"gc/tasks/{LOG_STREAM}"


def marks_in(events: list[Event]) -> dict[str, KeepMark]:
    """The keep marks the gc log's events leave standing, by task (the latest decision wins)."""
    out: dict[str, KeepMark] = {}
    for ev in events:
        task = ev.data.get("task")
        if not isinstance(task, str):
            continue
        if ev.kind == GC_KEPT:
            note = ev.data.get("note")
            out[task] = KeepMark(task, str(ev.data.get("since", "")), note if isinstance(note, str) else None)
        elif ev.kind == GC_RELEASED:
            out.pop(task, None)
    return dict(sorted(out.items()))


class StoreGc:
    """:class:`~intentlog.retention.storage.GcStorage` of a ledger on an object store (see the module doc)."""

    def __init__(self, storage: ObjectStorage, location: str = "") -> None:
        self.storage = storage
        self.client = storage.client
        self.location = location or self.client.describe("")
        # a handle of its own: what the store holds, never this process's unsynced buffer
        self.streams = ObjectStreams(storage.client)
        self._log: list[Event] | None = None
        #: stream names that are what is left of a stream gc deleted, found by the last scan
        self.leftovers: list[str] = []

    @property
    def where(self) -> str:
        return self.location

    def log_events(self) -> list[Event]:
        """The gc log's events, read once (``IntentlogError`` when it is damaged)."""
        if self._log is None:
            where = self.client.describe("gc/")
            try:
                data = read_log(self.client)
                self._log = [] if data is None else list(events_in(data, where))
            except CorruptStream as exc:
                raise IntentlogError(f"the store's gc log is damaged ({exc}); run 'intentlog verify'") from exc
        return self._log

    def forget_log(self) -> None:
        """Read the gc log again next time (it was appended to, or a lock was taken since)."""
        self._log = None

    def check_layout(self) -> None:
        """Nothing to check: a store has no links to be swapped in."""

    def keep_marks(self) -> dict[str, KeepMark]:
        return marks_in(self.log_events())

    def has_task(self, task: str) -> bool:
        return task in self.streams.names()

    def retired(self) -> dict[str, GcDeletion]:
        """The tasks the gc log records deleting, carried out (the plan leaves what is left of them out)."""
        try:
            return fold_deletions(self.log_events(), self.client.describe("gc/"), carried_out=True)
        except IntentlogError:
            return {}

    @contextlib.contextmanager
    def locked(self, *, wait: float, take_over_after: float | None = None) -> Iterator[StoreSession]:
        log = log_writer(self.storage, wait=wait, take_over_after=take_over_after)
        try:
            self.forget_log()  # what is read under the lease is read after it was taken
            yield StoreSession(self, log)
        finally:
            log.close()

    def scan(
        self,
        now: _dt.datetime,
        policy: GcPolicy,
        marks: Mapping[str, KeepMark],
        *,
        limit: int,
        progress: Progress | None,
        preview: bool,
    ) -> Scan:
        scan = Scan()
        retired = self.retired()
        try:
            names = sorted(self.streams.names())
        except LedgerError as exc:
            raise IntentlogError(f"cannot list the streams of {self.client.describe('tasks')}: {exc}") from exc
        self.leftovers = leftovers(self.client, names, retired)
        names = [n for n in names if n not in set(self.leftovers)]
        scan.stream_names = len(names)
        needed = self._backlog_needs(names)
        held: dict[str, str] = {}

        def busy(task: str) -> str | None:
            return held.get(task)

        units = UnitSettler(scan, names, limit=limit)
        for done, tid in enumerate(names, start=1):
            if progress is not None:
                progress("streams", done, len(names))
            info = TaskInfo(tid)
            refs: set[bytes] = set()
            inline: set[bytes] = set()
            readable = self._scan_one(info, refs, inline, scan, held)
            scan.stream_bytes += info.size
            if readable:
                classify(info, now, policy, marks, needed, busy)
            units.add(info, refs, inline, readable=readable)
        units.finish()
        return scan

    def _read(self, task: str) -> bytes:
        return self.streams.read(task)

    def _scan_one(self, info: TaskInfo, refs: set[bytes], inline: set[bytes], scan: Scan, held: dict[str, str]) -> bool:
        """Read one stream through the seam: size, identity, head, latest timestamp, state, digests."""
        where = f"tasks/{info.task}.jsonl"  # named as a folder names it: the same damage reads the same
        try:
            tail = self.streams.tail(info.task)
            data = self._read(info.task)
            fold, ops, latest, last = fold_for_gc(info, events_in(data, where), refs, inline)
            count, head = (last.seq + 1, last.digest) if last is not None else (0, None)
        except CorruptStream as exc:
            info.rule, info.detail = "unreadable", f"line {exc.line}: {exc.reason}; run 'intentlog verify'"
            scan.incomplete.append(f"{where} line {exc.line}: {exc.reason}")
            return False
        except (LedgerError, FileNotFoundError) as exc:
            info.rule, info.detail = "unreadable", f"cannot be read: {exc}"
            scan.incomplete.append(f"{where}: cannot be read ({exc})")
            return False
        info.size = len(data)
        info.ident = (tail.seg, tail.end_off, tail.epoch)
        info.head, info.events, info.last_ts = head, count, latest
        ws = fold.result()
        st = status_of(info.task, ws, ops.result(ws))
        info.state = sys.intern(st.state)
        if len(data) != tail.end_off:
            info.rule, info.detail = "busy", "it changed while it was read (a writer is appending)"
            return True
        if tail.held:
            held[info.task] = f"open for writing: its lease is held (lease epoch {tail.epoch})"
        protected = protected_by(st, info.unjoined)
        if protected is not None:
            info.rule, info.detail = "protected", protected
        return True

    def _backlog_needs(self, names: list[str]) -> BacklogNeeds:
        """The backlogs' unfinished item tasks, as :func:`~intentlog.retention.backlogs.backlog_needs` says."""
        needed = BacklogNeeds()
        for tid in names:
            if not tid.endswith(BACKLOG_SUFFIX):
                continue
            backlog = tid[: -len(BACKLOG_SUFFIX)]
            try:
                tasks = unfinished_item_tasks(events_in(self._read(tid), f"tasks/{tid}.jsonl"))
            except (CorruptStream, LedgerError, FileNotFoundError):
                needed.add(tid, backlog, (), whole=False)  # unread: claims its item-like tasks and every child
                continue
            needed.add(tid, backlog, tasks, whole=True)
        return needed

    def objects(self) -> Iterator[tuple[str, int, int, int]]:
        return object_times(self.client)

    def inline_payloads(self, task: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for ev in events_in(self._read(task), f"tasks/{task}.jsonl"):
            for digest, ref in walk(ev.data, INLINE):
                if ref is not None:
                    yield digest, ref

    def has_object(self, digest: str) -> bool:
        return self.client.head(ObjectArtifacts.key_for(digest)) is not None


class _LogStorage:
    """The gc log's stream seam, its lease taken over from a holder standing still ``take_over_after`` s."""

    def __init__(self, streams: ObjectStreams, take_over_after: float | None) -> None:
        self.streams = streams
        self.take_over_after = take_over_after

    def create(self, name: str, records: Sequence[bytes] = ()) -> None:
        self.streams.create(name, records)

    def lease(
        self,
        name: str,
        *,
        wait: float = 0.0,
        create: Callable[[], bytes] | None = None,
        take_over_after: float | None = None,
    ) -> StreamLease:
        after = self.take_over_after if take_over_after is None else take_over_after
        return self.streams.lease(name, wait=wait, create=create, take_over_after=after)

    def read(self, name: str, offset: int = 0) -> bytes:
        return self.streams.read(name, offset)

    def names(self) -> list[str]:
        return self.streams.names()

    def stamps(self, names: Sequence[str]) -> dict[str, str | None]:
        return self.streams.stamps(names)


def log_writer(storage: ObjectStorage, *, wait: float, take_over_after: float | None = None) -> StreamWriter:
    """The gc log's writer, open: its lease held (:class:`GcRefused` when another gc or keep holds it).

    Everything gc and keep write goes through this lease, so the store must fence writers
    first (the probe, once per process: ``StoreRefused``, nothing written).
    """
    client = storage.client
    require_fencing(client)
    log = StreamWriter(
        path=Path(client.describe(f"gc/{LOG_STREAM}.jsonl")),
        task_id="gc",
        quarantine_dir=Path("quarantine"),
        tmp_dir=Path("tmp"),
        storage=_LogStorage(log_streams(client), take_over_after),
    )
    try:
        log.open(wait=wait)
    except TaskBusy as exc:
        raise GcRefused(
            f"{client.describe('gc/')}: the store's gc log is leased by another gc or keep; wait for it to finish "
            "and run again (a gc that was killed leaves its lease held: run again with --take-over-after 30s "
            "once you know it is gone)"
        ) from exc
    return log


class StoreSession:
    """:class:`~intentlog.retention.storage.GcSession` of a store: made under the gc log's lease, through ``log``."""

    def __init__(self, gc: StoreGc, log: StreamWriter) -> None:
        self.gc = gc
        self.log = log
        self._beat: _Heartbeat | None = None

    @property
    def where(self) -> str:
        return self.gc.where

    @property
    def log_file(self) -> str:
        return LOG_FILE

    def mark(self, mark: KeepMark) -> None:
        self.log.append(GC_KEPT, {"task": mark.task, "since": mark.since, "note": mark.note}, sync=True)

    def release(self, task: str) -> bool:
        if task not in self.gc.keep_marks():  # read under the lease: no mark races this one
            return False
        self.log.append(GC_RELEASED, {"task": task}, sync=True)
        self.gc.forget_log()
        return True

    def sweep(self) -> None:
        _sweep(self.gc, self.log)
        self.gc.forget_log()

    def append(self, kind: str, data: dict[str, Any]) -> int:
        return self.log.append(kind, data).seq

    def _heartbeat(self, started: int) -> _Heartbeat:
        if self._beat is None:
            self._beat = _Heartbeat(self.log, started)
        return self._beat

    def delete_streams(
        self,
        expired: Sequence[ExpiredTask],
        started: int,
        evacuate: Evacuate,
        deleted: list[str],
        skipped: list[tuple[str, str]],
    ) -> None:
        """Lease every expired stream (``gc.leasing`` first, ``gc.leased`` after), then retire each."""
        gc, log = self.gc, self.log
        leases: list[tuple[str, ObjectLease]] = []
        holder = GC_HOLDER + secrets.token_hex(8)
        if expired:  # recorded first: a gc killed between a lease and gc.leased is finished by the next
            intended = [{"task": t.task, "epoch": (t.ident[2] if len(t.ident) == 3 else -1) + 1} for t in expired]
            log.append(GC_LEASING, {"started": started, "holder": holder, "tasks": intended})
        for t in expired:
            lease, why = _take(gc.streams, t, holder)
            if lease is not None:
                why = evacuate(t.task, gc.inline_payloads(t.task))
                if why is not None:
                    lease.release()
            if why is None and lease is not None:
                leases.append((t.task, lease))
            else:
                skipped.append((t.task, why or "it could not be leased"))
        if leases:
            log.append(GC_LEASED, {"started": started, "tasks": [{"task": n, "epoch": lz.epoch} for n, lz in leases]})
        beat = self._heartbeat(started)
        for name, _ in leases:
            beat.check()
            delete_stream(gc.client, name)
            deleted.append(name)

    def put_object(self, data: bytes) -> None:
        ObjectArtifacts(self.gc.client).put(data)

    def references(self, task: str, refs: set[bytes]) -> bool:
        held: set[bytes] = set()
        try:
            for ev in events_in(self.gc.streams.read(task), task):
                collect_digests(ev.data, refs, held)
        except FileNotFoundError:
            return True
        except (CorruptStream, LedgerError):
            return False
        return True

    def delete_objects(self, blobs: Sequence[ExpiredBlob], started: int) -> tuple[list[str], list[str]]:
        """Each blob behind a dying marker, spared when a writer touched it since the plan; the lease proved first."""
        beat = self._heartbeat(started)
        deleted: list[str] = []
        restored: list[str] = []
        token = secrets.token_hex(8)
        for b in blobs:
            verdict = retire_object(
                self.gc.client, b.digest, ObjectArtifacts.key_for(b.digest), b.touches, token, beat.check
            )
            if verdict == "deleted":
                deleted.append(b.digest)
            elif verdict == "restored":
                restored.append(b.digest)
        return deleted, restored


def _sweep(source: StoreGc, log: StreamWriter) -> None:
    """Finish what a killed gc left: dying markers, streams it deleted in part, streams it had leased."""
    client = source.client
    markers = stale_markers(client)
    for key in markers:
        client.delete(key)
    events = source.log_events()
    leased = _unfinished_leases(events)
    retired = source.retired()
    swept: list[str] = []
    for name in source.streams.names():
        if name in retired and orphans(client, name) is not None:  # what an older gc left: no segment 0
            delete_stream(client, name)
            swept.append(name)
        elif name in leased:
            try:
                tail = source.streams.tail(name)
            except (CorruptStream, LedgerError, FileNotFoundError):
                continue
            epoch, holder = leased[name]
            own = tail.holder == holder if holder is not None else tail.holder.startswith(GC_HOLDER)
            # the killed gc's own lease, nothing after it; what it left of the stream is deleted once
            mine = tail.kind == "lease" and tail.epoch == epoch and own
            if mine and (delete_stream(client, name) or name not in retired):
                swept.append(name)
    touches = compact_touches(client)
    if swept or markers or touches:
        log.append(GC_SWEPT, {"tasks": swept, "markers": len(markers), "touches": touches})


def _unfinished_leases(events: list[Any]) -> dict[str, tuple[int, str | None]]:
    """Stream -> (epoch, holder token) a gc run that never finished leased it at, or was about to, for deletion.

    A wrong-shaped event: :class:`GcRefused` (the log is not trusted; nothing is deleted).
    """
    open_runs: dict[int, dict[str, tuple[int, str | None]]] = {}
    for ev in events:
        try:
            check_shape(ev, LOG_FILE)
        except CorruptStream as exc:
            raise GcRefused(f"gc refused: {exc}; nothing was deleted") from None
        started = ev.data.get("started")
        if ev.kind == GC_STARTED:
            open_runs[ev.seq] = {}
        elif ev.kind in (GC_LEASING, GC_LEASED) and started in open_runs:
            holder = ev.data.get("holder")
            for t in ev.data.get("tasks") or []:
                if isinstance(t, dict) and isinstance(t.get("task"), str) and type(t.get("epoch")) is int:
                    open_runs[started][t["task"]] = (t["epoch"], holder if isinstance(holder, str) else None)
        elif ev.kind == GC_FINISHED and started is not None:
            open_runs.pop(started, None)
    out: dict[str, tuple[int, str | None]] = {}
    for run in open_runs.values():
        out.update(run)
    return out


class _Heartbeat:
    """gc proving it still holds the gc log's lease (a fenced put) before its deletes: a stalled gc stops."""

    def __init__(self, log: StreamWriter, started: int) -> None:
        self.log = log
        self.started = started
        self.count = BEAT_EVERY  # the first delete proves the lease first
        self.last = time.monotonic()

    def check(self) -> None:
        """Prove the lease when the last proof is ``BEAT_AFTER`` s old or ``BEAT_EVERY`` deletes ago; else nothing."""
        if self.count >= BEAT_EVERY or time.monotonic() - self.last > BEAT_AFTER:
            try:
                self.log.append(GC_HEARTBEAT, {"started": self.started})
            except LeaseLost as exc:
                raise GcRefused(
                    f"gc stopped: another gc took the store's gc log lease over while this one stood still ({exc}); "
                    "nothing more was deleted by this one: the other gc finishes the work"
                ) from exc
            self.last = time.monotonic()
            self.count = 0
        self.count += 1


def _take(streams: ObjectStreams, t: ExpiredTask, holder: str) -> tuple[ObjectLease | None, str | None]:
    """The expired stream's lease (held as ``holder``), when it is still the stream the plan saw; else why it stays."""
    try:
        lease = streams.lease(t.task, wait=0, holder=holder)
    except TaskBusy:
        return None, "a writer opened it after the plan (its lease is held)"
    except FileNotFoundError:
        return None, "its stream vanished after the plan"
    except (CorruptStream, LedgerError) as exc:
        return None, f"its stream cannot be leased ({exc})"
    planned_epoch = t.ident[2] if len(t.ident) == 3 else -1
    if lease.epoch != planned_epoch + 1 or lease.next_seq != t.events:
        lease.release()
        return None, "it changed after the plan"
    return lease, None
