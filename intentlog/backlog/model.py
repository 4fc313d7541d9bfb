"""The backlog's record, folded: items, their decisions, and each item's operator state. Pure.

A backlog ``NAME`` is the stream ``NAME.backlog`` (a task stream: ``verify`` checks its
chain and refs like any other); item ``ITEM`` is done by the task ``NAME.item.ITEM``.
The backlog stream records what was decided about items (``backlog.item_added``,
``backlog.item_scheduled``, ``backlog.item_blocked``, ``backlog.item_unblocked``,
``backlog.item_failed``, ``backlog.item_done``, ``backlog.holder_ended``,
``backlog.item_timed_out``, ``backlog.quota_waiting``, ``backlog.run_started``,
``backlog.run_stopped``); an item's task records its work (calls, approvals) and the
runner's own records in it (``lease.acquired``, ``lease.released``, ``quota.reserved``,
``item.returned``). Nothing here reads a clock or the disk: the caller passes ``now``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..eventlog.format import TASK_CREATED, Event
from ..projections.backlogs import BACKLOG_NAME_RE, BACKLOG_SUFFIX
from ..projections.idioms import CHILD_SPAWNED
from ..projections.status import AWAITING_APPROVAL, FAILED, ITEM_RETURNED, PAUSED_FOR_REVIEW, taking_over
from ..projections.workstate import RECONCILE_EFFECT
from .errors import MalformedRecord

if TYPE_CHECKING:
    from ..artifacts import ArtifactStore
    from ..ledgerstorage import LeaseOwner, LedgerStorage
    from ..task import Task

__all__ = [
    "BACKLOG_NAME_RE",
    "ITEM_STATES",
    "BacklogFold",
    "ItemRecord",
    "ItemView",
    "LedgerLike",
    "LeaseRecord",
    "StatusLike",
    "TaskExtras",
    "backlog_stream_id",
    "first_record",
    "foreign_records",
    "given_up",
    "item_task_id",
    "item_view",
    "task_extras",
]


QUEUED: Final = "queued"
SCHEDULED: Final = "scheduled"
RUNNING: Final = "running"
AWAITING: Final = "awaiting approval"
BLOCKED: Final = "blocked"
PAUSED: Final = "paused for review"
DONE: Final = "done"
ITEM_FAILED: Final = "failed"
#: Every state an item takes in the view, in display order.
ITEM_STATES: Final = (QUEUED, SCHEDULED, RUNNING, AWAITING, BLOCKED, PAUSED, DONE, ITEM_FAILED)
#: States from which nothing moves without a person (or that are final).
SETTLED: Final = frozenset({AWAITING, BLOCKED, PAUSED, DONE, ITEM_FAILED})


class StatusLike(Protocol):
    """What a backlog reads of an item task's operator state (a ``TaskStatus``, or its cached summary)."""

    @property
    def state(self) -> str: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def next_step(self) -> str: ...

    @property
    def next_operation(self) -> str: ...


class LedgerLike(Protocol):
    """What the backlog needs of a ledger (:class:`intentlog.Ledger` is one)."""

    root: Path
    artifacts: ArtifactStore

    @property
    def backend(self) -> LedgerStorage:
        """Where the ledger lives (:class:`~intentlog.ledgerstorage.LedgerStorage`): the lease facts, how to reopen."""
        ...

    def task(self, task_id: str, *, wait: float = 0.0) -> Task: ...


class BacklogLike(Protocol):
    """What a run needs of its backlog (:class:`intentlog.backlog.Backlog` is one): its name, ledger and stream."""

    @property
    def name(self) -> str: ...

    @property
    def ledger(self) -> LedgerLike: ...

    @property
    def task(self) -> Task: ...


def backlog_stream_id(name: str) -> str:
    return name + BACKLOG_SUFFIX


def item_task_id(name: str, item: str) -> str:
    return f"{name}.item.{item}"


def _own(kind: str) -> bool:
    """A record the stream writes about itself (its creation, a repaired tail), never a backlog or a step."""
    return kind == TASK_CREATED or kind.startswith("stream.")


