"""``repair`` on an object-store ledger: the folder's judgement and refusals, the store's cut.

:func:`repair_stored` reads the task's segments (:func:`intentlog.s3.cut.read_segments`),
judges their bytes exactly as a folder's writer judges its file
(:func:`~intentlog.eventlog.damage.assess_bytes`: a torn tail, damage, a stream its seals
contradict) and refuses what a folder refuses, with the same messages: damage without
``accept_damage`` (:func:`~intentlog.eventlog.damage.refusal`), bytes to move aside that
record a started send without ``accept_resend``
(:func:`~intentlog.eventlog.damage.resend_refusal`). A segment that cannot be read, is
missing, or does not continue the one before is damage at the end of what can be read.
Every refusal writes nothing and runs no probe. What it accepts it cuts with
:func:`intentlog.s3.cut.cut_stream` (one ``cut`` segment under a fencing lease, the bytes
moved aside kept under ``quarantine/`` on the store), or with ``dry_run`` only says what
it would cut.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .errors import CorruptStream
from .eventlog.damage import Damage, SealedHead, assess_bytes, refusal, resend_refusal, started_in_bytes
from .eventlog.format import Event, parse_line

if TYPE_CHECKING:
    from .s3 import ObjectStorage

__all__ = ["STORE_REPAIR_HINT", "StoreRepair", "repair_stored"]

#: How an operator restores a damaged stream on a store (what a refusal names instead of "the file").
STORE_REPAIR_HINT: Final = (
    "restore the task's segments (tasks/{task}/s/ under the prefix) from a copy of the prefix (nothing was written)"
)

#: What a store's repair did or would do: the damage, the quarantined bytes' entry, the stream.repaired appended.
StoreRepair = tuple[Damage, dict[str, Any], Event | None]


def stored_seal(storage: ObjectStorage, task: str) -> SealedHead | None:
    """The furthest head any seal recorded for ``task``, retired when the gc log records deleting exactly it."""
    from .s3.retire import store_gc_log
    from .s3.seals import stored_heads

    heads = stored_heads(storage.client)  # LedgerError when the seals contradict each other
    h = heads.get(task) if heads is not None else None
    if h is None:
        return None
    d = store_gc_log(storage.client)[0].get(task)
    return SealedHead(h.stream, h.seq, h.head, d is not None and d.matches(h))


def repair_stored(
    storage: ObjectStorage, task: str, *, accept_damage: bool, accept_resend: bool, dry_run: bool
) -> StoreRepair | None:
    """Repair ``task`` on the store as a folder's repair would (see the module); None: nothing to repair."""
    from .s3.cut import cut_stream, read_segments
    from .s3.streams import GC_HOLDER

    streams = storage.streams
    where = streams.where(task)
    restore = STORE_REPAIR_HINT.format(task=task)
    seal = stored_seal(storage, task)
    try:
        stored = read_segments(streams, task)
    except CorruptStream as exc:  # a stray key: no segment, so never cut
        raise CorruptStream(exc.path, exc.line, exc.reason, hint=restore) from None
    tail = stored.tail if stored is not None else None
    if tail is not None and tail.kind == "lease" and tail.holder.startswith(GC_HOLDER):
        stored = None  # what gc left of a stream it deleted: no stream, as a folder's file gc removed
    if stored is None:
        if seal is None or seal.retired:
            return None
        raise CorruptStream(
            where, 1, f"the stream is absent but a seal records it to seq {seal.seq} of stream {seal.stream}, and "
            "the store's gc log records no deletion of it: it was lost, and re-creating it would repeat its "
            "effects", hint=f"{restore}; if it is lost for good, run 'intentlog seal' to anchor the ledger without it",
        )  # fmt: skip
    data = stored.data
    scan, d = assess_bytes(data, where, seal, broken=stored.broken)
    if d is None:
        return None
    if d.kind == "damage" and not accept_damage:
        raise refusal(where, d, restore=restore)
    started: list[dict[str, Any]] = []
    if d.kind == "damage":
        started = started_in_bytes(data + stored.rest, d.offset)
        if started and not accept_resend:
            raise resend_refusal(where, d, started, restore=restore)
    if dry_run:
        from blake3 import blake3

        from .eventlog.damage import quarantine_name

        moved = data[d.offset :] + stored.rest
        hasher = blake3(moved)
        planned = {"file": f"quarantine/{quarantine_name(task, hasher)}", "digest": "blake3:" + hasher.hexdigest()}
        return d, {**planned, "size": len(moved)}, None
    cut = cut_stream(streams, task, task, stored, d, head=scan.head, count=scan.count, started=started)
    return d, cut.quarantined, parse_line(cut.line, cut.seq, cut.prev)
