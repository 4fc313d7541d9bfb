"""What the ledger's backlogs still need, for a gc plan: each backlog stream read only when it changed.

A backlog ``B`` keeps its record in the task stream ``B.backlog``; until it records an
item done or failed, that item's task is what a later run resumes from, so gc keeps it
(:func:`intentlog.projections.backlogs.unfinished_item_tasks` says which). A preview takes
a backlog stream's unfinished item tasks from the view cache's index
(``cache/index-backlogs.json``) when the stream's file facts are the ones recorded there;
the plan gc applies reads every backlog stream whole (it is given a join that reads
nothing), and refuses when it differs from the preview.

A backlog stream that cannot be read whole leaves its items unknown: it claims every task
named like its items (``NAME.item.*``) and every child task (a task whose record names a
parent: a child item's task id is the child id, whatever its name), on every storage
(:class:`BacklogNeeds`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LedgerError
from ..eventlog.format import TASK_ID_RE
from ..eventlog.reader import StreamScan, open_stream
from ..projections.backlogs import BACKLOG_SUFFIX, unfinished_item_tasks
from ..viewcache.index import IndexJoin, facts_of

__all__ = ["BacklogNeeds", "backlog_needs"]

_SUFFIX = BACKLOG_SUFFIX + ".jsonl"


@dataclass(slots=True)
class BacklogNeeds:
    """What the ledger's backlogs hold: each unfinished item's task, and what an unreadable backlog may hold.

    ``tasks``: task id -> the backlog whose unfinished item it is (and each such backlog's
    own stream). ``unread``: the backlogs whose stream cannot be read whole; each claims
    every task named like its items and every child task (:meth:`claim`): gc never guesses
    in the direction of deleting. The one place both storages ask.
    """

    tasks: dict[str, str] = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)

    def add(self, backlog_stream: str, backlog: str, items: Iterable[str], *, whole: bool) -> None:
        """Record one backlog stream's unfinished item tasks (``whole``: it could be read whole)."""
        items = set(items)
        if not whole:
            self.unread.append(backlog)
            self.tasks[backlog_stream] = backlog
        elif items:
            self.tasks[backlog_stream] = backlog
        for t in items:
            self.tasks[t] = backlog

    def claim(self, task: str, *, child: bool) -> str | None:
        """Why a backlog holds ``task`` (the plan's detail), or None. ``child``: its record names a parent."""
        backlog = self.tasks.get(task)
        if backlog is not None:
            return (
                f"backlog {backlog!r} has not finished with it: a later run resumes from this record "
                f"(see 'intentlog backlog {backlog}')"
            )
        for backlog in self.unread:
            if child or task.startswith(f"{backlog}{_ITEM_INFIX}"):
                what = "a child task" if child else "named like its items"
                return (
                    f"backlog {backlog!r} cannot be read whole and it is {what}: it may be an unfinished item "
                    f"a later run resumes from this record; run 'intentlog verify {backlog}{BACKLOG_SUFFIX}'"
                )
        return None


_ITEM_INFIX = ".item."


def backlog_needs(tasks_dir: Path, names: list[str], join: IndexJoin) -> BacklogNeeds:
    """The backlogs' unfinished item tasks (:class:`BacklogNeeds`), each backlog stream read only when it changed.

    ``names`` are the stream file names in ``tasks_dir`` in task-id order. A backlog stream
    that cannot be read whole claims every task named like its items and every child task
    (:meth:`BacklogNeeds.claim`). A name that is not a task id (bytes that are not UTF-8, a
    stray character, one too long) is never read: the scan reports it and keeps the file,
    and it claims what an unreadable one does. ``join`` is walked in the same order (the
    entries of streams that are not backlogs are dropped) and committed. Memory: the tasks
    claimed.
    """
    needed = BacklogNeeds()
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
        needed.add(tid, backlog, tasks, whole=whole)
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
