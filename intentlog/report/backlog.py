"""A backlog's part of the report: its counts per state and the items a person must unblock.

The report takes the backlog's operator view in the shape ``intentlog backlog BACKLOG
--json`` prints (DESIGN §11, issue "a durable backlog runner"): ``counts`` (state ->
number) and ``items``, each with at least ``item``, ``task``, ``state``, ``reason`` and
``next_step``; a running item's ``holder`` (``pid``, ``host``, ``since``: when its lease
was recorded) is shown with how long it has run. Only that shape is read, so the report depends on no backlog code; the
command line builds the view with the backlog package and passes it here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from ..errors import UsageError
from .html import commands, esc, running_since, table

__all__ = ["ITEM_FIELDS", "NEEDS_A_PERSON", "backlog_section", "check_backlog"]

#: The fields every item of the view must carry.
ITEM_FIELDS: Final = ("item", "task", "state", "reason", "next_step")
#: Item states listed with their reason and command: a person must act before the item moves.
NEEDS_A_PERSON: Final = frozenset({"blocked", "awaiting approval", "paused for review", "failed"})
#: The state of an item a worker holds now.
RUNNING: Final = "running"


def _task_link(task: str, detailed: Collection[str]) -> str:
    return f'<a href="#task-{esc(task)}">{esc(task)}</a>' if task in detailed else esc(task)


def check_backlog(view: Mapping[str, Any]) -> None:
    """Refuse (``UsageError``) a view without ``counts`` and ``items`` of the documented shape."""
    if not isinstance(view, Mapping):
        raise UsageError(f"a backlog view is a mapping with 'counts' and 'items', not {type(view).__name__}")
    counts, items = view.get("counts"), view.get("items")
    if not isinstance(counts, Mapping) or not all(type(v) is int for v in counts.values()):
        raise UsageError("the backlog view has no 'counts' mapping of state -> number")
    if not isinstance(items, list):
        raise UsageError("the backlog view has no 'items' list")
    for i, it in enumerate(items):
        if not isinstance(it, Mapping) or any(f not in it for f in ITEM_FIELDS):
            raise UsageError(f"backlog item {i} lacks one of {', '.join(ITEM_FIELDS)}")


def backlog_section(view: Mapping[str, Any], hint: Callable[[str], str], detailed: Collection[str]) -> str:
    """Counts in the view's own order of states; the items a person must act on, by state then item id."""
    name = view.get("backlog")
    counts = view["counts"]
    badges = " ".join(f"<b>{esc(s)}</b> {esc(n)}" for s, n in counts.items())
    stuck = sorted(
        (it for it in view["items"] if it["state"] in NEEDS_A_PERSON),
        key=lambda it: (str(it["state"]), str(it["item"])),
    )
    rows = [
        [esc(it["item"]), _task_link(str(it["task"]), detailed), esc(it["state"]),
         esc(it["reason"] or ""), commands(hint(str(it["next_step"] or "")))]
        for it in stuck
    ]
    title = f"Backlog {esc(name)}" if name else "Backlog"
    body = table(["item", "task", "state", "reason", "next step"], rows) if rows else "<p>no item needs a person</p>"
    return (
        f'<h2 id="backlog">{title}</h2><p class="counts">{badges}</p><h3>Items a person must act on</h3>{body}'
        + _running(view["items"], detailed)
    )


def _running(items: list[Any], detailed: Collection[str]) -> str:
    """The running items, by item id, each with its holder and how long since its lease was recorded."""
    rows = []
    for it in sorted((it for it in items if it["state"] == RUNNING), key=lambda it: str(it["item"])):
        holder = it.get("holder") if isinstance(it.get("holder"), Mapping) else {}
        since = holder.get("since")
        who = f"process {holder.get('pid')} on {holder.get('host')}" if holder.get("pid") is not None else "-"
        started = running_since(since, "taken") if isinstance(since, str) else "-"
        rows.append([esc(it["item"]), _task_link(str(it["task"]), detailed), esc(who), started])
    if not rows:
        return ""
    return "<h3>Items running</h3>" + table(["item", "task", "held by", "running"], rows)
