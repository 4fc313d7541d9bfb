"""What the ledger's backlogs still need, for a gc plan: each backlog stream read only when it changed.

A backlog ``B`` keeps its record in the task stream ``B.backlog``; until it records an
item done or failed, that item's task is what a later run resumes from, so gc keeps it
(:func:`intentlog.projections.backlogs.unfinished_item_tasks` says which). A preview takes
a backlog stream's unfinished item tasks from the view cache's index
(``cache/index-backlogs.json``) when the stream's file facts are the ones recorded there;
the plan gc applies reads every backlog stream whole (it is given a join that reads
nothing), and refuses when it differs from the preview.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import LedgerError
from ..eventlog.format import TASK_ID_RE
from ..eventlog.reader import StreamScan, open_stream
from ..projections.backlogs import BACKLOG_SUFFIX, unfinished_item_tasks
from ..viewcache.index import IndexJoin, facts_of

__all__ = ["backlog_needs"]

_SUFFIX = BACKLOG_SUFFIX + ".jsonl"


def backlog_needs(tasks_dir: Path, names: list[str], join: IndexJoin) -> dict[str, str]:
    """Task id -> the backlog whose unfinished item it is, and each such backlog's own stream.

    ``names`` are the stream file names in ``tasks_dir`` in task-id order. A backlog stream
    that cannot be read whole claims every task named like its items: gc never guesses in
    the direction of deleting. A name that is not a task id (bytes that are not UTF-8, a
    stray character, one too long) is never read: the scan reports it and keeps the file,
    and it claims the tasks named like its items, as an unreadable one does. ``join``
    is walked in the same order (the entries of streams that are not backlogs are dropped)
    and committed. Memory: the tasks claimed.
    """
    needed: dict[str, str] = {}
    for name in names:
        if not name.endswith(_SUFFIX):
            continue
        tid = name[:-6]
        backlog = name[: -len(_SUFFIX)]
        named = TASK_ID_RE.match(tid) is not None  # else reported by the scan ("not named like a task stream")
        cached = _cached(tasks_dir, tid, join) if named else None
        if cached is not None:
            tasks, whole = cached, True
        elif named:
            tasks, whole = _read(tasks_dir, tid, join)
        else:  # never read, kept
            tasks, whole = set(), False
        if not whole:
            prefix = f"{backlog}.item."
            tasks |= {n[:-6] for n in names if n.startswith(prefix)}
        if tasks:
            needed[tid] = backlog
        for t in tasks:
            needed[t] = backlog
    join.commit()
    return needed


def _cached(tasks_dir: Path, tid: str, join: IndexJoin) -> set[str] | None:
    """The unfinished item tasks the index recorded, when the stream's facts are the ones it saw."""
    found = join.find(tid)
    if found is None:
        return None
    try:
        st = os.lstat(tasks_dir / f"{tid}.jsonl")
    except OSError:
        return None
    value = found[1]
    if not stat.S_ISREG(st.st_mode) or found[0] != facts_of(st) or type(value) is not list:
        return None
    if not all(type(t) is str and TASK_ID_RE.match(t) is not None for t in value):
        return None
    join.keep()
    return set(value)


def _read(tasks_dir: Path, tid: str, join: IndexJoin) -> tuple[set[str], bool]:
    """Read the backlog stream: its unfinished item tasks, and whether it could be read whole.

    Recorded in the index only when the stream had no problem and did not change while read.
    """
    path = tasks_dir / f"{tid}.jsonl"
    try:
        with open_stream(path) as f:
            before = os.fstat(f.fileno())
            scan = StreamScan(path, fd=f.fileno())
            tasks = unfinished_item_tasks(scan)
            after = os.fstat(f.fileno())
    except (OSError, LedgerError):
        return set(), False
    p = scan.problem
    if p is None and facts_of(before) == facts_of(after):
        join.put(tid, facts_of(after), sorted(tasks))
    return tasks, p is None or p.incomplete
