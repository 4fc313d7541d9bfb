"""One writer per task (DESIGN §4 rule 5): an exclusive ``flock`` held for a handle's life.

``flock`` is released by the kernel when the process dies, so a ``SIGKILL`` never leaves
a stale lock (a soft lock file would lock everyone out). The lock file is opened with
``O_NOFOLLOW``: a lock file that is a symbolic link is refused with
:class:`~intentlog.errors.LinkRefused`, never followed. The holder writes its pid into
the lock file so that a refused writer can say who holds it.

A lock knows the pid that took it. A forked child shares the parent's open file
description, so it must never unlock it: :meth:`WriterLock.release` in another process
only closes its copy of the descriptor (the parent keeps the lock).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from .._internal.fsutil import check_own_file, open_nofollow
from ..errors import LedgerError, LinkRefused, TaskBusy

__all__ = ["WriterLock"]

_POLL = 0.01  # seconds between tries while waiting for another writer


class WriterLock:
    def __init__(self, path: Path, task_id: str) -> None:
        self.path = path
        self.task_id = task_id
        self._fd: int | None = None
        self._pid = 0
        self._ident: tuple[int, int] = (-1, -1)  # (device, inode) of the file locked

    @property
    def held(self) -> bool:
        return self._fd is not None and self._pid == os.getpid()

    @property
    def fd(self) -> int | None:
        """The descriptor this process locked through (None unless :attr:`held`): the kernel can be asked about it."""
        return self._fd if self.held else None

    def acquire(self, wait: float, *, dir_fd: int | None = None) -> None:
        """Take the lock, waiting up to ``wait`` seconds, else raise :class:`TaskBusy`.

        Raises :class:`~intentlog.errors.LinkRefused` when the lock file is a link and
        :class:`~intentlog.errors.LedgerError` when it cannot be created or opened (a
        read-only ledger, a full disk); nothing is written then. With ``dir_fd`` (a
        descriptor on the lock's folder) the file is opened inside that folder.
        """
        if self._fd is not None:
            if self._pid == os.getpid():
                return
            self.abandon()
        deadline = time.monotonic() + wait
        while True:
            fd = self._open(dir_fd)
            try:
                check_own_file(fd, self.path, what="a task's lock file")  # it is rewritten in place below
                self._flock(fd, max(0.0, deadline - time.monotonic()))
                locked_the_file_at_path = self._at_path(fd, dir_fd)
                if locked_the_file_at_path:
                    pid = f"{os.getpid()}\n".encode()
                    # write first, then cut: a refused writer never reads an empty file in between
                    os.pwrite(fd, pid, 0)
                    os.ftruncate(fd, len(pid))
            except LedgerError:
                os.close(fd)
                raise
            except OSError as exc:
                os.close(fd)
                raise LedgerError(_cannot(self.path, exc)) from exc
            except BaseException:
                os.close(fd)
                raise
            if locked_the_file_at_path:
                break
            # the file was unlinked while this waited for it (gc deletes a task's lock file with its
            # stream, holding it): its flock excludes no one, so lock the file at the path now
            os.close(fd)
        st = os.fstat(fd)
        self._fd, self._pid, self._ident = fd, os.getpid(), (st.st_dev, st.st_ino)

    def _open(self, dir_fd: int | None) -> int:
        try:
            name = self.path.name if dir_fd is not None else self.path
            return open_nofollow(name, os.O_RDWR | os.O_CREAT, 0o644, what="a task's lock file", dir_fd=dir_fd)
        except LinkRefused:
            raise LinkRefused(str(self.path), "a task's lock file") from None
        except OSError as exc:
            raise LedgerError(_cannot(self.path, exc)) from exc

    def _at_path(self, fd: int, dir_fd: int | None) -> bool:
        """Whether the file locked through ``fd`` is still the one at this lock's path."""
        name = self.path.name if dir_fd is not None else self.path
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        st = os.fstat(fd)
        return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)

    def _flock(self, fd: int, wait: float) -> None:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise TaskBusy(self.task_id, str(self.path), self._holder(fd))
            time.sleep(min(_POLL, left))

    def _holder(self, fd: int) -> int | None:
        for _ in range(5):
            try:
                first = os.pread(fd, 32, 0).split(b"\n", 1)[0].strip()
                if first:
                    return int(first)
            except (OSError, ValueError):
                return None
            time.sleep(0.01)
        return None

    def is_current(self, *, dir_fd: int | None = None) -> bool:
        """Whether the file at this lock's path is still the file this lock holds.

        False once the lock file was removed or replaced (a cleanup of ``*.lock`` files, a
        restore): the ``flock`` then excludes no one, since another writer locks the new
        file. A writer asks before each sync, so it never makes a record durable -- and so
        never reaches a send -- on a lock that no longer excludes.
        """
        if self._fd is None:
            return False
        try:
            name = self.path.name if dir_fd is not None else self.path
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return False
        return (now.st_dev, now.st_ino) == self._ident  # an inode held open is never reused

    def abandon(self) -> None:
        """Close this process's descriptor without unlocking (a forked child's inherited copy)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def release(self) -> None:
        """Unlock and close; in a process that did not take the lock, only close (see the module doc)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._pid == os.getpid():
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _cannot(path: Path, exc: OSError) -> str:
    why = exc.strerror or type(exc).__name__
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        nxt = "the ledger is read-only here: reading (status, log, verify) works; write from a writable copy"
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        nxt = "free some space and try again"
    else:
        nxt = "check the ledger folder and try again"
    return f"cannot take the writer lock {path}: {why}; nothing was written; {nxt}"
