"""The task streams a folder ledger holds, by name: one sorted list, read without opening a stream."""

from __future__ import annotations

import os
from pathlib import Path

from .format import check_task_id

__all__ = ["task_ids"]

STREAM_SUFFIX = ".jsonl"


def task_ids(root: Path) -> list[str]:
    """The ids of ``root/tasks/*.jsonl``, sorted; names that are not task ids are skipped; no folder, no ids."""
    try:
        names = os.listdir(root / "tasks")
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        if n.endswith(STREAM_SUFFIX):
            try:
                out.append(check_task_id(n[: -len(STREAM_SUFFIX)]))
            except ValueError:
                continue
    return sorted(out)
