"""What a backlog's stream says its item tasks still need (pure: a fold over its events).

A backlog ``B`` keeps its record in the task stream ``B.backlog`` and does each item's work
in its own task (named in ``backlog.item_added``). Until the backlog records the item done
or failed, that task's record is what a later run resumes from -- replaying the calls it
completed instead of paying for them again -- so nothing may delete it. gc asks this fold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from ..eventlog.format import Event

__all__ = [
    "BACKLOG_NAME_RE",
    "BACKLOG_SUFFIX",
    "PACE_WINDOW",
    "BacklogPace",
    "PaceFold",
    "Running",
    "children_there",
    "settled_items",
    "unfinished_item_tasks",
]

#: A backlog's own stream is the task ``NAME`` + this suffix.
BACKLOG_SUFFIX: Final = ".backlog"
#: A backlog's name: no dot, so ``NAME.backlog`` and ``NAME.item.ITEM`` never collide across backlogs.
BACKLOG_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")


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


def settled_items(events: Iterable[Event], items: Iterable[str]) -> dict[str, str | None]:
    """Of ``items`` -- spawned children, each an item whose task is itself -- each the backlog recorded failed (its
    reason) or else done (None); the rest are left out.

    Both are final: nothing in a backlog's record runs a failed or done item again. An
    item of the same id done by another task (a plain item ``NAME.item.ID``, which kept the
    child from being added) is not the child: it is left out.
    """
    return children_there(events, items)[1]


def children_there(
    events: Iterable[Event], items: Iterable[str]
) -> tuple[set[str], dict[str, str | None], dict[str, str]]:
    """Of ``items`` (spawned children): those the backlog added as child items (their task is themselves); of
    those the settled ones as :func:`settled_items` gives them; and those whose item id another task holds (item
    id -> that task: a plain item ``NAME.item.ID`` keeps the child from ever being added)."""
    wanted = set(items)
    mine: set[str] = set()
    others: dict[str, str] = {}
    failed: dict[str, str] = {}
    done: set[str] = set()
    for ev in events:
        item = ev.data.get("item")
        if not isinstance(item, str) or item not in wanted:
            continue
        if ev.kind == "backlog.item_added":
            if ev.data.get("task") == item:
                mine.add(item)
            elif item not in mine:
                others.setdefault(item, str(ev.data.get("task")))
        elif ev.kind == "backlog.item_failed":
            failed[item] = str(ev.data.get("reason"))
        elif ev.kind == "backlog.item_done":
            done.add(item)
    return mine, {i: failed.get(i) for i in wanted & mine if i in failed or i in done}, others


#: seconds of the record the rate is counted over (the items settled within it, before the view's ``now``)
PACE_WINDOW: Final = 60.0


@dataclass(frozen=True, slots=True)
class Running:
    """One running item as the view sees it: the item, its holder's process and host, and since when (ISO time)."""

    item: str
    pid: int | None
    host: str | None
    since: str | None


@dataclass(frozen=True, slots=True)
class BacklogPace:
    """What a backlog holds now and how fast it moves, for an operator.

    ``in_flight``: items running; ``by_process``: how many each holder process runs
    (``"pid 81234 on build-3"``); ``rate``: items settled (done or failed) per second over
    the last :data:`PACE_WINDOW` seconds of the record before ``now`` (None when nothing
    settled in it); ``oldest``: the running item held longest (item, holder, since);
    ``run``: the open run's settings as it recorded them (workers, in flight per worker,
    quotas), or None when no run is open. Times are the records' (wall clocks): for
    people, never for a decision.
    """

    in_flight: int
    by_process: dict[str, int]
    rate: float | None
    window: float
    settled_in_window: int
    oldest: Running | None
    run: Mapping[str, Any] | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        o = self.oldest
        return {
            "in_flight": self.in_flight,
            "by_process": dict(self.by_process),
            "rate": self.rate,
            "window": self.window,
            "settled_in_window": self.settled_in_window,
            "oldest_running": None if o is None else {"item": o.item, "pid": o.pid, "host": o.host, "since": o.since},
            "run": None if self.run is None else dict(self.run),
        }

    def lines(self) -> list[str]:
        """The operator's lines: what is in flight and where, the rate, the oldest running item, the run's limits."""
        out: list[str] = []
        if self.run is not None:
            r = self.run
            quotas = ", ".join(str(q) for q in r.get("quota") or []) or "none"
            per = r.get("in_flight") or 1
            cap = r.get("max_in_flight")
            out.append(
                f"run open: {r.get('workers')} worker(s) x {per} in flight"
                + (f", at most {cap} in flight" if cap else "")
                + f"; quotas: {quotas}"
            )
        if self.in_flight:
            where = ", ".join(f"{who}: {n}" for who, n in sorted(self.by_process.items()))
            out.append(f"in flight: {self.in_flight} ({where})")
        if self.rate is not None:
            out.append(
                f"rate: {self.rate:.2f} items/s ({self.settled_in_window} settled in the last {self.window:g} s)"
            )
        if self.oldest is not None:
            o = self.oldest
            who = f"pid {o.pid} on {o.host}" if o.pid is not None else "a holder recording no process"
            out.append(f"oldest running: {o.item} since {o.since or '-'} ({who})")
        return out


def _when(ts: str) -> float | None:
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return None


class PaceFold:
    """Fed the backlog stream's events once (with the view's own fold): the settle times and the open run.

    Pure: the view passes ``now`` and the running rows to :meth:`pace`.
    """

    def __init__(self) -> None:
        self.settled: list[float] = []
        self.run: dict[str, Any] | None = None

    def apply(self, ev: Event) -> None:
        kind = ev.kind
        if kind in ("backlog.item_done", "backlog.item_failed"):
            t = _when(ev.ts)
            if t is not None:
                self.settled.append(t)
        elif kind == "backlog.run_started":
            d = ev.data
            self.run = {k: d.get(k) for k in ("pid", "host", "workers", "in_flight", "max_in_flight", "quota")}
        elif kind == "backlog.run_stopped":
            self.run = None
        # every other kind leaves the pace as it is (the items' states come from the view's own fold)

    def pace(self, running: Iterable[Running], now: float, window: float = PACE_WINDOW) -> BacklogPace:
        rows = list(running)
        by: dict[str, int] = {}
        for r in rows:
            who = f"pid {r.pid} on {r.host}" if r.pid is not None else "unknown holder"
            by[who] = by.get(who, 0) + 1
        recent = [t for t in self.settled if now - window <= t <= now]
        rate = len(recent) / window if recent else None
        dated = [r for r in rows if r.since is not None]
        oldest = (
            min(dated, key=lambda r: (_when(r.since or "") or now, r.item)) if dated else (rows[0] if rows else None)
        )
        return BacklogPace(len(rows), by, rate, window, len(recent), oldest, self.run)
