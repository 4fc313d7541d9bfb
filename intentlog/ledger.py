"""The ledger: a root folder of task streams and artifacts (DESIGN §3).

Task handles are shared process-wide (DESIGN §4 rule 5): opening the same root twice in
one process and asking for the same task gives the same :class:`~intentlog.task.Task`, so
a process never locks itself out of its own task.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, final

import orjson

from ._internal.args import check_bool, check_seconds
from ._internal.commands import DEFAULT_ROOT as COMMAND_DEFAULT_ROOT
from ._internal.fsutil import makedirs_durable, open_nofollow, publish_bytes
from .artifacts import inline_bytes
from .errors import ArtifactError, IntentlogError, NotALedger, UsageError, WrongType
from .eventlog import FORMAT, check_task_id
from .eventlog.storage import DEFAULT_TAKE_OVER_AFTER
from .folderstorage import MARKER, FolderLedgerStorage
from .ledgerstorage import LedgerStorage, RepairReport
from .task import Task

if TYPE_CHECKING:
    from .artifacts.protocol import ObjectStore
    from .backlog import Backlog
    from .checker.seams import LedgerReads
    from .eventlog.storage import StreamStorage
    from .heads.codec import StreamHead
    from .ledgerreads import Revisions
    from .projections.idioms import Signal
    from .retention.storage import GcStorage
    from .s3 import ObjectStorage
    from .sessions import Session

__all__ = ["DEFAULT_ROOT", "Ledger", "RepairReport", "open_ledger"]

DEFAULT_ROOT: Final = COMMAND_DEFAULT_ROOT  # one spelling, shared with the hints that name it
_SUBDIRS: Final = ("tasks", "objects", "tmp", "quarantine")
GITIGNORE: Final = (
    b"# intentlog: lock files, staging and the view cache (derived, deletable) are not evidence\n*.lock\ntmp/\ncache/\n"
)
#: The view cache's folder (intentlog/viewcache/__init__.py): made with the ledger, so a reader never creates it.
CACHE: Final = "cache"
GITATTRIBUTES: Final = (
    b"# intentlog: hashes cover exact bytes; never let git rewrite line endings\n"
    b"tasks/** -text\nobjects/** -text\nquarantine/** -text\ngc.jsonl -text\n"
)

# what an interrupted creation may have left before the marker was written
#: What creating a layout folder fails with on a ledger this process may only read.
_NOT_WRITABLE: Final = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
_LAYOUT: Final = frozenset({*_SUBDIRS, CACHE, ".gitignore", ".gitattributes"})

_HANDLES: dict[tuple[str, str], Task] = {}
_HANDLES_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child starts with no handles of its own: the parent's belong to the parent.

    A child that asks for a task gets a new handle, whose first write takes the lock
    properly (:class:`~intentlog.errors.TaskBusy` while the parent holds it); an inherited
    handle reopens the same way (see :meth:`TaskStream.open_writer`).
    """
    global _HANDLES_LOCK
    _HANDLES.clear()
    _HANDLES_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _check_wait(wait: object) -> float:
    return check_seconds(wait, "wait")


def _check_take_over(seconds: object) -> float:
    if isinstance(seconds, float) and seconds == float("inf"):
        return seconds
    return check_seconds(seconds, "take_over_after")


