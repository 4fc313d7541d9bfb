"""Items waiting for an event or for children in another backlog, woken when the signal lands or the children
settle there: each inbox, and each other backlog's stream, looked at cheaply.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from ..errors import IntentlogError
from ..projections.idioms import INBOX_SUFFIX, inbox_signals
from .model import BacklogFold, backlog_stream_id
from .runlease import BEAT, NOT_THE_HOLDERS, STALE, holder_gone

if TYPE_CHECKING:
    from ..task import Task
    from .model import ItemRecord, LedgerLike

__all__ = ["LOOK_EVERY", "ChildrenWatch", "InboxWatch"]

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


@dataclass
class _Elsewhere:
    task: Task
    fold: BacklogFold
    size: int
    #: on this process's monotonic clock: when its stream was first looked at or last seen to move
    moved: float = field(default_factory=time.monotonic)
    #: when its last read failed (None: it did not): read again a beat later, moved or not
    failed: float | None = None


class ChildrenWatch:
    """The other backlogs that children of this backlog's parents are items of, each one's fold kept current.

    A parent whose join waits for children in another backlog (``backlog.item_scheduled
    {children, backlogs}``) is taken again once each of them is done or failed there. Each
    such backlog's stream is watched as an inbox is: its progress number is compared each
    look (at most every :data:`LOOK_EVERY` s), and only when it moved are the records after
    the fold read and folded. The baseline is taken before the read, so a child settled at
    any moment is seen by that read or by the next look. A run that restarts reads the
    other backlog whole at its first look.
    """

    def __init__(self, ledger: LedgerLike) -> None:
        self.ledger = ledger
        self.backlogs: dict[str, _Elsewhere] = {}
        self.looked = -LOOK_EVERY

    def item(self, backlog: str, child: str) -> ItemRecord | None:
        """The child's item in ``backlog`` as last looked at (read now the first time that backlog is asked of)."""
        w = self.backlogs.get(backlog)
        if w is None:
            w = self.backlogs[backlog] = _Elsewhere(self.ledger.task(backlog_stream_id(backlog)), BacklogFold(), -2)
            self._look(w)
        return w.fold.items.get(child)

    def running(self, backlog: str) -> bool:
        """Whether ``backlog`` has a live run (its children may still settle there without a person).

        Its record holds a run started and not stopped, and that run's holder is not gone:
        on this machine its process runs (pid, start time, not a zombie); from another
        machine, a record other than an add or an unblock (anyone's) landed within
        :data:`~.runlease.STALE` s on this process's clock (a live run records a heartbeat
        every :data:`~.runlease.BEAT` s). A supervisor killed with its run open is no reason
        to wait.
        """
        w = self.backlogs.get(backlog)
        if w is None or w.fold.run is None or w.fold.stopped is not None:
            return False
        gone = holder_gone(w.fold.run)
        if gone is not None:
            return not gone
        return time.monotonic() - w.moved < STALE

    def look(self) -> None:
        """Fold what each watched backlog appended since the last look, where its stream moved."""
        now = time.monotonic()
        if not self.backlogs or now - self.looked < LOOK_EVERY:
            return
        self.looked = now
        for w in self.backlogs.values():
            self._look(w)

    def _look(self, w: _Elsewhere) -> None:
        if w.failed is not None and time.monotonic() - w.failed < BEAT:
            return  # a damaged stream is not read again at every look
        size = self.ledger.backend.progress(w.task.stream)  # before the read: an append racing it moves it again
        if size == w.size:
            return
        if size < 0:
            w.size = size
            return  # no such backlog yet: no child of it settled
        try:
            for ev in w.task.events(since=w.fold.seq + 1):
                w.fold.apply(ev)
                if ev.kind not in NOT_THE_HOLDERS:  # an add or an unblock, anyone's, says nothing of its run
                    w.moved = time.monotonic()
        except IntentlogError:
            # damaged, or a segment retired under the read: nothing settles here; read again a beat later
            w.failed = time.monotonic()
            return
        w.size, w.failed = size, None
