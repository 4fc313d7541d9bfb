"""The cut a repair makes in a stream on an object store: one ``cut`` segment, under a fencing lease.

A folder's repair truncates the file under its lock. Segments are never replaced, so a
store's repair *voids* them instead: :func:`cut_stream` puts a ``lease`` segment at the
next number (epoch + 1: every earlier holder is fenced, its next put finds the number
taken), copies the bytes it moves aside to ``quarantine/NAME`` (created only if absent, as
a folder's repair copies them before it truncates), then puts ONE ``cut`` segment after
its lease. The cut names the first number it voids and carries the trusted lines of that
segment before the bad line, then ``stream.repaired``; readers skip every voided segment
(:func:`~intentlog.s3.segments.live_numbers`), which stays in place, never read again
(a fenced holder's number stays taken). Last, a ``release``.

No crash or second writer turns this into a shortened record that does not say so: until
the cut is stored the stream is exactly as it was (damaged: refused), and the cut that
shortens it carries the ``stream.repaired`` that records it, in the same conditional
create. A writer that took the lease over meanwhile holds the number the cut needs:
:class:`~intentlog.errors.LeaseLost`, nothing cut.

:func:`read_segments` reads a stream's segments loosely (an unreadable one is named, not
raised) for the shared judgement (:func:`~intentlog.eventlog.damage.assess_bytes`).
"""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from blake3 import blake3

from ..errors import CorruptStream, LeaseLost, LedgerError, TaskBusy
from ..eventlog.canonical import dumps
from ..eventlog.damage import Damage, quarantine_name, repaired_data
from ..eventlog.format import FORMAT, TASK_CREATED, encode_line, new_stream_id, utc_now
from .segments import WIDTH, Segment, is_number, live_numbers, segment_key
from .streams import GC_HOLDER, ObjectStreams

__all__ = ["QUARANTINE", "REPAIR_HOLDER", "Cut", "StoredSegments", "cut_stream", "read_segments"]

#: where a store keeps the bytes a repair moved aside (as a folder's ``quarantine/``)
QUARANTINE: Final = "quarantine"
#: a repair's lease holder token starts so
REPAIR_HOLDER: Final = "repair-"
_READERS: Final = 8


@dataclass
class StoredSegments:
    """A stream's segments as a repair reads them: the trusted run, and what stops it.

    ``run`` are the live segments (no later cut voids them) from 0 that continue one
    another; ``broken`` what is wrong with the next live one (None: nothing);
    ``rest`` the raw bytes of every listed segment after the run (what a cut moves aside
    beyond ``data``); ``last`` the last number listed; ``epoch`` the highest epoch read;
    ``tail`` the last segment's header (None: unreadable).
    """

    run: list[tuple[Segment, bytes]] = field(default_factory=list)
    broken: str | None = None
    stop: int = -1  # the first number after the trusted run, where what is broken begins (-1: nothing is)
    rest: bytes = b""
    last: int = -1
    epoch: int = 0
    tail: Segment | None = None

    @property
    def data(self) -> bytes:
        """The trusted run's records, joined: the stream's bytes as far as they can be read."""
        return b"".join(p for _, p in self.run)


@dataclass(frozen=True)
class Cut:
    """What :func:`cut_stream` stored: the quarantined bytes' entry and the ``stream.repaired`` line."""

    quarantined: dict[str, Any]
    line: bytes  # the stream.repaired line (with its newline)
    seq: int  # its seq
    prev: str | None  # the digest of the line before it


def read_segments(streams: ObjectStreams, name: str) -> StoredSegments | None:
    """Every segment of ``name``, read loosely; None when the stream has no segment at all.

    A stray key under ``s/`` is :class:`CorruptStream` (never cut: it is no segment; remove
    it with the store's own tools).
    """
    client = streams.client
    numbers: list[int] = []
    for key, _ in client.scan(f"tasks/{name}/s"):
        text = key.rsplit("/", 1)[1]
        if not is_number(text):
            raise CorruptStream(
                client.describe(key), 1, f"not a segment: {text!r} is not a {WIDTH}-digit segment number, and a "
                "repair cuts segments only: remove the stray object (the store's own tools), then repair again",
            )  # fmt: skip
        numbers.append(int(text))
    if not numbers:
        return None

    def load(n: int) -> tuple[Segment, bytes] | CorruptStream:
        try:
            return streams.segment(name, n)
        except CorruptStream as exc:
            return exc

    with ThreadPoolExecutor(min(_READERS, len(numbers))) as pool:
        loaded = dict(zip(numbers, pool.map(load, numbers), strict=True))
    heads = [x[0] if isinstance(x, tuple) else None for x in loaded.values()]
    out = StoredSegments(last=numbers[-1], epoch=max((h.epoch for h in heads if h is not None), default=0))
    last = loaded[numbers[-1]]
    out.tail = last[0] if isinstance(last, tuple) else None
    live = live_numbers(numbers, heads) or []
    prev: Segment | None = None
    for n in live:
        got = loaded[n]
        why = _broken(got, prev, n)
        if why is not None:
            out.broken, out.stop = f"{client.describe(segment_key(name, n))}: {why}", prev.seg + 1 if prev else 0
            out.rest = b"".join(client.get(segment_key(name, m)) or b"" for m in numbers if m >= n)
            return out
        assert isinstance(got, tuple)
        out.run.append(got)
        prev = got[0]
    return out


