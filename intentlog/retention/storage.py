"""The storage seam gc and keep are written against, whatever holds a ledger's streams and objects.

Retention (the plan, the apply, the keep marks, the report) is written once against
:class:`GcStorage`; a ledger hands out its implementation (``Ledger.gc_storage()``), and
there are exactly two: :class:`~intentlog.retention.folder.FolderGc` (a ledger folder:
``tasks/``, ``objects/``, ``keep.json`` and ``gc.jsonl`` under ``gc.lock``) and
``StoreGc``, beside the object store's seams (the same streams and objects read through
them; the keep marks, the record and the lock are the store's gc log). A folder and a
store holding the same streams and objects give the same plan: the same rows, the same
bytes printed, and an apply deletes the same tasks and blobs.

What differs by nature stays behind the seam: how a stream's identity is taken ("unchanged
since the plan"), what *busy* means (a held writer lock, a held lease), how a stream is
deleted (unlinked under its writer lock; leased, then retired), how an object is deleted
(moved aside; behind a dying marker), and what the lock is (``gc.lock``; the gc log's lease).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from .policy import GcPolicy
from .report import ExpiredBlob, ExpiredTask
from .rules import KeepMark
from .scan import Progress, Scan

__all__ = ["Evacuate", "GcLedger", "GcSession", "GcStorage"]

#: ``evacuate(task, payloads)``: copy the inline bytes a kept task needs out of an expiring
#: stream (``payloads``: its inline ``(digest, ref)`` pairs) before it is deleted; why the
#: stream must stay instead, or None.
Evacuate = Callable[[str, Iterator[tuple[str, dict[str, Any]]]], "str | None"]


class GcSession(Protocol):
    """What gc and keep do while they hold the ledger's gc lock (no other gc or keep runs meanwhile)."""

    @property
    def where(self) -> str:
        """The ledger, as messages name it (its folder, its store location)."""

    @property
    def log_file(self) -> str:
        """Where the gc record is, as a result names it (``gc.jsonl``; the store's gc log stream)."""

    def mark(self, mark: KeepMark) -> None:
        """Record ``mark`` (replacing the task's earlier one); durable on return."""

    def release(self, task: str) -> bool:
        """Remove ``task``'s keep mark, durable on return; False (nothing written) when it had none."""

    def sweep(self) -> None:
        """Finish or undo what a gc killed mid-apply left (always safe; recorded where the storage records it)."""

    def append(self, kind: str, data: dict[str, Any]) -> int:
        """Append one event to the gc record, durable on return; its seq."""

    def delete_streams(
        self,
        expired: Sequence[ExpiredTask],
        started: int,
        evacuate: Evacuate,
        deleted: list[str],
        skipped: list[tuple[str, str]],
    ) -> None:
        """Delete each expired stream that is still the one the plan saw and that no writer holds.

        Each is first held against writers (its writer lock, its lease), checked unchanged,
        and ``evacuate`` d; then deleted and added to ``deleted``, or left and added to
        ``skipped`` with why. ``started`` is the seq of the run's ``gc.started``.
        """

    def put_object(self, data: bytes) -> None:
        """Store ``data`` in the ledger's objects (an evacuation)."""

    def references(self, task: str, refs: set[bytes]) -> bool:
        """Add every digest ``task``'s stream names to ``refs``; False when it cannot be read whole (gone: True)."""

    def delete_objects(self, blobs: Sequence[ExpiredBlob], started: int) -> tuple[list[str], list[str]]:
        """Delete each blob unless a writer stored it again since the plan: ``(deleted, restored)`` digests."""


class GcStorage(Protocol):
    """What a gc plan reads a ledger through, and the lock its apply and keep marks are made under."""

    @property
    def where(self) -> str:
        """The ledger, as messages name it (its folder, its store location)."""

    def check_layout(self) -> None:
        """Refuse (an ``IntentlogError``) a layout gc must not work in (a folder swapped for a link)."""

    def keep_marks(self) -> dict[str, KeepMark]:
        """The keep marks by task; ``IntentlogError`` when they cannot be read (the plan is then refused)."""

    def has_task(self, task: str) -> bool:
        """Whether ``task`` has a stream (what may be marked kept)."""

    def scan(
        self,
        now: _dt.datetime,
        policy: GcPolicy,
        marks: Mapping[str, KeepMark],
        *,
        limit: int,
        progress: Progress | None,
        preview: bool,
    ) -> Scan:
        """Every stream, in task-id order (:mod:`.scan`); ``preview``: unchanged streams may come from an index."""

    def objects(self) -> Iterator[tuple[str, int, int, int]]:
        """``(digest, size, mtime_ns, touches)`` of every object (``mtime_ns`` -1: unknown, never past grace)."""

    def inline_payloads(self, task: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every ``(digest, ref)`` riding inline in the task's trusted events."""

    def has_object(self, digest: str) -> bool:
        """Whether the ledger's objects hold ``digest``."""

    def locked(self, *, wait: float, take_over_after: float | None = None) -> AbstractContextManager[GcSession]:
        """The gc lock, held (waiting up to ``wait`` s; ``GcRefused`` when another gc or keep holds it).

        ``take_over_after`` takes it from a holder that stood still that long, where a
        holder's death does not free it by itself (a store's lease); a folder's lock dies
        with its holder.
        """


class GcLedger(Protocol):
    """What gc is given: a ledger (:class:`intentlog.Ledger`) -- its config and its storage for retention."""

    @property
    def root(self) -> Path: ...

    @property
    def marker(self) -> dict[str, Any]: ...

    def gc_storage(self) -> GcStorage: ...
