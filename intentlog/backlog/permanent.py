"""Which errors a step raises fail its item at once: a retry would raise them again.

The worker classifies every exception a step (or its resume) raises
(:func:`intentlog.backlog.worker.failure_answer`); this module is the one place that says
which of them are *permanent*. Guarantees:

- a permanent error fails the item on that attempt (``backlog.item_failed``, the attempt
  counted, the reason naming the error and its message), never scheduled again, whatever
  ``max_attempts`` says;
- permanent are: intentlog's :class:`~intentlog.errors.UsageError` and its subclasses
  (an argument intentlog refuses -- bad input or misuse -- is refused the same way on every
  attempt), the refusals of what a step records that the same step records again on every
  attempt (:class:`~intentlog.errors.NotSerializable`: a value that is not exact JSON;
  :class:`~intentlog.errors.InvalidTaskId`: a malformed task or child id;
  :class:`~intentlog.errors.ReservedKind`: an event kind only intentlog writes), a
  backlog's refusal of a child the step spawns (:class:`~intentlog.backlog.ItemTaskTaken`:
  its id is another task's item; :class:`~intentlog.backlog.PayloadChanged`: the item was
  added with another payload; :class:`~intentlog.backlog.BacklogTaken`: the backlog's
  stream is not a backlog's), and
  :class:`~intentlog.idioms.errors.ChildrenPending` in a backlog (every child the join waits
  for is settled and some failed: joining again cannot succeed);
- everything else a step raises is a failed attempt, retried after a backoff up to
  ``max_attempts`` (:meth:`intentlog.backlog.schedule.Schedule.failed_attempt`).
"""

from __future__ import annotations

from typing import Final

from ..errors import InvalidTaskId, NotSerializable, ReservedKind, UsageError
from ..idioms.errors import ChildrenPending
from .errors import BacklogTaken, ItemTaskTaken, PayloadChanged

__all__ = ["PERMANENT", "permanent_reason"]

#: the exception types a retry would raise again
PERMANENT: Final[tuple[type[BaseException], ...]] = (
    UsageError, NotSerializable, InvalidTaskId, ReservedKind, ChildrenPending, ItemTaskTaken, PayloadChanged,
    BacklogTaken,
)  # fmt: skip


def permanent_reason(exc: BaseException) -> str | None:
    """The reason the item fails at once for ``exc`` (its type and message), or None: a retry may succeed."""
    if isinstance(exc, ChildrenPending):
        return str(exc)  # names each failed child with its state and next step
    if isinstance(exc, PERMANENT):
        return f"{type(exc).__name__}: {exc} (a permanent error: not retried; fix the step or its input)"
    return None
