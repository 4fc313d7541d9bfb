"""Suspending instead of blocking: how a runner (a backlog worker) asks sleeps and waits not to hold it.

Inside :func:`suspending`, a sleep that is not due and a wait whose event is not there
record what they wait for and raise :class:`~intentlog.idioms.errors.Suspended` instead of
blocking, whatever ``block`` the script passed: the runner releases the item and takes it
again when due (a sleep: its recorded wake time; an event: once the signal lands in the
task's inbox). Outside it, ``block`` decides.

A runner may also say where spawned children run (:class:`ChildRunner`): inside
``suspending(runner)``, ``task.spawn`` hands each child to the runner once its link is
recorded (a backlog adds it as an item), and ``task.join`` asks the runner about the
children not returned yet: it suspends the parent while any of them may still return
(``Suspended`` naming them), and raises ``ChildrenPending`` only for children that never will.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..stream import TaskStream

__all__ = ["ChildRunner", "blocks", "runner", "suspending"]

_SUSPENDING: ContextVar[bool] = ContextVar("intentlog_idioms_suspending", default=False)


class ChildRunner(Protocol):
    """Where a suspending runner runs the children its steps spawn (a backlog: as its items)."""

    def check(self, parent: TaskStream, child_id: str, payload: Any, backlog: str | None) -> None:
        """Before the child's link is recorded: raise what the runner would refuse when handed it (it writes
        nothing), so that a refused child leaves no link. ``backlog``: the one the spawn names, if any."""
        ...

    def spawned(self, parent: TaskStream, child_id: str, payload: Any) -> None:
        """The child's link is recorded and its stream created: make sure it runs (idempotent by ``child_id``)."""
        ...

    def failed(self, parent: TaskStream, pending: Sequence[str]) -> list[tuple[str, str, str]] | None:
        """Of the children not returned, those that never will: (child, state, next step) each, once every one
        of ``pending`` is settled; None while any of them may still return (the parent suspends)."""
        ...


_RUNNER: ContextVar[ChildRunner | None] = ContextVar("intentlog_idioms_runner", default=None)


@contextmanager
def suspending(children: ChildRunner | None = None) -> Iterator[None]:
    """Sleeps and waits in this context (this thread or task) raise ``Suspended`` instead of blocking;
    ``children``: the runner spawned children are handed to (and a join suspends on)."""
    token = _SUSPENDING.set(True)
    rtoken = _RUNNER.set(children)
    try:
        yield
    finally:
        _RUNNER.reset(rtoken)
        _SUSPENDING.reset(token)


def runner() -> ChildRunner | None:
    """The child runner of the suspending context this code runs in, if any."""
    return _RUNNER.get() if _SUSPENDING.get() else None


def blocks(block: bool) -> bool:
    """Whether a sleep or wait may block here: as asked, unless a runner is suspending."""
    return block and not _SUSPENDING.get()
