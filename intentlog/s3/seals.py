"""Sealed heads on an object store: each seal one ``heads/NNNNNNNNNNNN.json`` object, created only if absent.

A folder keeps its seal in ``heads.json``, replaced atomically by every ``seal``. An object
store has no conditional replace worth trusting, so nothing is ever overwritten here:
:func:`seal_store` creates the next numbered seal object with ``If-None-Match: *`` (two
sealers racing at one number: the store refuses the second, which takes the next), and
the seal in force is the highest number (:func:`latest_seal`). Each object holds exactly
the bytes a folder's ``heads.json`` would (:func:`~intentlog.heads.codec.encode_heads`), so
the checker, ``export`` and a bundle read it with the same codec; older seals stay as
the record of what was sealed when.

The heads are computed through the stream seam: every line of every stream is read and
checked (:func:`~intentlog.eventlog.remote.events_in`); a stream that is not one clean
chain beginning with ``task.created`` is :class:`~intentlog.errors.CorruptStream` and
nothing is sealed.
"""

from __future__ import annotations

from typing import Final

from ..errors import CorruptStream, LedgerError
from ..eventlog.format import TASK_CREATED
from ..eventlog.remote import events_in
from ..heads.codec import StreamHead, decode_heads, encode_heads
from .client import ObjectClient
from .streams import ObjectStreams

__all__ = ["SEALS", "latest_seal", "seal_store", "stored_heads"]

#: The folder holding the numbered seal objects.
SEALS: Final = "heads"
_WIDTH: Final = 12
_ATTEMPTS: Final = 64


def _number(key: str) -> int | None:
    name = key.rsplit("/", 1)[-1]
    stem = name[: -len(".json")] if name.endswith(".json") else ""
    return int(stem) if len(stem) == _WIDTH and stem.isdigit() else None


def latest_seal(client: ObjectClient) -> tuple[str, bytes] | None:
    """The key and bytes of the seal in force (the highest number), or None when the store was never sealed."""
    numbers = [n for k, _ in client.scan(SEALS) if (n := _number(k)) is not None]
    for n in sorted(numbers, reverse=True):
        key = f"{SEALS}/{n:0{_WIDTH}d}.json"
        data = client.get(key)
        if data is not None:
            return client.describe(key), data
    return None


def stored_heads(client: ObjectClient) -> dict[str, StreamHead] | None:
    """The heads last sealed on the store, by task; None when never sealed (``LedgerError`` when malformed)."""
    found = latest_seal(client)
    if found is None:
        return None
    where, data = found
    return decode_heads(data, where=where)


def _head(streams: ObjectStreams, task: str) -> StreamHead:
    where = streams.where(task)
    stream_id: str | None = None
    last = None
    count = 0
    for ev in events_in(streams.read(task), where):
        if ev.seq == 0 and ev.kind == TASK_CREATED and isinstance(ev.data.get("stream"), str):
            stream_id = ev.data["stream"]
        last, count = ev, count + 1
    if last is None or stream_id is None:
        raise CorruptStream(where, 1, f"the stream of task {task!r} does not begin with task.created; not sealed")
    return StreamHead(stream=stream_id, seq=last.seq, head=last.digest, events=count)


def seal_store(client: ObjectClient) -> str:
    """Seal every stream on the store: create the next ``heads/N.json``; return where it is.

    Takes no lease: events appended while sealing are simply after the head. Nothing is
    written when a stream is corrupt (:class:`CorruptStream`).
    """
    streams = ObjectStreams(client)
    data = encode_heads({task: _head(streams, task) for task in streams.names()})
    for _ in range(_ATTEMPTS):
        numbers = [n for k, _ in client.scan(SEALS) if (n := _number(k)) is not None]
        key = f"{SEALS}/{max(numbers, default=0) + 1:0{_WIDTH}d}.json"
        if client.create(key, data):
            return client.describe(key)
    raise LedgerError(f"{client.describe(SEALS)}: {_ATTEMPTS} other seals were created meanwhile; seal again")
