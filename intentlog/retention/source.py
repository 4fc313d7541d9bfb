"""What a gc plan reads a ledger through, whatever holds its streams and objects (a folder, an object store).

:func:`~intentlog.retention.plan.plan_from` decides from a :class:`GcSource` only, so a
folder (:class:`~intentlog.retention.plan.FolderSource`) and an object store
(:class:`~intentlog.retention.storescan.StoreSource`) holding the same streams and objects
give the same plan: the same rows, the same bytes printed.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from .marks import KeepMark
from .policy import GcPolicy
from .scan import Progress, Scan

__all__ = ["GcSource"]


class GcSource(Protocol):
    """The reads a plan makes."""

    def check_layout(self) -> None:
        """Refuse (an ``IntentlogError``) a layout gc must not work in (a folder swapped for a link)."""

    def keep_marks(self) -> dict[str, KeepMark]:
        """The keep marks by task; ``IntentlogError`` when they cannot be read (the plan is then refused)."""

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
        """Every stream, in task-id order (:mod:`.scan`)."""

    def objects(self) -> Iterator[tuple[str, int, int, int]]:
        """``(digest, size, mtime_ns, touches)`` of every object (``mtime_ns`` -1: unknown, never past grace)."""

    def inline_payloads(self, task: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every ``(digest, ref)`` riding inline in the task's trusted events."""

    def has_object(self, digest: str) -> bool:
        """Whether the object store holds ``digest``."""
