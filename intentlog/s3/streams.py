"""Streams on an object store: numbered segment objects, created only if absent.

:class:`ObjectStreams` implements the stream seam (:class:`~intentlog.eventlog.storage.StreamStorage`)
over any :class:`~intentlog.s3.client.ObjectClient`. A stream ``NAME`` is the objects
``tasks/NAME/s/000000000000``, ``.../000000000001``, ...: each *segment* is one header line
(what it is, its number, the seq and byte offset it starts at, the lease epoch) followed by
the records of one append (one event or one group-commit batch). Every segment is written
with a conditional create (``If-None-Match: *``), so the store itself refuses a second
object at a number: two writers can never both extend a stream from the same place.

The writer lease is a segment too. :meth:`ObjectStreams.lease` writes a ``lease`` segment
(epoch + 1, a random holder token) at the next number; a holder that lost its lease — taken
over while it was stopped — is fenced by its very next put, which finds that number taken
(:class:`~intentlog.errors.LeaseLost`, nothing written). :meth:`ObjectLease.release` writes a
``release`` segment. A lease that is neither released nor moving is only ever *taken over*
on request (``take_over_after``: the tail has not moved for that long on this process's own
monotonic clock), never by comparing timestamps another machine wrote.

Finding the tail is cheap: every :data:`CHECKPOINT_EVERY` segments a checkpoint object
``tasks/NAME/c/SEGNO.SEQ.OFFSET`` is created (its name is its content: a listing gives it
without a get), and the tail is found by listing segments from the last checkpoint (two
lists and one get). Reads list from the checkpoint nearest below the offset and get the
segments after it, checking each header continues the one before (seq, offset, epoch).
A checkpoint is only a hint: one whose segment's header does not say what its name says
is ignored (the read starts at segment 0; a tail past the last segment is found by
listing from 0). An object under ``s/`` whose name is not 12 ASCII digits, a ``lease`` or
``release`` segment carrying records, and a ``create`` segment anywhere but at number 0
are :class:`~intentlog.errors.CorruptStream`.

Guarantees: those of the seam. An append is durable when the store acknowledged its put; a
put whose answer was lost and retried is recognised (the stored bytes are this writer's own
segment) rather than mistaken for a lost lease.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType

import orjson

from ..errors import Conflict, CorruptStream, LeaseLost, LedgerError, TaskBusy, UsageError
from ..eventlog.format import TASK_ID_RE, check_task_id
from ..eventlog.reader import MAX_LINE
from .client import ObjectClient

__all__ = ["CHECKPOINT_EVERY", "GC_HOLDER", "ObjectLease", "ObjectStreams", "Segment"]

#: A checkpoint object is created after every segment whose number is a multiple of this.
CHECKPOINT_EVERY = 64
_WIDTH = 12
_POLL = 0.05
_READERS = 8
_DIGITS = frozenset("0123456789")
#: a lease whose holder token starts so is gc's: never taken over by a writer (a retired stream keeps it as its tail)
GC_HOLDER = "gc-"


@dataclass(frozen=True, slots=True)
class Segment:
    """A segment's header: what the object at ``seg`` says about itself and the records it holds."""

    kind: str  # "create" | "lease" | "data" | "release"
    seg: int
    seq: int  # records in the stream before this segment
    off: int  # bytes of records in the stream before this segment
    epoch: int
    holder: str
    n: int = 0  # records in this segment
    size: int = 0  # bytes of records in this segment

    @property
    def held(self) -> bool:
        """True when the stream is leased after this segment (a lease or a holder's data)."""
        return self.kind in ("lease", "data")

    @property
    def end_seq(self) -> int:
        return self.seq + self.n

    @property
    def end_off(self) -> int:
        return self.off + self.size

    def encode(self, records: Sequence[bytes] = ()) -> bytes:
        head = {"v": 1, "t": self.kind, "seg": self.seg, "seq": self.seq, "off": self.off, "epoch": self.epoch}
        head |= {"holder": self.holder, "n": len(records)}
        return orjson.dumps(head) + b"\n" + b"".join(r + b"\n" for r in records)


