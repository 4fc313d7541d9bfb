"""Hashing bytes and files with BLAKE3: the one place that decides how (threads, memory maps).

Guarantees: :func:`hash_fd` reads a file without moving its position and in bounded
memory (one :data:`MMAP_WINDOW` at a time, or :data:`CHUNK_SIZE` reads below that);
:func:`digest_of` and :func:`hash_fd` give the same ``blake3:<hex>`` name for the same bytes.
"""

from __future__ import annotations

import mmap
import os
from typing import Protocol, cast

from blake3 import blake3

from .._internal.digest import DIGEST_PREFIX

__all__ = ["CHUNK_SIZE", "MMAP_WINDOW", "THREADED_MIN", "Hasher", "digest_of", "hash_fd", "hasher"]

#: Size of each read when copying or hashing a file: memory stays bounded by a few of these.
CHUNK_SIZE = 1 << 20
#: From this size on, hashing uses BLAKE3's multithreaded mode. Measured on a 2-core
#: machine: at 256 KiB threads gain ~20 %, at 1 MiB ~70 %; below 128 KiB they cost.
THREADED_MIN = 512 << 10
#: Objects at least this large are hashed through read-only memory maps of this many
#: bytes at a time: no copy into Python, so the multithreaded hasher runs at ~2x a read
#: loop, while resident memory stays bounded by one window (a whole-file ``update_mmap``
#: would map -- and count in RSS -- the whole object).
MMAP_WINDOW = 16 << 20


class Hasher(Protocol):
    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...
    def hexdigest(self) -> str: ...


def hasher(size: int) -> Hasher:
    """A BLAKE3 hasher, multithreaded only where that measurably helps (large inputs)."""
    if size >= THREADED_MIN:
        return cast(Hasher, blake3(max_threads=blake3.AUTO))
    return cast(Hasher, blake3())


def digest_of(data: bytes | bytearray | memoryview) -> str:
    h = hasher(len(data))
    h.update(data)
    return DIGEST_PREFIX + h.hexdigest()


def hash_fd(fd: int, size: int) -> str:
    """Digest of the first ``size`` bytes of ``fd``, without moving its file position.

    Large objects are hashed through bounded memory-map windows. Store objects are
    immutable (0o444, never rewritten), which is what makes mapping them safe: a file
    truncated under a live map would fault.
    """
    h = hasher(size)
    if size < MMAP_WINDOW:
        offset = 0
        while offset < size:
            chunk = os.pread(fd, min(CHUNK_SIZE, size - offset), offset)
            if not chunk:
                break
            h.update(chunk)
            offset += len(chunk)
        return DIGEST_PREFIX + h.hexdigest()
    offset = 0
    while offset < size:
        length = min(MMAP_WINDOW, size - offset)
        with mmap.mmap(fd, length, access=mmap.ACCESS_READ, offset=offset) as window:
            view = memoryview(window)
            try:
                h.update(view)
            finally:
                view.release()
        offset += length
    return DIGEST_PREFIX + h.hexdigest()