@final
class Ledger:
    """A ledger folder. Use :func:`intentlog.open` to get one.

    ``workspace`` is the folder that :meth:`Task.record_artifact` locators are relative
    to; by default the ledger's parent folder.
    """

    def __init__(
        self, root: Path, *, workspace: Path | None = None, storage: ObjectStorage | None = None, location: str = ""
    ) -> None:
        self.root = root
        #: where the ledger is, as given: its folder, or its ``s3://bucket/prefix`` URL
        self.location = location or str(root)
        #: the object store holding the streams and artifacts, or None for a folder ledger (as given)
        self.storage = storage
        #: where the ledger lives, as the operations ask it (:class:`~intentlog.ledgerstorage.LedgerStorage`)
        self.backend: LedgerStorage = _storage_for(root, storage, self.location, self._inline_lookup)
        self.workspace = workspace if workspace is not None else self.backend.default_workspace()
        self.tasks_dir = root / "tasks"
        self.tmp_dir = root / "tmp"
        self.quarantine_dir = root / "quarantine"
        self.marker: dict[str, Any] = self.backend.marker
        self.artifacts = self.backend.artifacts
        self._key = self.backend.key
        self._opened: set[str] = set()
        #: seconds a dead holder's stream must stand still before a task opened here takes its lease
        #: (an object store; a folder's lock dies with its holder); ``Ledger.task`` may say otherwise
        self.take_over_after: float = DEFAULT_TAKE_OVER_AFTER

    def __repr__(self) -> str:
        return f"<Ledger {str(self.root)!r}>"

    @property
    def streams(self) -> StreamStorage:
        """The task streams behind the storage seam (eventlog/storage.py): the tasks/ folder, or the store.

        Built on first use, so ``import intentlog`` does not load the seam module.
        """
        return self.backend.streams

    @property
    def objects(self) -> ObjectStore:
        """The artifact objects behind the object seam (artifacts/protocol.py): objects/, or the store's."""
        return self.backend.objects

    def sealed_heads(self) -> dict[str, StreamHead] | None:
        """The heads the ledger's seals record, by task (None when never sealed).

        A folder's ``heads.json``; on a store the furthest head any of its seals recorded
        (every seal is a lower bound). ``LedgerError`` when a seal is malformed.
        """
        return self.backend.sealed_heads()

    def gc_storage(self) -> GcStorage:
        """What gc and keep work through (:mod:`intentlog.retention.storage`): the folder, or the store.

        Built on each call (its reads are its own), so ``import intentlog`` loads no retention module.
        """
        return self.backend.gc_storage()

    def reads(self) -> LedgerReads:
        """What verify, the report and export read of this ledger (its storage's own; nothing written, no probe)."""
        return self.backend.reads(self.workspace)

    # -- tasks ---------------------------------------------------------------------

    def task(self, task_id: str, *, wait: float = 0.0, take_over_after: float | None = None) -> Task:
        """The process-wide handle of task ``task_id`` (created on its first write).

        ``wait`` is how long its first write waits for another process's lock before
        raising :class:`~intentlog.errors.TaskBusy`. ``take_over_after`` (on an object
        store, where a lease outlives a process killed outright): how long, in seconds of
        this process's monotonic clock, the holder's stream must stand still (no append, no
        heartbeat) before the first write takes the lease over, fencing the old holder;
        ``0`` takes it at once, ``math.inf`` never; None: the ledger's
        (:attr:`take_over_after`, by default 120 s). A holder that ran on this machine and
        has ended is taken over at once.
        """
        check_task_id(task_id)
        wait = _check_wait(wait)
        after = self.take_over_after if take_over_after is None else _check_take_over(take_over_after)
        with _HANDLES_LOCK:
            handle = _HANDLES.get((self._key, task_id))
            if handle is None:
                handle = Task(self, task_id)
                _HANDLES[(self._key, task_id)] = handle
            self._opened.add(task_id)
        handle.wait = wait
        handle.stream.take_over_after = after
        return handle

    def session(
        self,
        session_id: str,
        *,
        messages_field: str = "messages",
        drop: Iterable[str] | None = None,
        redact: Any = None,
        accept: bool = True,
        wait: float = 0.0,
    ) -> Session:
        """A :class:`~intentlog.sessions.Session` over task ``session_id``: its calls are conversation turns.

        Each call returns a new ``Session`` (turn numbering is per object) over the one
        process-wide task handle.
        """
        from .sessions import Session

        return Session(
            self.task(session_id, wait=wait), messages_field=messages_field, drop=drop, redact=redact, accept=accept
        )

    def backlog(self, name: str) -> Backlog:
        """The backlog ``name`` (its stream is the task ``NAME.backlog``); see :mod:`intentlog.backlog`."""
        from .backlog import Backlog

        return Backlog(self, name)

    def signal(
        self, task_id: str, name: str, payload: Any = None, *, event_id: str | None = None, wait: float = 30.0
    ) -> Signal:
        """Record event ``name`` (with a JSON ``payload``) for the task ``task_id`` to receive; durable on return.

        Written to the task's inbox stream (``<task id>.inbox``), never to the task's own, so it
        is recorded while another process holds the task's writer (waiting for it, or not).
        Idempotent by ``event_id`` (default: the payload's digest): the same delivery again
        writes nothing and returns the recorded signal; another payload under that id, or
        another id for a name already signalled, raises :class:`~intentlog.EventConflict`
        and writes nothing. ``wait``: seconds to wait for another sender holding the inbox.
        See :mod:`intentlog.idioms.events`.
        """
        from .idioms.events import signal

        return signal(self, task_id, name, payload, event_id=event_id, wait=wait)[0]

    def fork(
        self,
        task_id: str,
        from_call: str,
        new_id: str | None = None,
        *,
        note: str | None = None,
        accept_risk: bool = False,
    ) -> Task:
        """Start a new task from ``task_id``'s record before ``from_call``; see :func:`intentlog.fork.fork_task`."""
        from .fork import fork_task

        return self.task(fork_task(self, task_id, from_call, new_id, note=note, accept_risk=accept_risk))

    def repair(
        self, task_id: str, *, accept_damage: bool = False, accept_resend: bool = False, dry_run: bool = False
    ) -> RepairReport:
        """The operator's path for a stream the writer refuses (``intentlog repair TASK``).

        Without ``accept_damage`` it does only what the next writer would do: quarantine a
        torn tail (a crash's leftovers); damage raises
        :class:`~intentlog.errors.CorruptStream` and nothing is written. With
        ``accept_damage`` damage is moved aside too, from its first bad line (a suspect
        line, a bad line followed by good ones, a line too long), and the repair recorded
        in ``stream.repaired`` with ``"accepted": "damage"`` (and ``"seal"`` when the stream
        contradicts ``heads.json``: writers then accept that seal). Bytes to move aside that
        record an ``attempt.started`` (its send began; a re-run would send again) are refused
        with :class:`~intentlog.errors.CorruptStream` naming each attempt, unless
        ``accept_resend`` too: then ``"accepted": "damage+resend"`` and ``"started"`` list
        them. Takes the writer lock
        (:class:`~intentlog.errors.TaskBusy` if another process holds it); ``dry_run``
        reads only and says what would be moved. On an object-store ledger the same judgement
        and refusals hold; the cut is one ``cut`` segment under a fencing lease and the bytes
        moved aside are kept under the store's ``quarantine/`` (:func:`intentlog.storerepair.repair_stored`).
        """
        check_bool(accept_damage, "accept_damage")
        check_bool(accept_resend, "accept_resend")
        check_bool(dry_run, "dry_run")
        return self.backend.repair(
            self.task(task_id).stream, accept_damage=accept_damage, accept_resend=accept_resend, dry_run=dry_run
        )

    def task_ids(self) -> list[str]:
        """Every task with a stream, sorted (on a store: not what is left of a stream its gc deleted)."""
        return self.backend.task_ids()

    def revisions(self, path: str | os.PathLike[str], *, task: str | None = None) -> Revisions:
        """The recorded revisions of a workspace path (``task.record_artifact``), in record order.

        Across every task, or only ``task``'s; each with its task, seq, ts, digest and size.
        Read through the ledger's storage (a folder or a store alike); appends nothing,
        takes no lock. See :func:`intentlog.ledgerreads.revisions_of`.
        """
        from .ledgerreads import revisions_of

        ids = [check_task_id(task)] if task is not None else self.task_ids()
        return revisions_of(path, ids, lambda tid: self.task(tid).events(), workspace=self.workspace)

    def stream_path(self, task_id: str) -> Path:
        return self.tasks_dir / f"{check_task_id(task_id)}.jsonl"

    # -- inline payloads -----------------------------------------------------------

    def _inline_lookup(self, digest: str) -> bytes | None:
        """Find bytes stored inline in some event (DESIGN §3); a full scan, used rarely."""
        for task_id in self.task_ids():
            for ev in self.backend.scan_events(task_id):
                found = _find_inline(ev.data, digest)
                if found is not None:
                    return found
        return None

    # -- lifetime ------------------------------------------------------------------

    def close(self) -> None:
        """Sync and close every task handle this ledger gave out, releasing their locks."""
        with _HANDLES_LOCK:
            handles = [_HANDLES.get((self._key, t)) for t in self._opened]
        for h in handles:
            if h is not None:
                h.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _storage_for(
    root: Path, storage: ObjectStorage | None, location: str, inline_lookup: Callable[[str], bytes | None]
) -> LedgerStorage:
    """The storage a ledger opened at ``root`` lives in: the object store given, else the folder.

    The one place a ledger's storage is chosen (what :class:`Ledger` was given); everything
    else calls the :class:`~intentlog.ledgerstorage.LedgerStorage` it returns.
    """
    if storage is None:  # the choice itself
        return FolderLedgerStorage(root, inline_lookup=inline_lookup)
    from .s3.ledgerstorage import StoreLedgerStorage

    return StoreLedgerStorage(storage, location, root, inline_lookup=inline_lookup)


