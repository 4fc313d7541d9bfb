"""``repair`` on an object-store ledger: find what a repair would have to cut, and refuse it, writing nothing.

A store keeps no torn tail (a segment is whole or absent), so whatever fails there is
damage: a line that fails its checks, segments that do not make one stream (a hole, a
spliced segment, records under a stale lease, a stray key under ``s/``), or a stream its
seals contradict. Moving damaged segments aside on a store means deleting them and
re-creating the stream's tail under a lease, with no step a crash or a second writer can
turn into a shortened record that does not say so -- not done yet. So
:func:`check_stored_stream` reads the task through the stream seam and checks it against
every seal, and either finds nothing to repair or raises
:class:`~intentlog.errors.CorruptStream` naming the damage and what to do: restore the
task's segments from a copy. It writes nothing and runs no probe, with or without
``accept_damage``: damage is never accepted on a store, so it can never be cut into a
second payment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .errors import CorruptStream
from .eventlog.format import TASK_CREATED
from .eventlog.remote import events_in

if TYPE_CHECKING:
    from .s3 import ObjectStorage

__all__ = ["STORE_REPAIR_HINT", "check_stored_stream"]

#: What an operator does with a damaged stream on a store (the refusal's last words).
STORE_REPAIR_HINT: Final = (
    "nothing was written. A store keeps no torn tail, so this is damage, and repair does not cut segments out "
    "of a store (accepting damage there is not offered, with or without --accept-damage): restore the task's "
    "segments (tasks/{task}/s/ under the prefix) from a copy of the prefix, then run verify; "
    "the other tasks are unaffected"
)


def check_stored_stream(storage: ObjectStorage, location: str, task: str) -> None:
    """Nothing to repair in ``task`` on the store, or :class:`CorruptStream` naming the damage (nothing written).

    Reads the stream through :meth:`~intentlog.s3.ObjectStreams.read` (which checks every
    segment continues the one before), checks every line's chain, and compares the stream
    with the furthest head any seal recorded for the task (a stream only grows: one that
    ends before the sealed seq, or holds another digest there, or another stream id, was
    cut or replaced). A stream that is absent is nothing to repair unless a seal names it.
    """
    from .s3.seals import stored_heads

    hint = STORE_REPAIR_HINT.format(task=task)
    where = storage.streams.where(task)
    heads = stored_heads(storage.client)  # LedgerError when the seals contradict each other
    sealed = heads.get(task) if heads is not None else None
    try:
        data = storage.streams.read(task)
    except FileNotFoundError:
        data = None
    except CorruptStream as exc:
        raise CorruptStream(exc.path, exc.line, exc.reason, hint=hint) from None
    if data is None:
        if sealed is None:
            return
        raise CorruptStream(where, 1, f"the stream is absent but a seal records it to seq {sealed.seq}", hint=hint)
    stream_id: object = None
    digests: list[str] = []
    try:
        for ev in events_in(data, where):
            if ev.seq == 0 and ev.kind == TASK_CREATED:
                stream_id = ev.data.get("stream")
            digests.append(ev.digest)
    except CorruptStream as exc:
        raise CorruptStream(exc.path, exc.line, exc.reason, hint=hint) from None
    if sealed is None:
        return
    if stream_id != sealed.stream:
        raise CorruptStream(where, 1, f"the stream is not the one sealed (stream id {sealed.stream!r})", hint=hint)
    if len(digests) <= sealed.seq:
        reason = f"the stream ends at seq {len(digests) - 1}, before the sealed head at seq {sealed.seq}"
        raise CorruptStream(where, len(digests) + 1, reason, hint=hint)
    if digests[sealed.seq] != sealed.head:
        raise CorruptStream(where, sealed.seq + 1, f"seq {sealed.seq} is not the sealed head {sealed.head}", hint=hint)
