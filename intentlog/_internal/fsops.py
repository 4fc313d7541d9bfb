"""The file-system calls that change or sync a ledger's files, in one place.

The folder implementations of the storage seams (``eventlog/storage.py``, the artifact
store) and the atomic-write helpers (``_fsutil``) make every call that creates, writes,
syncs, links, renames, truncates or removes a file through this module, looked up at
call time (``fsops.write(...)``, never ``from ._fsops import write``). In production each
function is the ``os`` call of the same name, nothing more; a test can wrap them all to
record, in order, what reached the disk and what was made durable (tests/crashsim, the
crash-state explorer, docs/streams.md "Power loss").

``open`` is here too: a recorder needs to know which file a descriptor names.
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = [
    "close",
    "fchmod",
    "fdatasync",
    "fsync",
    "ftruncate",
    "link",
    "mkdir",
    "open",
    "pwrite",
    "rename",
    "replace",
    "unlink",
    "write",
]

_FDATASYNC: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


def open(path: str | os.PathLike[str], flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
    return os.open(path, flags, mode, dir_fd=dir_fd)


def close(fd: int) -> None:
    os.close(fd)


def write(fd: int, data: bytes | memoryview) -> int:
    return os.write(fd, data)


def pwrite(fd: int, data: bytes, offset: int) -> int:
    return os.pwrite(fd, data, offset)


def fsync(fd: int) -> None:
    os.fsync(fd)


def fdatasync(fd: int) -> None:
    """``fdatasync`` where the platform has it, else ``fsync``."""
    _FDATASYNC(fd)


def ftruncate(fd: int, length: int) -> None:
    os.ftruncate(fd, length)


def fchmod(fd: int, mode: int) -> None:
    os.fchmod(fd, mode)


def link(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    src_dir_fd: int | None = None,
    dst_dir_fd: int | None = None,
    follow_symlinks: bool = False,
) -> None:
    os.link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=follow_symlinks)


def rename(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    src_dir_fd: int | None = None,
    dst_dir_fd: int | None = None,
) -> None:
    os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, dst_dir_fd: int | None = None) -> None:
    os.replace(src, dst, dst_dir_fd=dst_dir_fd)


def unlink(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> None:
    os.unlink(path, dir_fd=dir_fd)


def mkdir(path: str | os.PathLike[str], mode: int = 0o777) -> None:
    os.mkdir(path, mode)
