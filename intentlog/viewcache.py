"""The view cache: a derived, deletable store of each task's projections, so a view reads only what changed.

Kept under ``cache/`` in the ledger, made with it (the ledger's ``.gitignore`` excludes it;
deleting it changes nothing but speed; a reader never creates ``cache/`` itself, so a git
clone, which lacks it, is read without a cache until a writer puts the folder back). Two
kinds of file, both written atomically (temp + rename; not fsync'd: they are derivable)
and both checked before use, never trusted as read:

- ``cache/views/TASK.json``: the work-state and operator folds of one task at a seq, with
  the byte offset, length and digest of that seq's line (and of line 0). A reader
  (:func:`fold_task`) uses it only when the stream is at least that long and the line at
  that offset hashes to the recorded digest; the scan then continues from the next byte,
  checking the chain exactly as a full read does (the next line must name that digest as
  its ``prev``), and folds only the later events. A missing, corrupt, stale or foreign
  entry, or one whose anchor line no longer matches, is ignored and rebuilt by a full
  read. A stream *shorter* than its entry says, whose line 0 is still the same, is
  reported (:class:`~intentlog.errors.CorruptStream`): events were cut from its end.
- ``cache/index-rows.json``, ``cache/index-gc.json``: per task, the file facts of its stream (size, inode, device,
  mtime_ns) when last read whole, and what listings show of it (:mod:`intentlog.views`,
  gc's plan). A listing reads a stream only when its facts differ from the index's.

The cache never decides what is sent: a writer's open reads and checks its whole stream
(tail, damage, seal), and ``intentlog verify`` reads every byte and never reads the cache.
Nothing under ``cache/`` is read or written through a link: a linked ``cache/`` or
``cache/views/`` is not used at all, a linked entry is ignored (a new entry's rename
replaces the link itself, never what it points to).
Entries are written by readers and at a writer's close, never on the durable append path.
"""

from __future__ import annotations

import contextlib
import gc
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson
from blake3 import blake3

from ._digest import digest_bytes
from ._nofollow import check_real_dir, open_dir_nofollow, open_nofollow
from .errors import CorruptStream, LinkRefused
from .eventlog.reader import StreamScan, open_stream
from .projections.operator import OperatorFold
from .projections.workstate import WorkState, WorkStateFold, work_state

__all__ = [
    "CACHE_DIR",
    "ENTRY_FORMAT",
    "INDEX_FORMAT",
    "MIN_EVENTS",
    "MIN_TASKS",
    "Folded",
    "drop_entry",
    "fold_task",
    "load_index",
    "paused_gc",
    "save_index",
    "save_folds",
    "work_state_of",
]

#: The cache's folder inside the ledger (in the ledger's ``.gitignore``).
CACHE_DIR: Final = "cache"
ENTRY_FORMAT: Final = b"intentlog-viewcache/1"
INDEX_FORMAT: Final = b"intentlog-viewindex/1"
_VIEWS: Final = "views"
#: A reader writes a task's entry only when it folded at least this many events (a
#: small stream is read faster than an entry; reads of small ledgers write nothing).
MIN_EVENTS = 256
#: A listing rewrites the index only when it covers at least this many tasks.
MIN_TASKS = 64


@dataclass(slots=True)
class Folded:
    """One task's folds over its trusted events, and the scan that read (the rest of) them.

    ``resumed_at`` is the seq the folds were resumed after (-1: a full read).
    """

    work: WorkStateFold
    ops: OperatorFold
    scan: StreamScan
    resumed_at: int


# -- the folder ---------------------------------------------------------------------------


def _cache_dir(root: Path, sub: str | None, *, create: bool) -> int | None:
    """A descriptor on ``cache/`` (or ``cache/<sub>``), never through a link; None when absent or unusable."""
    try:
        fd = _open_dir(root / CACHE_DIR, create=False)  # made with the ledger: a reader never creates it
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