def _find_inline(value: Any, digest: str) -> bytes | None:
    """The checked bytes of ``digest`` riding inline somewhere in ``value``; None if no good copy."""
    from .refs import INLINE, walk  # only `show` of an inline-only digest comes here

    for named, ref in walk(value, INLINE):
        if named == digest and ref is not None:
            try:
                return inline_bytes(ref)
            except ArtifactError:
                pass  # a corrupt copy: keep looking for a good one (verify reports the bad one)
    return None


def _check_root(root: object) -> Path:
    if isinstance(root, bytes) or not isinstance(root, (str, os.PathLike)):
        raise WrongType(f"a ledger root is a folder path (str or os.PathLike), not {type(root).__name__}: {root!r}")
    text = os.fspath(root)
    if not isinstance(text, str) or not text or "\0" in text:
        raise UsageError(f"{text!r} is not a usable folder path (empty, bytes, or with a NUL character)")
    if text.startswith("s3:/") and not text.startswith("s3://"):  # never a local folder named "s3:"
        raise UsageError(f"{text!r}: an object-store ledger is named s3://BUCKET/PREFIX (two slashes)")
    return Path(text)


def _ignores_cache(path: Path) -> bool:
    """Whether the ledger's ``.gitignore`` excludes ``cache/`` (a ledger made before the cache does not)."""
    try:
        fd = open_nofollow(path / ".gitignore", os.O_RDONLY, what="the ledger's .gitignore")
    except (OSError, IntentlogError):
        return False
    try:
        return b"\ncache/\n" in os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def open_ledger(
    root: str | os.PathLike[str] = DEFAULT_ROOT,
    *,
    create: bool = True,
    workspace: str | os.PathLike[str] | None = None,
    write: bool = False,
    take_over_after: float | None = None,
) -> Ledger:
    """Open the ledger at ``root``, creating its folder layout if missing.

    ``take_over_after``: the ledger's :attr:`Ledger.take_over_after` (None: 120 s), see
    :meth:`Ledger.task`.

    A missing or empty folder becomes a new ledger (every new directory and file is
    fsynced). An existing folder must hold ``intentlog.json``; anything else raises
    :class:`~intentlog.errors.NotALedger` and writes nothing. ``write`` (implied by
    ``create``) opens it to write: a store's fencing probe runs now, before anything is read.
    """
    ledger = _open_ledger(root, create=create, workspace=workspace, write=write)
    if take_over_after is not None:
        ledger.take_over_after = _check_take_over(take_over_after)
    return ledger


