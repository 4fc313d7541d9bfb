"""The one atomic-write helper and its directory fsyncs (DESIGN §4 rules 1 and 3).

Besides the ``O_APPEND`` stream writer, this is the only place that opens files for
writing. A file published here is complete and durable when the call returns: its bytes
were fsynced before it got its name, and the directory entry was fsynced after.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from .errors import LinkRefused

__all__ = [
    "O_NOFOLLOW",
    "check_real_dir",
    "fsync_dir",
    "makedirs_durable",
    "open_nofollow",
    "publish_bytes",
    "publish_chunks",
    "real_dirs",
    "write_all",
]

#: Added to every open of a file inside a ledger: a link in the last component fails with ``ELOOP``.
O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)


def open_nofollow(path: str | os.PathLike[str], flags: int, mode: int = 0o644, *, what: str = "a file") -> int:
    """``os.open`` that never follows a link in the last component of ``path``.

    A link there raises :class:`LinkRefused` naming ``path`` and ``what`` it stands for;
    nothing is opened. The folders above are not checked here: check them with
    :func:`check_real_dir` (or :func:`real_dirs`). Other ``OSError`` s pass through.
    """
    try:
        return os.open(path, flags | O_NOFOLLOW | _O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and os.path.islink(path)):
            raise LinkRefused(os.fspath(path), what) from exc
        raise


def check_real_dir(path: str | os.PathLike[str], *, what: str) -> bool:
    """True if ``path`` is a real directory, False if it does not exist.

    Raises :class:`LinkRefused` when it is a symbolic link (to a folder or not) and
    ``NotADirectoryError`` (an ``OSError`` the caller translates, as for any failed
    folder operation) when it is some other kind of file. Never follows the link.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise LinkRefused(os.fspath(path), what)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, f"should be the folder of {what} but is a file", os.fspath(path))
    return True


def real_dirs(root: str | os.PathLike[str], rel: str | os.PathLike[str], *, what: str) -> bool:
    """Check every folder from ``root`` down to ``root/rel`` with :func:`check_real_dir`.

    ``root`` itself (the ledger folder, which the user chose) may be a link; nothing
    below it may. True when the whole chain exists, False at the first missing folder.
    """
    p = Path(root)
    for part in Path(rel).parts:
        p = p / part
        if not check_real_dir(p, what=what):
            return False
    return True


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (a new or renamed file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
            os.mkdir(d)
        except FileExistsError:
            continue
        fsync_dir(d.parent)
    return bool(missing)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte, looping on short writes."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _temp_path(tmp_dir: Path, stem: str) -> Path:
    return tmp_dir / f".{stem}.{os.getpid()}.{os.urandom(6).hex()}.tmp"


def publish_chunks(
    chunks: Iterable[bytes],
    dest: str | os.PathLike[str],
    *,
    tmp_dir: str | os.PathLike[str],
    replace: bool = False,
    mode: int = 0o444,
) -> bool:
    """Write ``chunks`` to a temp file, fsync it, give it its name, fsync the directory.

    With ``replace=False`` the name is given by ``os.link``, which never overwrites: if
    ``dest`` already exists the temp file is removed and False is returned (the caller
    decides whether the existing file is acceptable). With ``replace=True`` ``os.replace``
    swaps it in. The temp file is removed on any error.
    """
    dest = Path(dest)
    tmp = _temp_path(Path(tmp_dir), dest.name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            for chunk in chunks:
                write_all(fd, chunk)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, dest)
            created = True
        else:
            try:
                os.link(tmp, dest)
                created = True
            except FileExistsError:
                created = False
            os.unlink(tmp)
        if created:
            fsync_dir(dest.parent)
        return created
    except BaseException:
        try:
            os.unlink(tmp)
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
) -> bool:
    """:func:`publish_chunks` for one bytes object."""
    return publish_chunks((data,), dest, tmp_dir=tmp_dir, replace=replace, mode=mode)
