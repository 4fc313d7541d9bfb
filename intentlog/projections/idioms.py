"""The idioms' projection: recorded values, sleeps, awaited events and children of one task stream.

A pure fold (no clock, no I/O): one small handler per idiom kind, a frozen result. What
it says of a sleep or a wait is what the record says -- the wake time and the deadline
recorded by the process that started them -- never a comparison with the reader's clock.

The kinds (all in intentlog's own ``task.`` namespace, so ``task.append`` refuses them):

- ``task.value_recorded {name, value}``: a recorded value (``task.value``, ``@task.step``);
- ``task.sleep_started {sleep, until, seconds}`` and ``task.woke {sleep}``: a durable sleep;
- ``task.event_awaited {event, deadline}``, ``task.event_received {event, id, payload,
  payload_hash, inbox_seq}``, ``task.event_timed_out {event, deadline}``: a wait for an
  external event, delivered through the task's inbox stream (``task.signalled`` there);
- ``task.child_spawned {child, payload[, backlog]}`` and ``task.joined {children}`` in the parent
  (``backlog``: the backlog the child was sent to, when it is not the parent's own),
  ``task.spawned {parent, payload}`` and ``task.returned {result}`` in the child: child tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from ..eventlog.format import Event
from .backlogs import BACKLOG_NAME_RE

__all__ = [
    "CHILD_SPAWNED",
    "EVENT_AWAITED",
    "EVENT_RECEIVED",
    "EVENT_TIMED_OUT",
    "IDIOM_KINDS",
    "INBOX_SUFFIX",
    "JOINED",
    "RETURNED",
    "SIGNALLED",
    "SLEEP_STARTED",
    "SPAWNED",
    "VALUE_RECORDED",
    "WOKE",
    "EventWait",
    "IdiomFold",
    "IdiomState",
    "Signal",
    "Sleep",
    "idiom_state",
    "inbox_signals",
    "pending_events",
    "tasks_with_inboxes",
    "open_waits",
]

VALUE_RECORDED: Final = "task.value_recorded"
SLEEP_STARTED: Final = "task.sleep_started"
WOKE: Final = "task.woke"
EVENT_AWAITED: Final = "task.event_awaited"
EVENT_RECEIVED: Final = "task.event_received"
EVENT_TIMED_OUT: Final = "task.event_timed_out"
SIGNALLED: Final = "task.signalled"
CHILD_SPAWNED: Final = "task.child_spawned"
SPAWNED: Final = "task.spawned"
RETURNED: Final = "task.returned"
JOINED: Final = "task.joined"
IDIOM_KINDS: Final = (
    VALUE_RECORDED, SLEEP_STARTED, WOKE, EVENT_AWAITED, EVENT_RECEIVED, EVENT_TIMED_OUT, SIGNALLED,
    CHILD_SPAWNED, SPAWNED, RETURNED, JOINED,
)  # fmt: skip
#: a task's inbox is the stream of the task ``<task id>.inbox``: senders append there, never to the task
INBOX_SUFFIX: Final = ".inbox"


@dataclass(frozen=True, slots=True)
class Sleep:
    """One durable sleep: its wake time as recorded (UTC ``ts`` text), and whether waking was recorded."""

    name: str
    until: str
    seconds: float | None
    seq: int
    woke: bool = False


@dataclass(frozen=True, slots=True)
class EventWait:
    """One awaited event: its deadline as recorded (None: none), and its outcome once recorded."""

    name: str
    deadline: str | None
    seq: int
    received: bool = False
    timed_out: bool = False
    event_id: str | None = None
    payload: Any = None

    @property
    def open(self) -> bool:
        return not (self.received or self.timed_out)


@dataclass(frozen=True, slots=True)
class Signal:
    """One event as its inbox recorded it."""

    name: str
    event_id: str
    payload: Any
    payload_hash: str
    seq: int


@dataclass(frozen=True, slots=True)
class IdiomState:
    """What a task's idiom records say: values, sleeps, waits, children, and its own returned result."""

    values: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    sleeps: Mapping[str, Sleep] = field(default_factory=lambda: MappingProxyType({}))
    waits: Mapping[str, EventWait] = field(default_factory=lambda: MappingProxyType({}))
    children: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # child id -> payload
    #: child id -> the backlog it was sent to (``task.child_spawned {backlog}``), for those sent to one
    child_backlogs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    returned: bool = False
    result: Any = None
    parent: str | None = None  # the task that spawned this one
    joined: frozenset[tuple[str, ...]] = frozenset()  # the children lists joined (each recorded once)
    anomalies: tuple[str, ...] = ()

    @property
    def sleeping(self) -> Sleep | None:
        """The sleep started and not recorded woken (the latest), if any: its ``until`` is the recorded wake time."""
        open_ = [s for s in self.sleeps.values() if not s.woke]
        return max(open_, key=lambda s: s.seq) if open_ else None

    @property
    def waiting(self) -> EventWait | None:
        """The event awaited with no outcome recorded (the latest), if any."""
        open_ = [w for w in self.waits.values() if w.open]
        return max(open_, key=lambda w: w.seq) if open_ else None


