"""Suspending instead of blocking: how a runner (a backlog worker) asks sleeps and waits not to hold it.

Inside :func:`suspending`, a sleep that is not due and a wait whose event is not there
record what they wait for and raise :class:`~intentlog.idioms.errors.Suspended` instead of
blocking, whatever ``block`` the script passed: the runner releases the item and takes it
again when due (a sleep: its recorded wake time; an event: at its next look, every
``event_poll`` seconds). Outside it, ``block`` decides.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["blocks", "suspending"]

_SUSPENDING: ContextVar[bool] = ContextVar("intentlog_idioms_suspending", default=False)


@contextmanager
def suspending() -> Iterator[None]:
    """Sleeps and waits in this context (this thread or task) raise ``Suspended`` instead of blocking."""
    token = _SUSPENDING.set(True)
    try:
        yield
    finally:
        _SUSPENDING.reset(token)


def blocks(block: bool) -> bool:
    """Whether a sleep or wait may block here: as asked, unless a runner is suspending."""
    return block and not _SUSPENDING.get()
