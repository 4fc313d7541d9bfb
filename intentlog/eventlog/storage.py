"""The stream seam: what the event layer needs from the place that keeps its streams.

A stream is a named, append-only sequence of records (one line each, the newline added by
the storage). :class:`StreamStorage` is the contract every place that keeps streams
honours; :class:`FolderStreams` is today's one, a folder of ``NAME.jsonl`` files beside
their ``NAME.jsonl.lock``. The contract is written once as a test suite
(tests/test_storage_contract.py) that every implementation must pass; an object-store
implementation (conditional puts for the append, a lease object for the lock) only has
to pass it too.

Guarantees every implementation gives:

- ``create`` makes an empty stream durably, and refuses a name that exists.
- Only the holder of a stream's :meth:`~StreamStorage.lease` appends; a second lease is
  refused with :class:`~intentlog.errors.TaskBusy` while the first is held.
- :meth:`StreamLease.append` is conditional: it carries the seq the caller expects the
  next record to get and is refused with :class:`~intentlog.errors.Conflict` (nothing
  written) when the stream has moved on. It is durable when it returns -- unless it is
  given ``sync=False`` (group commit): the records are then counted at once and readable
  through the storage that granted the lease (other handles may see them now, as on a
  folder, or only once synced, as on an object store, which puts the group as one
  segment), and made durable by the lease's next :meth:`~StreamLease.sync` or synced
  append, all of them with one sync. A crash before it may lose them (and only them).
- ``lease(name, create=record)`` leases a stream, creating it first (atomically: it
  appears holding ``record`` or not at all, durably) when it does not exist.
- :meth:`~StreamStorage.read` from an offset returns exactly the stored bytes from there.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Protocol

from .._internal import fsops
from .._internal.fsutil import drop_dead_temp_names, fsync_dir, makedirs_durable, publish_bytes, write_all
from .._internal.nofollow import check_own_file, check_real_dir, open_dir_nofollow, open_nofollow
from ..errors import Conflict, CorruptStream, LedgerError, LinkRefused, UsageError
from .format import TASK_ID_RE, check_task_id
from .lock import WriterLock
from .reader import MAX_LINE, open_stream

__all__ = [
    "DEFAULT_TAKE_OVER_AFTER",
    "NO_STREAM",
    "file_stamp",
    "FolderLease",
    "FolderStreams",
    "StreamIO",
    "StreamLease",
    "StreamStorage",
    "ledger_os_error",
]

#: Seconds a task's stream on a storage whose leases outlive their holder (an object store)
#: must stand still -- no append, no heartbeat, as watched on the taker's own monotonic
#: clock -- before a writer opening the task takes the lease over. A live holder beats far
#: more often (every 10 s), so only a holder that died (or is stopped) is ever taken.
DEFAULT_TAKE_OVER_AFTER = 120.0

SUFFIX = ".jsonl"
_CHUNK = 1 << 20
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


#: The stamp of a stream that does not exist (:meth:`StreamStorage.stamps`).
NO_STREAM: Final = "-"


def file_stamp(size: int, ino: int, dev: int, mtime_ns: int, ctime_ns: int) -> str:
    """A folder stream's stamp (:meth:`StreamStorage.stamps`) from its file's facts.

    The change time is in because ``os.utime`` (or ``cp -p``) can put an edited file's
    mtime back; nothing can set its ctime.
    """
    return f"f{size}.{ino}.{dev}.{mtime_ns}.{ctime_ns}"


class StreamLease(Protocol):
    """The right to append to one stream, held until :meth:`release` (a context manager)."""

    @property
    def next_seq(self) -> int:
        """The seq the next appended record gets (the number of records in the stream)."""

    def append(self, records: Sequence[bytes], *, expected_seq: int, sync: bool = True) -> int:
        """Append ``records`` if the stream's next seq is ``expected_seq``; durable on return.

        Returns the new next seq. :class:`~intentlog.errors.Conflict` and nothing written
        when the stream has moved on; a record holding a newline is a ``UsageError``.
        With ``sync=False`` the records are counted now, readable through this storage,
        and made durable by the next :meth:`sync` (or synced append): one sync for a whole
        group (a failed one may be reported there rather than here). A failed write or
        sync is a :class:`~intentlog.errors.LedgerError`, and the lease appends nothing
        more (what reached the storage is unknown: lease the stream again).
        """

    def append_line(self, line: bytes, *, expected_seq: int, sync: bool = True) -> int:
        """:meth:`append` of one record given as a line already ending in its newline."""

    @property
    def dirty(self) -> bool:
        """Whether records were appended that no sync made durable yet (a sync then has something to do)."""

    def sync(self) -> None:
        """Make every record appended through this lease durable (nothing to do: no cost)."""

    def release(self) -> None:
        """Give the lease up (idempotent); records appended with ``sync=False`` stay appended, not synced."""

    @property
    def left_stamp(self) -> str | None:
        """Once released: the stream's stamp (:meth:`StreamStorage.stamps`) as this lease left it, when the lease
        knows it with no request (a store's, whose release is a segment); None otherwise (a folder's writer makes
        it from its own check)."""

    def abandon(self) -> None:
        """In a forked child: drop the parent's lease, neither releasing it nor writing through it."""

    def renew_mutex(self) -> None:
        """In a forked child: replace the locks another thread of the parent may have held at the fork."""

    def __enter__(self) -> StreamLease: ...

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None: ...


