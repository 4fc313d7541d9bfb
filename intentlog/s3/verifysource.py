"""What a reader of a whole ledger gets from an object store beside its two seams: the seals and the gc log.

Verify, the report and export read a ledger through
:class:`~intentlog.checker.seams.LedgerReads`; on a store that is the seam implementation
(:class:`~intentlog.checker.seams.SeamReads`) given what :func:`store_reads` gathers here:

* the streams through a handle of their own (what the store holds: never a cache or a
  writer's unsynced buffer);
* every seal (``heads/NNNNNNNNNNNN.json``, in number order: :func:`~intentlog.s3.seals.all_seals`),
  each a lower bound;
* what the store's gc log records deleting, what is wrong with it, and the names that are
  what is left of a stream it deleted (:func:`~intentlog.s3.retire.store_gc_log`).

Reads only: nothing is written and no probe runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..eventlog.gclog import GcDeletion
from .client import ObjectClient
from .objects import ObjectArtifacts
from .retire import store_gc_log
from .seals import all_seals
from .streams import ObjectStreams

__all__ = ["StoreReadParts", "store_reads"]


@dataclass(frozen=True, slots=True)
class StoreReadParts:
    """The arguments of a :class:`~intentlog.checker.seams.SeamReads` of one store, in its order."""

    streams: ObjectStreams
    objects: ObjectArtifacts
    where: str
    seals: Sequence[tuple[str, bytes]]
    gc_deleted: Mapping[str, GcDeletion]
    gc_problem: str | None
    gc_leftovers: frozenset[str]


def store_reads(client: ObjectClient, where: str, objects: ObjectArtifacts | None = None) -> StoreReadParts:
    """What a whole-ledger reader reads of the store behind ``client`` (``objects``: the ledger's own seam, if open)."""
    deleted, problem, left = store_gc_log(client)
    return StoreReadParts(
        ObjectStreams(client),
        objects if objects is not None else ObjectArtifacts(client),
        where,
        all_seals(client),
        deleted,
        problem,
        left,
    )
