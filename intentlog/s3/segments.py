"""A stream segment on an object store: its header line, how it is decoded and checked, its key.

Each segment object is one header line -- what it is (``create``, ``lease``, ``data``,
``release``, ``cut``), its number, the seq and byte offset it starts at, the lease epoch and holder,
how many records follow; a ``lease`` also names the process that took it
(:class:`~intentlog.s3.holder.Holder`) -- then the records of one append. :func:`decode_segment` refuses
(:class:`~intentlog.errors.CorruptStream`) an object that does not describe itself and its
records exactly.

A ``cut`` segment is what ``repair`` writes under its own lease: it *voids* the segments
from number ``void`` up to itself (damaged or torn ones, never deleted, never read again)
and carries the records that follow the stream's trusted part (the trusted lines of the
first voided segment, then ``stream.repaired``); its seq and offset continue the segment
before ``void``. :func:`live_numbers` says which segments a reader reads.

Pure: no store is touched here (:mod:`intentlog.s3.streams` does that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import orjson

from ..errors import CorruptStream, UsageError
from ..eventlog.reader import MAX_LINE
from .holder import Holder

__all__ = [
    "DIGITS",
    "WIDTH",
    "Segment",
    "checked_records",
    "decode_segment",
    "describes",
    "is_number",
    "live_numbers",
    "segment_key",
]

#: digits in a segment number
WIDTH: Final = 12
DIGITS: Final = frozenset("0123456789")


@dataclass(frozen=True, slots=True)
class Segment:
    """A segment's header: what the object at ``seg`` says about itself and the records it holds."""

    kind: str  # "create" | "lease" | "data" | "release" | "cut"
    seg: int
    seq: int  # records in the stream before this segment
    off: int  # bytes of records in the stream before this segment
    epoch: int
    holder: str
    n: int = 0  # records in this segment
    size: int = 0  # bytes of records in this segment
    void: int = 0  # a cut: the first segment number it voids (the segments from there to it are never read)
    #: the process that took the lease (a ``lease`` segment; None where not recorded): for people and takers
    who: Holder | None = None

    @property
    def held(self) -> bool:
        """True when the stream is leased after this segment (a lease, a holder's data, a repair's cut)."""
        return self.kind in ("lease", "data", "cut")

    @property
    def end_seq(self) -> int:
        return self.seq + self.n

    @property
    def end_off(self) -> int:
        return self.off + self.size

    def encode(self, records: Sequence[bytes] = ()) -> bytes:
        head = {"v": 1, "t": self.kind, "seg": self.seg, "seq": self.seq, "off": self.off, "epoch": self.epoch}
        head |= {"holder": self.holder, "n": len(records)}
        if self.kind == "cut":
            head["void"] = self.void
        if self.who is not None:
            head["who"] = self.who.to_json()
        return orjson.dumps(head) + b"\n" + b"".join(r + b"\n" for r in records)


def decode_segment(where: str, seg: int, body: bytes) -> tuple[Segment, bytes]:
    head_line, nl, payload = body.partition(b"\n")
    try:
        head = orjson.loads(head_line) if nl else {}
        kind, number, seq, off = head["t"], head["seg"], head["seq"], head["off"]
        epoch, holder, n = head["epoch"], head["holder"], head["n"]
        void = head["void"] if kind == "cut" else 0
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise CorruptStream(where, 1, "not a stream segment (its header line is unreadable)") from None
    ok = kind in ("create", "lease", "data", "release", "cut") and number == seg and payload.count(b"\n") == n
    if kind == "cut" and (type(void) is not int or not 0 <= void <= seg):
        ok = False
    if not ok or (payload and not payload.endswith(b"\n")):
        raise CorruptStream(where, 1, f"the segment header does not describe segment {seg} and its records")
    if (kind == "create") != (seg == 0):
        raise CorruptStream(where, 1, f"segment {seg} is a {kind!r} segment: a stream is created at segment 0 only")
    if kind in ("lease", "release") and payload:
        raise CorruptStream(where, 1, f"segment {seg} is a {kind!r} segment carrying records: only data segments do")
    who = Holder.from_json(head.get("who")) if kind == "lease" else None
    return Segment(kind, seg, seq, off, epoch, holder, n, len(payload), void, who), payload


def is_number(text: str) -> bool:
    """Exactly 12 ASCII digits: a segment number as this module writes it."""
    return len(text) == WIDTH and set(text) <= DIGITS


def checked_records(records: Sequence[bytes]) -> list[bytes]:
    """The records as a list, each one line of bytes no longer than a stream line may be."""
    for r in records:
        if not isinstance(r, bytes) or b"\n" in r:
            raise UsageError(f"a record is bytes without a newline, not {r[:40]!r}; nothing was written")
        if len(r) >= MAX_LINE:
            raise UsageError(f"a record of {len(r)} bytes is longer than a stream line may be ({MAX_LINE} bytes)")
    return list(records)


def describes(point: tuple[int, int, int], first: Segment, offset: int) -> bool:
    """Whether checkpoint ``point`` (segment, seq and offset after it) is true of ``first``, the segment it names."""
    return (first.seg, first.end_seq, first.end_off) == point and first.off <= offset


def live_numbers(numbers: Sequence[int], heads: Sequence[Segment | None]) -> list[int] | None:
    """The listed ``numbers`` a reader reads: those no later ``cut`` voids (``heads``: each one's, None if unreadable).

    Walks back from the tail: a cut at ``m`` voiding from ``v`` drops every number in
    ``[v, m)``, and the walk goes on below ``v`` (a cut may void an earlier cut). None when
    a cut voids numbers below the first one listed (a read that began at a checkpoint the
    cut voided: read again from 0).
    """
    keep: list[int] = []
    floor, below = -1, -1  # the numbers in [floor, below) are void (the last cut seen walking back)
    for n, head in zip(reversed(numbers), reversed(heads), strict=True):
        if floor <= n < below:
            continue
        keep.append(n)
        if head is not None and head.kind == "cut":
            floor, below = head.void, n
    if numbers and 0 <= floor < numbers[0]:
        return None
    return keep[::-1]


def segment_key(name: str, seg: int) -> str:
    return f"tasks/{name}/s/{seg:0{WIDTH}d}"