class StreamStorage(Protocol):
    """Named append-only streams: create, lease (the writer lock), conditional append, read, list."""

    def create(self, name: str, records: Sequence[bytes] = ()) -> None:
        """Make the stream ``name`` holding ``records`` atomically and durably; ``LedgerError`` if it exists."""

    def lease(
        self,
        name: str,
        *,
        wait: float = 0.0,
        create: Callable[[], bytes] | None = None,
        take_over_after: float | None = None,
    ) -> StreamLease:
        """The stream's writer lease, waiting up to ``wait`` s; ``TaskBusy`` if another holds it.

        A missing stream is ``FileNotFoundError`` -- unless ``create`` is given: it is then
        called under the lease and the stream created holding the one record it returns
        (atomically: no reader sees it empty; whatever it raises propagates).
        ``take_over_after``: where a lease can outlive its holder (an object store), it is
        taken from a holder whose stream stood still that many seconds on this process's
        monotonic clock (None: never); a folder's lock dies with its holder: no effect.
        """

    def read(self, name: str, offset: int = 0) -> bytes:
        """The stream's bytes from ``offset`` to its end (``FileNotFoundError`` if absent)."""

    def names(self) -> list[str]:
        """Every stream's name, sorted (names that are not task ids are not streams)."""

    def stamps(self, names: Sequence[str]) -> dict[str, str | None]:
        """Per stream, a short text naming its stored bytes as the storage shows them now, none read.

        Equal stamps mean the stream is as it was (a folder: its file's size, inode, device,
        mtime and ctime; a store: its segments' numbers, sizes and ETags, one listing). For
        derived caches to be matched against, never a proof against anyone who can write
        the storage. :data:`NO_STREAM` for a stream that does not exist; None for one that
        is not a regular file (a link), or a storage that cannot tell (a store whose client
        gives no ETags).
        """


class StreamIO(Protocol):
    """How a folder lease writes and syncs its descriptor (the stream writer passes its own)."""

    def write(self, fd: int, data: bytes) -> None: ...

    def sync(self, fd: int) -> None: ...


class _FolderIO:
    """The default: every byte written (:func:`write_all`), then ``fdatasync``; looked up per call."""

    def write(self, fd: int, data: bytes) -> None:
        write_all(fd, data)

    def sync(self, fd: int) -> None:
        fsops.fdatasync(fd)


def ledger_os_error(path: Path, doing: str, exc: OSError) -> LedgerError:
    """A failed system call on a stream as a library error: what, where, and what to do next."""
    why = exc.strerror or type(exc).__name__
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        nxt = "free some space and open the task again (the stream keeps only whole lines)"
    elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        nxt = "the ledger is not writable here; reading works, write from a writable copy"
    else:
        nxt = "check the ledger folder and open the task again"
    return LedgerError(f"{path}: {doing} failed: {why}; {nxt}")


