"""Reading the ledger being exported: no link followed, every copied byte checked against its digest.

A ledger on an object store is read through its seams (:class:`~intentlog.checker.seams.Seams`):
its streams' bytes by ``read`` (the segments checked to make one stream), its objects by
``get`` (checked against their digest).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
from blake3 import blake3

from .._digest import DIGEST_PREFIX
from ..artifacts.inline import inline_bytes
from ..checker.seams import Seams
from ..checker.walk import find_links
from ..errors import (
    ArtifactError,
    ArtifactMissing,
    CorruptStream,
    DigestMismatch,
    LedgerError,
    NotALedger,
)
from ..eventlog.format import FORMAT
from ..eventlog.reader import StreamScan
from ..eventlog.remote import events_in
from ..heads.codec import HEADS_FILE
from ..refs import EXPORT_INLINE, walk
from .files import CHUNK, MARKER_FILE

_O_READ: Final = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def _open_no_link(path: Path) -> Any:
    """``path`` opened for reading as a regular file, never through a final link (:class:`LedgerError` names it)."""
    try:
        fd = os.open(path, _O_READ | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LedgerError(f"{path} is a symbolic link; export never copies through one: replace it with the "
                              "real file (from a copy or git), then export again") from exc
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


def stored_object(seams: Seams, digest: str, size: int | None, where: str) -> bytes | None:
    """The object ``digest`` read through the seam (checked against its digest and ``size``); None if absent."""
    try:
        data = seams.objects.get(digest)
    except ArtifactMissing:
        return None
    if size is not None and len(data) != size:
        raise ArtifactError(f"{seams.where}: object {digest} holds {len(data)} bytes but {where} says {size}; "
                            "not exported")
    return data


def inline_in(root: Path | Seams, tasks: Sequence[str], wanted: set[str]) -> dict[str, bytes]:
    """Blobs that ride inline only in streams not being exported (checked against their digest)."""
    found: dict[str, bytes] = {}
    for task in tasks:
        if not wanted:
            break
        if isinstance(root, Seams):
            events = events_in(root.streams.read(task), f"{root.where} task {task!r}")
        else:
            events = iter(StreamScan(root / "tasks" / f"{task}.jsonl"))
        for ev in events:
            for digest, ref in walk(ev.data, EXPORT_INLINE):
                if not wanted:
                    break
                if digest in wanted and ref is not None:
                    try:
                        data = inline_bytes(ref)
                    except ArtifactError:
                        data = None  # a corrupt copy: keep looking for a good one
                    if data is not None:
                        found[digest] = data
                        wanted.discard(digest)
    return found


_READ_TOP: Final = frozenset({MARKER_FILE, HEADS_FILE, "tasks", "objects", "quarantine"})


def refuse_links(root: Path) -> None:
    """:class:`LedgerError` naming the first link among what export reads; export never copies through one."""
    for rel, target in find_links(root).items():
        top = rel.split("/", 1)[0]
        if top in _READ_TOP and not (top == "tasks" and rel.endswith(".lock")):
            raise LedgerError(
                f"{root / rel} is a symbolic link (to {target!r}); export never copies through one, so nothing was "
                "exported. Replace it with the real file or folder (from a copy or git), then export again; "
                "'intentlog verify' lists every link in the ledger"
            )


def check_marker(root: Path) -> None:
    try:
        marker = orjson.loads((root / MARKER_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise NotALedger(str(root), f"{MARKER_FILE} cannot be read ({exc}); pass the ledger root") from exc
    if type(marker) is not dict or marker.get("format") != FORMAT:
        raise NotALedger(str(root), f"{MARKER_FILE} does not declare format {FORMAT!r}")
