"""Items waiting for an event, woken when the signal lands: each one's inbox looked at cheaply.

An item whose task waits for an event is scheduled with ``backlog.item_scheduled {event,
not_before}`` (``not_before``: a fallback look). The run watches the inbox of each such item
(``<task>.inbox``, where every signal goes): a number that grows whenever the inbox does
(:meth:`~intentlog.ledgerstorage.LedgerStorage.progress`: its size on a folder, its last
segment on a store) is compared each look, and only when it moved is the inbox read, and the
item woken once it holds the event. The baseline is taken before the first read, so a
signal that lands at any moment is seen: before the baseline by that read, after it by the
growth. Waking records nothing: the item is taken again at once (it receives the event
from its inbox and records it in its own task); a run that restarts watches again from the
record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ..projections.idioms import INBOX_SUFFIX, inbox_signals

if TYPE_CHECKING:
    from ..task import Task
    from .model import ItemRecord, LedgerLike

__all__ = ["LOOK_EVERY", "InboxWatch"]

#: seconds between two looks at the watched inboxes (each look: one stat per inbox on a folder)
LOOK_EVERY: Final = 0.05


@dataclass
class _Watched:
    box: Task
    event: str
    size: int


class InboxWatch:
    """The inboxes of the items waiting for an event, and the items whose event has landed."""

    def __init__(self, ledger: LedgerLike) -> None:
        self.ledger = ledger
        self.watched: dict[str, _Watched] = {}
        #: items whose event is in their inbox: taken again now, whatever their fallback time says
        self.woken: set[str] = set()
        self.looked = -LOOK_EVERY

    def watch(self, rec: ItemRecord) -> None:
        """Watch the item's inbox for ``rec.event`` (once per scheduling; woken at once if it is there already)."""
        if rec.event is None or rec.item in self.watched or rec.item in self.woken:
            return
        box = self.ledger.task(rec.task + INBOX_SUFFIX)
        w = self.watched[rec.item] = _Watched(box, rec.event, -1)
        self._look(rec.item, w)

    def look(self) -> None:
        """Read each watched inbox whose stream moved since the last look (at most every :data:`LOOK_EVERY` s)."""
        now = time.monotonic()
        if not self.watched or now - self.looked < LOOK_EVERY:
            return
        self.looked = now
        for item, w in list(self.watched.items()):
            self._look(item, w)

    def _look(self, item: str, w: _Watched) -> None:
        size = self.ledger.backend.progress(w.box.stream)  # before the read: a signal racing it moves it again
        if size == w.size:
            return
        w.size = size
        if size < 0:
            return  # no inbox yet: nothing signalled
        if inbox_signals(w.box.events()).get(w.event) is not None:
            del self.watched[item]
            self.woken.add(item)

    def forget(self, item: str) -> None:
        """The item was answered (run again, done, or scheduled anew): its watch starts over from the record."""
        self.watched.pop(item, None)
        self.woken.discard(item)