def _read(dir_fd: int, name: str, fmt: bytes) -> Any:
    """The JSON body of a cache file whose header names ``fmt`` and the body's digest; None otherwise."""
    try:
        fd = open_nofollow(name, os.O_RDONLY, what="a view cache entry", dir_fd=dir_fd)
    except (OSError, LinkRefused):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
            raw = f.readall()
    except OSError:
        return None
    finally:
        os.close(fd)
    head, nl, body = raw.partition(b"\n")
    parts = head.split(b" ")
    if not nl or len(parts) != 2 or parts[0] != fmt or parts[1] != blake3(body).hexdigest().encode():
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _write(dir_fd: int, name: str, fmt: bytes, value: Any) -> None:
    """Replace ``name`` atomically (temp + rename inside the folder); a failure leaves the old file or none."""
    body = orjson.dumps(value)
    data = b"".join((fmt, b" ", blake3(body).hexdigest().encode(), b"\n", body))
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, what="a view cache entry", dir_fd=dir_fd)
    except (OSError, LinkRefused):
        return  # a read-only ledger, a full disk: the cache is only speed
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)


# -- one task's folds -----------------------------------------------------------------------


def _entry_name(task_id: str) -> str:
    return task_id + ".json"


def _load_entry(root: Path, task_id: str) -> dict[str, Any] | None:
    dfd = _cache_dir(root, _VIEWS, create=False)
    if dfd is None:
        return None
    try:
        entry = _read(dfd, _entry_name(task_id), ENTRY_FORMAT)
    finally:
        os.close(dfd)
    if type(entry) is not dict or entry.get("task") != task_id:
        return None
    return entry


def drop_entry(root: Path, task_id: str) -> None:
    """Forget what the cache holds of ``task_id`` (a repair that cut events calls this); never follows a link."""
    dfd = _cache_dir(root, _VIEWS, create=False)
    if dfd is None:
        return
    try:
        with contextlib.suppress(OSError):
            os.unlink(_entry_name(task_id), dir_fd=dfd)
    finally:
        os.close(dfd)


def _line_at(fd: int, offset: int, length: int) -> bytes | None:
    try:
        line = os.pread(fd, length, offset)
    except OSError:
        return None
    return line if len(line) == length and line.endswith(b"\n") else None


def _anchor(fd: int, size: int, path: Path, entry: Mapping[str, Any]) -> tuple[int, int, str] | None:
    """Where to resume: ``(offset, seq, digest)`` after the entry's line, or None to read from line 0.

    Raises :class:`CorruptStream` when the stream is shorter than the entry says while its
    line 0 is the one the entry saw: events were cut from its end.
    """
    try:
        seq, offset, end, digest = int(entry["seq"]), int(entry["offset"]), int(entry["end"]), entry["digest"]
        first_len, first = int(entry["first_len"]), entry["first"]
    except (KeyError, TypeError, ValueError):
        return None
    if not 0 <= offset < end or seq < 0 or first_len <= 0 or type(digest) is not str:
        return None
    if size < end:
        line0 = _line_at(fd, 0, first_len) if size >= first_len else None
        if line0 is not None and digest_bytes(line0) == first:
            raise CorruptStream(
                str(path),
                seq + 1,
                f"the stream is {size} bytes, but it held {seq + 1} events ending at byte {end} when it was "
                f"last read (cache/views/{path.stem}.json): events were cut from its end; run 'intentlog verify' "
                "and restore the stream from a copy (if an older copy was restored on purpose, delete that "
                "cache entry)",
            )
        return None  # another stream under this name (gc retired the old one): read it whole
    line = _line_at(fd, offset, end - offset)
    if line is None or digest_bytes(line) != digest:
        return None  # rewritten under the entry: read it whole (the full read judges it)
    return end, seq + 1, digest