def _open_ledger(
    root: str | os.PathLike[str], *, create: bool, workspace: str | os.PathLike[str] | None, write: bool
) -> Ledger:
    path = _check_root(root)
    text = os.fspath(root)
    if text.startswith("s3://"):
        from .s3 import connect

        # a writer's store must fence writers (the probe runs before anything is written)
        storage = connect(text, write=create or write)
        return Ledger(Path(text), workspace=Path(workspace) if workspace is not None else None, storage=storage,
                      location=text.rstrip("/"))
    if path.exists() and not path.is_dir():
        raise NotALedger(str(path), "exists and is not a folder")
    has_marker = (path / MARKER).is_file()
    if not has_marker:
        if path.exists() and any(n not in _LAYOUT for n in os.listdir(path)):
            raise NotALedger(
                str(path),
                f"is a non-empty folder without {MARKER}: not an intentlog ledger; "
                "pass a new or empty folder, or run 'intentlog init' there",
            )
        if not create:
            raise NotALedger(str(path), f"no ledger here (no {MARKER}); run 'intentlog init'")
        try:
            makedirs_durable(path)
            for sub in (*_SUBDIRS, CACHE):
                makedirs_durable(path / sub)
            tmp = path / "tmp"
            publish_bytes(GITIGNORE, path / ".gitignore", tmp_dir=tmp, mode=0o644, replace=True)
            publish_bytes(GITATTRIBUTES, path / ".gitattributes", tmp_dir=tmp, mode=0o644, replace=True)
            # the marker goes last: a folder with it is complete
            publish_bytes(
                orjson.dumps({"format": FORMAT, "hash": "blake3"}, option=orjson.OPT_SORT_KEYS) + b"\n",
                path / MARKER,
                tmp_dir=tmp,
                mode=0o644,
            )
        except OSError as exc:
            raise NotALedger(str(path), f"cannot create the ledger ({exc})") from exc
    elif create:
        # a git clone drops empty folders; a writer puts them back, a reader (create=False) never writes.
        # A ledger this process may not write (a read-only mount, another user's folder) still opens to
        # read: its first write is refused by the writer lock, with the library's error.
        try:
            for sub in _SUBDIRS:
                makedirs_durable(path / sub)
            if _ignores_cache(path):
                makedirs_durable(path / CACHE)
        except OSError as exc:
            if exc.errno not in _NOT_WRITABLE:
                raise NotALedger(str(path), f"cannot complete the folder layout ({exc})") from exc
    return Ledger(path, workspace=Path(workspace) if workspace is not None else None)
