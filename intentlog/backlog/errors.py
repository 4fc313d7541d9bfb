"""The backlog's own refusals: each is raised before anything is written.

Kept apart from :mod:`intentlog.backlog.core` so that :mod:`intentlog.backlog.permanent`
(which the worker imports) can name them: a step that spawns a child a backlog refuses
is refused the same way on every attempt.
"""

from __future__ import annotations

from ..errors import IntentlogError

__all__ = ["BacklogTaken", "ItemTaskTaken", "MalformedRecord", "PayloadChanged", "StillBlocked"]


class PayloadChanged(IntentlogError, ValueError):
    """An item id was added again with another payload: an item id names one payload forever."""


class ItemTaskTaken(IntentlogError, ValueError):
    """A new item's task already holds records the backlog did not write: the item is not added."""


class BacklogTaken(IntentlogError, ValueError):
    """The backlog's stream (``NAME.backlog``) is a task no backlog wrote: nothing is added, run or unblocked there."""


class StillBlocked(IntentlogError):
    """``unblock`` was asked while the item's task still needs a person (the reason holds)."""


class MalformedRecord(IntentlogError, ValueError):
    """A backlog record whose data is not what a backlog writes (a field missing or of another type): the
    stream was edited, its hash chain rewritten. Nothing is written; its folder's bytes stay as they are."""
