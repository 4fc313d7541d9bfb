"""A ledger folder as a :class:`~intentlog.ledgerstorage.LedgerStorage`.

Streams are ``tasks/ID.jsonl`` files, each written under a ``flock`` on ``tasks/ID.jsonl.lock``
(this host's ``/proc/locks`` names its holder); artifacts are ``objects/``; the seal is
``heads.json`` and gc's record ``gc.jsonl``. Work states and rows read through the view
cache (``cache/``), checked against the stream files' facts.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import orjson

from ._internal.fsutil import check_own_file, check_real_dir, open_nofollow
from ._internal.procs import PROC_LOCKS, flock_writer
from .artifacts import ArtifactStore
from .errors import NotALedger
from .eventlog import FORMAT, Event
from .eventlog.damage import assess, lost, quarantine_plan, refusal, resend_refusal, started_in
from .eventlog.reader import StreamScan
from .eventlog.writer import SealedHead
from .ledgerstorage import LeaseOwner, ReopenSpec, RepairReport
from .stream import lock_holder, read_events

if TYPE_CHECKING:
    from .artifacts.protocol import ObjectStore
    from .checker.seams import LedgerReads
    from .eventlog.storage import StreamStorage
    from .heads.codec import StreamHead
    from .projections.workstate import WorkState
    from .retention.storage import GcStorage
    from .stream import TaskStream

__all__ = ["MARKER", "FolderLedgerStorage", "no_storage", "read_marker"]

MARKER = "intentlog.json"


def read_marker(root: Path) -> dict[str, Any]:
    """The ledger folder's marker (``intentlog.json``); :class:`~intentlog.errors.NotALedger` when it is not one."""
    try:
        marker = orjson.loads((root / MARKER).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise NotALedger(str(root), f"{MARKER} cannot be read ({exc})") from exc
    if not isinstance(marker, dict) or marker.get("format") != FORMAT:
        raise NotALedger(str(root), f"{MARKER} does not declare format {FORMAT!r}: {marker!r}")
    return marker


def no_storage(location: str) -> None:
    """A folder ledger is opened again from its path alone (the ``connect`` of its :class:`ReopenSpec`)."""
    return None


@final
class FolderLedgerStorage:
    """The storage of a ledger folder at ``root`` (its marker is read now: :class:`~intentlog.errors.NotALedger`)."""

    def __init__(self, root: Path, *, inline_lookup: Callable[[str], bytes | None] | None = None) -> None:
        self.root = root
        self.tasks_dir = root / "tasks"
        self.tmp_dir = root / "tmp"
        self.quarantine_dir = root / "quarantine"
        self.marker: dict[str, Any] = read_marker(root)
        self.artifacts = ArtifactStore(root, inline_lookup=inline_lookup)
        self.key = str(root.resolve())
        self._streams: StreamStorage | None = None
        self._objects: ObjectStore | None = None

    def __repr__(self) -> str:
        return f"<FolderLedgerStorage {str(self.root)!r}>"

    # -- the seams -----------------------------------------------------------------

    @property
    def streams(self) -> StreamStorage:
        if self._streams is None:
            from .eventlog.storage import FolderStreams  # on first use: `import intentlog` does not load the seam

            self._streams = FolderStreams(self.tasks_dir, tmp_dir=self.tmp_dir)
        return self._streams

    @property
    def objects(self) -> ObjectStore:
        if self._objects is None:
            from .artifacts.objects import FolderObjects

            self._objects = FolderObjects(self.root)
        return self._objects

    def default_workspace(self) -> Path:
        return self.root.parent

    def sealed_heads(self) -> dict[str, StreamHead] | None:
        from .heads.codec import read_heads_at

        return read_heads_at(self.root)

    def gc_storage(self) -> GcStorage:
        from .retention.folder import FolderGc

        return FolderGc(self)

    def reads(self, workspace: Path | None) -> LedgerReads:
        from .checker.folder import FolderReads

        return FolderReads(self.root, workspace)

    def task_ids(self) -> list[str]:
        return self.streams.names()

    def _path(self, task_id: str) -> Path:
        return self.tasks_dir / f"{task_id}.jsonl"

    def scan_events(self, task_id: str) -> Iterable[Event]:
        return StreamScan(self._path(task_id))

    # -- one task's stream ---------------------------------------------------------

    @property
    def writer_storage(self) -> StreamStorage | None:
        return None  # the writer's own file and lock under tasks/

    def sealed_head(self, task_id: str) -> SealedHead | None:
        from .eventlog.gclog import retired_by_gc
        from .heads.codec import read_heads_at

        heads = read_heads_at(self.root)
        h = heads.get(task_id) if heads else None
        if h is None:
            return None
        return SealedHead(h.stream, h.seq, h.head, retired_by_gc(self.root, task_id, h))

    def has_stream(self, task_id: str) -> bool:
        return self._path(task_id).exists()

    def task_events(self, task_id: str, since: int) -> Iterator[Event]:
        return read_events(self._path(task_id), self.tasks_dir, since)

    def lock_pid(self, task_id: str) -> int | None:
        path = self._path(task_id)
        return lock_holder(path.with_name(path.name + ".lock"))

    def work_state(self, stream: TaskStream) -> WorkState:
        from .viewcache import work_state_of

        return work_state_of(self.root, self.tasks_dir, stream.id)

    def row_files(self) -> Path | None:
        return self.tasks_dir

    # -- repair --------------------------------------------------------------------

    def repair(self, stream: TaskStream, *, accept_damage: bool, accept_resend: bool, dry_run: bool) -> RepairReport:
        task_id, path = stream.id, stream.path
        check_real_dir(self.tasks_dir, what="task streams")
        if not os.path.lexists(path):
            seal = stream.seal()
            if seal is not None and not seal.retired:
                raise lost(path, seal)  # nothing to move aside: restore it, or re-seal without it
            return RepairReport(task_id, "none")
        if dry_run:
            fd = open_nofollow(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0), what="a task stream")
            try:
                check_own_file(fd, path, what="a task stream")  # what the repair itself would refuse
            finally:
                os.close(fd)
            _, d = assess(path, stream.seal())
            if d is None or (d.kind == "damage" and not accept_damage):
                if d is not None:
                    raise refusal(path, d)
                return RepairReport(task_id, "none")
            if d.kind == "damage" and not accept_resend:
                started = started_in(path, d.offset)
                if started:
                    raise resend_refusal(path, d, started)
            qname, digest, size = quarantine_plan(path, task_id, d.offset)
            return RepairReport(task_id, d.kind, d.line, f"quarantine/{qname}", size, digest, d.reason)
        stream.close()
        try:
            w = stream.open_writer(accept_damage=accept_damage, accept_resend=accept_resend)
            d, q, ev = w.damage, w.quarantined, w.repaired
        finally:
            stream.close()
        if d is None or q is None:
            return RepairReport(task_id, "none")
        from .viewcache import drop_entry  # imported here: only a repair needs the cache at all

        drop_entry(self.root, task_id)  # the cut may reach under the view cache's entry: let it be rebuilt
        return RepairReport(task_id, d.kind, d.line, q["file"], q["size"], q["digest"], d.reason, ev)

    # -- lease facts (the backlog runner's) ----------------------------------------

    @property
    def forks(self) -> bool:
        return True  # files and locks: a forked child reopens what it writes (TaskStream's own fork handling)

    @property
    def fences(self) -> bool:
        return False  # a lock cannot be taken from its holder: a stalled one is ended on its own host

    def lease_holder(self, stream: TaskStream) -> int | None:
        lock = stream.path.with_name(stream.path.name + ".lock")
        try:
            return flock_writer(os.stat(lock), PROC_LOCKS, mine=stream.writing)
        except OSError:
            return os.getpid() if stream.writing else None

    def lease_owner(self, stream: TaskStream) -> LeaseOwner | None:
        pid = self.lease_holder(stream)
        return None if pid is None else LeaseOwner(pid, socket.gethostname(), True)  # a flock dies with its holder

    def reopen_spec(self) -> ReopenSpec:
        return ReopenSpec(str(self.root), no_storage)

    def progress(self, stream: TaskStream) -> int:
        try:
            return os.stat(stream.path).st_size
        except OSError:
            return -1

    def held_elsewhere(self, stream: TaskStream) -> bool:
        return stream.writer_pid() is not None

    def fence(self, stream: TaskStream) -> int | None:
        return None

    def claim_stale(self, stream: TaskStream, after: float) -> None:
        return None  # a folder's lock died with its holder
