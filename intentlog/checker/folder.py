""":class:`FolderReads`: the :class:`~intentlog.checker.seams.LedgerReads` of a ledger (or exported bundle) folder.

Files are read without following a link (a linked stream, object or seal is reported by
the caller, never read through), hashed in fixed-size chunks, and never locked: a writer's
lock is probed through ``/proc/locks`` only. ``heads.json`` and ``gc.jsonl`` are read
through their codecs (:mod:`intentlog.heads.codec`, :mod:`intentlog.eventlog.gclog`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

from blake3 import blake3

from .._internal.digest import DIGEST_PREFIX, is_digest
from .._internal.regular import read_regular
from ..errors import ArtifactError, CorruptStream, DigestMismatch, IntentlogError, LedgerError
from ..eventlog.format import Event, check_task_id
from ..eventlog.gclog import GcDeletion, read_gc_deletions, retired_by_gc
from ..eventlog.listing import task_ids
from ..eventlog.reader import StreamScan
from ..heads.codec import StreamHead, read_heads_at
from .seams import EventRead, Payload, checked_payload
from .walk import find_links, hash_file, iter_objects, iter_regular_lines, lock_holder

__all__ = ["CHUNK", "FolderReads", "checked_copy", "read_range"]

#: Bytes read per chunk when a file is copied.
CHUNK: Final = 1 << 20
_O_READ: Final = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
MARKER: Final = "intentlog.json"


def _open_no_link(path: Path) -> Any:
    """``path`` opened for reading as a regular file, never through a final link (:class:`LedgerError` names it)."""
    try:
        fd = os.open(path, _O_READ | _O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LedgerError(
                f"{path} is a symbolic link; export never copies through one: replace it with the "
                "real file (from a copy or git), then export again"
            ) from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LedgerError(f"{path} is not a regular file; a bundle copies only files")
    return os.fdopen(fd, "rb")


def read_range(path: Path, end: int, *, follow: bool = False) -> Iterator[bytes]:
    """The first ``end`` bytes of ``path`` (a stream's trusted lines; later appends are not read).

    Never through a link inside the ledger; ``follow`` for files the caller named (receipt logs).
    """
    with open(path, "rb") if follow else _open_no_link(path) as f:
        left = end
        while left > 0:
            chunk = f.read(min(CHUNK, left))
            if not chunk:  # pragma: no cover - streams only grow while they are read
                raise CorruptStream(str(path), 0, f"the file is shorter than the {end} bytes just read; export again")
            left -= len(chunk)
            yield chunk


def _read_all(path: Path) -> Iterator[bytes]:
    """Every byte of ``path`` now, in chunks, never through a link."""
    with _open_no_link(path) as f:
        while chunk := f.read(CHUNK):
            yield chunk


def checked_copy(src: Path, digest: str, size: int | None, *, where: str | None = None) -> Iterator[bytes]:
    """``src`` in chunks; raises (so the copy is discarded) unless it hashes to ``digest`` with ``size`` bytes."""
    h = blake3()
    n = 0
    with _open_no_link(src) as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            n += len(chunk)
            yield chunk
    actual = DIGEST_PREFIX + h.hexdigest()
    if actual != digest:
        raise DigestMismatch(digest, actual, f"{src}" + (f" (referenced by {where})" if where else ""))
    if size is not None and n != size:
        raise ArtifactError(f"{src} holds {n} bytes but {where or 'its record'} says {size}; not exported")


class FolderReads:
    """A ledger (or bundle) folder at ``root``, read file by file (:class:`~intentlog.checker.seams.LedgerReads`)."""

    def __init__(self, root: Path, workspace: Path | None = None) -> None:
        self.root = root
        self.workspace = workspace

    def __repr__(self) -> str:
        return f"FolderReads({str(self.root)!r})"

    @property
    def where(self) -> str:
        return str(self.root)

    @property
    def tasks_where(self) -> str:
        return str(self.root / "tasks")

    @property
    def default_workspace(self) -> Path | None:
        return self.workspace if self.workspace is not None else self.root.absolute().parent

    # -- the ledger's own files --------------------------------------------------------------

    def links(self) -> dict[str, str]:
        return find_links(self.root)

    def marker(self) -> bytes | None:
        return read_regular(self.root / MARKER)

    def heads(self) -> tuple[dict[str, StreamHead] | None, list[str]]:
        try:
            return read_heads_at(self.root), []
        except LedgerError as exc:
            return {}, [str(exc)]

    def gc_log(self) -> tuple[dict[str, GcDeletion], str | None]:
        return read_gc_deletions(self.root)

    def retired(self, task: str, sealed: StreamHead) -> bool:
        return retired_by_gc(self.root, task, sealed)

    # -- streams ------------------------------------------------------------------------------

    def _path(self, task: str) -> Path:
        return self.root / "tasks" / f"{task}.jsonl"

    def names(self) -> list[str]:
        return task_ids(self.root)

    def listing(self) -> tuple[list[str], list[str], str | None]:
        try:
            entries = sorted(e.name for e in os.scandir(self.root / "tasks") if e.name.endswith(".jsonl"))
        except FileNotFoundError:
            return [], [], None
        except OSError as exc:
            return [], [], f"cannot list tasks/: {exc.strerror or exc}; check the folder's permissions"
        names: list[str] = []
        strays: list[str] = []
        for name in entries:
            try:
                names.append(check_task_id(name[: -len(".jsonl")]))
            except ValueError:
                strays.append(f"tasks/{name}")
        return names, strays, None

    def stream_where(self, task: str) -> str:
        return str(self._path(task))

    def lines(self, task: str) -> Iterator[tuple[int, bytes]]:
        return iter_regular_lines(self._path(task))

    def events(self, task: str) -> EventRead:
        scan = StreamScan(self._path(task))
        out = EventRead(iter(()))

        def events() -> Iterator[Event]:
            try:
                yield from scan
            except (OSError, IntentlogError) as exc:
                out.failure = f"tasks/{task}.jsonl: {exc}"
            out.count, out.problem = scan.count, scan.problem

        out.events = events()
        return out

    def stream_chunks(self, task: str) -> Iterable[bytes]:
        return _read_all(self._path(task))

    def stream_bytes(self, task: str) -> bytes:
        return self._path(task).read_bytes()

    def gc_remains(self, task: str, exc: Exception) -> GcDeletion | None:
        return None  # gc deletes a folder's stream file whole: nothing of it is left to read

    def writer(self, task: str) -> int | None:
        return lock_holder(self.root / "tasks" / f"{task}.jsonl.lock")

    # -- objects ------------------------------------------------------------------------------

    def hash_object(self, digest: str, rel: str, buf: bytearray) -> tuple[str, int]:
        return hash_file(self.root / rel, buf)

    def object_exists(self, digest: str, rel: str) -> bool:
        return (self.root / rel).exists()

    def stored_objects(self) -> Iterator[tuple[str, int]]:
        return iter_objects(self.root)

    def object_size(self, digest: str) -> int:
        hexd = digest[len(DIGEST_PREFIX) :]
        return os.lstat(self.root / "objects" / hexd[:2] / hexd[2:]).st_size

    def payload(self, digest: str, limit: int) -> Payload:
        """At most ``limit`` + 1 bytes of ``objects/xx/...``, read without following a link."""
        if not is_digest(digest):
            return Payload("absent")
        hexd = digest[len(DIGEST_PREFIX) :]
        try:
            fd = os.open(self.root / "objects" / hexd[:2] / hexd[2:], os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK)
        except OSError:
            return Payload("absent")
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a FIFO or device is never read
                return Payload("absent")
            chunks: list[bytes] = []
            n = 0
            while n <= limit:
                chunk = os.read(fd, limit + 1 - n)
                if not chunk:
                    break
                chunks.append(chunk)
                n += len(chunk)
        except OSError:
            return Payload("absent")
        finally:
            os.close(fd)
        if n > limit:
            return Payload("large", max(st.st_size, n))
        return checked_payload(digest, b"".join(chunks))

    def object_chunks(self, digest: str, size: int | None, where: str) -> Iterable[bytes] | None:
        hexd = digest[len(DIGEST_PREFIX) :]
        src = self.root / "objects" / hexd[:2] / hexd[2:]
        if not os.path.lexists(src):
            return None  # (a link is refused by the copy, which never reads through one)
        return checked_copy(src, digest, size, where=where)

    # -- quarantine/ ----------------------------------------------------------------------------

    def hash_file(self, rel: str, buf: bytearray) -> tuple[str, int]:
        return hash_file(self.root / rel, buf)

    def quarantine_names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.root / "quarantine"))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def file_chunks(self, rel: str, digest: str, size: int | None) -> Iterable[bytes] | None:
        src = self.root / rel
        if not os.path.lexists(src):
            return None
        return checked_copy(src, digest, size)
