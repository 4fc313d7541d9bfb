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
are :class:`~intentlog.errors.CorruptStream`. A ``cut`` segment (what ``repair`` writes, or
a writer creating again an id gc deleted) voids the segments from the number it names up to
itself: readers skip them (:func:`~intentlog.s3.segments.live_numbers`), which stay in place.

Before a lease is taken the store's seals are checked (:meth:`ObjectStreams.check_seal`,
:mod:`intentlog.s3.bounds`): a stream behind what any seal recorded is refused, nothing
written. A handle keeps the segments it read and created (:mod:`intentlog.s3.segcache`),
checked against a listing (sizes and ETags) on every use: a re-read GETs only new segments,
and the holder of the lease reads its own stream with no request.

Guarantees: those of the seam. An append is durable when the store acknowledged its put; a
put whose answer was lost and retried is recognised (the stored bytes are this writer's own
segment) rather than mistaken for a lost lease.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import orjson
from blake3 import blake3

from ..errors import CorruptStream, LedgerError, TaskBusy, UsageError
from ..eventlog.format import TASK_ID_RE, check_task_id
from ..eventlog.storage import NO_STREAM
from .bounds import SealReader, seal_refusal
from .client import ObjectClient, TaggedClient
from .holder import Holder, this_process
from .lease import HEARTBEAT_EVERY, ObjectLease, beats_folder, given_up_tokens, held_tokens
from .segcache import Part, SegmentCache, continues
from .segments import (
    DIGITS,
    WIDTH,
    Segment,
    checked_records,
    decode_segment,
    describes,
    is_number,
    live_numbers,
    segment_key,
)

__all__ = ["CHECKPOINT_EVERY", "GC_HOLDER", "ObjectLease", "ObjectStreams", "Segment", "listing_stamp"]

#: A checkpoint object is created after every segment whose number is a multiple of this.
CHECKPOINT_EVERY = 64
_POLL = 0.05
#: how often a writer watching a held stream for a take-over looks again, once its ``wait`` is over
_WATCH = 1.0
_READERS = 8
#: a lease whose holder token starts so is gc's: never taken over by a writer (a retired stream keeps it as its tail)
GC_HOLDER = "gc-"


def listing_stamp(listing: Sequence[tuple[int, int, str | None]]) -> str | None:
    """A stream's stamp from the ``(number, size, ETag)`` of every segment it has, in order: the count, then
    128 bits of BLAKE3 over the listing (:data:`~intentlog.eventlog.storage.NO_STREAM`: no segment; None: one
    without an ETag)."""
    if not listing:
        return NO_STREAM
    if any(tag is None for _, _, tag in listing):
        return None
    return f"s{len(listing)}.{blake3(orjson.dumps(listing)).hexdigest(length=16)}"