class FolderStreams:
    """Streams as ``DIR/NAME.jsonl`` files: O_APPEND + fdatasync appends, flock writer locks.

    Nothing here follows a link: a stream or lock file that is a link raises
    :class:`~intentlog.errors.LinkRefused`, a stream with a second name (a hard link) or
    that is not a regular file is refused before a byte is written. The lock, the stream
    and a created stream's name are all reached through one descriptor on ``DIR``, so a
    folder swapped for a link after a check is never the one written.

    ``tmp_dir`` is where a stream created with a first record is staged (``DIR`` itself
    when not given); ``in_root`` says ``DIR`` is the ledger folder itself, which may be a
    link (``gc.jsonl``); ``io`` replaces the write and sync calls (see :class:`StreamIO`).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        tmp_dir: str | os.PathLike[str] | None = None,
        in_root: bool = False,
        io: StreamIO | None = None,
    ) -> None:
        self.directory = Path(os.fspath(directory)).absolute()
        self.tmp_dir = Path(os.fspath(tmp_dir)).absolute() if tmp_dir is not None else self.directory
        self.in_root = in_root
        self.io: StreamIO = io if io is not None else _FolderIO()

    def __repr__(self) -> str:
        return f"FolderStreams({str(self.directory)!r})"

    def path(self, name: str) -> Path:
        """Where the stream ``name`` lives (a task id's rules apply to the name)."""
        return self.directory / f"{check_task_id(name)}{SUFFIX}"

    def create(self, name: str, records: Sequence[bytes] = ()) -> None:
        path = self.path(name)
        data = _joined(records)
        if not check_real_dir(self.directory, what="task streams"):
            makedirs_durable(self.directory)
        if data:
            if self.tmp_dir != self.directory:
                makedirs_durable(self.tmp_dir)  # a git clone drops an empty staging folder
            if not publish_bytes(data, path, tmp_dir=self.tmp_dir, mode=0o644):
                raise LedgerError(f"{path}: the stream exists already; lease it to append")
            return
        try:
            fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, what="a task stream")
        except FileExistsError:
            raise LedgerError(f"{path}: the stream exists already; lease it to append") from None
        try:
            fsops.fsync(fd)
        finally:
            fsops.close(fd)
        fsync_dir(self.directory)

    def _open_dir(self) -> int:
        """A descriptor on ``DIR``: every name below is given inside it."""
        if self.in_root:
            return os.open(self.directory, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        return open_dir_nofollow(self.directory, what="task streams")

    def lease(
        self,
        name: str,
        *,
        wait: float = 0.0,
        create: Callable[[], bytes] | None = None,
        take_over_after: float | None = None,
        repair: bool = False,
    ) -> FolderLease:
        """See :meth:`StreamStorage.lease` (``take_over_after`` has nothing to do: the flock dies
        with its holder, so no lock outlives a process). Folder only: ``repair=True`` grants the lease on a
        torn tail too, leaving the counting to the caller (the stream writer, which scans
        every record, repairs the tail and then calls :meth:`FolderLease.adopt`)."""
        path = self.path(name)
        try:
            if not self.in_root:
                check_real_dir(self.directory, what="task streams")
            dir_fd = self._open_dir()
        except FileNotFoundError:
            if create is None:
                raise FileNotFoundError(errno.ENOENT, "no such stream (create it first)", str(path)) from None
            missing = OSError(errno.ENOENT, "no such folder")
            raise ledger_os_error(path, "checking the ledger's folders", missing) from None
        except LinkRefused:
            raise
        except OSError as exc:
            raise ledger_os_error(path, "checking the ledger's folders", exc) from exc
        try:
            if create is None and not self._exists(path, dir_fd):
                # refused before the lock: no lock file made
                raise FileNotFoundError(errno.ENOENT, "no such stream (create it first)", str(path))
            lock = WriterLock(path.with_name(path.name + ".lock"), name)
            lock.acquire(wait, dir_fd=dir_fd)
            try:
                return self._leased(path, name, lock, dir_fd, create, repair)
            except BaseException:
                lock.release()
                raise
        except BaseException:
            os.close(dir_fd)
            raise

    def _leased(
        self, path: Path, name: str, lock: WriterLock, dir_fd: int, create: Callable[[], bytes] | None, repair: bool
    ) -> FolderLease:
        if not self._exists(path, dir_fd):
            if create is None:
                raise FileNotFoundError(errno.ENOENT, "no such stream (it was removed)", str(path))
            record = create()
            try:
                publish_bytes(_joined([record]), path, tmp_dir=self.tmp_dir, mode=0o644, dir_fd=dir_fd)
            except OSError as exc:
                raise ledger_os_error(path, "creating the stream", exc) from exc
            self._exists(path, dir_fd)  # a link that appeared meanwhile is refused, never scanned
        # one descriptor for everything after: the file checked is the file scanned,
        # repaired and appended to, whatever is renamed in meanwhile
        try:
            try:
                fd = open_nofollow(path.name, os.O_RDWR | os.O_APPEND, what="a task stream", dir_fd=dir_fd)
            except LinkRefused:
                raise LinkRefused(str(path), "a task stream") from None
            try:
                if self.tmp_dir != self.directory:  # a crash's leftover second name is removed, not refused
                    drop_dead_temp_names(fd, path.name, self.tmp_dir)
                check_own_file(fd, path, what="a task stream")
                next_seq = -1 if repair else _count(fd, path)
            except BaseException:
                os.close(fd)
                raise
        except OSError as exc:
            raise ledger_os_error(path, "opening the stream for appending", exc) from exc
        return FolderLease(name, path, lock, fd, dir_fd, self.io, next_seq)

    @staticmethod
    def _exists(path: Path, dir_fd: int) -> bool:
        try:
            st = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(st.st_mode):
            raise LinkRefused(str(path), "a task stream")
        return True

    def read(self, name: str, offset: int = 0) -> bytes:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise UsageError(f"offset must be an int >= 0, not {offset!r}")
        with open_stream(self.path(name)) as f:
            f.seek(offset)
            return f.read()

    def names(self) -> list[str]:
        try:
            entries = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        ids = (n[: -len(SUFFIX)] for n in entries if n.endswith(SUFFIX))
        return sorted(i for i in ids if TASK_ID_RE.match(i))  # a stray file is verify's to report

    def stamps(self, names: Sequence[str]) -> dict[str, str | None]:
        """See :meth:`StreamStorage.stamps`: one ``stat`` per stream inside the folder, never through a link."""
        out: dict[str, str | None] = dict.fromkeys(names)
        if not names:
            return out
        try:
            if not self.in_root:
                check_real_dir(self.directory, what="task streams")
            dfd = self._open_dir()
        except FileNotFoundError:
            return dict.fromkeys(names, NO_STREAM)  # no folder yet: no stream
        except OSError as exc:
            raise ledger_os_error(self.directory, "reading the streams' facts", exc) from exc
        try:
            for name in names:
                try:
                    st = os.stat(check_task_id(name) + SUFFIX, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    out[name] = NO_STREAM
                    continue
                if stat.S_ISREG(st.st_mode):
                    out[name] = file_stamp(st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns)
        finally:
            os.close(dfd)
        return out


def _joined(records: Sequence[bytes]) -> bytes:
    """The records as stored lines; a record that is not one line of bytes is refused (nothing written)."""
    for r in records:
        if not isinstance(r, bytes) or b"\n" in r:
            raise UsageError(f"a record is bytes without a newline, not {r[:40]!r}; nothing was written")
        if len(r) >= MAX_LINE:
            raise UsageError(f"a record of {len(r)} bytes is longer than a stream line may be ({MAX_LINE} bytes)")
    if len(records) == 1:
        return records[0] + b"\n"
    return b"".join(r + b"\n" for r in records)


def _count(fd: int, path: Path) -> int:
    """Records in the stream; a torn tail (no final newline) is the writer's to repair, not a lease's."""
    lines, pos, last = 0, 0, b"\n"
    while chunk := os.pread(fd, _CHUNK, pos):  # bounded memory whatever the stream's size
        lines += chunk.count(b"\n")
        pos += len(chunk)
        last = chunk[-1:]
    if last != b"\n":
        raise CorruptStream(str(path), lines + 1, "the stream ends in a torn line; repair it before appending")
    return lines


class FolderLease:
    """A held :class:`FolderStreams` writer lock and the stream's append descriptor.

    Threads sharing a lease append (and release) one at a time. Records appended with
    ``sync=False`` are on the descriptor at once and durable at the next sync.
    """

    def __init__(
        self, name: str, path: Path, lock: WriterLock, fd: int, dir_fd: int, io: StreamIO, next_seq: int
    ) -> None:
        self.name = name
        self.path = path
        self._lock = lock
        self._io = io
        self._fd: int | None = fd
        self._dir_fd: int | None = dir_fd
        self._dirty = False
        self._broken: str | None = None
        self._mutex = threading.RLock()
        self._next = next_seq
        st, folder = os.fstat(fd), os.fstat(dir_fd)
        #: the file this lease appends to, and the folder it reached it through: an inode held open is never reused
        self._ident, self._folder = (st.st_dev, st.st_ino), (folder.st_dev, folder.st_ino)

    # -- what the folder's stream writer needs besides the contract ---------------------

    @property
    def fd(self) -> int:
        """The stream's descriptor (read-write, O_APPEND), for the writer's scan and repair."""
        if self._fd is None:
            raise LedgerError(f"{self.path}: the lease was released; lease the stream again")
        return self._fd

    @property
    def dir_fd(self) -> int | None:
        """The descriptor on the stream's folder the lease reached it through."""
        return self._dir_fd

    @property
    def lock_fd(self) -> int | None:
        """The descriptor holding the writer lock, in the process that took it (None elsewhere, or released)."""
        return self._lock.fd

    def adopt(self, next_seq: int) -> None:
        """Set the record count found by a caller that scanned the stream (``lease(repair=True)``)."""
        with self._mutex:
            self._next = next_seq

    def truncate(self, offset: int) -> None:
        """Cut the stream back to ``offset`` bytes, durably (a repair, after the cut bytes were kept aside)."""
        with self._mutex:
            fsops.ftruncate(self.fd, offset)
            fsops.fsync(self.fd)
            self._dirty = False

    @property
    def dirty(self) -> bool:
        """Whether records were appended that no sync covers yet."""
        return self._dirty

    # -- the contract -------------------------------------------------------------------

    @property
    def next_seq(self) -> int:
        return self._next

    def append(self, records: Sequence[bytes], *, expected_seq: int, sync: bool = True) -> int:
        if isinstance(expected_seq, bool) or not isinstance(expected_seq, int):
            raise UsageError(f"expected_seq must be an int, not {expected_seq!r}")
        data = _joined(records)
        with self._mutex:
            if self._fd is None:
                raise LedgerError(f"{self.path}: the lease was released; lease the stream again to append")
            if self._broken is not None:
                raise LedgerError(f"{self.path}: an earlier append failed ({self._broken}); lease the stream again")
            if expected_seq != self._next:
                raise Conflict(self.name, expected_seq, self._next)
            if not data:
                return self._next
            return self._write_locked(self._fd, data, len(records), sync)

    def append_line(self, line: bytes, *, expected_seq: int, sync: bool = True) -> int:
        """:meth:`append` of one record already ending in its newline (the writer's encoded line; no copy)."""
        if line.find(b"\n") != len(line) - 1 or len(line) > MAX_LINE:
            return self.append([line[:-1]] if line.endswith(b"\n") else [line], expected_seq=expected_seq, sync=sync)
        with self._mutex:
            if self._fd is None or self._broken is not None or expected_seq != self._next:
                return self.append([line[:-1]], expected_seq=expected_seq, sync=sync)  # refused there, as it says
            return self._write_locked(self._fd, line, 1, sync)

    def _write_locked(self, fd: int, data: bytes, count: int, sync: bool) -> int:
        """Write ``count`` whole records (``data``), syncing when asked; the new next seq. Holds the mutex."""
        if not self._dirty:
            self._check_lock()  # a group's first write: a lease that stopped excluding writes nothing
        try:
            self._io.write(fd, data)
            self._dirty = True
            if sync:
                self._check_lock()
                self._io.sync(fd)
                self._dirty = False
                self._check_lock()  # replaced while it synced: the caller must not act on this record
        except OSError as exc:
            raise self._fail(exc) from exc
        self._next += count
        return self._next

    def _check_lock(self) -> None:
        """Refuse to write or sync once the lock file is not the one this lease locked, or the stream file not its own.

        Asked before a group's first write (so a lease that stopped excluding others
        writes nothing into a stream another holder now appends to) and again after the
        write, before the sync: a writer that took a new lock file before this write is
        seen there, one that takes it after reads this line when it opens. Either way no
        two holders both make a record durable as theirs, so no two both reach a send. A
        stream file renamed over or removed (a restore, a checkout) is refused the same way:
        what this lease appended after it would be in a file no reader opens.
        """
        if not self._lock.is_current(dir_fd=self._dir_fd):
            self._broken = "the lock file was removed or replaced"
            raise LedgerError(
                f"{self._lock.path}: the task's lock file was removed or replaced while this writer held it, "
                "so another process may be writing the stream; nothing more is made durable through this "
                "writer: open the task again (and never delete *.lock files of a live ledger)"
            )
        if not self._is_current():
            self._broken = "the stream file was removed or replaced"
            raise LedgerError(
                f"{self.path}: the task's stream file was removed or replaced while this writer held it "
                "(a restore, a checkout, a copy renamed over it), so what it appends no reader would find; "
                "nothing more is written through this writer and the file at the path is left as it is: "
                "open the task again to go on from that file"
            )

    def _is_current(self) -> bool:
        """Whether the file at the stream's path is still the one this lease appends to, in the folder at its path."""
        try:
            now = os.stat(self.path.name if self._dir_fd is not None else self.path, dir_fd=self._dir_fd,
                          follow_symlinks=False)  # fmt: skip
            if self._dir_fd is not None:  # ``tasks/`` itself moved aside and another put in its place (a restore)
                there = os.stat(self.path.parent)  # followed: a ledger's root may be reached through a link
                if (there.st_dev, there.st_ino) != self._folder:
                    return False
        except OSError:
            return False
        return (now.st_dev, now.st_ino) == self._ident

    def sync(self) -> None:
        with self._mutex:
            if self._fd is None or not self._dirty:
                return
            if self._broken is not None:
                raise LedgerError(f"{self.path}: an earlier append failed ({self._broken}); lease the stream again")
            self._check_lock()
            try:
                self._io.sync(self._fd)
            except OSError as exc:
                raise self._fail(exc) from exc
            self._dirty = False
            self._check_lock()  # replaced while it synced: the caller must not act on what it synced

    def _fail(self, exc: OSError) -> LedgerError:
        """A part-written tail is the next writer's to repair: this lease appends no further."""
        self._broken = f"{type(exc).__name__}: {exc}"
        return LedgerError(f"{self.path}: append failed: {exc.strerror or exc}; lease the stream again")

    @property
    def left_stamp(self) -> None:
        """A folder's lease makes none: its writer does, from what it checked and appended."""
        return None

    def abandon(self) -> None:
        """In a forked child: close the inherited descriptors, leaving the parent's lock alone."""
        with self._mutex:
            self._close_fds()
            self._lock.abandon()

    def _close_fds(self) -> None:
        fd, self._fd = self._fd, None
        dir_fd, self._dir_fd = self._dir_fd, None
        for f in (fd, dir_fd):
            if f is not None:
                os.close(f)

    def release(self) -> None:
        with self._mutex:
            self._close_fds()
            self._lock.release()

    def renew_mutex(self) -> None:
        """After a fork, in the child: a thread lock held at fork time stays held forever there."""
        self._mutex = threading.RLock()

    def __enter__(self) -> FolderLease:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
