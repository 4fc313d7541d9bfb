"""Sealed heads on an object store: each seal one ``heads/NNNNNNNNNNNN.json`` object, created only if absent.

A folder keeps its seal in ``heads.json``, replaced atomically by every ``seal``. An object
store has no conditional replace worth trusting, so nothing is ever overwritten here:
:func:`seal_store` creates the next numbered seal object with ``If-None-Match: *`` (two
sealers racing at one number: the store refuses the second, which takes the next), and
the newest seal is the highest number (:func:`latest_seal`). Each object holds exactly
the bytes a folder's ``heads.json`` would (:func:`~intentlog.heads.codec.encode_heads`), so
the checker, ``export`` and a bundle read it with the same codec; older seals stay as
the record of what was sealed when.

Each seal anchors the store's gc log too, as it anchors a stream: its head (stream id, seq,
digest) under ``gc`` (:data:`~intentlog.heads.codec.GC_KEY`), read after the streams; a gc
log that does not hold that event at that seq (:func:`intentlog.s3.retire.store_gc_log`)
is untrusted, as a damaged one is, and ``verify`` says so.

Every seal is a lower bound: a stream only grows, so each stream is checked against the
furthest head *any* seal recorded for it (:func:`combine_seals`, :func:`stored_heads`),
never only the newest seal's. Seals that contradict each other -- another stream id for
a task, or another digest at the same seq -- are reported, never resolved by number.
:func:`seal_store` lists the seals before it reads the streams and reads them again
after losing a number to another sealer, so a seal it creates holds heads at least as
far as every seal numbered before it. Seal numbers are exactly 12 ASCII digits; the last
one (``999999999999``) refuses to seal again rather than create a seal nothing reads.

The heads are computed through the stream seam: every line of every stream is read and
checked (:func:`~intentlog.eventlog.remote.events_in`); a stream that is not one clean
chain beginning with ``task.created`` is :class:`~intentlog.errors.CorruptStream` and
nothing is sealed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..errors import CorruptStream, LedgerError
from ..eventlog.format import TASK_CREATED
from ..eventlog.remote import events_in
from ..heads.codec import StreamHead, encode_heads
from .bounds import SEALS, furthest_heads, seal_number
from .bounds import seal_key as _key
from .client import ObjectClient
from .retire import LOG_STREAM, live_names, log_streams, read_log, store_gc_log
from .streams import ObjectStreams

__all__ = ["SEALS", "all_seals", "combine_seals", "create_seal", "latest_seal", "seal_store", "stored_heads"]

_WIDTH: Final = 12
_ATTEMPTS: Final = 64
_LAST: Final = 10**_WIDTH - 1


def _numbers(client: ObjectClient) -> list[int]:
    return sorted(n for k, _ in client.scan(SEALS) if (n := seal_number(k)) is not None)


def all_seals(client: ObjectClient) -> list[tuple[str, bytes]]:
    """Every seal on the store, in number order: where each is and its bytes (each a lower bound)."""
    found = []
    for n in _numbers(client):
        data = client.get(_key(n))
        if data is not None:
            found.append((client.describe(_key(n)), data))
    return found


def combine_seals(seals: Sequence[tuple[str, bytes]]) -> tuple[dict[str, StreamHead], list[str]]:
    """The furthest head any seal recorded for each task, and what is wrong with the seals.

    ``seals`` are ``(where, heads.json bytes)`` in number order. A seal that does not parse,
    or that contradicts an earlier one (another stream id for a task, or another digest at
    the same seq), is a problem message; the well-formed seals still count. Of the heads
    recorded for a task the one with the highest seq is returned (the first recorded on a
    tie): every seal is a lower bound, none replaces another (:func:`~intentlog.s3.bounds.furthest_heads`).
    """
    furthest, problems = furthest_heads(seals)
    return {task: h for task, (_, h) in furthest.items()}, problems


def latest_seal(client: ObjectClient) -> tuple[str, bytes] | None:
    """Where the newest seal (the highest number) is and its bytes, or None when the store was never sealed.

    The newest seal is not the bound to check against: :func:`stored_heads` combines them all.
    """
    for n in reversed(_numbers(client)):
        data = client.get(_key(n))
        if data is not None:
            return client.describe(_key(n)), data
    return None


def stored_heads(client: ObjectClient) -> dict[str, StreamHead] | None:
    """The furthest head any seal recorded, by task; None when never sealed.

    ``LedgerError`` when a seal is malformed or seals contradict each other (:func:`combine_seals`).
    """
    seals = all_seals(client)
    if not seals:
        return None
    heads, problems = combine_seals(seals)
    if problems:
        raise LedgerError(problems[0])
    return heads


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


def _log_head(client: ObjectClient) -> StreamHead | None:
    """The gc log's head (None: no gc or keep ever wrote it); read after the streams, so at least as far."""
    if read_log(client) is None:
        return None
    return _head(log_streams(client), LOG_STREAM)


def _follows(client: ObjectClient, heads: dict[str, StreamHead]) -> dict[str, str]:
    """By task, the stream id an earlier seal bound that gc deleted, where ``heads`` holds another stream."""
    earlier, _ = combine_seals(all_seals(client))
    changed = {t for t, h in heads.items() if t in earlier and earlier[t].stream != h.stream}
    if not changed:
        return {}
    deleted = store_gc_log(client, [])[0]
    return {t: earlier[t].stream for t in changed if t in deleted and deleted[t].stream == earlier[t].stream}


def create_seal(client: ObjectClient) -> tuple[str, bytes]:
    """Seal every stream on the store: create the next ``heads/N.json``; where it is and the bytes created.

    The seals are listed *before* the streams are read, and after losing the number to
    another sealer both are read again: the seal created holds heads at least as far as
    every seal numbered before it. Takes no lease: events appended while sealing are
    simply after the head. Nothing is written when a stream is corrupt
    (:class:`CorruptStream`) or the last seal number is taken (:class:`LedgerError`).
    """
    streams = ObjectStreams(client)  # a handle of its own: stored bytes only, never a writer's buffer
    for _ in range(_ATTEMPTS):
        number = max(_numbers(client), default=0) + 1
        if number > _LAST:
            raise LedgerError(
                f"{client.describe(_key(_LAST))} exists: seal numbers are {_WIDTH} digits and the last is taken, so "
                "nothing was sealed; a seal there was not numbered by 'intentlog seal' -- copy the ledger to a "
                "new prefix (merge) and seal it there"
            )
        heads = {task: _head(streams, task) for task in live_names(client)}  # gc's leftovers: no task
        data = encode_heads(heads, _log_head(client), _follows(client, heads))
        if client.create(_key(number), data):
            return client.describe(_key(number)), data
    raise LedgerError(f"{client.describe(SEALS)}: {_ATTEMPTS} other seals were created meanwhile; seal again")


def seal_store(client: ObjectClient) -> str:
    """Seal every stream on the store (:func:`create_seal`); return where the new seal is."""
    return create_seal(client)[0]
