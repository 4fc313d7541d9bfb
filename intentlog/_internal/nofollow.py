"""Opening and checking paths inside a ledger without following links (read-only primitives).

intentlog never follows a symbolic link inside a ledger: a link could lead reads and
writes outside the folder. Every layer -- the stream writer and readers, the artifact
store, ``verify`` and ``export`` -- uses these two primitives:

- :func:`open_nofollow` opens a file with ``O_NOFOLLOW`` (a link in the last component
  raises :class:`~intentlog.errors.LinkRefused`);
- :func:`check_real_dir` / :func:`real_dirs` check that folders are real folders
  (``lstat``), never links.

This module writes nothing, so checkers that must not reach a writer may import it
(:mod:`intentlog._internal.fsutil` re-exports it for writers).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import LedgerError, LinkRefused
from . import fsops

__all__ = ["O_NOFOLLOW", "check_own_file", "check_real_dir", "open_dir_nofollow", "open_nofollow", "real_dirs"]

#: Added to every open of a file inside a ledger: a link in the last component fails with ``ELOOP``.
O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)


def open_nofollow(
    path: str | os.PathLike[str], flags: int, mode: int = 0o644, *, what: str = "a file", dir_fd: int | None = None
) -> int:
    """``os.open`` that never follows a link in the last component of ``path``.

    A link there raises :class:`LinkRefused` naming ``path`` and ``what`` it stands for;
    nothing is opened. The folders above are not checked here: check them with
    :func:`check_real_dir` (or :func:`real_dirs`), or pass ``dir_fd`` (from
    :func:`open_dir_nofollow`): ``path`` is then relative to that folder, whatever is
    renamed in meanwhile. Other ``OSError`` s pass through.
    """
    try:
        return fsops.open(path, flags | O_NOFOLLOW | _O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and _is_link(path, dir_fd)):
            raise LinkRefused(os.fspath(path), what) from exc
        raise


def _is_link(path: str | os.PathLike[str], dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


_O_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)


def open_dir_nofollow(
    path: str | os.PathLike[str], *, what: str, dir_fd: int | None = None
) -> int:
    """A descriptor on the real folder ``path`` (relative to ``dir_fd`` if given), never a link.

    Deleting or moving entries through the descriptor (``dir_fd=``) reaches that folder
    whatever is renamed in meanwhile, so a folder swapped for a link after a check is
    never the one changed. A link raises :class:`LinkRefused`; a missing folder
    ``FileNotFoundError``; anything else not a folder ``NotADirectoryError``.
    """
    try:
        return fsops.open(path, os.O_RDONLY | _O_DIRECTORY | O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                is_link = stat.S_ISLNK(os.lstat(path, dir_fd=dir_fd).st_mode)
            except OSError:
                is_link = exc.errno == errno.ELOOP
            if is_link:
                raise LinkRefused(os.fspath(path), what) from exc
        raise


def check_own_file(fd: int, path: str | os.PathLike[str], *, what: str) -> None:
    """Refuse an open file that is not a regular file with exactly one name.

    For files a writer changes in place (streams it appends to and may truncate, lock
    files it rewrites): a hard link is not a symbolic link, ``O_NOFOLLOW`` and ``lstat``
    do not see it, and writing through it changes the other name's file too, wherever
    it lives. Raises :class:`~intentlog.errors.LedgerError` naming ``path``; reads only.
    """
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise LedgerError(
            f"{os.fspath(path)}: is not a regular file where intentlog keeps {what}; nothing was written: "
            "move it aside and put back the real file (from a copy or git)"
        )
    if st.st_nlink != 1:
        raise LedgerError(
            f"{os.fspath(path)}: has {st.st_nlink} names (a hard link) where intentlog keeps {what}; writing "
            "it would change the other name's file too, so nothing was written: give it a name of its own "
            "(cp FILE FILE.new && mv FILE.new FILE) and try again"
        )


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
