"""What a backlog's stream says its item tasks still need (pure: a fold over its events).

A backlog ``B`` keeps its record in the task stream ``B.backlog`` and does each item's work
in its own task (named in ``backlog.item_added``). Until the backlog records the item done
or failed, that task's record is what a later run resumes from -- replaying the calls it
completed instead of paying for them again -- so nothing may delete it. gc asks this fold.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ..eventlog.format import Event

__all__ = ["BACKLOG_SUFFIX", "unfinished_item_tasks"]

#: A backlog's own stream is the task ``NAME`` + this suffix.
BACKLOG_SUFFIX: Final = ".backlog"


def unfinished_item_tasks(events: Iterable[Event]) -> set[str]:
    """The task ids of the items the backlog added and has not recorded done or failed."""
    task_of: dict[str, str] = {}
    finished: set[str] = set()
    for ev in events:
        d = ev.data
        item = d.get("item")
        if not isinstance(item, str):
            continue
        if ev.kind == "backlog.item_added" and isinstance(d.get("task"), str):
            task_of[item] = d["task"]
        elif ev.kind in ("backlog.item_done", "backlog.item_failed"):
            finished.add(item)
    return {t for item, t in task_of.items() if item not in finished}
