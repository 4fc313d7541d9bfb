"""Streaming reads of a stored object that check its digest when reading reaches the end.

Guarantee: a reader of :class:`CheckedObjectIO` never gets the last bytes of an object
whose bytes do not match its name: the read that reaches the end raises
:class:`~intentlog.errors.DigestMismatch` instead (and every later read too).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .._internal.digest import DIGEST_PREFIX
from ..errors import ArtifactError, DigestMismatch
from .hashing import CHUNK_SIZE, hash_fd, hasher

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["CheckedObjectIO"]


class CheckedObjectIO(io.RawIOBase):
    """Raw reader over a store object that checks its digest when reading reaches the end."""

    def __init__(self, fd: int, *, digest: str, path: Path, size: int) -> None:
        super().__init__()
        self._fd = fd
        self._digest = digest
        self._path = path
        self._size = size
        self._pos = 0
        self._hashed = 0  # bytes [0, _hashed) went through the streaming hasher, in order
        self._hasher = hasher(size)
        self._checked = False
        self._error: DigestMismatch | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        self._pos = os.lseek(self._fd, offset, whence)
        return self._pos

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        if self._error is not None:
            raise self._error
        view = memoryview(buffer).cast("B")
        start = self._pos
        try:
            n = os.readv(self._fd, [view])
        except OSError as exc:
            raise ArtifactError(
                f"reading {self._path} ({self._digest}) failed at byte {start}: {(exc.strerror or type(exc).__name__)}"
            ) from exc
        end = start + n
        if start <= self._hashed < end:
            self._hasher.update(view[self._hashed - start : n])
            self._hashed = end
        self._pos = end
        if not self._checked and (n == 0 or end >= self._size):
            self._check(eof=end)
        return n

    def readall(self) -> bytes:
        remaining = max(self._size - self._pos, 0)
        buf = bytearray(remaining)
        view = memoryview(buf)
        filled = 0
        while filled < remaining:
            n = self.readinto(view[filled:])
            if not n:
                break
            filled += n
        view.release()
        del buf[filled:]
        tail = bytearray(CHUNK_SIZE)
        while n := self.readinto(tail):  # a file that grew: read it all, as readall promises
            buf += tail[:n]
        return bytes(buf)

    def _check(self, *, eof: int) -> None:
        self._checked = True
        if self._hashed == eof:
            actual = DIGEST_PREFIX + self._hasher.hexdigest()
        else:  # read out of order: hash the object again, from the start
            actual = hash_fd(self._fd, os.fstat(self._fd).st_size)
        if actual != self._digest:
            self._error = DigestMismatch(self._digest, actual, str(self._path))
            raise self._error

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()