def first_record(events: Iterable[Event]) -> Event | None:
    """The task's first record that is not the stream's own (None: it holds nothing else yet)."""
    for ev in events:
        if not _own(ev.kind):
            return ev
    return None


def _names(d: Mapping[str, Any], task_id: str) -> bool:
    """Whether a ``lease.acquired``'s data names the item whose task is ``task_id``.

    An item's task is ``NAME.item.ITEM``, or, for a child task a step spawned
    (:mod:`intentlog.backlog.children`), the child's own id, which is its item id: an id
    ``NAME.item.ITEM`` never equals ``ITEM``, so the two never name the same task.
    """
    b, i = d.get("backlog"), d.get("item")
    return isinstance(b, str) and isinstance(i, str) and (item_task_id(b, i) == task_id or i == task_id)


def foreign_records(task_id: str, events: Iterable[Event]) -> str | None:
    """Why an item task's records are not its backlog's; None when nothing says so.

    A backlog's worker leases an item task (``lease.acquired {backlog, item}``) before the
    step writes anything in it; a task whose first lease names another backlog or item is
    someone else's (a task of that name from an earlier backlog, or copied in): its result,
    approvals and calls are not the item's, and nothing may be run in it. (A new item whose
    task exists at all is refused by ``add``.)
    """
    for ev in events:
        if ev.kind == "lease.acquired":
            if _names(ev.data, task_id):
                return None
            return (
                f"its task {task_id!r} was first leased for backlog {ev.data.get('backlog')!r} item "
                f"{ev.data.get('item')!r} (seq {ev.seq}): a task of that name that is not this item's"
            )
    return None


@dataclass
class ItemRecord:
    """What the backlog stream says about one item."""

    item: str
    task: str
    payload_hash: str
    payload: Mapping[str, Any]
    priority: int
    not_before: float | None
    max_attempts: int | None
    added_seq: int
    inactivity: float | None = None
    max_duration: float | None = None
    failures: int = 0
    retry_at: float | None = None
    blocked: tuple[str, str] | None = None  # (reason, command) until unblocked
    failed: str | None = None
    done: bool = False
    ended: int = 0  # holders ended by a supervisor (stalled or timed out)
    #: the task that spawned this item's task (a child item), from ``backlog.item_added``
    parent: str | None = None
    #: the child items its task waits for (scheduled with ``children``): taken again once each is done or failed
    waits_for: tuple[str, ...] | None = None
    #: of those, the ones that are items of another backlog: child id -> that backlog (``backlogs``)
    waits_in: dict[str, str] | None = None
    #: the event its task waits for (scheduled with ``event``): taken again when the inbox holds it
    event: str | None = None

    def due(self) -> float | None:
        """The earliest time the item may start (None: now)."""
        times = [t for t in (self.not_before, self.retry_at) if t is not None]
        return max(times) if times else None


