"""The idioms' own errors, under :class:`~intentlog.errors.IntentlogError`; each says what, where and what next."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import IntentlogError, UsageError

__all__ = ["ChildrenPending", "EventConflict", "EventTimedOut", "Suspended"]


class EventTimedOut(IntentlogError):
    """The event was not recorded by the deadline; the timeout is recorded (``task.event_timed_out``).

    Raised again, from the record, by every later run that waits for the same event.
    """

    def __init__(self, task_id: str, event: str, deadline: str) -> None:
        self.task_id, self.event, self.deadline = task_id, event, deadline
        super().__init__(
            f"task {task_id!r}: event {event!r} was not signalled by its deadline {deadline}; the timeout is "
            "recorded, and every re-run raises it again: handle it in the script (or wait for the event under a "
            "new name)"
        )


class EventConflict(IntentlogError, ValueError):
    """A signal contradicts the one already recorded for the event's name; nothing was written."""

    def __init__(self, task_id: str, event: str, why: str) -> None:
        self.task_id, self.event = task_id, event
        super().__init__(f"task {task_id!r}, event {event!r}: {why}; nothing was written")


class ChildrenPending(IntentlogError):
    """Some children have not returned a result yet; ``blocked`` maps each to its state and next step."""

    def __init__(self, task_id: str, blocked: Sequence[tuple[str, str, str]]) -> None:
        self.task_id = task_id
        self.blocked = tuple(blocked)
        lines = "; ".join(f"{c}: {state} (next: {step})" for c, state, step in self.blocked)
        super().__init__(
            f"task {task_id!r}: {len(self.blocked)} child task(s) not done: {lines}; join again once they return"
        )


class Suspended(IntentlogError):
    """The task cannot continue before ``until`` (a recorded wake time), before ``event`` is signalled, or
    before its ``children`` are done.

    Raised by a sleep or a wait asked not to block (``block=False``), or by a join inside a
    backlog: what is waited for is recorded first (a sleep's wake time, a wait, the children
    spawned), so a backlog worker can release the item and take it again when due.
    """

    def __init__(
        self, task_id: str, *, until: str | None = None, event: str | None = None, children: Sequence[str] = ()
    ) -> None:
        if sum((until is not None, event is not None, bool(children))) != 1:
            raise UsageError("a suspension waits for a time, for an event or for children")
        self.task_id, self.until, self.event, self.children = task_id, until, event, tuple(children)
        if until is not None:
            self.what = f"sleeping until {until}"
        elif event is not None:
            self.what = f"waiting for event {event!r}"
        else:
            more = len(self.children) - 3
            shown = ", ".join(self.children[:3]) + (f" and {more} more" if more > 0 else "")
            self.what = f"waiting for {len(self.children)} child task(s): {shown}"
        super().__init__(f"task {task_id!r} is {self.what}; run it again then (the record holds what it waits for)")

    def due(self, now: float, *, event_poll: float) -> float:
        """When to run the task again (epoch seconds): the recorded wake time, or ``now + event_poll`` for an event
        (its fallback look; a backlog takes it again as soon as the signal lands), or ``now`` for children (a
        backlog takes it again once they are done, whatever this says)."""
        if self.children:
            return now
        if self.until is None:
            return now + event_poll
        from ..eventlog.format import parse_utc

        return parse_utc(self.until).timestamp()
