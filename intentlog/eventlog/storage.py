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
  written) when the stream has moved on. It is durable when it returns.
- :meth:`~StreamStorage.read` from an offset returns exactly the stored bytes from there.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol

from .._fsutil import fsync_dir, makedirs_durable, write_all
from .._nofollow import check_own_file, check_real_dir, open_nofollow
from ..errors import Conflict, CorruptStream, LedgerError, UsageError
from .format import TASK_ID_RE, check_task_id
from .lock import WriterLock
from .reader import MAX_LINE, open_stream
from .writer import fdatasync

__all__ = ["FolderStreams", "StreamLease", "StreamStorage"]

SUFFIX = ".jsonl"
_CHUNK = 1 << 20


class StreamLease(Protocol):
    """The right to append to one stream, held until :meth:`release` (a context manager)."""

    @property
    def next_seq(self) -> int:
        """The seq the next appended record gets (the number of records in the stream)."""

    def append(self, records: Sequence[bytes], *, expected_seq: int) -> int:
        """Append ``records`` if the stream's next seq is ``expected_seq``; durable on return.

        Returns the new next seq. :class:`~intentlog.errors.Conflict` and nothing written
        when the stream has moved on; a record holding a newline is a ``UsageError``.
        """

    def release(self) -> None:
        """Give the lease up (idempotent)."""

    def __enter__(self) -> StreamLease: ...

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None: ...


class StreamStorage(Protocol):
    """Named append-only streams: create, lease (the writer lock), conditional append, read, list."""

    def create(self, name: str) -> None:
        """Make the empty stream ``name`` durably; ``LedgerError`` if it exists."""

    def lease(self, name: str, *, wait: float = 0.0) -> StreamLease:
        """The stream's writer lease, waiting up to ``wait`` s; ``TaskBusy`` if another holds it."""

    def read(self, name: str, offset: int = 0) -> bytes:
        """The stream's bytes from ``offset`` to its end (``FileNotFoundError`` if absent)."""

    def names(self) -> list[str]:
        """Every stream's name, sorted (names that are not task ids are not streams)."""


class FolderStreams:
    """Streams as ``DIR/NAME.jsonl`` files: O_APPEND + fdatasync appends, flock writer locks.

    Nothing here follows a link: a stream or lock file that is a link raises
    :class:`~intentlog.errors.LinkRefused`, a stream with a second name (a hard link) or
    that is not a regular file is refused before a byte is written.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(os.fspath(directory)).absolute()

    def __repr__(self) -> str:
        return f"FolderStreams({str(self.directory)!r})"

    def path(self, name: str) -> Path:
        """Where the stream ``name`` lives (a task id's rules apply to the name)."""
        return self.directory / f"{check_task_id(name)}{SUFFIX}"

    def create(self, name: str) -> None:
        path = self.path(name)
        if not check_real_dir(self.directory, what="task streams"):
            makedirs_durable(self.directory)
        try:
            fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, what="a task stream")
        except FileExistsError:
            raise LedgerError(f"{path}: the stream exists already; lease it to append") from None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.directory)

    def lease(self, name: str, *, wait: float = 0.0) -> FolderLease:
        path = self.path(name)
        if not check_real_dir(self.directory, what="task streams") or not os.path.lexists(path):
            raise FileNotFoundError(errno.ENOENT, "no such stream (create it first)", str(path))  # no lock file made
        lock = WriterLock(path.with_name(path.name + ".lock"), name)
        lock.acquire(wait)
        try:
            return FolderLease(name, path, lock)
        except BaseException:
            lock.release()
            raise

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


class FolderLease:
    """A held :class:`FolderStreams` writer lock and the stream's append descriptor."""

    def __init__(self, name: str, path: Path, lock: WriterLock) -> None:
        self.name = name
        self.path = path
        self._lock = lock
        fd = open_nofollow(path, os.O_RDWR | os.O_APPEND, what="a task stream")
        try:
            check_own_file(fd, path, what="a task stream")
            self._next = self._count(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        self._mutex = threading.RLock()  # threads sharing a lease append (and release) one at a time

    def _count(self, fd: int) -> int:
        """Records in the stream; a torn tail (no final newline) is the writer's to repair, not ours."""
        lines, pos, last = 0, 0, b"\n"
        while chunk := os.pread(fd, _CHUNK, pos):  # bounded memory whatever the stream's size
            lines += chunk.count(b"\n")
            pos += len(chunk)
            last = chunk[-1:]
        if last != b"\n":
            raise CorruptStream(str(self.path), lines + 1, "the stream ends in a torn line; repair it before appending")
        return lines

    @property
    def next_seq(self) -> int:
        return self._next

    def append(self, records: Sequence[bytes], *, expected_seq: int) -> int:
        if isinstance(expected_seq, bool) or not isinstance(expected_seq, int):
            raise UsageError(f"expected_seq must be an int, not {expected_seq!r}")
        for r in records:
            if not isinstance(r, bytes) or b"\n" in r:
                raise UsageError(f"a record is bytes without a newline, not {r[:40]!r}; nothing was written")
            if len(r) >= MAX_LINE:
                raise UsageError(f"a record of {len(r)} bytes is longer than a stream line may be ({MAX_LINE} bytes)")
        with self._mutex:
            return self._append_locked(records, expected_seq)

    def _append_locked(self, records: Sequence[bytes], expected_seq: int) -> int:
        if self._fd is None:
            raise LedgerError(f"{self.path}: the lease was released; lease the stream again to append")
        if expected_seq != self._next:
            raise Conflict(self.name, expected_seq, self._next)
        if records:
            try:
                write_all(self._fd, b"".join(r + b"\n" for r in records))
                fdatasync(self._fd)
            except OSError as exc:
                self.release()  # a part-written tail is the next writer's to repair: append no further here
                raise LedgerError(f"{self.path}: append failed: {exc.strerror or exc}; lease the stream again") from exc
            self._next += len(records)
        return self._next

    def release(self) -> None:
        with self._mutex:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._lock.release()

    def __enter__(self) -> FolderLease:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