class IdiomFold:
    """The projection as a fold: :meth:`apply` each event, :meth:`result` any time. Never raises for content."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.sleeps: dict[str, Sleep] = {}
        self.waits: dict[str, EventWait] = {}
        self.children: dict[str, Any] = {}
        self.child_backlogs: dict[str, str] = {}
        self.returned = False
        self.result_value: Any = None
        self.parent: str | None = None
        self.joined: set[tuple[str, ...]] = set()
        self.anomalies: list[str] = []
        self.last_seq = -1

    def apply(self, ev: Event) -> None:
        self.last_seq = ev.seq
        handler = _HANDLERS.get(ev.kind)
        if handler is not None:
            handler(self, ev, ev.data)

    def _anomaly(self, ev: Event, what: str) -> None:
        if len(self.anomalies) < 100:
            self.anomalies.append(f"seq {ev.seq} ({ev.kind}): {what}")

    def _value(self, ev: Event, d: dict[str, Any]) -> None:
        name = d.get("name")
        if type(name) is not str or "value" not in d:
            self._anomaly(ev, "a value record without a name and a value")
        elif name in self.values:
            self._anomaly(ev, f"value {name!r} recorded again (the first record counts)")
        else:
            self.values[name] = d["value"]

    def _sleep(self, ev: Event, d: dict[str, Any]) -> None:
        name, until, seconds = d.get("sleep"), d.get("until"), d.get("seconds")
        if type(name) is not str or type(until) is not str:
            self._anomaly(ev, "a sleep without a name and a wake time")
        elif name in self.sleeps:
            self._anomaly(ev, f"sleep {name!r} started again (the first wake time counts)")
        else:
            secs = float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else None
            self.sleeps[name] = Sleep(name, until, secs, ev.seq)

    def _woke(self, ev: Event, d: dict[str, Any]) -> None:
        s = self.sleeps.get(d.get("sleep"))  # type: ignore[arg-type]
        if s is None:
            self._anomaly(ev, f"wakes sleep {d.get('sleep')!r}, never started")
        else:
            self.sleeps[s.name] = Sleep(s.name, s.until, s.seconds, s.seq, woke=True)

    def _awaited(self, ev: Event, d: dict[str, Any]) -> None:
        name, deadline = d.get("event"), d.get("deadline")
        if type(name) is not str or (deadline is not None and type(deadline) is not str):
            self._anomaly(ev, "a wait without an event name")
        elif name in self.waits:
            self._anomaly(ev, f"event {name!r} awaited again (the first deadline counts)")
        else:
            self.waits[name] = EventWait(name, deadline, ev.seq)

    def _outcome(self, ev: Event, d: dict[str, Any], *, received: bool) -> None:
        w = self.waits.get(d.get("event"))  # type: ignore[arg-type]
        if w is None:
            self._anomaly(ev, f"an outcome of event {d.get('event')!r}, never awaited")
        elif not w.open:
            self._anomaly(ev, f"a second outcome of event {w.name!r} (the first counts)")
        elif received:
            eid = d.get("id")
            self.waits[w.name] = EventWait(
                w.name, w.deadline, w.seq, received=True, event_id=eid if type(eid) is str else None,
                payload=d.get("payload"),
            )  # fmt: skip
        else:
            self.waits[w.name] = EventWait(w.name, w.deadline, w.seq, timed_out=True)

    def _spawned(self, ev: Event, d: dict[str, Any]) -> None:
        child = d.get("child")
        if type(child) is not str:
            self._anomaly(ev, "a child without an id")
        elif child not in self.children:
            self.children[child] = d.get("payload")
            where = d.get("backlog")
            if type(where) is str and BACKLOG_NAME_RE.match(where):
                self.child_backlogs[child] = where
            elif where is not None:  # an edited record: no backlog named so is read (its stream's path from it)
                self._anomaly(ev, f"child {child!r} sent to {where!r}, not a backlog name")

    def _spawned_by(self, ev: Event, d: dict[str, Any]) -> None:
        parent = d.get("parent")
        if type(parent) is not str:
            self._anomaly(ev, "a link to a parent without its id")
        elif self.parent is None:
            self.parent = parent

    def _joined(self, ev: Event, d: dict[str, Any]) -> None:
        children = d.get("children")
        if isinstance(children, list) and all(type(c) is str for c in children):
            self.joined.add(tuple(children))

    def _returned(self, ev: Event, d: dict[str, Any]) -> None:
        if not self.returned:
            self.returned, self.result_value = True, d.get("result")

    def result(self) -> IdiomState:
        return IdiomState(
            values=MappingProxyType(dict(self.values)),
            sleeps=MappingProxyType(dict(self.sleeps)),
            waits=MappingProxyType(dict(self.waits)),
            children=MappingProxyType(dict(self.children)),
            child_backlogs=MappingProxyType(dict(self.child_backlogs)),
            returned=self.returned,
            result=self.result_value,
            parent=self.parent,
            joined=frozenset(self.joined),
            anomalies=tuple(self.anomalies),
        )


_HANDLERS: Final[dict[str, Callable[[IdiomFold, Event, dict[str, Any]], None]]] = {
    VALUE_RECORDED: IdiomFold._value,
    SLEEP_STARTED: IdiomFold._sleep,
    WOKE: IdiomFold._woke,
    EVENT_AWAITED: IdiomFold._awaited,
    EVENT_RECEIVED: lambda f, ev, d: f._outcome(ev, d, received=True),
    EVENT_TIMED_OUT: lambda f, ev, d: f._outcome(ev, d, received=False),
    CHILD_SPAWNED: IdiomFold._spawned,
    SPAWNED: IdiomFold._spawned_by,
    RETURNED: IdiomFold._returned,
    JOINED: IdiomFold._joined,
}


def open_waits(other_kinds: Mapping[str, int]) -> int:
    """How many sleeps and waits are open, from the kind counts a work state keeps (``WorkState.other_kinds``).

    Exact for a stream that keeps the graph rules (a sleep wakes once, a wait has one
    outcome): the sleeps started less those woken, plus the waits less their outcomes.
    Lets a view that does not fold the idiom records (a listing, gc) see that a task waits.
    """
    sleeps = other_kinds.get(SLEEP_STARTED, 0) - other_kinds.get(WOKE, 0)
    waits = other_kinds.get(EVENT_AWAITED, 0) - other_kinds.get(EVENT_RECEIVED, 0) - other_kinds.get(EVENT_TIMED_OUT, 0)
    return max(0, sleeps) + max(0, waits)


def idiom_state(events: Iterable[Event]) -> IdiomState:
    """Fold ``events`` into an :class:`IdiomState`. Pure: no clock, no I/O."""
    fold = IdiomFold()
    for ev in events:
        fold.apply(ev)
    return fold.result()


def inbox_signals(events: Iterable[Event]) -> dict[str, Signal]:
    """The events an inbox stream recorded, by name; the first ``task.signalled`` of a name counts."""
    out: dict[str, Signal] = {}
    for ev in events:
        d = ev.data
        if ev.kind != SIGNALLED:
            continue
        name, eid, ph = d.get("event"), d.get("id"), d.get("payload_hash")
        if type(name) is str and type(eid) is str and type(ph) is str and name not in out:
            out[name] = Signal(name, eid, d.get("payload"), ph, ev.seq)
    return out


def pending_events(idioms: IdiomState, signals: Mapping[str, Signal]) -> tuple[str, ...]:
    """The events signalled into a task's inbox that its own record has not received yet, in inbox order."""
    return tuple(
        s.name for s in sorted(signals.values(), key=lambda s: s.seq)
        if not ((w := idioms.waits.get(s.name)) is not None and w.received)
    )  # fmt: skip


def tasks_with_inboxes(task_ids: Iterable[str]) -> set[str]:
    """The tasks among ``task_ids`` whose inbox (``<task id>.inbox``) is among them too (the tasks signalled)."""
    ids = task_ids if isinstance(task_ids, (list, tuple)) else list(task_ids)
    boxes = {t[: -len(INBOX_SUFFIX)] for t in ids if t.endswith(INBOX_SUFFIX)}
    return {t for t in ids if t in boxes} if boxes else set()