def _broken(got: tuple[Segment, bytes] | CorruptStream, prev: Segment | None, n: int) -> str | None:
    """What keeps segment ``n`` out of the trusted run (the checks a reader makes), or None."""
    if isinstance(got, CorruptStream):
        return got.reason
    head = got[0]
    if prev is None:
        first = head.kind == "create" or (head.kind == "cut" and head.void == 0 and (head.seq, head.off) == (0, 0))
        return None if n == 0 and first else "the stream's first segment is missing or is not its creation"
    if head.seg != prev.seg + 1 and not (head.kind == "cut" and head.void == prev.seg + 1):
        return f"segment {prev.seg + 1} is missing: the stream has a hole"
    if (head.seq, head.off) != (prev.end_seq, prev.end_off):
        return "the segment does not continue the one before it"
    if head.kind == "data" and (head.epoch, head.holder) != (prev.epoch, prev.holder):
        return "records written under a lease that was not the current one"
    return None


def cut_stream(
    streams: ObjectStreams,
    name: str,
    task_id: str,
    stored: StoredSegments,
    damage: Damage,
    *,
    head: str | None,
    count: int,
    started: list[dict[str, Any]],
) -> Cut:
    """Cut ``name`` at ``damage.offset`` (a byte offset in ``stored.data``); the cut as stored.

    ``head`` / ``count``: the last trusted event's digest and how many events are trusted
    (the ``stream.repaired`` follows them). :class:`TaskBusy` when another writer holds the
    lease (the tail is a lease or a holder's data: nothing written; a repair's lease is
    taken over, since a repair that stopped before its cut left it, and a live one is
    fenced by the number anyway); :class:`LeaseLost` when
    a writer took the lease over before the cut was stored (nothing cut; the lease and the
    quarantined copy may remain, as a folder's copy does after a crash).
    """
    client = streams.client
    where = streams.where(name)
    tail = stored.tail
    if tail is not None and tail.held and not tail.holder.startswith(REPAIR_HOLDER):  # a repair's: it died
        if tail.kind == "lease" and tail.holder.startswith(GC_HOLDER):
            raise LedgerError(f"{where}: gc holds this stream's lease (it deleted the task or is deleting it)")
        raise TaskBusy(task_id, where, None)
    data = stored.data
    moved = data[damage.offset :] + stored.rest
    hasher = blake3(moved)
    quarantined = {
        "file": _keep_aside(streams, f"{QUARANTINE}/{quarantine_name(task_id, hasher)}", moved),
        "digest": "blake3:" + hasher.hexdigest(),
        "size": len(moved),
    }
    holder = REPAIR_HOLDER + secrets.token_hex(8)
    epoch = stored.epoch + 1
    at = stored.last + 1
    end_seq = tail.end_seq if tail is not None else count
    end_off = tail.end_off if tail is not None else len(data)
    lease = Segment("lease", at, end_seq, end_off, epoch, holder)
    created, _ = streams.put_segment(segment_key(name, at), lease.encode())
    if not created:
        raise TaskBusy(task_id, where, None)
    void, seq, off, kept = _void_from(stored, damage.offset, at + 1)
    records = kept
    prev, seq_next = head, count
    if damage.offset == 0:  # nothing could be kept: a new first line, as a folder's repair writes
        created_line = _created(task_id)
        records = [created_line[:-1]]
        prev, seq_next = _digest(created_line), 1
    line = encode_line("stream.repaired", dumps(repaired_data(damage, quarantined, started)), prev, seq_next, utc_now())
    records = [*records, line[:-1]]
    size = sum(len(r) + 1 for r in records)
    cut = Segment("cut", at + 1, seq, off, epoch, holder, len(records), size, void)
    created, _ = streams.put_segment(segment_key(name, cut.seg), cut.encode(records))
    if not created:
        raise LeaseLost(task_id, client.describe(segment_key(name, cut.seg)), epoch)
    mark = Segment("release", cut.seg + 1, cut.end_seq, cut.end_off, epoch, holder)
    try:
        streams.put_segment(segment_key(name, mark.seg), mark.encode())
    except LedgerError:
        pass  # the lease stays recorded as held: the next writer takes it over (take_over_after)
    return Cut(quarantined, line, seq_next, prev)


def _void_from(stored: StoredSegments, offset: int, cut_at: int) -> tuple[int, int, int, list[bytes]]:
    """Where a cut at ``offset`` begins: the first number voided, the seq and offset the cut continues, its kept lines.

    The segment holding ``offset`` is voided whole and its lines before ``offset`` re-stated
    in the cut; at the end of the trusted run, the first segment after it (or, nothing
    being wrong after it, none: the cut voids nothing and only records the repair).
    """
    for head, payload in stored.run:
        if head.n and head.off <= offset < head.end_off:
            kept = payload[: offset - head.off].split(b"\n")[:-1]
            return head.seg, head.seq, head.off, kept
    if offset == 0 or not stored.run:
        return 0, 0, 0, []
    last = stored.run[-1][0]
    return stored.stop if stored.broken is not None else cut_at, last.end_seq, last.end_off, []


def _keep_aside(streams: ObjectStreams, key: str, moved: bytes) -> str:
    """Create ``key`` holding ``moved`` (a key holding exactly these bytes is reused); the key used."""
    client = streams.client
    name = key
    for _ in range(8):
        if streams.put_segment(name, moved)[0] or client.get(name) == moved:
            return name
        name = f"{key[: -len('.bin')]}.{secrets.token_hex(6)}.bin"
    raise LedgerError(f"{client.describe(QUARANTINE)}: no free name for the bytes to move aside; nothing was cut")


def _created(task_id: str) -> bytes:
    data = dumps({"format": FORMAT, "stream": new_stream_id(), "task": task_id})
    return encode_line(TASK_CREATED, data, None, 0, utc_now())


def _digest(line: bytes) -> str:
    return "blake3:" + blake3(line).hexdigest()