@dataclass
class BacklogFold:
    """Fold of a backlog stream's events into its items (in order of addition)."""

    items: dict[str, ItemRecord] = field(default_factory=dict)
    quota_waiting: dict[str, Any] | None = None
    stopped: dict[str, Any] | None = None
    seq: int = -1
    #: the digest of the last event folded (the stream's head at ``seq``)
    head: str | None = None
    #: why the stream is not a backlog's (its first record is not one a backlog writes); None: it is
    foreign: str | None = None
    first: bool = True
    #: the last ``backlog.run_started`` (its run open while ``stopped`` is None)
    run: dict[str, Any] | None = None

    def apply(self, ev: Event) -> None:
        """Fold one record; :class:`~intentlog.backlog.errors.MalformedRecord` for data no backlog writes."""
        try:
            self._apply(ev)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedRecord(
                f"backlog record seq {ev.seq} ({ev.kind!r}) is not one a backlog writes ({type(exc).__name__}: "
                f"{exc}): the stream was edited; restore it from a copy or git (intentlog verify checks the rest)"
            ) from exc

    def _apply(self, ev: Event) -> None:
        self.seq = ev.seq
        self.head = ev.digest
        d = ev.data
        kind = ev.kind
        if self.first and not _own(kind):
            self.first = False
            if not (kind.startswith("backlog.") or (kind == "task.checkpoint" and d.get("phase") == "backlog")):
                self.foreign = (
                    f"its stream holds records no backlog wrote (seq {ev.seq} {kind!r} comes first): a task of that "
                    "name that is not a backlog"
                )
        if kind == "backlog.item_added":
            self.items[d["item"]] = ItemRecord(
                d["item"], d["task"], d["payload_hash"], d["payload"], int(d["priority"]),
                d.get("not_before"), d.get("max_attempts"), ev.seq, d.get("inactivity"), d.get("max_duration"),
                parent=d.get("parent") if isinstance(d.get("parent"), str) else None,
            )  # fmt: skip
            return
        if kind == "backlog.quota_waiting":
            self.quota_waiting = dict(d)
            return
        if kind == "backlog.run_started":
            self.quota_waiting, self.stopped, self.run = None, None, dict(d)
            return
        if kind == "backlog.run_stopped":
            self.stopped = dict(d)
            return
        it = self.items.get(d.get("item", "")) if isinstance(d.get("item"), str) else None
        if it is None:
            return
        if kind == "backlog.item_scheduled":
            it.failures = int(d.get("failures", it.failures))
            it.retry_at = d.get("not_before")
            kids = d.get("children")
            it.waits_for = tuple(str(c) for c in kids) if isinstance(kids, list) and kids else None
            where = d.get("backlogs")
            it.waits_in = (
                {str(c): str(b) for c, b in where.items()} if isinstance(where, dict) and it.waits_for else None
            )  # the tree lists every child sent elsewhere from the parent's links (TaskExtras.children_in)
            it.event = d.get("event") if isinstance(d.get("event"), str) else None
        elif kind == "backlog.item_blocked":
            it.blocked = (str(d.get("reason")), str(d.get("command")))
            it.waits_for, it.waits_in, it.event = None, None, None
        elif kind == "backlog.item_unblocked":
            it.blocked = None
        elif kind == "backlog.item_failed":
            it.failed = str(d.get("reason"))
            it.failures = int(d.get("failures", it.failures))  # the failing attempt counts too
        elif kind == "backlog.item_done":
            it.done = True
        elif kind in ("backlog.holder_ended", "backlog.item_timed_out"):
            it.ended += 1

    def ordered(self) -> list[ItemRecord]:
        """Items by priority (highest first), then order of addition."""
        return sorted(self.items.values(), key=lambda r: (-r.priority, r.added_seq))


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    epoch: int
    pid: int
    host: str
    start_time: int | None
    since: str
    released: bool


@dataclass(frozen=True, slots=True)
class TaskExtras:
    """The runner's own records in an item's task: its leases, its reservations, its result."""

    lease: LeaseRecord | None
    returned: bool
    result: Any
    reserved: Mapping[str, float]
    last_ts: str | None
    events: int
    #: why the task's records are not its backlog's (:func:`foreign_records`); None when they are
    foreign: str | None = None
    #: the children its task sent to another backlog (``task.child_spawned {child, backlog}``): child id -> backlog,
    #: each as first recorded; the tree lists them under the item whether it ever waited for them or not
    children_in: Mapping[str, str] = field(default_factory=dict)


