"""A held writer lease on one object-store stream: appends are conditional creates at the next number.

:meth:`intentlog.s3.streams.ObjectStreams.lease` grants it; see that module for the layout.
A holder fenced by a take-over finds its next segment number taken: :class:`~intentlog.errors.LeaseLost`,
nothing written (what it buffered is dropped, never stored).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from ..errors import Conflict, CorruptStream, LeaseLost, LedgerError, UsageError
from .segments import Segment, checked_records, segment_key

if TYPE_CHECKING:
    from .streams import ObjectStreams

__all__ = ["ObjectLease"]


class ObjectLease:
    """A held lease on one object-store stream: appends are conditional creates at the next number.

    Group commit: records appended with ``sync=False`` are buffered and put, with whatever
    the next synced append brings, as ONE segment by the next :meth:`sync` (or synced
    append). Until then they are counted (:attr:`next_seq`) and readable through the
    :class:`ObjectStreams` that granted the lease (its :meth:`~ObjectStreams.read` adds
    them after the stored segments), but not stored: another handle does not see them, a
    crash loses them, and a holder fenced before its sync never stores them (the put is
    refused whole: :class:`~intentlog.errors.LeaseLost`, the buffer dropped).
    """

    #: a buffer this large is put at once, before its sync (one segment stays one GET to read)
    FLUSH_BYTES = 4 << 20

    def __init__(self, streams: ObjectStreams, name: str, lease: Segment) -> None:
        self._streams = streams
        self.name = name
        self._last = lease
        self._epoch = lease.epoch
        self._holder = lease.holder
        self._state = "held"  # "held" | "released" | "lost" | "poisoned"
        self._mutex = threading.RLock()
        self._buf: list[bytes] = []
        self._buf_size = 0

    @property
    def epoch(self) -> int:
        """This lease's epoch: one more than the lease before it."""
        return self._epoch

    @property
    def next_seq(self) -> int:
        return self._last.end_seq + len(self._buf)

    @property
    def dirty(self) -> bool:
        """Whether records were appended that no sync has put yet."""
        return bool(self._buf)

    def pending(self) -> tuple[int, bytes]:
        """The last segment this lease stored and the buffered records' bytes after it (one snapshot)."""
        with self._mutex:
            return self._last.seg, b"".join(r + b"\n" for r in self._buf)

    def append(self, records: Sequence[bytes], *, expected_seq: int, sync: bool = True) -> int:
        """Append ``records`` at ``expected_seq``: one conditional create of the next segment.

        With ``sync=False`` the records are buffered (see the class): the put happens at the
        next :meth:`sync` or synced append, which stores the buffer and its own records as
        one segment. Returns the new next seq.
        """
        if isinstance(expected_seq, bool) or not isinstance(expected_seq, int):
            raise UsageError(f"expected_seq must be an int, not {expected_seq!r}")
        recs = checked_records(records)
        with self._mutex:
            self._check_state()
            if expected_seq != self.next_seq:
                raise Conflict(self.name, expected_seq, self.next_seq)
            self._buf.extend(recs)
            self._buf_size += sum(len(r) + 1 for r in recs)
            if sync or self._buf_size >= self.FLUSH_BYTES:
                self._put_buffer()
            return self.next_seq

    def sync(self) -> None:
        """Put the buffered records as one segment; a lost or failed lease says so (nothing to put: no request)."""
        with self._mutex:
            if self._state == "released":
                return  # nothing buffered: a release puts what was
            self._check_state()
            self._put_buffer()

    def _check_state(self) -> None:
        where = self._streams.where(self.name)
        if self._state == "lost":
            raise LeaseLost(self.name, where, self._epoch)
        if self._state == "poisoned":
            raise LedgerError(f"{where}: an append failed; lease the stream again to see what it holds")
        if self._state != "held":
            raise LedgerError(f"{where}: the lease was {self._state}; lease the stream again to append")

    def _put_buffer(self) -> None:
        """One conditional create of the next segment holding the buffer. Holds the mutex."""
        records, self._buf, self._buf_size = self._buf, [], 0
        if not records:
            return
        where = self._streams.where(self.name)
        last = self._last
        size = sum(len(r) + 1 for r in records)
        seg = Segment("data", last.seg + 1, last.end_seq, last.end_off, self._epoch, self._holder, len(records), size)
        body = seg.encode(records)
        key = segment_key(self.name, seg.seg)
        client = self._streams.client
        try:
            stored, tag = self._streams.put_segment(key, body)
            stored = stored or client.get(key) == body  # a retried put of ours is ours (its ETag then unknown)
        except LedgerError as exc:
            self._state = "poisoned"  # the put's outcome is unknown: the next lease reads the tail again
            self._streams.forget(self.name, self)
            raise LedgerError(f"{where}: append failed ({exc}); lease the stream again to see what it holds") from exc
        if not stored:
            self._state = "lost"  # fenced: the records buffered are dropped, never stored
            self._streams.forget(self.name, self)
            raise LeaseLost(self.name, client.describe(key), self._epoch)
        self._last = seg
        self._streams.remember(self.name, seg, body[body.index(b"\n") + 1 :], len(body), tag)
        self._streams.checkpoint_after(self.name, seg)

    def release(self) -> None:
        """Put what is buffered, then write the ``release`` segment (idempotent; a lost lease writes nothing).

        When the buffered records cannot be put because the lease was taken over, they are
        not stored and :class:`~intentlog.errors.LeaseLost` says so (never a silent loss).
        """
        with self._mutex:
            if self._state in ("released", "lost"):
                return
            if self._state == "held" and self._buf:
                try:
                    self._put_buffer()  # what was appended is stored, as a folder's release leaves it written
                except LedgerError:
                    pass  # poisoned: the put's outcome is unknown (looked at below)
            self._streams.forget(self.name, self)
            last = self._last
            if self._state == "poisoned":
                try:
                    last = self._streams.tail(self.name)
                except (LedgerError, CorruptStream, FileNotFoundError):
                    self._state = "released"
                    return
                if (last.epoch, last.holder) != (self._epoch, self._holder) or not last.held:
                    self._state = "released"
                    return
            self._state = "released"
            mark = Segment("release", last.seg + 1, last.end_seq, last.end_off, self._epoch, self._holder)
            try:
                created, tag = self._streams.put_segment(segment_key(self.name, mark.seg), mark.encode())
                if created:
                    self._streams.remember(self.name, mark, b"", len(mark.encode()), tag)
                    self._streams.checkpoint_after(self.name, mark)
            except LedgerError:
                pass  # the lease stays recorded as held: the next writer takes it over (take_over_after)

    def __enter__(self) -> ObjectLease:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
