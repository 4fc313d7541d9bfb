"""Child tasks in a backlog: a step's spawned children are items of its backlog, run on its workers.

A backlog worker runs each step inside :func:`~intentlog.idioms.suspend.suspending` with a
:class:`BacklogChildren` runner. Guarantees:

- **a child is an item, added once**: ``task.spawn(child_id, payload)`` records the parent
  link and creates the child's stream first (:mod:`intentlog.idioms.children`), then adds
  the item ``child_id`` whose task is the child itself (``backlog.item_added {item, task,
  parent}``), idempotent by the child id: a parent re-run after a crash anywhere in between
  adds it then, never twice. The child inherits its parent item's priority, ``max_attempts``
  and limits;
- **the child's step is the backlog's step**: it gets the child's payload, and what it
  returns is recorded as the child's result (``task.returned``, then ``item.returned``);
  a child item whose task already returned (a ``run=`` child, or a crash between the two)
  answers that result without running the step again;
- **a joining parent holds no worker**: ``task.join`` with children not returned raises
  :class:`~intentlog.idioms.errors.Suspended` naming them; the worker answers ``Waiting``,
  the supervisor records ``backlog.item_scheduled {children}`` and takes the parent again
  once every one of them is done or failed (:meth:`intentlog.backlog.schedule.Schedule.candidates`),
  woken by their completion, not by a poll;
- **a child in another backlog**: a link naming a backlog (``task.spawn(..., backlog=NAME)``)
  makes the child an item of that backlog, run by its own step and workers; the parent's
  join is scheduled with ``backlogs`` (child id -> backlog) and its run takes it again once
  they are settled there (:class:`intentlog.backlog.wake.ChildrenWatch`, no poll of the
  children); :func:`children_elsewhere` lists them under their parent in the view;
- **a child that failed fails its parent's join**: once every child not returned is settled
  and some failed (``backlog.item_failed``), the join raises
  :class:`~intentlog.idioms.errors.ChildrenPending` naming them; uncaught, the parent item is
  failed at once (never retried: its children would fail it again). A child blocked for a
  person keeps its parent waiting until it is unblocked and done.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..errors import IntentlogError
from ..idioms import state
from ..idioms.children import finish, settled_child
from ..idioms.suspend import suspending
from .itemcache import read_items
from .model import (
    DONE,
    ITEM_FAILED,
    QUEUED,
    SCHEDULED,
    BacklogFold,
    ItemRecord,
    ItemView,
    LedgerLike,
    backlog_stream_id,
    item_view,
)

if TYPE_CHECKING:
    from ..ledgerstorage import LeaseOwner
    from ..stream import TaskStream
    from ..task import Task

__all__ = ["BacklogChildren", "arun_step", "children_elsewhere", "is_child_item", "run_step", "with_children"]


def is_child_item(item: str, task_id: str) -> bool:
    """Whether the item is a spawned child: its task id is its item id (an item's own is ``NAME.item.ITEM``)."""
    return item == task_id


class _Adds(Protocol):
    """What the runner needs of a backlog (:class:`intentlog.backlog.Backlog` is one)."""

    def add_child(self, child_id: str, payload: Any, *, parent: str) -> ItemRecord: ...

    def check_child(self, child_id: str, payload: Any, *, parent: str) -> None: ...

    def fold(self) -> BacklogFold: ...


class _Ledger(Protocol):
    def backlog(self, name: str) -> _Adds: ...


class BacklogChildren:
    """The child runner of one item's run: children become items of ``backlog``, or of the backlog their link names."""

    def __init__(self, ledger: _Ledger, backlog: str) -> None:
        self.ledger, self.name = ledger, backlog
        self._backlogs: dict[str, _Adds] = {}

    @property
    def backlog(self) -> _Adds:
        """The item's own backlog."""
        return self.handle(self.name)

    def handle(self, name: str) -> _Adds:
        """One handle per backlog per run: its fold is reused across the step's spawns."""
        got = self._backlogs.get(name)
        if got is None:
            got = self._backlogs[name] = self.ledger.backlog(name)
        return got

    def where(self, parent: TaskStream, child_id: str) -> str:
        """The backlog the child is an item of: the one its link names, else this item's."""
        with parent.mutex:
            return state.current(parent).child_backlogs.get(child_id, self.name)

    def check(self, parent: TaskStream, child_id: str, payload: Any, backlog: str | None) -> None:
        """What adding the child to its backlog (``backlog``, else this item's) would refuse, raised now."""
        self.handle(backlog or self.name).check_child(child_id, payload, parent=parent.id)

    def spawned(self, parent: TaskStream, child_id: str, payload: Any) -> None:
        """Add the child as an item of its backlog (a no-op when it is one already)."""
        self.handle(self.where(parent, child_id)).add_child(child_id, payload, parent=parent.id)

    def failed(self, parent: TaskStream, pending: Sequence[str]) -> list[tuple[str, str, str]] | None:
        """None while any pending child may still return; else each one's (id, state, next step).

        A pending child that is not an item yet (its add lost to a crash) is added now: the
        parent then waits for it. Each backlog the children are items of is read once.
        """
        folds: dict[str, BacklogFold] = {}
        out: list[tuple[str, str, str]] = []
        waiting = False
        for cid in pending:
            name = self.where(parent, cid)
            f = folds.get(name)
            if f is None:
                f = folds[name] = self.handle(name).fold()
            rec = f.items.get(cid)
            if rec is None or rec.task != cid:  # not an item yet, or its id taken by another task (adding refuses)
                with parent.mutex:
                    payload = state.current(parent).children[cid]
                self.spawned(parent, cid, payload)
                waiting = True
            elif rec.failed is not None or rec.done:  # done with no result in its task (removed since): none comes
                out.append(settled_child(cid, name, rec.failed))
            else:
                waiting = True
        return None if waiting else out


def _child_result(task: Task) -> tuple[bool, Any]:
    st = state.current(task.stream)  # the worker holds the task's writer: this reads it once per lease
    return st.returned, st.result


def run_step(task: Task, backlog: str, item: str, step: Callable[[Task, Any], Any], payload: Any) -> Any:
    """Run the item's step suspending, its spawned children handed to the backlog; a child's result recorded."""
    child = is_child_item(item, task.id)
    if child:
        returned, result = _child_result(task)
        if returned:
            return result
    with suspending(BacklogChildren(cast("_Ledger", task.ledger), backlog)):
        value = step(task, payload)
    return finish(task.stream, value) if child else value


async def arun_step(
    task: Task, backlog: str, item: str, step: Callable[[Task, Any], Awaitable[Any]], payload: Any
) -> Any:
    """:func:`run_step` for an ``async def`` step: the record read and written off the event loop."""
    child = is_child_item(item, task.id)
    if child:
        returned, result = await asyncio.to_thread(_child_result, task)
        if returned:
            return result
    with suspending(BacklogChildren(cast("_Ledger", task.ledger), backlog)):
        value = await step(task, payload)
    return await asyncio.to_thread(finish, task.stream, value) if child else value


def children_elsewhere(
    ledger: LedgerLike,
    recs: Sequence[ItemRecord],
    sent: Mapping[str, Mapping[str, str]],
    owner: Callable[[str], LeaseOwner | None],
    now: float,
) -> list[ItemView]:
    """The rows of the children the items' tasks sent to another backlog, as that backlog says.

    ``sent``: each item task's links to another backlog (:attr:`~intentlog.backlog.model.TaskExtras.children_in`,
    child id -> backlog, in the order spawned), whether the item ever waited for them or not (children settled
    before their parent joins are never waited for). Each such row names its ``backlog``; each other backlog is
    read once (its stream, and the child tasks through the item cache).
    """
    wanted: dict[str, list[str]] = {}
    for rec in recs:
        for child, name in sent.get(rec.task, {}).items():
            wanted.setdefault(name, []).append(child)
    out: list[ItemView] = []
    for name, children in wanted.items():
        f = BacklogFold()
        try:
            for ev in ledger.task(backlog_stream_id(name)).events():
                f.apply(ev)
        except IntentlogError:  # a damaged backlog shows none of its rows here (verify and repair name it)
            continue
        there = [f.items[c] for c in dict.fromkeys(children) if c in f.items]
        got = read_items(ledger, name, [rec.task for rec in there])
        for rec in there:
            it = got[rec.task]
            row = item_view(name, rec, it.status, it.extras, owner=functools.partial(owner, rec.task), now=now)
            out.append(replace(row, backlog=name))
    return out


def with_children(rows: list[ItemView], elsewhere: Sequence[ItemView] = ()) -> list[ItemView]:
    """The rows, each parent's with its child items counted per state (the tree ``intentlog backlog`` shows).

    A parent joining children that are all settled is shown queued: the next turn takes it.
    ``elsewhere``: rows of children that are items of another backlog (each naming it),
    counted under their parent and listed after the rows.
    """
    rows = [*rows, *elsewhere]
    by_parent: dict[str, dict[str, int]] = {}
    for r in rows:
        if r.parent is not None:
            counts = by_parent.setdefault(r.parent, {})
            counts[r.state] = counts.get(r.state, 0) + 1
    if not by_parent:
        return rows
    out: list[ItemView] = []
    for r in rows:
        got = by_parent.get(r.task)
        if got is not None:
            counts = got
            told = ", ".join(f"{n} {s}" for s, n in counts.items())
            if r.state == SCHEDULED and r.reason is not None and "child task(s)" in r.reason:
                if all(s in (DONE, ITEM_FAILED) for s in counts):
                    r = replace(r, state=QUEUED, reason=f"its children are settled ({told})",
                                next_step="wait: a worker takes it (intentlog run ...)")  # fmt: skip
                else:
                    r = replace(r, reason=f"{r.reason} (children: {told})")
            r = replace(r, children=counts)
        out.append(r)
    return out
