"""The segments a stream handle has read, kept to read again: a cache validated by the stream's tail.

A segment object is created once (``If-None-Match: *``) and never replaced, so the bytes of
the segments an :class:`~intentlog.s3.streams.ObjectStreams` handle has read and checked
stay what they were -- unless the object is deleted and created again (gc, or damage). The
cache is derived data and never trusted on its own (DESIGN §11): a reader that does not
hold the lease uses it only with a client that names objects by ETag
(:class:`~intentlog.s3.client.TaggedClient`), and each use lists the stream from the first
segment it holds (one LIST): the cache is dropped, the read starting afresh, unless the
listing still shows every segment it holds with the size and ETag it had when read or
created (a segment deleted and created again with other bytes, of any size, has another
ETag), and every segment after them continues the chain (:func:`continues`: seq and
offset; a lease one epoch up; data and release under the lease before them). A writer
holding the lease knows its own tail (the segments it created are added as it creates
them), so its reads make no request at all (as a folder's writer does not scan its file
again before each append). A lease checks the cache like any reader (a folder's writer
scans its file when it opens); without ETags it starts afresh. ``verify`` and ``seal``
read through a handle of their own.
:class:`SegmentCache` keeps at most :data:`CACHE_BYTES` of records per handle (the streams
used longest ago dropped first).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Final, NamedTuple

if TYPE_CHECKING:
    from .segments import Segment

__all__ = ["CACHE_BYTES", "Part", "SegmentCache", "continues"]

#: The records' bytes one handle keeps cached, all streams together.
CACHE_BYTES: Final = 64 << 20


class Part(NamedTuple):
    """One segment as read: its header, its records' bytes, the object's size and ETag (what a listing says)."""

    head: Segment
    payload: bytes
    size: int
    tag: str | None = None  # the object's ETag, from the create or get that gave these bytes


def continues(prev: Segment, head: Segment) -> bool:
    """Whether ``head`` is the segment that can follow ``prev``, as this module's writers write them."""
    if (head.seg, head.seq, head.off) != (prev.seg + 1, prev.end_seq, prev.end_off):
        return False
    if head.kind == "lease":
        return head.epoch == prev.epoch + 1
    return head.kind in ("data", "release") and prev.held and (head.epoch, head.holder) == (prev.epoch, prev.holder)


class SegmentCache:
    """Per stream, a run of consecutive checked segments (from any number on); thread-safe."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit = limit
        self._runs: OrderedDict[str, list[Part]] = OrderedDict()
        self._bytes = 0
        self._mutex = threading.Lock()

    def get(self, name: str) -> list[Part] | None:
        """The run kept for ``name`` (a copy), or None."""
        with self._mutex:
            run = self._runs.get(name)
            if run is None:
                return None
            self._runs.move_to_end(name)
            return list(run)

    def put(self, name: str, run: list[Part]) -> None:
        """Keep ``run`` (consecutive, checked) for ``name``, replacing what was kept."""
        with self._mutex:
            self._drop(name)
            if not run:
                return
            self._runs[name] = list(run)
            self._bytes += sum(len(p.payload) for p in run)
            while self._bytes > self.limit and self._runs:
                self._drop(next(iter(self._runs)))

    def extend(self, name: str, after: int, parts: list[Part]) -> None:
        """Add ``parts`` to the run of ``name`` when it ends at segment ``after`` (else nothing changes)."""
        with self._mutex:
            run = self._runs.get(name)
            if run is None or run[-1].head.seg != after:
                return
            run.extend(parts)
            self._bytes += sum(len(p.payload) for p in parts)
            self._runs.move_to_end(name)
            while self._bytes > self.limit and len(self._runs) > 1:
                self._drop(next(iter(self._runs)))

    def drop(self, name: str) -> None:
        with self._mutex:
            self._drop(name)

    def _drop(self, name: str) -> None:
        run = self._runs.pop(name, None)
        if run is not None:
            self._bytes -= sum(len(p.payload) for p in run)
