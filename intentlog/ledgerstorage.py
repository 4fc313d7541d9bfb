"""Where a ledger keeps its streams, objects and seals: one protocol, two implementations.

A :class:`LedgerStorage` answers every question whose answer depends on where the ledger
lives: a folder (:class:`~intentlog.folderstorage.FolderLedgerStorage`: ``tasks/``,
``objects/``, ``heads.json``, ``gc.jsonl``, lock files and ``/proc/locks``) or an object
store (:class:`~intentlog.s3.ledgerstorage.StoreLedgerStorage`: segments, leases and
seals under an ``s3://bucket/prefix``). The :class:`~intentlog.Ledger` holds one
(:attr:`~intentlog.Ledger.backend`); the task, the views and the backlog call it and
never ask which one it is. Nothing here reads or writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, final

from .stream import TaskStorage

if TYPE_CHECKING:
    from .artifacts import ArtifactStore
    from .artifacts.protocol import ObjectStore
    from .checker.seams import LedgerReads
    from .eventlog import Event
    from .eventlog.storage import StreamStorage
    from .heads.codec import StreamHead
    from .projections.workstate import WorkState
    from .retention.storage import GcStorage
    from .stream import TaskStream

__all__ = ["STORE_POLL", "LedgerStorage", "LeaseOwner", "RepairReport", "ReopenSpec"]

#: how often (seconds) the progress of one stream on a store is read again; between reads the
#: last answer stands (a stall is judged over a supervisor's ``inactivity``, seconds to minutes)
STORE_POLL: Final = 0.25


@final
@dataclass(frozen=True, slots=True)
class RepairReport:
    """What :meth:`Ledger.repair <intentlog.Ledger.repair>` did (or, with ``dry_run``, would do) to one stream.

    ``action`` is ``"none"`` (nothing to repair), ``"torn_tail"`` (what a crash leaves;
    the next writer would do the same) or ``"damage"`` (accepted by the operator).
    ``line`` is the first line moved aside, ``quarantined`` the ledger-relative file the
    bytes went to, ``size`` and ``digest`` those bytes; ``event`` the ``stream.repaired``
    appended (None for a dry run or when nothing was done).
    """

    task: str
    action: str
    line: int | None = None
    quarantined: str | None = None
    size: int = 0
    digest: str | None = None
    reason: str | None = None
    event: Event | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "action": self.action,
            "line": self.line,
            "quarantined": self.quarantined,
            "size": self.size,
            "digest": self.digest,
            "reason": self.reason,
            "event": self.event.to_json() if self.event is not None else None,
        }


@final
@dataclass(frozen=True, slots=True)
class ReopenSpec:
    """How another process opens this ledger again: ``Ledger(Path(location), storage=connect(location), location=...)``.

    Picklable (``connect`` is a module-level function): what a spawned or remote worker is
    sent, so that it opens its own handles -- a store's client, and its fencing probe,
    cannot cross a process boundary. ``connect`` gives the object storage to pass (None: a folder).
    """

    location: str
    connect: Callable[[str], Any]


@final
@dataclass(frozen=True, slots=True)
class LeaseOwner:
    """Who holds a stream's writer lease now, as far as this process can tell (the operator's view of it).

    ``pid`` and ``host`` name the process (None where nothing records it). ``alive``: True
    it runs (it is this process, or a folder lock's holder, or a process of this machine
    seen running), False it has ended (it can never write again: its lease waits to be
    taken over), None it cannot be told from here (another host: only its stream
    standing still on the watcher's clock says it stopped). ``beat``: when the holder's
    newest heartbeat was stored, on the store's clock (Unix seconds; None where there is
    none or it is not cheap to read). Never a judgement of safety: a take-over is fenced
    whatever was believed here.
    """

    pid: int | None
    host: str | None
    alive: bool | None
    beat: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "host": self.host, "alive": self.alive, "beat": self.beat}


class LedgerStorage(TaskStorage, Protocol):
    """What a ledger's operations ask of the place it lives in (see the module doc).

    Besides what a task's stream asks (:class:`~intentlog.stream.TaskStorage`): the two
    seams, the marker, the artifact store, the seals, the storages gc, verify and repair
    work through, the task names, the work state and row facts of one task, and the lease
    facts a backlog runner reads.
    """

    @property
    def streams(self) -> StreamStorage:
        """The task streams behind the stream seam (eventlog/storage.py)."""
        ...

    @property
    def objects(self) -> ObjectStore: ...

    @property
    def marker(self) -> dict[str, Any]: ...

    @property
    def artifacts(self) -> ArtifactStore: ...

    @property
    def key(self) -> str:
        """What names this ledger among the process-wide task handles."""
        ...

    def default_workspace(self) -> Path:
        """The folder :meth:`Task.record_artifact` locators are relative to when none is given."""
        ...

    def sealed_heads(self) -> dict[str, StreamHead] | None: ...

    def gc_storage(self) -> GcStorage: ...

    def reads(self, workspace: Path | None) -> LedgerReads: ...

    def task_ids(self) -> list[str]: ...

    def scan_events(self, task_id: str) -> Iterable[Event]:
        """The events of a stream for a search, as far as they read (no damage raised for a folder's torn tail)."""
        ...

    def repair(
        self, stream: TaskStream, *, accept_damage: bool, accept_resend: bool, dry_run: bool
    ) -> RepairReport: ...

    def work_state(self, stream: TaskStream) -> WorkState: ...

    def row_files(self) -> Path | None:
        """The folder of stream files the view cache indexes by their file facts; None: rows read each stream."""
        ...

    def lease_holder(self, stream: TaskStream) -> int | None: ...

    def lease_owner(self, stream: TaskStream) -> LeaseOwner | None:
        """Who holds the stream's lease now (None: nobody, or no stream); one probe, no waiting, no write."""
        ...

    def reopen_spec(self) -> ReopenSpec:
        """How another process opens this ledger again, with handles of its own (see :class:`ReopenSpec`)."""
        ...

    def progress(self, stream: TaskStream) -> int: ...

    def held_elsewhere(self, stream: TaskStream) -> bool: ...

    def fence(self, stream: TaskStream) -> int | None: ...

    def claim_stale(self, stream: TaskStream, after: float) -> None: ...

    @property
    def forks(self) -> bool:
        """Whether a forked child may go on using this storage's handles (False: it opens :meth:`reopen_spec` anew)."""
        ...

    @property
    def fences(self) -> bool:
        """Whether a stalled lease can be taken from its holder on any host (a store), not only ended here."""
        ...