def task_extras(events: Iterable[Event], task_id: str | None = None) -> TaskExtras:
    """The runner's records in an item task.

    With ``task_id``, only the backlog's own records count: a result (``item.returned``) is
    the item's only when written under a lease (its epoch) that names this task, and a task
    whose first lease names another is ``foreign`` (:func:`foreign_records`).
    """
    lease: LeaseRecord | None = None
    returned, result, last_ts, n = False, None, None, 0
    reserved: dict[str, float] = {}
    children_in: dict[str, str] = {}
    spawned: set[str] = set()
    ours: set[int] = set()
    foreign: str | None = None
    first_lease = True
    for ev in events:
        n += 1
        last_ts = ev.ts
        d = ev.data
        if ev.kind == "lease.acquired":
            lease = LeaseRecord(int(d["epoch"]), int(d["pid"]), str(d["host"]), d.get("start_time"), ev.ts, False)
            if task_id is not None:
                if first_lease:
                    foreign = foreign_records(task_id, (ev,))
                    first_lease = False
                if _names(d, task_id):
                    ours.add(lease.epoch)
        elif ev.kind == "lease.released" and lease is not None and d.get("epoch") == lease.epoch:
            lease = LeaseRecord(lease.epoch, lease.pid, lease.host, lease.start_time, lease.since, True)
        elif ev.kind == ITEM_RETURNED and (task_id is None or (type(d.get("epoch")) is int and d["epoch"] in ours)):
            returned, result = True, d.get("result")
        elif ev.kind == "quota.reserved":
            for q, units in dict(d.get("units", {})).items():
                reserved[q] = reserved.get(q, 0.0) + float(units)
        elif ev.kind == CHILD_SPAWNED and type(d.get("child")) is str and d["child"] not in spawned:
            spawned.add(d["child"])  # as the idiom state reads it: a child's first link is its link
            if type(d.get("backlog")) is str and BACKLOG_NAME_RE.match(d["backlog"]) is not None:
                children_in[d["child"]] = d["backlog"]  # an edited name ('../etc') names no backlog to read
    if foreign is not None:
        returned, result = False, None
    return TaskExtras(lease, returned, result, reserved, last_ts, n, foreign, children_in)


@dataclass(frozen=True, slots=True)
class ItemView:
    """One row of ``intentlog backlog``: the item's state, why, and the safe next step."""

    item: str
    task: str
    state: str
    reason: str | None
    next_step: str
    priority: int
    not_before: float | None
    failures: int
    holder: Mapping[str, Any] | None
    last_progress: str | None
    task_state: str | None
    #: the task that spawned this item's (a child item), and, for a parent, its child items per state
    parent: str | None = None
    children: Mapping[str, int] | None = None
    #: the backlog this row's item is in, when not the one viewed (a child a step sent to another backlog)
    backlog: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "item": self.item,
            "task": self.task,
            "state": self.state,
            "reason": self.reason,
            "next_step": self.next_step,
            "priority": self.priority,
            "not_before": self.not_before,
            "failures": self.failures,
            "holder": dict(self.holder) if self.holder is not None else None,
            "last_progress": self.last_progress,
            "task_state": self.task_state,
            "parent": self.parent,
            "children": dict(self.children) if self.children is not None else None,
            "backlog": self.backlog,
        }


def blocking_reason(st: StatusLike | None) -> tuple[str, str, str] | None:
    """(state, reason, command) when the item's task needs a person before it can continue."""
    if st is None:
        return None
    if st.state == AWAITING_APPROVAL:
        return AWAITING, st.reason or "awaiting approval", st.next_step
    if st.state == PAUSED_FOR_REVIEW:
        state = BLOCKED if st.next_operation == RECONCILE_EFFECT else PAUSED
        return state, st.reason or "paused for review", st.next_step
    return None


def given_up(st: StatusLike | None) -> str | None:
    """Why the item's task was given up (``task.failed`` after its last acceptance), or None: its item is failed."""
    if st is None or st.state != FAILED:
        return None
    return f"its task was given up: {st.reason or 'no reason recorded'}"


def _holder(owner: LeaseOwner, lease: LeaseRecord | None) -> dict[str, Any]:
    """The row's holder: the item's own lease record where it is the process holding the lease now."""
    ours = lease is not None and owner.pid in (None, -1, lease.pid)
    return {
        "pid": lease.pid if ours and lease is not None else owner.pid,
        "host": lease.host if ours and lease is not None else owner.host,
        "epoch": lease.epoch if lease is not None else None,
        "since": lease.since if ours and lease is not None else None,
        "alive": owner.alive,
        "beat": owner.beat,
    }


