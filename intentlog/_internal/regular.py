"""Reading a regular file inside a ledger, read-only: never through a final link, never blocking on a FIFO.

Readers that must not reach writing code (the checker, the heads.json and gc.jsonl codecs)
share these few lines.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["O_READ_FLAGS", "NotRegular", "open_regular", "read_regular"]

O_READ_FLAGS: Final = (
    os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
)


class NotRegular(Exception):
    pass


def open_regular(path: Path) -> int:
    """A read-only descriptor of the regular file ``path``: never follows a final link, never blocks on a FIFO.

    Raises FileNotFoundError, :class:`NotRegular` (a link, a folder, a device), or OSError.
    """
    try:
        fd = os.open(path, O_READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular("a symbolic link") from exc
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular("not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path) -> bytes:
    """All bytes of a small regular file, read without following a link (see :func:`open_regular`)."""
    with os.fdopen(open_regular(path), "rb") as f:
        return f.read()
