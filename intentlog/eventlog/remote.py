"""Reading a stream held by a storage other than a folder: its bytes, checked line by line.

A stream on an object store is a sequence of whole segments (a segment is written by one
conditional create: it is there whole or not at all), so a writer never leaves a torn line.
A line that fails to parse or to chain is raised here as
:class:`~intentlog.errors.CorruptStream` naming it, for a reader and a writer alike; only
``repair`` judges it (:mod:`intentlog.storerepair`: the folder's judgement, and a ``cut``
segment under a fencing lease for what it accepts, the bytes moved aside kept under the
store's ``quarantine/``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..errors import CorruptStream
from .format import Event, LineError, parse_line

__all__ = ["StreamTail", "events_in", "tail_of"]


def events_in(
    data: bytes, where: str, since: int = 0, *, resume: tuple[int, int, str | None] | None = None
) -> Iterator[Event]:
    """Every event of the stream ``data`` (its bytes from offset 0) from seq ``since`` on, each checked.

    ``resume=(offset, seq, prev)``: start at byte ``offset`` as if ``seq`` events ending in
    ``prev`` had been read and checked there (the caller vouches for that prefix).
    """
    start, seq, prev = resume if resume is not None else (0, 0, None)
    lineno = seq
    size = len(data)
    while start < size:
        end = data.find(b"\n", start)
        lineno += 1
        if end < 0:
            raise CorruptStream(where, lineno, "the stream ends in an incomplete line (a stored segment is damaged)")
        line = data[start : end + 1]
        try:
            ev = parse_line(line, seq, prev)
        except LineError as exc:
            raise CorruptStream(where, lineno, exc.reason) from None
        if seq >= since:
            yield ev
        seq, prev, start = seq + 1, ev.digest, end + 1


class StreamTail:
    """What a writer needs of a stream it reads whole: how many events, the last one's digest."""

    def __init__(self) -> None:
        self.count = 0
        self.head: str | None = None


def tail_of(
    data: bytes,
    where: str,
    replay: Callable[[Event], None] | None = None,
    *,
    resume: tuple[int, int, str | None] | None = None,
) -> StreamTail:
    """Check every line of ``data`` (after ``resume``: see :func:`events_in`); the count and head.

    ``replay`` sees each event checked.
    """
    tail = StreamTail()
    if resume is not None:
        tail.count, tail.head = resume[1], resume[2]
    for ev in events_in(data, where, resume=resume):
        if replay is not None:
            replay(ev)
        tail.count, tail.head = ev.seq + 1, ev.digest
    return tail