def _decode(where: str, seg: int, body: bytes) -> tuple[Segment, bytes]:
    head_line, nl, payload = body.partition(b"\n")
    try:
        head = orjson.loads(head_line) if nl else {}
        kind, number, seq, off = head["t"], head["seg"], head["seq"], head["off"]
        epoch, holder, n = head["epoch"], head["holder"], head["n"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise CorruptStream(where, 1, "not a stream segment (its header line is unreadable)") from None
    ok = kind in ("create", "lease", "data", "release") and number == seg and payload.count(b"\n") == n
    if not ok or (payload and not payload.endswith(b"\n")):
        raise CorruptStream(where, 1, f"the segment header does not describe segment {seg} and its records")
    if (kind == "create") != (seg == 0):
        raise CorruptStream(where, 1, f"segment {seg} is a {kind!r} segment: a stream is created at segment 0 only")
    if kind in ("lease", "release") and payload:
        raise CorruptStream(where, 1, f"segment {seg} is a {kind!r} segment carrying records: only data segments do")
    return Segment(kind, seg, seq, off, epoch, holder, n, len(payload)), payload


def _is_number(text: str) -> bool:
    """Exactly 12 ASCII digits: a segment number as this module writes it."""
    return len(text) == _WIDTH and set(text) <= _DIGITS


def _checked(records: Sequence[bytes]) -> list[bytes]:
    """The records as a list, each one line of bytes no longer than a stream line may be."""
    for r in records:
        if not isinstance(r, bytes) or b"\n" in r:
            raise UsageError(f"a record is bytes without a newline, not {r[:40]!r}; nothing was written")
        if len(r) >= MAX_LINE:
            raise UsageError(f"a record of {len(r)} bytes is longer than a stream line may be ({MAX_LINE} bytes)")
    return list(records)


def _describes(point: tuple[int, int, int], first: Segment, offset: int) -> bool:
    """Whether checkpoint ``point`` (segment, seq and offset after it) is true of ``first``, the segment it names."""
    return (first.seg, first.end_seq, first.end_off) == point and first.off <= offset


def _segment_key(name: str, seg: int) -> str:
    return f"tasks/{name}/s/{seg:0{_WIDTH}d}"


class ObjectStreams:
    """:class:`~intentlog.eventlog.storage.StreamStorage` over an object store's conditional create."""

    def __init__(self, client: ObjectClient) -> None:
        self.client = client
        #: the leases held through this handle, by stream: its reads see their buffered records
        self._held: dict[str, ObjectLease] = {}
        self._held_mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"ObjectStreams({self.client.describe('tasks')!r})"

    def where(self, name: str) -> str:
        """Where the stream ``name`` lives, for messages."""
        return self.client.describe(f"tasks/{name}/")

    # -- the seam ------------------------------------------------------------------------

    def create(self, name: str, records: Sequence[bytes] = ()) -> None:
        """Make the stream holding ``records`` in one conditional create (its segment 0)."""
        check_task_id(name)
        recs = _checked(records)
        head = Segment("create", 0, 0, 0, 0, "", len(recs), sum(len(r) + 1 for r in recs))
        if not self.client.create(_segment_key(name, 0), head.encode(recs)):
            raise LedgerError(f"{self.where(name)}: the stream exists already; lease it to append")

    def lease(
        self,
        name: str,
        *,
        wait: float = 0.0,
        create: Callable[[], bytes] | None = None,
        take_over_after: float | None = None,
        holder: str | None = None,
    ) -> ObjectLease:
        """The writer lease, waiting up to ``wait`` s for a holder to release it (``TaskBusy`` then).

        With ``take_over_after`` the lease is taken from a holder whose stream has not moved
        for that many seconds of this process's monotonic clock (0: at once); the old holder
        is fenced by its next put. ``FileNotFoundError`` if the stream does not exist, unless
        ``create`` is given: the stream is then created holding the record it returns (one
        conditional create: it appears whole or not at all; when another writer created it
        first, theirs stands and this one leases it like any other). ``holder``: the lease's
        token (gc's start with :data:`GC_HOLDER`; a stream whose tail is gc's lease is refused).
        """
        check_task_id(name)
        start = time.monotonic()
        seen: tuple[int, float] | None = None  # (tail seg, when first seen here)
        while True:
            try:
                tail = self.tail(name)
            except FileNotFoundError:
                if create is None:
                    raise
                try:
                    self.create(name, [create()])
                except LedgerError:
                    if not self._exists(name):
                        raise
                create = None  # created (by this writer or another): lease it
                continue
            if tail.kind == "lease" and tail.holder.startswith(GC_HOLDER):  # gc is deleting it, or deleted it
                raise LedgerError(
                    f"{self.where(name)}: gc holds this stream's lease (it deleted the task or is deleting it): a task "
                    "id gc deleted on a store is never used again, choose another; nothing was written"
                )
            now = time.monotonic()
            if seen is None or seen[0] != tail.seg:
                seen = (tail.seg, now)
            stale = take_over_after is not None and now - seen[1] >= take_over_after
            if not tail.held or stale:
                token = holder if holder is not None else secrets.token_hex(8)
                lease = Segment("lease", tail.seg + 1, tail.end_seq, tail.end_off, tail.epoch + 1, token)
                if self.client.create(_segment_key(name, lease.seg), lease.encode()):
                    self.checkpoint_after(name, lease)
                    held = ObjectLease(self, name, lease)
                    with self._held_mutex:
                        self._held[name] = held
                    return held
                continue  # another writer got there first: look again
            if now - start >= wait:
                raise TaskBusy(name, self.where(name), None)
            time.sleep(_POLL)

    def read(self, name: str, offset: int = 0) -> bytes:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise UsageError(f"offset must be an int >= 0, not {offset!r}")
        check_task_id(name)
        with self._held_mutex:
            held = self._held.get(name)
        last, pending = held.pending() if held is not None else (None, b"")
        point = self._checkpoint_below(name, offset, last)
        parts = self._fetch_from(name, point[0], last) if point is not None else []
        if point is None or not parts or not _describes(point, parts[0][0], offset):
            parts = self._fetch_from(name, None, last)  # no hint, or one that lies (forged or stale): from 0
        if not parts:
            raise FileNotFoundError(f"{self.where(name)}: no such stream (create it first)")
        base = parts[0][0].off  # <= offset: 0, or a checkpointed segment that starts at or before it
        return (b"".join(payload for _, payload in parts) + pending)[offset - base :]

    def _fetch_from(self, name: str, start: int | None, last: int | None) -> list[tuple[Segment, bytes]]:
        """The segments from ``start`` (or 0) up to ``last`` (or the tail), checked; none listed: ``[]``."""
        numbers = self._segment_numbers(name, start)
        if last is not None:  # this handle's writer: the stream as it wrote it, then what it buffered
            numbers = [n for n in numbers if n <= last]
        return self._fetch_all(name, numbers)

    def _forget(self, name: str, lease: ObjectLease) -> None:
        """``lease`` no longer holds ``name`` through this handle (released or lost)."""
        with self._held_mutex:
            if self._held.get(name) is lease:
                del self._held[name]

    def names(self) -> list[str]:
        return [n for n in self.client.folders("tasks") if TASK_ID_RE.match(n)]

    def _exists(self, name: str) -> bool:
        return self.client.get(_segment_key(name, 0)) is not None

    # -- the tail and the segments -------------------------------------------------------

    def tail(self, name: str) -> Segment:
        """The stream's last segment (``FileNotFoundError`` if the stream does not exist)."""
        start = self._last_checkpoint(name)
        last = self._last_listed(name, start)
        if last is None and start is not None:  # nothing from the checkpoint on: it is past the tail (a lie)
            last = self._last_listed(name, None)
        if last is None:
            raise FileNotFoundError(f"{self.where(name)}: no such stream (create it first)")
        return self.segment(name, last)[0]

    def _last_listed(self, name: str, start: int | None) -> int | None:
        """The last segment number listed from ``start`` (included) or from 0; None when none is."""
        numbers = self._segment_numbers(name, start)
        return numbers[-1] if numbers else None

    def segment(self, name: str, seg: int) -> tuple[Segment, bytes]:
        """Segment ``seg``'s header and records (``CorruptStream`` when it is missing or unreadable)."""
        key = _segment_key(name, seg)
        body = self.client.get(key)
        if body is None:
            raise CorruptStream(self.client.describe(key), 1, "a listed segment is missing")
        return _decode(self.client.describe(key), seg, body)

    def _checkpoints(self, name: str) -> list[tuple[int, int, int]]:
        """The checkpoints named ``SEGNO.SEQ.OFFSET`` in ASCII digits (others are not checkpoints: ignored)."""
        found = []
        for key, _ in self.client.scan(f"tasks/{name}/c"):
            parts = key.rsplit("/", 1)[1].split(".")
            if len(parts) == 3 and _is_number(parts[0]) and all(p and set(p) <= _DIGITS for p in parts[1:]):
                found.append((int(parts[0]), int(parts[1]), int(parts[2])))
        return sorted(found)

    def _last_checkpoint(self, name: str) -> int | None:
        points = self._checkpoints(name)
        return points[-1][0] if points else None

    def _checkpoint_below(self, name: str, offset: int, upto: int | None = None) -> tuple[int, int, int] | None:
        below = [p for p in self._checkpoints(name) if p[2] <= offset and (upto is None or p[0] <= upto)]
        return below[-1] if below else None

    def checkpoint_after(self, name: str, seg: Segment) -> None:
        """Create the checkpoint after ``seg`` when its number calls for one (a hint: reads work without it)."""
        if seg.seg % CHECKPOINT_EVERY == 0 and seg.seg:
            key = f"tasks/{name}/c/{seg.seg:0{_WIDTH}d}.{seg.end_seq}.{seg.end_off}"
            try:
                self.client.create(key, b"")
            except LedgerError:
                pass  # a checkpoint only makes finding the tail cheaper; the next one will do

    def _segment_numbers(self, name: str, start: int | None) -> list[int]:
        """Segment numbers from ``start`` (the checkpointed one, included) or from 0, in order."""
        after = _segment_key(name, start - 1) if start else None
        numbers = []
        for key, _ in self.client.scan(f"tasks/{name}/s", after):
            text = key.rsplit("/", 1)[1]
            if not _is_number(text):
                raise CorruptStream(
                    self.client.describe(key), 1, f"not a segment: {text!r} is not a {_WIDTH}-digit segment number; "
                    "remove the stray object (the store's own tools) or restore the stream from a copy"
                )
            numbers.append(int(text))
        if not start and numbers and numbers[0] != 0:  # listed from 0: keys without a creation are no stream
            raise CorruptStream(
                self.client.describe(_segment_key(name, 0)), 1, "segment 0 is missing: these segments are no "
                "stream (what is left of one gc deleted, or a put a fenced writer made after it); 'intentlog gc "
                "--apply' removes them"
            )
        return numbers

    def _fetch_all(self, name: str, numbers: list[int]) -> list[tuple[Segment, bytes]]:
        """The segments, fetched in parallel, each checked to continue the one before."""
        if not numbers:
            return []
        with ThreadPoolExecutor(min(_READERS, len(numbers))) as pool:
            parts = list(pool.map(lambda n: self.segment(name, n), numbers))
        prev: Segment | None = None
        for expected, (head, _) in zip(range(numbers[0], numbers[0] + len(numbers)), parts, strict=True):
            where = self.client.describe(_segment_key(name, head.seg))
            if head.seg != expected:
                raise CorruptStream(where, 1, f"segment {expected} is missing: the stream has a hole")
            if prev is not None and (head.seq, head.off) != (prev.end_seq, prev.end_off):
                raise CorruptStream(where, head.seq + 1, "the segment does not continue the one before it")
            if prev is not None and head.kind == "data" and (head.epoch, head.holder) != (prev.epoch, prev.holder):
                raise CorruptStream(where, head.seq + 1, "records written under a lease that was not the current one")
            if prev is None and numbers[0] == 0 and head.kind != "create":
                raise CorruptStream(where, 1, "the stream's first segment is not its creation")
            prev = head
        return parts


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
        recs = _checked(records)
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
        key = _segment_key(self.name, seg.seg)
        client = self._streams.client
        try:
            stored = client.create(key, body) or client.get(key) == body  # a retried put of ours is ours
        except LedgerError as exc:
            self._state = "poisoned"  # the put's outcome is unknown: the next lease reads the tail again
            self._streams._forget(self.name, self)
            raise LedgerError(f"{where}: append failed ({exc}); lease the stream again to see what it holds") from exc
        if not stored:
            self._state = "lost"  # fenced: the records buffered are dropped, never stored
            self._streams._forget(self.name, self)
            raise LeaseLost(self.name, client.describe(key), self._epoch)
        self._last = seg
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
            self._streams._forget(self.name, self)
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
                if self._streams.client.create(_segment_key(self.name, mark.seg), mark.encode()):
                    self._streams.checkpoint_after(self.name, mark)
            except LedgerError:
                pass  # the lease stays recorded as held: the next writer takes it over (take_over_after)

    def __enter__(self) -> ObjectLease:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
