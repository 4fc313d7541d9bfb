"""``intentlog run`` on a terminal: a live progress line, then a summary naming what needs a person.

The progress line is drawn on stderr only when stderr is a terminal and ``--json`` was not
given: never in a pipe, a log file or a script's output. It is redrawn in place (carriage
return, erase to the end of the line) from the backlog's own view, read by a thread of its
own on a ledger handle of its own, so the run itself is neither slowed nor changed: the
line shows the counts by state, the rate of items done since the run started, the quota's
state, and what is in flight (the view's ``in_flight`` where it has one, else the running
items). A view that cannot be read for a moment keeps the last line.

The summary (:func:`summary`) is what the run leaves: the counts, each item that needs a
person with why and the exact command, and where to see every item. Its exit status
(:data:`EXIT_NEEDS_PERSON`) says that a person is needed, so a script can tell "all done"
from "stopped where only a person can go on".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final, TextIO

from .._internal.text import printable as p
from ..backlog import BacklogView
from ..errors import IntentlogError

__all__ = ["EXIT_NEEDS_PERSON", "NEEDS_PERSON", "RunProgress", "needing_a_person", "progress_line", "summary"]

#: Exit status of ``intentlog run`` when it ended with items only a person can move on.
EXIT_NEEDS_PERSON: Final = 3

#: The item states that wait for a person: an approval, a reconcile, a review.
NEEDS_PERSON: Final = ("blocked", "awaiting approval", "paused for review")

#: How many of the items that need a person the summary lists (the rest: ``intentlog backlog NAME``).
LISTED: Final = 20


def needing_a_person(view: BacklogView) -> list[Any]:
    """The view's rows that wait for a person, in the view's order (priority, then order of addition)."""
    return [r for r in view.items if r.state in NEEDS_PERSON]


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _quota(view: BacklogView, quotas: tuple[str, ...], now: float) -> str | None:
    q = view.quota_waiting
    if q is not None:
        until = q.get("until")
        if until is None or float(until) > now:
            left = f", reopens in {_clock(float(until) - now)}" if until is not None else ""
            return f"quota {p(str(q.get('quota')))} waiting{left}"
    if view.stopped and view.stopped.get("quota"):
        return f"quota spent: {p(str(view.stopped['quota']))}"
    return "quota ok" if quotas else None


def progress_line(view: BacklogView, *, done_at_start: int, elapsed: float, quotas: tuple[str, ...], now: float) -> str:
    """One line: counts by state, items done per minute since the start, the quota's state, in flight, time run."""
    counts = " ".join(f"{k}: {v}" for k, v in view.counts.items() if v) or "no items"
    parts = [f"{p(view.name)} {counts}"]
    in_flight = getattr(view, "in_flight", None)
    if isinstance(in_flight, int) and not isinstance(in_flight, bool):
        parts.append(f"{in_flight} in flight")
    done = view.counts.get("done", 0) - done_at_start
    if elapsed > 0:
        parts.append(f"{done * 60 / elapsed:.1f} done/min")
    quota = _quota(view, quotas, now)
    if quota is not None:
        parts.append(quota)
    parts.append(_clock(elapsed))
    return " | ".join(parts)


def summary(view: BacklogView, hint: Callable[[str], str]) -> list[str]:
    """The lines a finished run prints: the counts, then each item that needs a person and its command.

    ``hint`` completes every ``intentlog COMMAND`` (``--root`` when the command line named one).
    """
    lines = [" ".join(f"{p(k)}: {v}" for k, v in view.counts.items() if v) or "no items"]
    waiting = needing_a_person(view)
    if not waiting:
        return lines
    lines.append(f"{len(waiting)} item(s) need a person:")
    for r in waiting[:LISTED]:
        why = f" ({p(r.reason)})" if r.reason else ""
        lines.append(f"  {p(r.item)}: {p(r.state)}{why}; {p(hint(r.next_step))}")
    more = f" ({len(waiting) - LISTED} more not listed)" if len(waiting) > LISTED else ""
    lines.append(f"every item, why and its command{more}: " + hint(f"intentlog backlog {view.name}"))
    return lines


class RunProgress:
    """Redraws :func:`progress_line` on ``out`` every ``every`` seconds until :meth:`stop`; a context manager.

    ``read_view`` is called on the drawing thread (give it a ledger handle of its own).
    Errors reading the view are ignored (the last line stays); :meth:`stop` erases the line.
    """

    def __init__(
        self,
        read_view: Callable[[], BacklogView],
        out: TextIO,
        *,
        quotas: tuple[str, ...] = (),
        every: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.read_view, self.out, self.quotas, self.every = read_view, out, quotas, every
        self.clock, self.wall = clock, wall
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="intentlog-run-progress", daemon=True)
        self._started = 0.0
        self._done_at_start: int | None = None
        self._drawn = False

    def __enter__(self) -> RunProgress:
        self._started = self.clock()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop drawing and erase the line (the summary takes its place)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._drawn:
            self._write("\r\x1b[K")

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):
            self._stop.set()  # the terminal went away: nothing left to draw on

    def draw(self) -> None:
        """Read the view once and redraw the line."""
        view = self.read_view()
        if self._done_at_start is None:
            self._done_at_start = view.counts.get("done", 0)
        line = progress_line(
            view, done_at_start=self._done_at_start, elapsed=self.clock() - self._started, quotas=self.quotas,
            now=self.wall(),
        )  # fmt: skip
        self._write(f"\r{line}\x1b[K")
        self._drawn = True

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.draw()
            except (IntentlogError, OSError, ValueError, KeyError):
                pass  # a view that cannot be read this moment: the last line stays
            self._stop.wait(self.every)
