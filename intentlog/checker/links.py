"""The checks across streams: every parent/child link, judged once every stream was read.

The rule is stated and implemented once, purely, in :mod:`intentlog.projections.graph_links`;
:mod:`.streams` notes each stream's link records while it reads it, and this module reports
what the rule finds. A link to a stream outside the tasks asked for (``verify TASK``) is
judged too: that stream's link records are read for it (its own checks are not run). A
stream the trusted gc log records deleting excuses the link (``info``: not checked); a
gc log that cannot be trusted excuses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from .._internal.regular import NotRegular
from ..errors import CorruptStream
from ..eventlog.gclog import GC_LOG, GcDeletion
from ..projections.graph_links import SpawnLinks
from .report import ERROR, INFO
from .state import CheckerState

__all__ = ["LinkChecks"]


class LinkChecks(CheckerState):
    """Reports :data:`~intentlog.projections.graph_links.LINK_RULES` over the links the stream checks noted."""

    def check_spawn_links(self, present: set[str], gc_deleted: Mapping[str, GcDeletion], trusted: bool) -> None:
        """Judge every link noted; ``present``: the task ids with a stream; ``trusted``: the gc log is."""
        links: SpawnLinks = self.spawn_links
        for task in sorted(_named(links) - set(links.streams)):
            if task in present and not self.blocked(f"tasks/{task}.jsonl"):
                self._note_unchecked(task)

        def gone(task: str) -> str | None:
            d = gc_deleted.get(task) if trusted else None
            return None if d is None else f"was deleted by gc at {d.ts} ({GC_LOG} seq {d.seq})"

        for f in links.findings(gone):
            severity, code = (ERROR, "graph") if f.severity == ERROR else (INFO, "deleted_by_gc")
            self.add(severity, code, f"{f.kind}: {f.message}", task=f.task, seq=f.seq)

    def _note_unchecked(self, task: str) -> None:
        """Note the link records of a stream whose own checks were not asked for (read, not judged)."""
        links: SpawnLinks = self.spawn_links
        links.begin(task)
        try:
            for _, raw in self.stream_lines(task):
                try:
                    ev: Any = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if type(ev) is dict and type(ev.get("data")) is dict and type(ev.get("seq")) is int:
                    links.note(task, ev["seq"], str(ev.get("kind")), ev["data"])
        except (OSError, NotRegular, CorruptStream):
            pass  # unreadable: its own verify says why; its links are judged on what was read


def _named(links: SpawnLinks) -> set[str]:
    """Every task a noted link names (parents, and the tasks of child items)."""
    out: set[str] = set()
    for s in links.streams.values():
        if s.spawned is not None:
            out.add(s.spawned[1])
        for _, child, parent, _ in s.items:
            out.update((child, parent))
    return out
