"""Where a report reads the record from: one :class:`ReportSource` over a ledger's :class:`LedgerReads`.

The reads are a folder's (:class:`~intentlog.checker.folder.FolderReads`: ``tasks/*.jsonl``
by :class:`~intentlog.eventlog.reader.StreamScan`, ``objects/`` without following a link)
or a storage's seams (:class:`~intentlog.checker.seams.SeamReads`: an object store's
streams and objects, checked against every seal): the report asks nothing else of them,
and checks with :func:`~intentlog.checker.verify` over the same reads. Nothing is written,
locked or probed. The same streams and objects give the same page, byte for byte, with one
difference on purpose: a store has no torn tails (a segment is whole or absent), so a line
that fails its checks there is damage and the task is ``unreadable`` (as ``intentlog
tasks`` on the store shows it), where a folder would call a bad *last* line a torn tail.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..checker.seams import EventRead, LedgerReads, Payload, PayloadKind

if TYPE_CHECKING:
    from ..checker.report import VerifyReport

__all__ = ["Payload", "PayloadKind", "ReportSource", "Stream"]

#: One read of a task's stream (its trusted events, then what stopped it).
Stream = EventRead


class ReportSource:
    """The reads a report makes of one ledger (``workspace``: what its captures are compared with)."""

    def __init__(self, reads: LedgerReads, workspace: Path | None = None) -> None:
        self.reads = reads
        self.workspace = workspace

    def names(self) -> list[str]:
        return self.reads.names()

    def where(self) -> str:
        return self.reads.tasks_where

    def stream(self, task: str) -> Stream:
        return self.reads.events(task)

    def payload(self, digest: str, limit: int) -> Payload:
        return self.reads.payload(digest, limit)

    def verify(self, tasks: Sequence[str] | None) -> VerifyReport:
        from ..checker.verify import verify

        return verify(self.reads, tasks, workspace=self.workspace)
