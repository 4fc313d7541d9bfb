"""The view cache's files: the folder, atomic replacement, and the per-task entry's codec.

Everything here is reached through a descriptor on ``cache/`` (never through a link) and
checked before use; nothing is fsync'd (the cache is derivable). :mod:`intentlog.viewcache`
decides when an entry may be used.

A task's entry (``cache/views/TASK.json``) is laid out so that reading a work state from
it costs what the caller looks at, not the size of the task:

    intentlog-viewcache/2 <meta length> <blake3 of meta>\\n
    <meta: JSON>\\n
    <one call record per line>...

The meta holds the anchor (seq, offset, end and digest of the last folded line, and of
line 0), the operator fold, the work fold without its call records, the work state's
summary, and per record its call id, length and a 64-bit BLAKE3 checksum. A record is
read and checked only when a caller reads that call (:class:`EntryRecords`); a record
that fails its check makes the whole entry unusable (:class:`StaleEntry`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import orjson
from blake3 import blake3

from .._internal.nofollow import open_dir_nofollow, open_nofollow
from ..errors import LinkRefused
from ..projections.records import CallRecord, call_from_json, call_to_json
from ..projections.workstate import WorkStateFold

__all__ = [
    "CACHE_DIR",
    "ENTRY_FORMAT",
    "EntryRecords",
    "StaleEntry",
    "cache_dir",
    "drop_entry",
    "drop_temp",
    "load_entry",
    "new_temp",
    "open_file",
    "read_lines",
    "save_entry",
    "write_lines",
]

#: The cache's folder inside the ledger (in the ledger's ``.gitignore``).
CACHE_DIR: Final = "cache"
ENTRY_FORMAT: Final = b"intentlog-viewcache/2"
VIEWS: Final = "views"
_SUM: Final = 8  # bytes of BLAKE3 per record: a check against damage, not a signature


class StaleEntry(Exception):
    """A cache entry changed or failed a check after its meta was read: read the stream instead."""


# -- the folder ---------------------------------------------------------------------------


def cache_dir(root: Path, sub: str | None, *, create: bool) -> int | None:
    """A descriptor on ``cache/`` (or ``cache/<sub>``, made when ``create``), never through a link.

    None when absent, a link, or unusable. ``cache/`` itself is made with the ledger: a
    reader never creates it.
    """
    try:
        fd = _open_dir(root / CACHE_DIR, create=False)
    except (OSError, LinkRefused):
        return None
    if sub is None:
        return fd
    try:
        return _open_dir(sub, create=create, dir_fd=fd)
    except (OSError, LinkRefused):
        return None
    finally:
        os.close(fd)


def _open_dir(path: str | Path, *, create: bool, dir_fd: int | None = None) -> int:
    try:
        return open_dir_nofollow(path, what="the view cache", dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o755, dir_fd=dir_fd)
    return open_dir_nofollow(path, what="the view cache", dir_fd=dir_fd)


def open_file(dir_fd: int, name: str) -> int | None:
    """A regular file in the folder, opened without following a link; None otherwise."""
    try:
        fd = open_nofollow(name, os.O_RDONLY, what="a view cache file", dir_fd=dir_fd)
    except (OSError, LinkRefused):
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def read_lines(dir_fd: int, name: str, fmt: bytes) -> list[bytes] | None:
    """The body lines of a cache file whose header names ``fmt`` and the body's digest; None otherwise.

    One JSON value per line, parsed by the caller one at a time (a listing's index never
    becomes one document in memory).
    """
    fd = open_file(dir_fd, name)
    if fd is None:
        return None
    try:
        with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
            raw = f.readall()
    except OSError:
        return None
    finally:
        os.close(fd)
    nl = raw.find(b"\n")
    parts = raw[:nl].split(b" ") if nl >= 0 else []
    if len(parts) != 2 or parts[0] != fmt or parts[1] != blake3(memoryview(raw)[nl + 1 :]).hexdigest().encode():
        return None
    return raw[nl + 1 :].splitlines()


def write_lines(dir_fd: int, name: str, fmt: bytes, lines: list[bytes]) -> None:
    """Replace ``name`` with ``fmt``, the body's digest and ``lines`` (one per line), atomically (best effort)."""
    body = b"\n".join(lines)
    _replace(dir_fd, name, [fmt, b" ", blake3(body).hexdigest().encode(), b"\n", body])