def item_view(
    backlog: str,
    rec: ItemRecord,
    st: StatusLike | None,
    extras: TaskExtras | None,
    *,
    owner: Callable[[], LeaseOwner | None],
    now: float,
) -> ItemView:
    """The item's state from the backlog's record, its task's operator state (``status_of``) and its lease.

    ``owner()``: who holds the item task's lease now, asked only when the record leaves the
    state open (never for an item that returned: on a store that is a request or more per
    task). A holder that runs, or that cannot be
    told from here (another host), shows the item *running* -- a send in flight is never
    shown blocked; where the task waits for a person, the step names the command that
    takes the lease over (``--take-over-after 0``) for once that process is gone. A holder
    known to have ended shows the item as its record says, every command writing the
    task taking the dead holder's lease over.
    """
    unblock = f"intentlog unblock {backlog} {rec.item}"

    def view(state: str, reason: str | None, step: str, holder: Mapping[str, Any] | None = None) -> ItemView:
        return ItemView(
            rec.item, rec.task, state, reason, step, rec.priority, rec.due(), rec.failures, holder,
            extras.last_ts if extras is not None else None, st.state if st is not None else None, rec.parent,
        )  # fmt: skip

    if extras is not None and extras.foreign is not None:
        return view(
            BLOCKED, f"{extras.foreign}; nothing is run in it",
            f"add the payload under another item id (intentlog log {rec.task} shows what the task holds)",
        )  # fmt: skip
    if extras is not None and extras.returned:
        return view(DONE, None, "nothing: the item is done")
    if rec.done and extras is not None and not extras.events:  # its task is gone: gc removes a done item's task
        return view(DONE, "the backlog recorded it done; its task was removed since (gc)", "nothing: the item is done")
    if rec.failed is not None or (st is not None and st.state == FAILED):
        why = rec.failed if rec.failed is not None else (st.reason if st is not None else None)
        return view(ITEM_FAILED, why, f"nothing: the item failed; see intentlog log {rec.task}")
    blocking = blocking_reason(st)
    holds = owner()
    if holds is not None and holds.alive is not False:
        holder = _holder(holds, extras.lease if extras is not None else None)
        step = "wait: a worker is running it"
        if holds.alive is None:
            who = f"process {holder['pid']} on {holder['host']}" if holder["pid"] is not None else "its holder"
            then = "intentlog run takes it over once its stream stands still"
            if blocking is not None:
                then = f"{taking_over(blocking[2])}; then: {unblock}"
            step = f"wait: {who} holds the item's task (a send may be in flight); if that process is gone: {then}"
        return view(RUNNING, "a worker holds the item's task", step, holder)
    if blocking is not None:
        state, reason, step = blocking
        if holds is not None:  # its holder ended with the lease held: the person's command takes it over
            step = taking_over(step)
        return view(state, reason, f"{step}; then: {unblock}")
    if rec.blocked is not None:
        reason, _ = rec.blocked
        return view(BLOCKED, f"{reason} (resolved in the task's record)", unblock)
    if rec.waits_for is not None:
        n = len(rec.waits_for)
        return view(
            SCHEDULED, f"its task joins {n} child task(s) not done yet", "wait: it is taken again once they are done"
        )
    due = rec.due()
    if due is not None and due > now and rec.event is not None:
        return view(
            SCHEDULED, f"its task waits for an event: {rec.event!r}",
            f"wait: it is taken again when the event is signalled (intentlog signal {rec.task} {rec.event} ...)",
        )  # fmt: skip
    if due is not None and due > now:
        why = f"retry {rec.failures + 1} after backoff" if rec.retry_at is not None and rec.retry_at >= due else None
        if why is not None and rec.failures == 0:  # scheduled with no failure: its task sleeps or waits for an event
            why = f"its task sleeps or waits for an event (intentlog status {rec.task})"
        return view(SCHEDULED, why or "not before its start time", "wait: it starts when due")
    return view(QUEUED, None, "wait: a worker takes it (intentlog run ...)")
