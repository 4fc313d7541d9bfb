"""The durable append path (DESIGN §4 rules 1, 2, 4, 5).

An append is one ``write`` of the whole line on an ``O_APPEND`` descriptor followed by
``fdatasync``; it returns only after both. Inside :meth:`StreamWriter.batch` the sync is
shared by every event of the batch and done once when the batch ends (or earlier, when
an append asks for ``sync=True``). A failed write or sync poisons the writer: its
durability is unknown, so every later append raises :class:`StreamPoisoned` until the
task is reopened and its tail re-checked.

The writer takes the task's exclusive lock when it opens and keeps it until closed; on
open it scans the stream, quarantines a torn tail (``quarantine/``, then truncate, fsync
and a ``stream.repaired`` event) and refuses a stream corrupt in the middle.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from blake3 import blake3

from .._digest import digest_bytes
from .._fsutil import makedirs_durable, publish_bytes, publish_chunks, write_all
from ..errors import Conflict, CorruptStream, IntentlogError, StreamPoisoned
from .canonical import dumps
from .format import FORMAT, TASK_CREATED, Event, check_kind, encode_data, encode_line, new_stream_id, utc_now
from .lock import WriterLock
from .reader import StreamScan, scan

__all__ = ["StreamWriter"]

def fdatasync(fd: int) -> None:
    """``fdatasync`` where the platform has it, else ``fsync`` (looked up per call so tests can count it)."""
    _fdatasync(fd)


_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


class StreamWriter:
    """The single writer of one task stream inside this process."""

    def __init__(
        self,
        *,
        path: Path,
        task_id: str,
        quarantine_dir: Path,
        tmp_dir: Path,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.path = path
        self.task_id = task_id
        self.quarantine_dir = quarantine_dir
        self.tmp_dir = tmp_dir
        self._lock = WriterLock(path.with_name(path.name + ".lock"), task_id)
        self._fd: int | None = None
        self._seq = 0
        self._head: str | None = None
        self._poisoned: str | None = None
        self._batch_depth: dict[int, int] = {}  # per thread: a batch defers only its own thread's syncs
        self._dirty = False
        self._mutex = threading.RLock()
        self._on_event = on_event
        self.repaired: Event | None = None

    # -- opening -------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def open(self, *, wait: float = 0.0, replay: Callable[[Event], None] | None = None) -> None:
        """Lock, re-check the tail, repair a torn one, create the stream if missing.

        ``replay`` sees every trusted event already in the stream (the scan that checks
        the tail is also the caller's chance to build state without a second read).
        """
        with self._mutex:
            if self._fd is not None:
                return
            self._lock.acquire(wait)
            try:
                self._open_locked(replay)
            except BaseException:
                self._close_fd()
                self._lock.release()
                raise

    def _open_locked(self, replay: Callable[[Event], None] | None) -> None:
        self._poisoned = None
        if not self.path.exists():
            self._create()
            s = scan(self.path)
            if replay and s.last is not None:
                replay(s.last)
        else:
            s = StreamScan(self.path)
            for ev in s:
                if replay:
                    replay(ev)
        if s.problem and not s.problem.torn:
            p = s.problem
            raise CorruptStream(
                str(self.path),
                p.line,
                f"{p.reason}, and event lines follow it",
                hint="a bad line followed by good ones is never repaired automatically; "
                "run 'intentlog verify' and restore the file from a copy or git",
            )
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._seq = s.count
        self._head = s.head
        if s.count == 0 and s.problem is None:
            # an empty file: a crash between a repair's truncate and its new first line
            self._write_created()
            fdatasync(self._fd)
        if s.problem:
            self._repair(s)
            if replay and self.repaired is not None:
                replay(self.repaired)

    def _create(self) -> None:
        makedirs_durable(self.path.parent)
        makedirs_durable(self.tmp_dir)
        line = encode_line(
            TASK_CREATED,
            dumps({"format": FORMAT, "stream": new_stream_id(), "task": self.task_id}),
            None,
            0,
            utc_now(),
        )
        publish_bytes(line, self.path, tmp_dir=self.tmp_dir, mode=0o644)

    def _repair(self, s: StreamScan) -> None:
        """Move the bad tail to quarantine/, truncate, fsync, and record it (DESIGN §4 rule 4)."""
        p = s.problem
        if self._fd is None or p is None:
            return
        # two streaming passes (hash, then copy) keep memory bounded whatever garbage follows
        hasher = blake3()
        size = 0
        for chunk in _chunks_from(self.path, p.offset):
            hasher.update(chunk)
            size += len(chunk)
        digest = "blake3:" + hasher.hexdigest()
        qname = f"{self.task_id}.{digest.split(':', 1)[1][:32]}.bin"
        qpath = self.quarantine_dir / qname
        if not qpath.exists():
            makedirs_durable(self.quarantine_dir)
            makedirs_durable(self.tmp_dir)
            publish_chunks(_chunks_from(self.path, p.offset, limit=size), qpath, tmp_dir=self.tmp_dir, mode=0o444)
        os.ftruncate(self._fd, p.offset)
        os.fsync(self._fd)
        if p.offset == 0:
            self._write_created()
        self.repaired = self.append(
            "stream.repaired",
            {
                "line": p.line,
                "offset": p.offset,
                "reason": p.reason,
                "suspect": p.suspect,
                "quarantined": {"file": f"quarantine/{qname}", "digest": digest, "size": size},
            },
        )

    def _write_created(self) -> None:
        """Line 0 of a stream left empty (it is synced by the caller's next sync)."""
        if self._fd is None:
            return
        line = encode_line(
            TASK_CREATED,
            dumps({"format": FORMAT, "stream": new_stream_id(), "task": self.task_id}),
            None,
            0,
            utc_now(),
        )
        write_all(self._fd, line)
        self._seq, self._head = 1, digest_bytes(line)

    # -- appending ---------------------------------------------------------------

    @property
    def next_seq(self) -> int:
        return self._seq

    @property
    def head(self) -> str | None:
        return self._head

    def append(
        self,
        kind: str,
        data: dict[str, Any],
        *,
        expected_seq: int | None = None,
        sync: bool = False,
        data_json: bytes | None = None,
    ) -> Event:
        """Append one event; durable on return unless inside a batch (then at its end, or now with ``sync``).

        ``data_json`` is ``data`` already encoded by :func:`encode_data` (callers that
        checked it pass it, so the data is serialised once).
        """
        if data_json is None:
            check_kind(kind)
            data_json = encode_data(data)
        with self._mutex:
            if self._poisoned is not None:
                raise StreamPoisoned(str(self.path), self._poisoned)
            fd = self._fd
            if fd is None:
                raise IntentlogError(f"{self.path}: the writer is closed; open the task again")
            if expected_seq is not None and expected_seq != self._seq:
                raise Conflict(self.task_id, expected_seq, self._seq)
            stamp = utc_now()
            line = encode_line(kind, data_json, self._head, self._seq, stamp)
            try:
                write_all(fd, line)
                if sync or not self._batch_depth.get(threading.get_ident()):
                    fdatasync(fd)
                    self._dirty = False
                else:
                    self._dirty = True
            except OSError as exc:
                self._poison(exc)
                raise StreamPoisoned(str(self.path), self._poisoned or str(exc)) from exc
            ev = Event(self._seq, kind, stamp, self._head, data, digest_bytes(line))
            self._seq += 1
            self._head = ev.digest
            if self._on_event is not None:
                self._on_event(ev)
            return ev

    def _poison(self, exc: OSError) -> None:
        self._poisoned = f"{type(exc).__name__}: {exc}"

    def sync(self) -> None:
        """Make every event written so far durable."""
        with self._mutex:
            if self._poisoned is not None:
                raise StreamPoisoned(str(self.path), self._poisoned)
            if self._fd is None or not self._dirty:
                return
            try:
                fdatasync(self._fd)
            except OSError as exc:
                self._poison(exc)
                raise StreamPoisoned(str(self.path), self._poisoned or str(exc)) from exc
            self._dirty = False

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group commit: the events appended inside share one sync, done when the block exits."""
        me = threading.get_ident()
        with self._mutex:
            self._batch_depth[me] = self._batch_depth.get(me, 0) + 1
        try:
            yield
        finally:
            with self._mutex:
                depth = self._batch_depth.pop(me) - 1
                if depth:
                    self._batch_depth[me] = depth
                last = depth == 0
            if last:
                self.sync()

    # -- closing -----------------------------------------------------------------

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Sync what is pending, close the descriptor and release the lock."""
        with self._mutex:
            try:
                if self._poisoned is None and self._fd is not None and self._dirty:
                    self.sync()
            finally:
                self._close_fd()
                self._lock.release()


def _chunks_from(path: Path, offset: int, *, limit: int | None = None, size: int = 1 << 20) -> Iterator[bytes]:
    """The file's bytes from ``offset`` (at most ``limit`` of them), a chunk at a time."""
    left = limit
    with open(path, "rb") as f:
        f.seek(offset)
        while left is None or left > 0:
            chunk = f.read(size if left is None else min(size, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk
