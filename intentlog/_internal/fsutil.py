"""The one atomic-write helper and its directory fsyncs (DESIGN §4 rules 1 and 3).

Besides the ``O_APPEND`` stream storage, this is the only place that opens files for
writing; every call that changes or syncs a file goes through :mod:`intentlog._internal.fsops`
(re-exported here as ``fsops``, for the artifact store). A file published here is
complete and durable when the call returns: its bytes were fsynced before it got its
name, and the directory entry was fsynced after.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from . import fsops
from .nofollow import O_NOFOLLOW, check_own_file, check_real_dir, open_dir_nofollow, open_nofollow, real_dirs
from .procs import pid_alive

__all__ = [
    "fsops",
    "O_NOFOLLOW",
    "check_own_file",
    "check_real_dir",
    "drop_dead_temp_names",
    "open_dir_nofollow",
    "fsync_dir",
    "makedirs_durable",
    "open_nofollow",
    "publish_bytes",
    "publish_chunks",
    "real_dirs",
    "write_all",
]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (a new or renamed file) durable."""
    fd = fsops.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsops.fsync(fd)
    finally:
        fsops.close(fd)


def makedirs_durable(path: str | os.PathLike[str]) -> bool:
    """Create ``path`` and any missing parents, fsyncing each parent that gained an entry.

    Returns True when something was created.
    """
    p = Path(path)
    missing: list[Path] = []
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            fsops.mkdir(d)
        except FileExistsError:
            continue
        fsync_dir(d.parent)
    return bool(missing)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte, looping on short writes."""
    view = memoryview(data)
    while view:
        n = fsops.write(fd, view)
        view = view[n:]


def _temp_path(tmp_dir: Path, stem: str) -> Path:
    return tmp_dir / f".{stem}.{os.getpid()}.{os.urandom(6).hex()}.tmp"


#: A temp file of :func:`publish_chunks`: ``.<name>.<pid>.<12 hex>.tmp``.
_TEMP_RE = re.compile(r"\.(.+)\.(\d+)\.[0-9a-f]{12}\.tmp\Z")


def drop_dead_temp_names(fd: int, name: str, tmp_dir: str | os.PathLike[str]) -> int:
    """Remove the temp names a dead publisher left on the file ``fd`` (published as ``name``); how many.

    :func:`publish_chunks` links its fsynced temp file to the real name, then unlinks the
    temp: a kill between the two, or a power cut before ``tmp/`` was synced after the
    unlink, leaves the published file with a second name in ``tmp_dir``. Only names of
    this shape (``.<name>.<pid>.<hex>.tmp``), of a dead pid, on the very same inode, are
    removed (then ``tmp_dir`` is fsynced); anything else is left for the caller to refuse.
    """
    st = os.fstat(fd)
    if st.st_nlink < 2:
        return 0
    removed = 0
    try:
        entries = list(os.scandir(tmp_dir))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for e in entries:
        m = _TEMP_RE.match(e.name)
        if m is None or m.group(1) != name or pid_alive(int(m.group(2))):
            continue
        try:
            other = e.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(other.st_mode) and (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            try:
                fsops.unlink(e.path)
            except FileNotFoundError:
                continue
            removed += 1
    if removed:
        fsync_dir(tmp_dir)
    return removed


def publish_chunks(
    chunks: Iterable[bytes],
    dest: str | os.PathLike[str],
    *,
    tmp_dir: str | os.PathLike[str],
    replace: bool = False,
    mode: int = 0o444,
    dir_fd: int | None = None,
) -> bool:
    """Write ``chunks`` to a temp file, fsync it, give it its name, fsync the directory.

    With ``replace=False`` the name is given by ``os.link``, which never overwrites: if
    ``dest`` already exists the temp file is removed and False is returned (the caller
    decides whether the existing file is acceptable). With ``replace=True`` ``os.replace``
    swaps it in. The temp file is removed on any error. With ``dir_fd`` (a descriptor on
    the destination folder) the name is given inside that folder, whatever is renamed in
    meanwhile, and that descriptor is fsynced.
    """
    dest = Path(dest)
    tmp = _temp_path(Path(tmp_dir), dest.name)
    fd = fsops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            for chunk in chunks:
                write_all(fd, chunk)
            fsops.fchmod(fd, mode)
            fsops.fsync(fd)
        finally:
            fsops.close(fd)
        target: str | Path = dest.name if dir_fd is not None else dest
        if replace:
            fsops.replace(tmp, target, dst_dir_fd=dir_fd)
            created = True
        else:
            try:
                fsops.link(tmp, target, dst_dir_fd=dir_fd, follow_symlinks=False)
                created = True
            except FileExistsError:
                created = False
            fsops.unlink(tmp)
        if created:
            if dir_fd is not None:
                fsops.fsync(dir_fd)
            else:
                fsync_dir(dest.parent)
        return created
    except BaseException:
        try:
            fsops.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def publish_bytes(
    data: bytes,
    dest: str | os.PathLike[str],
    *,
    tmp_dir: str | os.PathLike[str],
    replace: bool = False,
    mode: int = 0o444,
    dir_fd: int | None = None,
) -> bool:
    """:func:`publish_chunks` for one bytes object."""
    return publish_chunks((data,), dest, tmp_dir=tmp_dir, replace=replace, mode=mode, dir_fd=dir_fd)
