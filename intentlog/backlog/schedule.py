"""Which items a run may start, in which order, and what a failed attempt means.

Order is the backlog's (priority, then order of addition); an item starts never before its
``not_before`` or its retry time; a step that raised is scheduled again after an
exponential backoff with jitter (``backlog.item_scheduled``), or failed after
``max_attempts`` (``backlog.item_failed``), or at once when its task was given up; a step
whose task sleeps or waits for an event is scheduled again when due
(``backlog.item_scheduled``, no failure counted): a sleeper at its recorded wake time, a
waiter as soon as its event lands in its inbox (:mod:`intentlog.backlog.wake`), a parent
joining its children (``children``) once each of them is done or failed. Every decision is
recorded before it acts.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Collection, Iterator, Sequence

from ..eventlog.redaction import scrub_text
from ..projections.idioms import idiom_state
from .journal import Journal
from .model import BacklogFold, ItemRecord
from .wake import ChildrenWatch, InboxWatch

__all__ = ["Schedule"]


class Schedule:
    """The items not settled yet, in run order, and the retry decisions of one run."""

    def __init__(self, journal: Journal, *, backoff: float, max_backoff: float) -> None:
        self.journal = journal
        self.backoff, self.max_backoff = backoff, max_backoff
        #: items settled in this run ("done", "failed") that the fold may not say yet
        self.settled: dict[str, str] = {}
        #: the items not yet settled, in run order, for the fold they were listed from
        self.pending: deque[ItemRecord] = deque()
        self.pending_of: BacklogFold | None = None
        self.pending_count = -1
        #: the inboxes of the items waiting for an event, and those whose event landed
        self.inbox = InboxWatch(journal.backlog.ledger)
        #: the other backlogs the children that parents here join are items of
        self.elsewhere = ChildrenWatch(journal.backlog.ledger)

    def is_settled(self, rec: ItemRecord) -> bool:
        return rec.done or rec.failed is not None or self.settled.get(rec.item) in ("done", "failed")

    def unsettled(self) -> deque[ItemRecord]:
        """The items not done or failed, in run order: listed once per fold (and per item added), pruned from the front.

        Order depends only on what ``backlog.item_added`` says (priority, seq), so the list
        is rebuilt only when the fold is replaced or grows; an item settled out of order is
        skipped until it reaches the front.
        """
        fold = self.journal.fold
        if self.pending_of is not fold or self.pending_count != len(fold.items):
            self.pending = deque(r for r in fold.ordered() if not self.is_settled(r))
            self.pending_of, self.pending_count = fold, len(fold.items)
        pending = self.pending
        while pending and self.is_settled(pending[0]):
            pending.popleft()
        return pending

    def children_settled(self, rec: ItemRecord) -> bool:
        """Whether every child item the item's task joins is done or failed, here or in the other backlog it is an
        item of (one not an item counts as settled: the parent, taken again, adds it)."""
        items = self.journal.fold.items
        where = rec.waits_in or {}
        for c in rec.waits_for or ():
            name = where.get(c)
            if name is not None:
                other = self.elsewhere.item(name, c)
                if other is not None and not (other.done or other.failed is not None):
                    return False
            elif c in items and not self.is_settled(items[c]):
                return False
        return True

    def children_elsewhere_run(self, rec: ItemRecord) -> bool:
        """Whether a child the item joins, not settled, is an item of another backlog whose run is open (it may
        settle there without a person)."""
        where = rec.waits_in or {}
        return any(
            self.elsewhere.running(name) and not self.children_settled(rec) for name in set(where.values())
        )

    def candidates(self, busy: Collection[str]) -> Iterator[ItemRecord]:
        """The items that may start now, in run order (lazily: dispatch stops once no worker is free).

        A parent joining its children starts once they are settled, whatever its time says; an
        item waiting for an event starts when due or as soon as its inbox holds the event.
        """
        now = time.time()
        inbox = self.inbox
        inbox.look()
        self.elsewhere.look()
        for rec in self.unsettled():
            if rec.item in busy or rec.blocked is not None or self.is_settled(rec):
                continue
            if rec.waits_for is not None:
                if self.children_settled(rec):
                    yield rec
                continue
            due = rec.due()
            if due is not None and due > now:
                if rec.event is None:
                    continue
                inbox.watch(rec)
                if rec.item not in inbox.woken:
                    continue
            yield rec

    def waits_for_a_person(self, stuck: Collection[str] = ()) -> bool:
        """Every item not settled is blocked (awaiting approval, reconciliation or review, then ``unblock``),
        or ``stuck``: held by a stalled process the run can neither end nor fence, or joins children not settled
        (each of them is one of these items)."""
        return all(
            rec.blocked is not None or self.is_settled(rec) or rec.item in stuck
            or (rec.waits_for is not None and not self.children_settled(rec) and not self.children_elsewhere_run(rec))
            for rec in self.unsettled()
        )  # fmt: skip

    def children_elsewhere(self, rec: ItemRecord, children: Sequence[str]) -> dict[str, str]:
        """Of the children the item's task joins, those its links send to another backlog: child id -> backlog.

        Read from the parent's own record (``task.child_spawned {backlog}``), only when a child
        is not an item here.
        """
        items = self.journal.fold.items
        if all(c in items for c in children):
            return {}
        sent = idiom_state(self.journal.backlog.ledger.task(rec.task).events()).child_backlogs
        name = self.journal.backlog.name
        return {c: sent[c] for c in children if sent.get(c, name) != name}

    def failed_attempt(self, rec: ItemRecord, why: str, *, given_up: bool = False, permanent: bool = False) -> None:
        """Record the item scheduled again after a backoff, or failed once it used its ``max_attempts``.

        ``why`` (a step's exception text, say) is recorded as texts people give are: credentials scrubbed.
        ``given_up``: its task was given up (its step did not run): failed at once, ``why`` as the reason,
        its failures unchanged. ``permanent``: the step raised an error a retry would raise again
        (:mod:`intentlog.backlog.permanent`): failed at once, ``why`` as the reason, the attempt counted."""
        why = scrub_text(why)
        n = rec.failures + (0 if given_up else 1)
        if given_up or permanent or (rec.max_attempts is not None and n >= rec.max_attempts):
            reason = why if given_up or permanent else f"{n} failed attempt(s); last: {why}"
            self.journal.record(
                "backlog.item_failed", {"item": rec.item, "task": rec.task, "failures": n, "reason": reason}
            )
            self.settled[rec.item] = "failed"
            return
        base = min(self.max_backoff, self.backoff * (2 ** (n - 1)))
        delay = base * random.uniform(0.5, 1.0)
        self.journal.record(
            "backlog.item_scheduled",
            {
                "item": rec.item, "task": rec.task, "failures": n, "delay": round(delay, 3),
                "not_before": time.time() + delay, "reason": why,
            },
        )  # fmt: skip

    def suspended(
        self, rec: ItemRecord, until: float, why: str, *, event: str | None = None, children: Sequence[str] = ()
    ) -> None:
        """Record the item scheduled again at ``until`` (its task sleeps or waits), its failures unchanged.

        ``event``: the event it waits for (``until`` is the fallback look; its inbox is watched).
        ``children``: the child items it joins: no time, taken again once they are settled.
        """
        self.inbox.forget(rec.item)
        data = {"item": rec.item, "task": rec.task, "failures": rec.failures, "reason": why}
        if children:
            data.update(delay=0.0, not_before=None, children=list(children))
            where = self.children_elsewhere(rec, children)
            if where:
                data["backlogs"] = where
        else:
            data.update(delay=round(max(0.0, until - time.time()), 3), not_before=until)
            if event is not None:
                data["event"] = event
        self.journal.record("backlog.item_scheduled", data)