def new_temp(dir_fd: int, name: str) -> tuple[int, str] | None:
    """A new temp file beside ``name``, to be renamed over it: ``(descriptor, temp name)``; None when it cannot."""
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, what="a view cache file", dir_fd=dir_fd)
    except (OSError, LinkRefused):
        return None
    return fd, tmp


def drop_temp(dir_fd: int, tmp: str) -> None:
    """Remove a temp file :func:`new_temp` made (best effort)."""
    with contextlib.suppress(OSError):
        os.unlink(tmp, dir_fd=dir_fd)


def _replace(dir_fd: int, name: str, parts: list[bytes]) -> None:
    """Temp + rename inside the folder; a failure (a read-only ledger, a full disk) leaves the old file or none.

    A rename replaces a link at ``name`` itself, never what it points to.
    """
    made = new_temp(dir_fd, name)
    if made is None:
        return
    fd, tmp = made
    try:
        try:
            with os.fdopen(os.dup(fd), "wb") as f:
                f.writelines(parts)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        drop_temp(dir_fd, tmp)


# -- a task's entry -------------------------------------------------------------------------


def _entry_name(task_id: str) -> str:
    return task_id + ".json"


def save_entry(root: Path, task_id: str, meta: dict[str, Any], work: WorkStateFold) -> None:
    """Write ``task_id``'s entry: ``meta`` (the anchor and the other folds) and ``work``'s call records."""
    dfd = cache_dir(root, VIEWS, create=True)
    if dfd is None:
        return  # no cache/ (a clone, a ledger made before it): nothing to write, nothing to encode
    try:
        _replace(dfd, _entry_name(task_id), _entry_parts(meta, work))
    finally:
        os.close(dfd)


def _entry_parts(meta: dict[str, Any], work: WorkStateFold) -> list[bytes]:
    lines = [orjson.dumps(call_to_json(c)) + b"\n" for c in work.records().values()]
    meta = meta | {
        "work": work.snapshot(calls=False),
        "summary": work.summary(),
        "cids": list(work.records()),
        "lens": [len(x) for x in lines],
        "sums": "".join(blake3(x).hexdigest(length=_SUM) for x in lines),
    }
    body = orjson.dumps(meta)
    head = b"%s %d %s\n" % (ENTRY_FORMAT, len(body), blake3(body).hexdigest().encode())
    return [head, body, b"\n", *lines]


def load_entry(root: Path, task_id: str) -> tuple[dict[str, Any], EntryRecords] | None:
    """The meta of ``task_id``'s entry, checked, and its records (read when asked for); None when unusable."""
    dfd = cache_dir(root, VIEWS, create=False)
    if dfd is None:
        return None
    try:
        fd = open_file(dfd, _entry_name(task_id))
    finally:
        os.close(dfd)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        head = os.pread(fd, 160, 0).partition(b"\n")
        parts = head[0].split(b" ")
        if not head[1] or len(parts) != 3 or parts[0] != ENTRY_FORMAT or not parts[1].isdigit():
            return None
        start = len(head[0]) + 1
        body = os.pread(fd, int(parts[1]), start)
        if blake3(body).hexdigest().encode() != parts[2]:
            return None
        meta = orjson.loads(body)
        if type(meta) is not dict or meta.get("task") != task_id:
            return None
        records = EntryRecords(root, task_id, (st.st_dev, st.st_ino), start + len(body) + 1, meta)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        os.close(fd)
    return meta, records