class ObjectStreams:
    """:class:`~intentlog.eventlog.storage.StreamStorage` over an object store's conditional create."""

    def __init__(
        self,
        client: ObjectClient,
        *,
        before_write: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        #: this process's monotonic clock and its sleep: every wait and take-over is measured on them only
        self.clock = clock
        self.sleep = sleep
        #: called before every segment this handle puts (a store opened to read runs its fencing probe there)
        self.before_write = before_write
        #: the leases held through this handle, by stream: its reads see their buffered records
        self._held: dict[str, ObjectLease] = {}
        self._held_mutex = threading.Lock()
        self._seals = SealReader(client)
        #: the segments read or created through this handle, by stream (checked against the tail on every use)
        self._cache = SegmentCache()
        #: the process holding each stream's lease, by stream, as (epoch, holder) (found once per epoch)
        self._holders: dict[str, tuple[int, Holder | None]] = {}
        #: whether the client names objects by ETag: only then does a reader not holding the lease use the cache
        self._tagged = isinstance(client, TaggedClient)
        #: the stream id the store's gc log records gc finished deleting under a name (set by the ledger's
        #: storage, :func:`intentlog.s3.on_client`): that id's stream is retired, and the name may be created again
        self.deleted: Callable[[str], str | None] | None = None

    def __repr__(self) -> str:
        return f"ObjectStreams({self.client.describe('tasks')!r})"

    def where(self, name: str) -> str:
        """Where the stream ``name`` lives, for messages."""
        return self.client.describe(f"tasks/{name}/")

    # -- the seam ------------------------------------------------------------------------

    def create(self, name: str, records: Sequence[bytes] = ()) -> None:
        """Make the stream holding ``records`` in one conditional create (its segment 0)."""
        self._create(name, records)

    def _create(self, name: str, records: Sequence[bytes]) -> Segment:
        check_task_id(name)
        recs = checked_records(records)
        head = Segment("create", 0, 0, 0, 0, "", len(recs), sum(len(r) + 1 for r in recs))
        body = head.encode(recs)
        created, tag = self.put_segment(segment_key(name, 0), body)
        if not created:
            raise LedgerError(f"{self.where(name)}: the stream exists already; lease it to append")
        self._cache.put(name, [Part(head, body[body.index(b"\n") + 1 :], len(body), tag)])
        return head

    def put_segment(self, key: str, body: bytes) -> tuple[bool, str | None]:
        """A conditional create; whether it stored ``body`` and, when the client says, the object's ETag.

        Every segment of every stream (a creation, a lease, an append, a release) is put here,
        after :attr:`before_write`.
        """
        if self.before_write is not None:
            self.before_write()
        if isinstance(self.client, TaggedClient):
            return self.client.create_tagged(key, body)
        return self.client.create(key, body), None

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

        With ``take_over_after`` the lease is taken from a holder whose stream -- its tail
        segment and its holder's heartbeats (:data:`~intentlog.s3.lease.HEARTBEAT_EVERY`) --
        has not moved for that many seconds of this process's monotonic clock (0: at once).
        No timestamp another machine wrote is ever compared. The watch goes on past ``wait``
        until the stream is seen to move (``TaskBusy``: a live holder keeps its lease) or
        has stood still long enough; a holder this machine knows alive (it runs here:
        :meth:`~intentlog.s3.holder.Holder.alive`) is refused once ``wait`` is over. The
        take-over is a ``lease`` segment at the next number, as any lease: the old holder
        is fenced by its next put. ``take_over_after=None`` (or infinite): never taken
        (``TaskBusy`` once ``wait`` is over).

        ``FileNotFoundError`` if the stream does not exist, unless ``create`` is given: the
        stream is then created holding the record it returns (one conditional create: it
        appears whole or not at all; when another writer created it first, theirs stands
        and this one leases it like any other). ``holder``: the lease's token (gc's start
        with :data:`GC_HOLDER`; a stream whose tail is gc's lease is refused).
        """
        check_task_id(name)
        if isinstance(take_over_after, bool) or not (
            take_over_after is None or (isinstance(take_over_after, int | float) and take_over_after >= 0)
        ):
            raise UsageError(f"take_over_after must be a number of seconds >= 0 or None, not {take_over_after!r}")
        if take_over_after is not None and math.isinf(take_over_after):
            take_over_after = None  # never
        if not self._tagged:  # without ETags a writer's open reads the stream afresh, as a folder's scans its file
            self._cache.drop(name)
        start = self.clock()
        seen: tuple[object, float] | None = None  # (the stream's state, when first seen so here)
        moved = False  # whether the state changed while watched: its holder is alive
        made: Segment | None = None  # the stream's creation, just put by this writer: its tail, known
        sealed = False  # whether the seals were checked (once: after gc's refusal, before any put)
        while True:
            try:
                tail, made = made or self.tail(name), None
            except FileNotFoundError:
                if create is None:
                    raise
                if not sealed:
                    self.check_seal(name)  # a sealed stream that is gone is refused, never created again
                    sealed = True
                try:
                    made = self._create(name, [create()])
                except LedgerError:
                    if not self._exists(name):
                        raise
                create = None  # created (by this writer or another): lease it
                continue
            if tail.kind == "lease" and tail.holder.startswith(GC_HOLDER):  # gc is deleting it, or deleted it
                allowed, born = self._reborn(name, tail, create, holder) if create is not None else (False, None)
                if born is not None:  # created again by this writer, which holds it
                    held = ObjectLease(self, name, born)
                    with self._held_mutex:
                        self._held[name] = held
                    return held
                if allowed:
                    create = None  # created again by another writer: lease it
                    continue
                raise LedgerError(
                    f"{self.where(name)}: gc holds this stream's lease and the store's gc log records no finished "
                    "deletion of it (gc is deleting it, or a gc run stopped midway): the id is never used again until "
                    "a gc run records its deletion finished; nothing was written"
                )
            if not sealed:
                self.check_seal(name)
                sealed = True
            now = self.clock()
            alive: bool | None = None
            if tail.held:
                state: object = (tail.seg, self._last_beat(name) if take_over_after is not None else None)
                if seen is None or seen[0] != state:
                    moved = moved or seen is not None
                    seen = (state, now)
                who = self._holder_of(name, tail)
                alive = True if tail.holder in held_tokens() else (who.alive() if who is not None else None)
            still = now - seen[1] if seen is not None else 0.0
            ours = tail.held and tail.holder in given_up_tokens()  # this process gave it up; its release was lost
            # a holder on this machine whose process has ended can never write again: taken at once (the
            # store's conditional create fences it all the same, were that belief ever wrong)
            ended = alive is False and take_over_after is not None and math.isfinite(take_over_after)
            if not tail.held or ours or ended or (take_over_after is not None and still >= take_over_after):
                taken = self._take(name, tail, holder)
                if taken is not None:
                    return taken
                continue  # another writer got there first: look again
            if now - start >= wait and (take_over_after is None or moved or alive):
                who = self._holder_of(name, tail)
                raise TaskBusy(
                    name,
                    self.where(name),
                    who.pid if who is not None else None,
                    holder_host=who.host if who is not None else None,
                    still_for=still,
                    take_over_after=take_over_after,
                    alive=alive,
                )
            self.sleep(_POLL if now - start < wait else min(_WATCH, HEARTBEAT_EVERY))

    def _take(self, name: str, tail: Segment, holder: str | None) -> ObjectLease | None:
        """Put a ``lease`` segment after ``tail``: the lease, or None when another writer put one there first."""
        token = holder if holder is not None else secrets.token_hex(8)
        seg = Segment("lease", tail.seg + 1, tail.end_seq, tail.end_off, tail.epoch + 1, token, who=this_process())
        body = seg.encode()
        created, tag = self.put_segment(segment_key(name, seg.seg), body)
        if not created and self.client.get(segment_key(name, seg.seg)) != body:  # a retried put of ours is ours
            return None
        self.remember(name, seg, b"", len(body), tag)
        self.checkpoint_after(name, seg)
        held = ObjectLease(self, name, seg, lives_with_process=not token.startswith(GC_HOLDER))
        with self._held_mutex:
            self._held[name] = held
        if tail.held:  # a take-over: the holder taken from never deleted its heartbeats (a release does)
            for key, _ in self.client.scan(beats_folder(name)):
                try:
                    self.client.delete(key)
                except LedgerError:
                    pass  # a stale heartbeat only makes a later watcher wait longer
        return held

    def _last_beat(self, name: str) -> str | None:
        """The newest heartbeat object of ``name``'s lease holders (None: none stands)."""
        last = None
        for key, _ in self.client.scan(beats_folder(name)):
            last = key
        return last

    def _holder_of(self, name: str, tail: Segment) -> Holder | None:
        """The process that took the lease ``tail`` is under (its ``lease`` segment records it; None if not)."""
        if tail.kind == "lease":
            return tail.who
        known = self._holders.get(name)
        if known is not None and known[0] == tail.epoch:
            return known[1]
        try:
            who = self.holder_segment(name, tail).who
        except (CorruptStream, LedgerError):
            return None
        self._holders[name] = (tail.epoch, who)
        return who

    def holder_segment(self, name: str, tail: Segment) -> Segment:
        """The ``lease`` segment the held stream with tail ``tail`` is under: the first of its epoch.

        Epochs never go down along a stream (a lease is one more than the tail it follows;
        data and release segments carry their lease's): a binary search, a GET per step.
        """
        if tail.kind == "lease" or not tail.held:
            return tail
        lo, hi = 0, tail.seg  # the first segment of tail.epoch is in (lo, hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.segment(name, mid)[0].epoch >= tail.epoch:
                hi = mid
            else:
                lo = mid
        found = self.segment(name, hi)[0]
        if found.kind != "lease" or found.epoch != tail.epoch:
            raise CorruptStream(self.where(name), found.seq + 1, "the holder's data does not follow a lease segment")
        return found

    def check_seal(self, name: str) -> None:
        """Refuse a stream behind what any seal recorded for it (``CorruptStream``, as a folder's writer does).

        The seals are listed once (one LIST; each seal object got once per handle) and,
        only when one seals ``name``, the stream is read and judged
        (:func:`~intentlog.s3.bounds.seal_refusal`): fewer events than sealed, another
        digest at the sealed seq, another stream id, or gone while sealed. Nothing is written.
        """
        bound = self._seals.bounds().get(name)
        if bound is None:
            return
        try:
            data: bytes | None = self.read(name)
        except FileNotFoundError:
            data = None
        refused = seal_refusal(self.where(name), data, bound)
        if refused is not None and not self._retired_seal(name, bound[1].stream, data):
            raise refused

    def read(self, name: str, offset: int = 0) -> bytes:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise UsageError(f"offset must be an int >= 0, not {offset!r}")
        check_task_id(name)
        with self._held_mutex:
            held = self._held.get(name)
        last, pending = held.pending() if held is not None else (None, b"")
        parts = self._cached(name, offset, last)
        if parts is None:
            try:
                point = self._checkpoint_below(name, offset, last)
                parts = self._fetch_from(name, point[0], last) if point is not None else []
                if point is None or not parts or not describes(point, parts[0].head, offset):
                    parts = self._fetch_from(name, None, last)  # no hint, or one that lies (forged or stale): from 0
            except CorruptStream:
                if last is None and self.retired(name):
                    raise FileNotFoundError(
                        f"{self.where(name)}: no such stream (gc deleted it)"
                    ) from None
                raise
            self._cache.put(name, parts)
        if not parts:
            raise FileNotFoundError(f"{self.where(name)}: no such stream (create it first)")
        base = parts[0].head.off  # <= offset: 0, or a checkpointed segment that starts at or before it
        return (b"".join(p.payload for p in parts) + pending)[offset - base :]

    def retired(self, name: str) -> bool:
        """Whether ``name``'s tail is gc's lease: gc deleted the stream (or is deleting it) and keeps what is left.

        Readers then find no stream (``FileNotFoundError``), as in a folder once gc removed the
        file; writers are refused by :meth:`lease`. ``verify`` does not take this for granted:
        it judges what is left against the store's gc log.
        """
        try:
            tail = self.tail(name)
        except (CorruptStream, FileNotFoundError):
            return False
        return tail.kind == "lease" and tail.holder.startswith(GC_HOLDER)

    def remember(self, name: str, seg: Segment, payload: bytes, size: int, tag: str | None = None) -> None:
        """Keep ``seg``, just created through this handle, after the cached segments (when they end just before it)."""
        self._cache.extend(name, seg.seg - 1, [Part(seg, payload, size, tag)])

    def _cached(self, name: str, offset: int, last: int | None) -> list[Part] | None:
        """The stream's segments from the cache, up to ``last`` (this handle's writer) or the tail; None: read afresh.

        A writer's own tail is known: no request. Otherwise (only with a client that gives
        ETags) one LIST from the first cached segment: every cached segment must still be
        listed, with the size and ETag it had, and the
        segments after them are fetched and checked to continue the chain; anything else
        drops the cache (the read starts afresh and says what is wrong).
        """
        run = self._cache.get(name)
        if run is None or run[0].head.off > offset:
            return None
        top = run[-1]
        if last is not None and top.head.seg >= last:
            return [p for p in run if p.head.seg <= last]
        if not self._tagged or any(p.tag is None for p in run):
            return None  # without ETags a listing cannot tell a replaced segment of one size: read afresh
        listing = self._listing(name, run[0].head.seg)
        fresh: list[Part] | None = None
        if listing[: len(run)] == [(p.head.seg, p.size, p.tag) for p in run]:
            numbers = [n for n, _, _ in listing[len(run) :] if last is None or n <= last]
            try:
                fresh = self._fetch_all(name, numbers)  # None (a cut voids cached segments): read afresh
            except CorruptStream:
                fresh = None  # the fresh read says what is wrong
            seen = {n: (size, tag) for n, size, tag in listing}
            if fresh and (
                not continues(top.head, fresh[0].head) or any((p.size, p.tag) != seen[p.head.seg] for p in fresh)
            ):
                fresh = None
        if fresh is None:
            self._cache.drop(name)
            return None
        self._cache.extend(name, top.head.seg, fresh)
        return run + fresh

    def _fetch_from(self, name: str, start: int | None, last: int | None) -> list[Part]:
        """The segments from ``start`` (or 0) up to ``last`` (or the tail), checked; none listed: ``[]``."""
        numbers = self._segment_numbers(name, start)
        if start is None and numbers and numbers[0] != 0:  # read from 0: keys without a creation are no stream
            raise CorruptStream(
                self.client.describe(segment_key(name, 0)), 1, "segment 0 is missing: these segments are no "
                "stream (what is left of one gc deleted, or a put a fenced writer made after it); 'intentlog gc "
                "--apply' removes them"
            )
        if last is not None:  # this handle's writer: the stream as it wrote it, then what it buffered
            numbers = [n for n in numbers if n <= last]
        return self._fetch_all(name, numbers) or []  # None: a cut voids where the read began (read again from 0)

    def forget(self, name: str, lease: ObjectLease) -> None:
        """``lease`` no longer holds ``name`` through this handle (released or lost)."""
        with self._held_mutex:
            if self._held.get(name) is lease:
                del self._held[name]

    def names(self) -> list[str]:
        return [n for n in self.client.folders("tasks") if TASK_ID_RE.match(n)]

    def stamps(self, names: Sequence[str]) -> dict[str, str | None]:
        """See :meth:`StreamStorage.stamps <intentlog.eventlog.storage.StreamStorage.stamps>`: one LIST per stream
        (its segments' numbers, sizes and ETags, several streams listed at once); None for every stream when the
        client gives no ETags (a segment replaced by other bytes of its size would look the same)."""
        for name in names:
            check_task_id(name)
        if not self._tagged or not names:
            return dict.fromkeys(names)
        if len(names) == 1:
            return {names[0]: listing_stamp(self._listing(names[0], None))}
        with ThreadPoolExecutor(min(_READERS, len(names))) as pool:
            got = list(pool.map(lambda n: listing_stamp(self._listing(n, None)), names))
        return dict(zip(names, got, strict=True))

    def known_stamp(self, name: str, last: Segment) -> str | None:
        """The stamp of ``name`` as this handle knows it ends at ``last`` (a segment it just created), no request.

        Only when the segments this handle keeps of it run from 0 to ``last`` without a gap,
        each with its ETag: those before this handle's lease were checked against a listing
        (or read) when it leased, the rest it created. None otherwise.
        """
        run = self._cache.get(name)
        if not run or run[-1].head != last or any(p.head.seg != i or p.tag is None for i, p in enumerate(run)):
            return None
        return listing_stamp([(p.head.seg, p.size, p.tag) for p in run])

    def _exists(self, name: str) -> bool:
        return self.client.get(segment_key(name, 0)) is not None

    # -- the tail and the segments -------------------------------------------------------

    def tail(self, name: str) -> Segment:
        """The stream's last segment (``FileNotFoundError`` if the stream does not exist).

        With segments of the stream cached: one LIST from the first of them (and a GET per
        segment after them, kept); else two LISTs and one GET, from the last checkpoint
        (the segment then kept, to start from next time).
        """
        run = self._cache.get(name)
        if run is not None:
            parts = self._cached(name, run[0].head.off, None)
            if parts:
                return parts[-1].head
        start = self._last_checkpoint(name)
        last = self._last_listed(name, start)
        if last is None and start is not None:  # nothing from the checkpoint on: it is past the tail (a lie)
            last = self._last_listed(name, None)
        if last is None:
            raise FileNotFoundError(f"{self.where(name)}: no such stream (create it first)")
        part = self._load(name, last)
        if run is None:
            self._cache.put(name, [part])  # reads from its offset on, and the tail again, start from it
        return part.head

    def _last_listed(self, name: str, start: int | None) -> int | None:
        """The last segment number listed from ``start`` (included) or from 0; None when none is."""
        numbers = self._segment_numbers(name, start)
        return numbers[-1] if numbers else None

    def segment(self, name: str, seg: int) -> tuple[Segment, bytes]:
        """Segment ``seg``'s header and records (``CorruptStream`` when it is missing or unreadable)."""
        part = self._load(name, seg)
        return part.head, part.payload

    def _load(self, name: str, seg: int) -> Part:
        key = segment_key(name, seg)
        tag: str | None = None
        if isinstance(self.client, TaggedClient):
            got = self.client.get_tagged(key)
            body, tag = (None, None) if got is None else got
        else:
            body = self.client.get(key)
        if body is None:
            raise CorruptStream(self.client.describe(key), 1, "a listed segment is missing")
        head, payload = decode_segment(self.client.describe(key), seg, body)
        return Part(head, payload, len(body), tag)

    def _checkpoints(self, name: str) -> list[tuple[int, int, int]]:
        """The checkpoints named ``SEGNO.SEQ.OFFSET`` in ASCII digits (others are not checkpoints: ignored)."""
        found = []
        for key, _ in self.client.scan(f"tasks/{name}/c"):
            parts = key.rsplit("/", 1)[1].split(".")
            if len(parts) == 3 and is_number(parts[0]) and all(p and set(p) <= DIGITS for p in parts[1:]):
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
            key = f"tasks/{name}/c/{seg.seg:0{WIDTH}d}.{seg.end_seq}.{seg.end_off}"
            try:
                self.client.create(key, b"")
            except LedgerError:
                pass  # a checkpoint only makes finding the tail cheaper; the next one will do

    def _segment_numbers(self, name: str, start: int | None) -> list[int]:
        """Segment numbers from ``start`` (the checkpointed one, included) or from 0, in order."""
        return [n for n, _, _ in self._listing(name, start)]

    def _listing(self, name: str, start: int | None) -> list[tuple[int, int, str | None]]:
        """``(number, object size, ETag)`` of the segments from ``start`` (included) or from 0, in order."""
        after = segment_key(name, start - 1) if start else None
        folder = f"tasks/{name}/s"
        if isinstance(self.client, TaggedClient):
            listed: Iterator[tuple[str, int, str | None]] = self.client.scan_tagged(folder, after)
        else:
            listed = ((key, size, None) for key, size in self.client.scan(folder, after))
        numbers = []
        for key, size, tag in listed:
            text = key.rsplit("/", 1)[1]
            if not is_number(text):
                raise CorruptStream(
                    self.client.describe(key), 1, f"not a segment: {text!r} is not a {WIDTH}-digit segment number; "
                    "remove the stray object (the store's own tools) or restore the stream from a copy"
                )
            numbers.append((int(text), size, tag))
        return numbers

    def _fetch_all(self, name: str, numbers: list[int]) -> list[Part] | None:
        """The segments, fetched in parallel, each checked to continue the one before.

        Segments a later ``cut`` voids (:func:`~intentlog.s3.segments.live_numbers`) are
        left out, readable or not; None when a cut voids segments below ``numbers[0]``
        (the caller reads again from 0).
        """
        if not numbers:
            return []
        if len(numbers) == 1:
            loaded = [self._try_load(name, numbers[0])]
        else:
            with ThreadPoolExecutor(min(_READERS, len(numbers))) as pool:
                loaded = list(pool.map(lambda n: self._try_load(name, n), numbers))
        live = live_numbers(numbers, [p.head if isinstance(p, Part) else None for p in loaded])
        if live is None:
            return None
        by_number = dict(zip(numbers, loaded, strict=True))
        parts: list[Part] = []
        for n in live:
            got = by_number[n]
            if isinstance(got, CorruptStream):
                raise got
            parts.append(got)
        prev: Segment | None = None
        for head, *_ in parts:
            where = self.client.describe(segment_key(name, head.seg))
            expected = numbers[0] if prev is None else prev.seg + 1
            if head.seg != expected and not (head.kind == "cut" and head.void == expected):
                raise CorruptStream(where, 1, f"segment {expected} is missing: the stream has a hole")
            if prev is not None and (head.seq, head.off) != (prev.end_seq, prev.end_off):
                raise CorruptStream(where, head.seq + 1, "the segment does not continue the one before it")
            if prev is not None and head.kind == "data" and (head.epoch, head.holder) != (prev.epoch, prev.holder):
                raise CorruptStream(where, head.seq + 1, "records written under a lease that was not the current one")
            first = head.kind == "create" or (head.kind == "cut" and head.void == 0 and (head.seq, head.off) == (0, 0))
            if prev is None and numbers[0] == 0 and not first:
                raise CorruptStream(where, 1, "the stream's first segment is not its creation")
            prev = head
        return parts

    def _try_load(self, name: str, seg: int) -> Part | CorruptStream:
        """:meth:`_load`, or the damage it found (a cut may void that segment: then it is never read)."""
        try:
            return self._load(name, seg)
        except CorruptStream as exc:
            return exc

    # -- a task id gc deleted, used again ---------------------------------------------------

    def _generation(self, name: str, data: bytes | None) -> str | None:
        """The stream id ``data`` (the stream's bytes) begins with."""
        line = data.split(b"\n", 1)[0] if data else b""
        try:
            sid = orjson.loads(line).get("data", {}).get("stream") if line else None
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return sid if isinstance(sid, str) else None

    def _retired_seal(self, name: str, sealed: str, data: bytes | None) -> bool:
        """Whether the seal binds a stream gc finished deleting, and ``data`` is another one (as a folder's writer)."""
        if self.deleted is None or self.deleted(name) != sealed:
            return False
        return data is None or self._generation(name, data) != sealed

    def _reborn(
        self, name: str, tail: Segment, create: Callable[[], bytes], holder: str | None
    ) -> tuple[bool, Segment | None]:
        """Create ``name`` again after gc finished deleting it: a ``cut`` voiding all before it, a new first record.

        Only when the store's gc log records gc finished deleting the very stream that is
        left (its first live segment begins that stream id), and no seal binds that stream
        unless it is the one gc deleted (:meth:`check_seal`); the numbers a fenced holder
        may put at stay taken and void. ``(allowed, the cut this writer created)``: nothing
        written when not allowed; ``(True, None)`` when another writer created it first.
        """
        if self.deleted is None:
            return False, None
        gone = self.deleted(name)
        if gone is None or self.generation_id(name) != gone:
            return False, None
        self.check_seal(name)
        recs = checked_records([create()])
        token = holder if holder is not None else secrets.token_hex(8)
        size = sum(len(r) + 1 for r in recs)
        head = Segment("cut", tail.seg + 1, 0, 0, tail.epoch + 1, token, len(recs), size, 0)
        created, _ = self.put_segment(segment_key(name, head.seg), head.encode(recs))
        self._cache.drop(name)
        return True, head if created else None

    def generation_id(self, name: str) -> str | None:
        """The stream id ``name`` begins now: its segment 0's, or the last cut's that restarts it (a GET a segment)."""
        numbers = self._segment_numbers(name, None)
        start: Part | None = None
        for n in numbers:
            try:
                part = self._load(name, n)
            except CorruptStream:
                continue
            if n == 0 or (part.head.kind == "cut" and part.head.void == 0):
                start = part
        return self._generation(name, start.payload) if start is not None else None
