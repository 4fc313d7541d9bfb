"""The checker's read-only view of a ledger folder: objects, lines, links, hashes, the lock table.

The store's own helpers live beside its writing code (artifacts/store.py imports the
atomic-write helper); the checker keeps its import graph free of writers, so it names,
lists and hashes objects with the few read-only lines below.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from blake3 import blake3

from .._internal.digest import DIGEST_PREFIX
from .._internal.procs import PROC_LOCKS, flock_writer
from .._internal.regular import NotRegular, open_regular
from ..eventlog.reader import iter_lines

__all__ = [
    "CHUNK_SIZE",
    "PROC_LOCKS",
    "find_links",
    "hash_file",
    "iter_objects",
    "iter_regular_lines",
    "lock_holder",
    "object_rel",
    "relative",
    "through_link",
]

#: Bytes read per chunk when hashing a file; one buffer of this size is reused.
CHUNK_SIZE: Final = 4 << 20
#: From this size on, files are hashed with BLAKE3's multithreaded mode.
_THREADED_MIN: Final = 512 << 10

_SHARD_RE: Final = re.compile(r"[0-9a-f]{2}\Z")
_NAME_RE: Final = re.compile(r"[0-9a-f]{62}\Z")


def object_rel(digest: str) -> str:
    """``objects/<2 hex>/<62 hex>`` for a well-formed digest."""
    hexd = digest[len(DIGEST_PREFIX) :]
    return f"objects/{hexd[:2]}/{hexd[2:]}"


def iter_objects(root: Path) -> Iterator[tuple[str, int]]:
    """``(digest, size)`` of every object file, shard by shard; memory bounded by one shard's listing."""
    objects = root / "objects"
    try:
        shards = sorted(
            e.name for e in os.scandir(objects) if _SHARD_RE.match(e.name) and e.is_dir(follow_symlinks=False)
        )
    except FileNotFoundError:
        return
    for shard in shards:
        try:
            entries = sorted(
                (e.name, e.stat(follow_symlinks=False).st_size)
                for e in os.scandir(objects / shard)
                if _NAME_RE.match(e.name) and e.is_file(follow_symlinks=False)
            )
        except FileNotFoundError:
            continue
        for name, size in entries:
            yield DIGEST_PREFIX + shard + name, size


def relative(path: object) -> str | None:
    """``path`` in normal posix form if it stays inside its folder (lexically), else None."""
    if type(path) is not str or "\x00" in path or path.startswith("/"):
        return None
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts) or None





def iter_regular_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of every line of the regular file ``path`` (the last may lack its newline).

    Raises :class:`NotRegular` when ``path`` is a link or not a regular file, before
    anything is read (the shared reader reads what passes; the ledger walk already
    reported every link, and nothing under one reaches here).
    """
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular("a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file")
    return iter_lines(path)


def find_links(root: str | os.PathLike[str]) -> dict[str, str]:
    """Every symbolic link inside the folder ``root``: relative posix path -> where it points.

    Walks without following any link (a linked folder is reported, not entered); folders
    that cannot be listed are skipped. Memory: one folder's listing at a time, plus the links.
    """
    base = Path(root)
    found: dict[str, str] = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(base / rel if rel else base) as it:
                entries = sorted((e.name, e.is_symlink(), e.is_dir(follow_symlinks=False)) for e in it)
        except OSError:
            continue
        for name, is_link, is_dir in entries:
            child = f"{rel}/{name}" if rel else name
            if is_link:
                try:
                    found[child] = os.readlink(base / child)
                except OSError:
                    found[child] = "?"
            elif is_dir:
                stack.append(child)
    return dict(sorted(found.items()))


def through_link(rel: str, links: Mapping[str, str]) -> str | None:
    """The link on the way to ``rel`` (``rel`` itself or a folder above it), or None."""
    if not links:
        return None
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        head = "/".join(parts[:i])
        if head in links:
            return head
    return None


def hash_file(path: Path, buf: bytearray) -> tuple[str, int]:
    """BLAKE3 of a regular file in fixed-size chunks (never follows a final symlink, never blocks on a FIFO).

    Raises FileNotFoundError, :class:`NotRegular`, or OSError.
    """
    fd = open_regular(path)
    try:
        st = os.fstat(fd)
        h = blake3(max_threads=blake3.AUTO) if st.st_size >= _THREADED_MIN else blake3()
        view = memoryview(buf)
        total = 0
        while True:
            n = os.readv(fd, [view])
            if not n:
                break
            h.update(view[:n])
            total += n
        view.release()
        return DIGEST_PREFIX + h.hexdigest(), total
    finally:
        os.close(fd)


def lock_holder(lock_path: Path) -> int | None:
    """The pid holding an exclusive ``flock`` on ``lock_path`` per :data:`PROC_LOCKS`; None if none (or unknown).

    Never takes, blocks on or follows a link to the lock: a checker takes no lock. Where
    there is no ``/proc/locks`` nothing is seen, and an incomplete last line is reported
    as a torn tail.
    """
    try:
        st = os.lstat(lock_path)
        if not stat.S_ISREG(st.st_mode):
            return None
        return flock_writer(st, PROC_LOCKS)
    except OSError:
        return None