def _restore(entry: Mapping[str, Any]) -> tuple[WorkStateFold, OperatorFold] | None:
    try:
        return WorkStateFold.from_snapshot(entry["work"]), OperatorFold.from_snapshot(entry["ops"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None


def fold_task(root: Path, tasks_dir: Path, task_id: str, *, save: bool = True) -> Folded:
    """Fold one task's trusted events, resuming from its cache entry when the stream vouches for it.

    The folds and the scan's ``problem``/``count``/``end``/``head`` are what a full read
    gives, or :class:`CorruptStream` for a stream shorter than its entry says (see the
    module doc). A missing stream raises ``FileNotFoundError``; a linked ``tasks/`` or
    stream :class:`~intentlog.errors.LinkRefused`, as a full read does. With ``save``, an
    entry is written when the read folded at least :data:`MIN_EVENTS` events past the
    cached one (never for a stream with damage in it).
    """
    check_real_dir(tasks_dir, what="task streams")
    path = tasks_dir / f"{task_id}.jsonl"
    with open_stream(path) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        entry = _load_entry(root, task_id)
        start = _anchor(fd, size, path, entry) if entry is not None else None
        folds = _restore(entry) if start is not None and entry is not None else None
        if folds is None:
            start = None
            folds = WorkStateFold(task_id), OperatorFold()
        work, ops = folds
        scan = StreamScan(path, fd=fd, resume=start)
        first: tuple[int, str] | None = None
        for ev in scan:
            if ev.seq == 0:
                first = (scan.end, ev.digest)
            work.apply(ev)
            ops.apply(ev)
    resumed_at = start[1] - 1 if start is not None else -1
    if first is None and entry is not None and start is not None:
        first = (int(entry["first_len"]), entry["first"])
    p = scan.problem
    worth = scan.count - 1 - resumed_at >= MIN_EVENTS
    if save and worth and first is not None and (p is None or (p.torn and not p.suspect)):
        save_folds(root, task_id, scan, first, work, ops)
    return Folded(work, ops, scan, resumed_at)


def save_folds(
    root: Path, task_id: str, scan: StreamScan, first: tuple[int, str], work: WorkStateFold, ops: OperatorFold
) -> None:
    """Write the entry for ``task_id`` at the scan's last trusted line (best effort: the cache is only speed)."""
    if scan.count == 0 or scan.head is None:
        return
    entry = {
        "task": task_id,
        "seq": scan.count - 1,
        "offset": scan.last_start,
        "end": scan.end,
        "digest": scan.head,
        "first_len": first[0],
        "first": first[1],
        "work": work.snapshot(),
        "ops": ops.snapshot(),
    }
    dfd = _cache_dir(root, _VIEWS, create=True)
    if dfd is None:
        return
    try:
        _write(dfd, _entry_name(task_id), ENTRY_FORMAT, entry)
    finally:
        os.close(dfd)


# -- the listings' index ------------------------------------------------------------------------

#: ``(size, inode, device, mtime_ns)`` of a stream file.
Facts = tuple[int, int, int, int]


def facts_of(st: os.stat_result) -> Facts:
    return (st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns)


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the block (a listing builds many small acyclic containers)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _index_name(part: str) -> str:
    if part not in ("rows", "gc"):
        raise ValueError(f"no index part {part!r}")
    return f"index-{part}.json"


def load_index(root: Path, part: str) -> dict[str, tuple[Facts, Any]]:
    """What the index ``part`` (``rows``, ``gc``) holds per task: the stream's facts then, and the value.

    Each part is its own file (``cache/index-rows.json``, ``cache/index-gc.json``). Empty
    when there is none, or it is corrupt, foreign or reached through a link.
    """
    dfd = _cache_dir(root, None, create=False)
    if dfd is None:
        return {}
    try:
        got = _read(dfd, _index_name(part), INDEX_FORMAT)
    finally:
        os.close(dfd)
    if type(got) is not dict:
        return {}
    out: dict[str, tuple[Facts, Any]] = {}
    for task, v in got.items():
        if type(v) is list and len(v) == 5:
            out[task] = ((v[0], v[1], v[2], v[3]), v[4])
    return out


def save_index(root: Path, part: str, values: Mapping[str, tuple[Facts, Any]]) -> None:
    """Replace the index ``part``; best effort, atomic, never through a link."""
    dfd = _cache_dir(root, None, create=True)
    if dfd is None:
        return
    try:
        _write(dfd, _index_name(part), INDEX_FORMAT, {task: [*f, v] for task, (f, v) in values.items()})
    finally:
        os.close(dfd)


def work_state_of(root: Path, tasks_dir: Path, task_id: str) -> WorkState:
    """The work state of ``task_id`` as a full read gives it, resumed from the cache where it vouches.

    No stream: the state of no events. A torn tail ends the events quietly; damage raises
    :class:`CorruptStream` (as :func:`intentlog.stream.read_events` does), and so does a
    stream shorter than its cache entry says.
    """
    try:
        folded = fold_task(root, tasks_dir, task_id)
    except FileNotFoundError:
        return work_state((), task_id=task_id)
    p = folded.scan.problem
    if p is not None and (p.suspect or not p.torn):
        raise CorruptStream(str(folded.scan.path), p.line, p.reason)
    return folded.work.finished()
