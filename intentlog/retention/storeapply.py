"""Carrying out a gc plan on an object store: under the gc log's lease, each stream under its own.

The order, and why (docs/scale-out.md, *Retention on the store*):

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

import dataclasses
import datetime as _dt
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._digest import DIGEST_PREFIX
from ..artifacts.inline import inline_bytes
from ..errors import ArtifactError, CorruptStream, GcRefused, LeaseLost, LedgerError, TaskBusy
from ..eventlog.remote import events_in
from ..eventlog.writer import StreamWriter
from ..gclog import GC_FINISHED, GC_LEASED, GC_LEASING, GC_STARTED, GC_SWEPT, check_shape
from ..s3.objects import ObjectArtifacts
from ..s3.probe import require_fencing
from ..s3.retire import (
    LOG_STREAM,
    compact_touches,
    delete_stream,
    log_streams,
    orphans,
    retire_object,
    stale_markers,
)
from ..s3.streams import GC_HOLDER, ObjectLease, ObjectStreams
from .apply import bytes_freed, check_replan, finished_fields, started_data
from .plan import plan_from
from .policy import GcPolicy
from .report import ExpiredBlob, ExpiredTask, GcPlan, GcResult
from .scan import collect_digests
from .storescan import StoreSource

if TYPE_CHECKING:
    from ..eventlog.storage import StreamLease
    from ..s3 import ObjectStorage

__all__ = ["BEAT_AFTER", "GC_LEASED", "GC_SWEPT", "apply_on_store", "log_writer"]

GC_HEARTBEAT = "gc.heartbeat"
#: a delete more than this many seconds (gc's monotonic clock) after gc last proved its lease proves it again first
BEAT_AFTER = 1.0
#: and at least once per this many deletes
BEAT_EVERY = 32
#: where a store's apply is recorded, as a result names it (the keys of the gc log's stream)
LOG_FILE = f"gc/tasks/{LOG_STREAM}"


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


def apply_on_store(
    storage: ObjectStorage,
    policy: GcPolicy,
    when: _dt.datetime,
    preview: GcPlan | None,
    *,
    wait: float,
    take_over_after: float | None,
    max_tracked: int,
) -> GcResult:
    """:func:`~intentlog.retention.apply_gc` on an object store (see the module doc for the order)."""
    log = log_writer(storage, wait=wait, take_over_after=take_over_after)
    try:
        source = StoreSource(storage)
        _sweep(source, log)
        source.forget_log()
        current = plan_from(source, policy, when, max_tracked=max_tracked)
        check_replan(current, preview)
        if current.empty:
            return GcResult(current, (), (), (), (), (), 0, None)
        return _carry_out(source, log, current)
    finally:
        log.close()


def _sweep(source: StoreSource, log: StreamWriter) -> None:
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


def _carry_out(source: StoreSource, log: StreamWriter, plan: GcPlan) -> GcResult:
    client = source.client
    started = log.append(GC_STARTED, started_data(plan))
    evac = {e.digest for e in plan.evacuate}
    objects = ObjectArtifacts(client)
    leases: list[tuple[str, ObjectLease]] = []
    skipped: list[tuple[str, str]] = []
    evacuated: list[str] = []
    holder = GC_HOLDER + secrets.token_hex(8)
    if plan.expired:  # recorded first: a gc killed between a lease and gc.leased is finished by the next
        intended = [{"task": t.task, "epoch": (t.ident[2] if len(t.ident) == 3 else -1) + 1} for t in plan.expired]
        log.append(GC_LEASING, {"started": started.seq, "holder": holder, "tasks": intended})
    for t in plan.expired:
        lease, why = _take(source.streams, t, holder)
        if lease is not None and evac:
            why = _evacuate(source, objects, t.task, evac, evacuated)
            if why is not None:
                lease.release()
        if why is None and lease is not None:
            leases.append((t.task, lease))
        else:
            skipped.append((t.task, why or "it could not be leased"))
    if leases:
        log.append(GC_LEASED, {"started": started.seq, "tasks": [{"task": n, "epoch": lz.epoch} for n, lz in leases]})
    beat = _Heartbeat(log, started.seq)
    deleted: list[str] = []
    for name, _ in leases:
        beat.check()
        delete_stream(client, name)
        deleted.append(name)
    blobs = list(plan.blobs)
    if skipped:
        blobs = _spare_referenced(source, [t for t, _ in skipped], blobs)
    blobs_deleted, restored = _delete_blobs(source, blobs, beat)
    result = GcResult(
        plan, tuple(deleted), tuple(skipped), tuple(blobs_deleted), tuple(restored), tuple(evacuated),
        bytes_freed(plan, deleted, blobs_deleted, evacuated), None,
    )  # fmt: skip
    finished = log.append(GC_FINISHED, finished_fields(result, started.seq))
    return dataclasses.replace(result, log_seq=finished.seq, log_file=LOG_FILE)


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


def _evacuate(
    source: StoreSource, objects: ObjectArtifacts, task: str, evac: set[str], evacuated: list[str]
) -> str | None:
    """Copy the inline bytes a kept task needs out of the (leased) stream into objects; why not, or None."""
    try:
        for digest, ref in source.inline_payloads(task):
            if digest in evac and digest not in evacuated:
                data = inline_bytes(ref)
                if data is None:  # pragma: no cover - inline_payloads yields inline refs only
                    continue
                objects.put(data)
                evacuated.append(digest)
    except ArtifactError as exc:
        return f"it holds inline bytes a kept task needs, but they could not be copied out ({exc})"
    except (CorruptStream, LedgerError) as exc:
        return f"its stream cannot be read to copy out inline bytes a kept task needs ({exc})"
    return None


def _spare_referenced(source: StoreSource, tasks: list[str], blobs: list[ExpiredBlob]) -> list[ExpiredBlob]:
    """Drop from ``blobs`` every one a skipped (so retained) stream refers to; all of them if one cannot be read."""
    refs: set[bytes] = set()
    held: set[bytes] = set()
    for task in tasks:
        try:
            for ev in events_in(source.streams.read(task), task):
                collect_digests(ev.data, refs, held)
        except FileNotFoundError:
            continue
        except (CorruptStream, LedgerError):
            return []
    return [b for b in blobs if bytes.fromhex(b.digest[len(DIGEST_PREFIX) :]) not in refs]


def _delete_blobs(source: StoreSource, blobs: list[ExpiredBlob], beat: _Heartbeat) -> tuple[list[str], list[str]]:
    """Each blob behind a dying marker, spared when a writer touched it since the plan; the lease proved first."""
    deleted: list[str] = []
    restored: list[str] = []
    token = secrets.token_hex(8)
    for b in blobs:
        verdict = retire_object(
            source.client, b.digest, ObjectArtifacts.key_for(b.digest), b.touches, token, beat.check
        )
        if verdict == "deleted":
            deleted.append(b.digest)
        elif verdict == "restored":
            restored.append(b.digest)
    return deleted, restored