class EntryRecords(Mapping[str, CallRecord]):
    """An entry's call records by id, each read from the entry file and checked when first looked up.

    The file is reopened for a read (no descriptor is held) and must still be the one the
    meta came from; a record that fails its checksum or does not decode raises
    :class:`StaleEntry`. :meth:`load_all` reads every record at once.
    """

    __slots__ = ("_at", "_done", "_ident", "_index", "_lens", "_root", "_sums", "_task", "cids")

    def __init__(self, root: Path, task_id: str, ident: tuple[int, int], at: int, meta: Mapping[str, Any]) -> None:
        cids, lens, sums = meta["cids"], meta["lens"], meta["sums"]
        if type(cids) is not list or type(lens) is not list or type(sums) is not str:
            raise ValueError("an entry's record table of the wrong shape")
        if not len(cids) == len(lens) == len(sums) // (2 * _SUM) or len(sums) % (2 * _SUM):
            raise ValueError("an entry's record table of the wrong length")
        self._root, self._task, self._ident, self._at = root, task_id, ident, at
        self.cids: list[str] = cids
        self._lens: list[int] = lens
        self._sums = sums
        self._index: dict[str, tuple[int, int, int]] | None = None  # cid -> (i, offset, length), built on first use
        self._done: dict[str, CallRecord] = {}

    def _table(self) -> dict[str, tuple[int, int, int]]:
        if self._index is None:
            if not all(type(n) is int and n > 0 for n in self._lens) or not all(type(c) is str for c in self.cids):
                raise StaleEntry(self._task)  # a table of the wrong types: never trusted
            offsets = itertools.accumulate(self._lens, initial=self._at)  # one more than the records: the end
            spans = zip(self.cids, offsets, self._lens, strict=False)
            self._index = {cid: (i, off, n) for i, (cid, off, n) in enumerate(spans)}
        return self._index

    def _read(self, spans: list[tuple[int, int, int]]) -> list[bytes]:
        dfd = cache_dir(self._root, VIEWS, create=False)
        fd = None if dfd is None else open_file(dfd, _entry_name(self._task))
        if dfd is not None:
            os.close(dfd)
        if fd is None:
            raise StaleEntry(self._task)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self._ident:
                raise StaleEntry(self._task)
            if len(spans) > 1:
                lo, hi = spans[0][1], spans[-1][1] + spans[-1][2]
                blob = os.pread(fd, hi - lo, lo)
                raw = [blob[off - lo : off - lo + n] for _, off, n in spans]
            else:
                raw = [os.pread(fd, n, off) for _, off, n in spans]
        except OSError as exc:
            raise StaleEntry(self._task) from exc
        finally:
            os.close(fd)
        for (i, _, _), line in zip(spans, raw, strict=True):
            if blake3(line).hexdigest(length=_SUM) != self._sums[2 * _SUM * i : 2 * _SUM * (i + 1)]:
                raise StaleEntry(self._task)
        return raw

    @staticmethod
    def _decode(line: bytes) -> CallRecord:
        try:
            return call_from_json(orjson.loads(line))
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise StaleEntry(str(exc)) from exc

    def __getitem__(self, cid: str) -> CallRecord:
        rec = self._done.get(cid)
        if rec is None:
            span = self._table()[cid]  # KeyError for a call the entry does not hold
            rec = self._decode(self._read([span])[0])
            if rec.call_id != cid:
                raise StaleEntry(self._task)
            self._done[cid] = rec
        return rec

    def load_all(self) -> list[CallRecord]:
        """Every record in order, read in one go (to resume folding from the entry)."""
        table = self._table()
        spans = [table[cid] for cid in self.cids]
        recs = [self._decode(line) for line in self._read(spans)] if spans else []
        if [r.call_id for r in recs] != self.cids:
            raise StaleEntry(self._task)
        return recs

    def __iter__(self) -> Iterator[str]:
        return iter(self.cids)

    def __len__(self) -> int:
        return len(self.cids)

    def __contains__(self, cid: object) -> bool:
        return cid in self._table()


def drop_entry(root: Path, task_id: str) -> None:
    """Forget what the cache holds of ``task_id`` (a repair that cut events calls this); never follows a link."""
    dfd = cache_dir(root, VIEWS, create=False)
    if dfd is None:
        return
    try:
        with contextlib.suppress(OSError):
            os.unlink(_entry_name(task_id), dir_fd=dfd)
    finally:
        os.close(dfd)
