"""Storage-aware lease checks for the backlog runner: who holds an item, has it progressed, take it.

An item's lease is its task's writer, and what that is depends on where the ledger lives:

- **a folder**: the task's writer lock (a ``flock`` on ``tasks/ID.jsonl.lock``). This host's
  ``/proc/locks`` names the pid holding it; progress is the stream file's size; a stalled
  holder is ended with SIGKILL once its pid *and* start time match (never another host's);
- **an object store**: the stream's own lease epoch (a ``lease`` segment at the next
  number, ``ObjectStreams.lease``). The store is the fence: every append is a conditional
  create of the next segment, so a holder whose lease was taken cannot append -- not
  ``quota.reserved``, not ``attempt.started`` -- and therefore cannot send. Progress is the
  number of the stream's last segment; a stalled holder, on any host, is *fenced*: its
  lease is taken at the next number and given back at once (a ``release`` segment), so the
  next worker leases the stream normally and the old holder's next put is refused
  (``LeaseLost``, nothing written).

Every judgement of a stall is made by the caller on its own monotonic clock (the
supervisor's ``inactivity``), never by comparing timestamps another machine wrote.
Functions here take an item's :class:`~intentlog.task.Task` and read through the stream
seam only; none of them writes, except :func:`fence` (two segments on a store).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..ledgerstorage import STORE_POLL
from .procs import end_holder

if TYPE_CHECKING:
    from ..ledgerstorage import LedgerStorage
    from ..task import Task
    from .model import LedgerLike

__all__ = [
    "BACKLOG_STALE", "STORE_POLL", "Reopened", "claim_stale", "end_or_fence", "fence", "held_elsewhere",
    "holder", "progress", "reopen",
]  # fmt: skip

#: how long (seconds) a backlog stream's lease must stand still on a store before a new writer takes it: a
#: live supervisor gives its lease back about once a second, a SIGKILLed one never does
BACKLOG_STALE: Final = 5.0


def holder(task: Task) -> int | None:
    """The pid holding the item's lease as this process can tell; ``os.getpid()`` when it is this one.

    On a folder: the pid ``/proc/locks`` names for the task's lock (where there is no
    ``/proc/locks``, this process when its writer is open). On a store a lease names no
    pid: this process when its writer is open and has not been fenced, else None -- and
    the store refuses the next put of a holder whose lease was taken, so a stale answer
    here can never become a send.
    """
    return task.ledger.backend.lease_holder(task.stream)


def progress(task: Task) -> int:
    """A number that grows whenever the item's stream does: its size on a folder, its last segment on a store.

    -1 when there is no stream (yet). On a store one item is read at most every
    :data:`STORE_POLL` seconds (two LISTs and one GET: the tail), so a supervisor polling
    every 50 ms costs the store a few requests a second per running item.
    """
    return task.ledger.backend.progress(task.stream)


def held_elsewhere(task: Task) -> bool:
    """Whether a process other than this one holds the item's lease (so it must not be handed out).

    On a folder: a live process holds the task's lock. On a store: the stream's last
    segment is a lease or a holder's data (a holder that died without releasing stays
    recorded as holding until it is fenced).
    """
    return task.ledger.backend.held_elsewhere(task.stream)


def fence(task: Task) -> int | None:
    """Take the item's lease on a store from a stalled holder and give it back at once; the epoch taken.

    Call it only once the stream has stood still for the caller's ``inactivity`` on its own
    clock. The old holder, alive or not, on whatever host, is fenced: its next put is
    refused (``LeaseLost``), so it can neither append nor start an attempt. An attempt it
    had already started stays unknown in the record and blocks the item: never resent.
    A holder whose stream does not exist yet (stalled before its creation) is fenced by
    creating the stream first: its own creation then finds it made and leases it like any
    writer. None on a folder (a lock cannot be taken from its holder).
    """
    return task.ledger.backend.fence(task.stream)


def claim_stale(task: Task, after: float = BACKLOG_STALE) -> None:
    """On a store, take back the lease of a stream whose holder died: once it stood still ``after`` s here.

    For the backlog's own stream, which a SIGKILLed supervisor leaves leased (a folder's
    lock would have died with it). A holder that is alive keeps its stream moving or gives
    the lease back within about a second, and is waited for (up to ``after`` + 1 s, then
    the caller's own open meets it); a stalled one is fenced (its next put refused). Does
    nothing on a folder or for a stream that does not exist yet.
    """
    task.ledger.backend.claim_stale(task.stream, after)


def end_or_fence(task: Task, pid: int | None, started: int | None) -> bool:
    """End a stalled holder: SIGKILL when provably ours on this host (pid + start time), fence on a store.

    True once the holder can no longer write: it is gone, or (on a store) its lease was
    taken. A holder on another host with a folder ledger is never ended (False).
    """
    ended = pid is not None and end_holder(pid, started)
    if task.ledger.backend.fences:
        return fence(task) is not None or ended
    return ended


def reopen(
    cls: Callable[..., LedgerLike], connect: Callable[[str], Any], location: str, workspace: str | None = None
) -> LedgerLike:
    """Open, in this process, the ledger a supervisor's ``cls`` ledger is, from its storage's ``reopen_spec()``.

    The ledger is opened anew, with its own handles (``connect(location)``): a store's
    client, and its fencing probe, cannot be shared with a forked or remote process.
    """
    ws = {} if workspace is None else {"workspace": Path(workspace)}
    return cls(Path(location), storage=connect(location), location=location, **ws)


class Reopened:
    """A ledger like ``ledger`` that opens itself again on first use in the process it is sent to (picklable).

    What a spawned local worker gets for a ledger whose storage cannot cross a fork
    (:attr:`~intentlog.ledgerstorage.LedgerStorage.forks` False): the worker opens it anew
    from its :meth:`~intentlog.ledgerstorage.LedgerStorage.reopen_spec`.
    """

    def __init__(self, ledger: LedgerLike) -> None:
        self.cls: Callable[..., LedgerLike] = type(ledger)
        spec = ledger.backend.reopen_spec()
        self.location, self.connect = spec.location, spec.connect
        ws = getattr(ledger, "workspace", None)
        self.workspace = None if ws is None else str(ws)
        self._ledger: LedgerLike | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ledger": None}

    def opened(self) -> LedgerLike:
        if self._ledger is None:
            self._ledger = reopen(self.cls, self.connect, self.location, self.workspace)
        return self._ledger

    @property
    def root(self) -> Path:
        return self.opened().root

    @property
    def artifacts(self) -> Any:
        return self.opened().artifacts

    @property
    def backend(self) -> LedgerStorage:
        return self.opened().backend

    def task(self, task_id: str, *, wait: float = 0.0) -> Task:
        return self.opened().task(task_id, wait=wait)
