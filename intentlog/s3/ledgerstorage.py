"""A ledger on an object store as a :class:`~intentlog.ledgerstorage.LedgerStorage`.

Streams are numbered segments under a lease epoch (:class:`~intentlog.s3.streams.ObjectStreams`),
artifacts immutable objects, the seals ``heads/N.json`` (every one a lower bound) and gc's
record the store's gc log. A stream is read whole through the seam (a store keeps no torn
tails); a lease names no pid, and a stalled one is fenced from any host.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

from ..artifacts import ArtifactStore
from ..eventlog import FORMAT, Event
from ..eventlog.remote import events_in
from ..ledgerstorage import STORE_POLL, LeaseOwner, ReopenSpec, RepairReport

if TYPE_CHECKING:
    from ..checker.seams import LedgerReads
    from ..eventlog.storage import StreamStorage
    from ..eventlog.writer import SealedHead
    from ..heads.codec import StreamHead
    from ..projections.workstate import WorkState
    from ..retention.storage import GcStorage
    from ..stream import TaskStream
    from . import ObjectStorage
    from .objects import ObjectArtifacts

__all__ = ["StoreLedgerStorage", "stored_events"]

_seen: dict[tuple[str, str], tuple[float, int]] = {}
_seen_lock = threading.Lock()


def stored_events(remote: StreamStorage, name: str, where: str, since: int) -> Iterator[Event]:
    """The events of stream ``name`` read whole through ``remote`` from ``since`` on, every line checked.

    Any bad line is :class:`~intentlog.errors.CorruptStream` naming ``where`` (a store keeps no
    torn tails); no stream (yet): no events.
    """
    try:
        data = remote.read(name)
    except FileNotFoundError:
        return iter(())
    return events_in(data, where, since)


@final
class StoreLedgerStorage:
    """The storage of a ledger on the object store behind ``storage``, named ``location`` (its ``s3://`` URL).

    ``root`` is the ledger's root as a path (what its messages name).
    """

    def __init__(
        self,
        storage: ObjectStorage,
        location: str,
        root: Path,
        *,
        inline_lookup: Callable[[str], bytes | None] | None = None,
    ) -> None:
        self.storage = storage
        self.location = location
        self.root = root
        self.marker: dict[str, Any] = {"format": FORMAT, "hash": "blake3"}
        self.artifacts = ArtifactStore(root, inline_lookup=inline_lookup, objects=storage.objects)
        self.key = location

    def __repr__(self) -> str:
        return f"<StoreLedgerStorage {self.location!r}>"

    # -- the seams -----------------------------------------------------------------

    @property
    def streams(self) -> StreamStorage:
        return self.storage.streams

    @property
    def objects(self) -> ObjectArtifacts:
        return self.storage.objects

    def default_workspace(self) -> Path:
        return Path.cwd()

    def sealed_heads(self) -> dict[str, StreamHead] | None:
        from .seals import stored_heads

        return stored_heads(self.storage.client)

    def gc_storage(self) -> GcStorage:
        from .gcsource import StoreGc

        return StoreGc(self.storage, self.location)

    def reads(self, workspace: Path | None) -> LedgerReads:
        from ..ledgerreads import store_reads_on

        return store_reads_on(self.storage.client, self.location, self.storage.objects)

    def task_ids(self) -> list[str]:
        from .retire import live_names

        return live_names(self.storage.client)

    def scan_events(self, task_id: str) -> Iterable[Event]:
        return self.task_events(task_id, 0)

    # -- one task's stream ---------------------------------------------------------

    @property
    def writer_storage(self) -> StreamStorage | None:
        return self.storage.streams

    def sealed_head(self, task_id: str) -> SealedHead | None:
        return None  # a store's seals (heads/N.json) are checked by its own lease (ObjectStreams.check_seal)

    def has_stream(self, task_id: str) -> bool:
        try:
            self.storage.streams.read(task_id, 1 << 62)  # lists from the last checkpoint: no segment's bytes kept
        except FileNotFoundError:
            return False
        return True

    def task_events(self, task_id: str, since: int) -> Iterator[Event]:
        where = str(self.root / "tasks" / f"{task_id}.jsonl")
        return stored_events(self.storage.streams, task_id, where, since)

    def lock_pid(self, task_id: str) -> int | None:
        return None  # a lease on a store names no pid

    def work_state(self, stream: TaskStream) -> WorkState:
        from ..projections.workstate import work_state

        return work_state(stream.events(), task_id=stream.id)  # read whole through the seam (no cache there)

    def row_files(self) -> Path | None:
        return None  # no file facts, no cache (yet)

    # -- repair --------------------------------------------------------------------

    def repair(self, stream: TaskStream, *, accept_damage: bool, accept_resend: bool, dry_run: bool) -> RepairReport:
        from ..storerepair import repair_stored

        done = repair_stored(
            self.storage, stream.id, accept_damage=accept_damage, accept_resend=accept_resend, dry_run=dry_run
        )
        if done is None:
            return RepairReport(stream.id, "none")
        cut, kept, event = done
        return RepairReport(
            stream.id, cut.kind, cut.line, kept["file"], kept["size"], kept["digest"], cut.reason, event
        )

    # -- lease facts (the backlog runner's) ----------------------------------------

    @property
    def forks(self) -> bool:
        return False  # an object-store client cannot cross a fork (its runtime's threads stay behind)

    @property
    def fences(self) -> bool:
        return True  # every append is a conditional create of the next segment: a taken lease cannot append

    def lease_holder(self, stream: TaskStream) -> int | None:
        return os.getpid() if stream.writing else None

    def lease_owner(self, stream: TaskStream) -> LeaseOwner | None:
        from ..errors import CorruptStream, LedgerError
        from .holder import this_process
        from .lease import beats_folder, held_tokens

        if stream.writing:
            me = this_process()
            return LeaseOwner(me.pid, me.host, True)
        streams = self.storage.streams
        try:
            tail = streams.tail(stream.id)
        except FileNotFoundError:
            return None
        if not tail.held:
            return None
        try:
            who = streams.holder_segment(stream.id, tail).who
        except (CorruptStream, LedgerError):
            who = None
        alive = True if tail.holder in held_tokens() else (who.alive() if who is not None else None)
        beat = None
        scan_times = getattr(self.storage.client, "scan_times", None)  # the store's last-modified times, if listed
        if scan_times is not None:
            try:
                for _, _, mtime_ns in scan_times(beats_folder(stream.id)):
                    beat = max(beat or 0.0, mtime_ns / 1e9)
            except LedgerError:
                beat = None
        return LeaseOwner(who.pid if who is not None else None, who.host if who is not None else None, alive, beat)

    def reopen_spec(self) -> ReopenSpec:
        from . import connect

        return ReopenSpec(self.location, connect)

    def progress(self, stream: TaskStream) -> int:
        key = (self.location, stream.id)
        now = time.monotonic()
        with _seen_lock:
            seen = _seen.get(key)
        if seen is not None and now - seen[0] < STORE_POLL:
            return seen[1]
        return self._tail_seen(stream.id, now)[0]

    def _tail_seen(self, name: str, now: float) -> tuple[int, bool]:
        """The stream's tail segment number (-1: no stream) and whether it is held, read now; the number kept as
        :meth:`progress`'s answer for :data:`STORE_POLL` s (a supervisor asks both of an item it hands out)."""
        try:
            tail = self.storage.streams.tail(name)
            value, held = int(tail.seg), bool(tail.held)
        except FileNotFoundError:
            value, held = -1, False
        with _seen_lock:
            _seen[(self.location, name)] = (now, value)
        return value, held

    def held_elsewhere(self, stream: TaskStream) -> bool:
        if stream.writing:
            return False
        return self._tail_seen(stream.id, time.monotonic())[1]

    def fence(self, stream: TaskStream) -> int | None:
        """Take the stream's lease at once and give it back; the epoch taken.

        A stream that does not exist yet (its holder stalled before its creation put) is
        created here, holding the creation record its writer would have written, and leased
        the same way: the holder's own creation then finds segment 0 taken and it leases
        the stream like any other writer (refused while another holds it).
        """
        from ..stream import creation_record

        try:
            lease = self.storage.streams.lease(
                stream.id, wait=0.0, take_over_after=0.0, create=lambda: creation_record(stream.id)
            )
        except FileNotFoundError:  # pragma: no cover - a lease given ``create`` makes the stream
            return None
        epoch = int(lease.epoch)
        lease.release()
        with _seen_lock:
            _seen.pop((self.location, stream.id), None)
        return epoch

    def claim_stale(self, stream: TaskStream, after: float) -> None:
        if stream.writing:
            return
        from ..errors import TaskBusy

        try:
            lease = self.storage.streams.lease(stream.id, wait=after + 1.0, take_over_after=after)
        except (FileNotFoundError, TaskBusy):
            return
        lease.release()
