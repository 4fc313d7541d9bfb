"""Which :class:`~intentlog.checker.seams.LedgerReads` a ledger location or an open ledger is read through.

The one place a whole-ledger reader's storage is chosen: a folder is read file by file
(:class:`~intentlog.checker.folder.FolderReads`), an ``s3://bucket/prefix`` root (or a
ledger opened on an object store) through its two seams with the seals and gc log the
store keeps beside them (:class:`~intentlog.checker.seams.SeamReads` over
:func:`intentlog.s3.verifysource.store_reads`). Verify, the report and export are written
once against what is returned. Nothing is written and no probe runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .checker.folder import FolderReads
from .checker.report import VerifyReport
from .checker.seams import LedgerReads, ObjectReads, SeamReads
from .checker.state import Progress
from .checker.verify import verify

if TYPE_CHECKING:
    from .s3.client import ObjectClient

__all__ = ["open_reads", "store_reads_on", "verify_stored"]


def open_reads(location: str | os.PathLike[str]) -> LedgerReads:
    """The reads of the ledger at ``location``: a folder, or ``s3://bucket/prefix`` (standard AWS settings)."""
    text = os.fspath(location)
    if text.startswith("s3://"):
        from .s3 import connect

        storage = connect(text, write=False)  # no probe: it only reads
        return store_reads_on(storage.client, text.rstrip("/"), storage.objects)
    return FolderReads(Path(text))


def store_reads_on(client: ObjectClient, where: str, objects: ObjectReads | None = None) -> SeamReads:
    """The reads of the ledger on the store behind ``client`` named ``where`` (``objects``: its artifacts' seam)."""
    from .s3.verifysource import store_reads

    parts = store_reads(client, where)
    return SeamReads(
        parts.streams, objects if objects is not None else parts.objects, where, parts.seals,
        parts.gc_deleted, parts.gc_problem, parts.gc_leftovers, kept=client.get,
    )  # fmt: skip


def verify_stored(
    client: ObjectClient,
    objects: ObjectReads,
    tasks: Sequence[str] | None = None,
    *,
    where: str,
    workspace: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """:func:`~intentlog.checker.verify.verify` of a ledger on the object store behind ``client``.

    Its streams read through a handle of their own (what the store holds), against every
    seal (each a lower bound) and the store's gc log (what gc retired is no task).
    """
    return verify(store_reads_on(client, where, objects), tasks, workspace=workspace, progress=progress)
