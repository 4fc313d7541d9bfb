"""The messages between the supervisor and its slots: one typed record per kind, shared by every engine.

Each message is an immutable named tuple whose first field, ``kind``, is its wire tag
(``Done("done", item, result)`` is the tuple ``("done", item, result, None)``: a last
field with a default is optional on the wire), so a message pickles as itself, reads the
same in any log, and an engine written against the tuples still interoperates
(:func:`from_slot` turns a plain tuple into its typed message).

Directions and order:

- supervisor to slot: :class:`Run` (one item), then for each attempt of a worker that asks
  one reply to its :class:`Reserve` -- :class:`Grant`, :class:`Stop` or :class:`Spent`; a
  worker that does not ask may be sent :class:`Stop` once, unasked; :class:`Quit` ends the
  slot between items;
- slot to supervisor: any number of :class:`Reserve`, :class:`Leased` and :class:`Died`,
  then exactly one :class:`Answer` per :class:`Run`;
- a Dask task to its slot, first: :class:`Hello`, answered :class:`Welcome` or :class:`TurnedAway`.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NamedTuple

__all__ = [
    "Answer", "Blocked", "Busy", "Died", "Done", "Exhausted", "Failed", "FromSlot", "Grant", "Hello", "Leased",
    "Quit", "Reply", "Reserve", "Run", "Spent", "Stop", "Stopped", "ToSlot", "TurnedAway", "Waiting", "Welcome",
    "from_slot",
]  # fmt: skip

# -- supervisor to slot ---------------------------------------------------------------------


class Run(NamedTuple):
    """Run one item: resume its task ``task`` with ``payload``; ``asks``: ask for a grant before each attempt."""

    kind: Literal["item"]
    item: str
    task: str
    backlog: str
    payload: Any
    asks: bool


class Quit(NamedTuple):
    """End the slot (sent between items only)."""

    kind: Literal["quit"]


class Stop(NamedTuple):
    """The run takes no more attempts: the reply to a :class:`Reserve`, or sent once unasked."""

    kind: Literal["stop"]


class Grant(NamedTuple):
    """The reserved units are granted (``at``: the supervisor's wall-clock time; None when not asked).

    ``valid``: the seconds the grant is good for, counted by the worker from when it asked
    (the time the request waited at the supervisor plus :data:`~.quota.GRANT_VALID`); a send
    that has not started by then is not sent (None: no deadline, nothing was counted).
    """

    kind: Literal["grant"]
    at: float | None = None
    valid: float | None = None


class Spent(NamedTuple):
    """A budget that cannot reopen is spent: the attempt does not start."""

    kind: Literal["exhausted"]
    reason: str


# -- slot to supervisor ---------------------------------------------------------------------


class Reserve(NamedTuple):
    """Before an attempt: reserve ``units`` (name to amount) for ``item``; one :data:`Reply` follows."""

    kind: Literal["reserve"]
    item: str
    units: dict[str, float]


class Leased(NamedTuple):
    """The item's lease was taken (progress, for an engine that reports it)."""

    kind: Literal["leased"]
    item: str


class Died(NamedTuple):
    """The process running ``item`` was lost; the engine runs it again elsewhere (it resumes)."""

    kind: Literal["died"]
    item: str
    pid: int | None
    reason: str


class Done(NamedTuple):
    """The item's step returned ``result`` (recorded in its task)."""

    kind: Literal["done"]
    item: str
    result: Any
    #: the item task's view-cache line as its writer left it (:func:`intentlog.backlog.itemcache.entry_left`),
    #: or None; derived, never used to decide anything
    entry: Any = None


class Blocked(NamedTuple):
    """The item's task needs a person: its ``state``, the ``reason`` and the ``command`` to run first."""

    kind: Literal["blocked"]
    item: str
    state: str
    reason: str
    command: str


class Failed(NamedTuple):
    """The item's step raised (``reason`` names the error): a failed attempt, retried or failed by the supervisor.

    ``given_up``: the item's task was given up (``task.failed``): the item is failed at once, never retried.
    ``permanent``: the step raised an error a retry would raise again (:mod:`intentlog.backlog.permanent`):
    the item is failed at once, the attempt counted.
    """

    kind: Literal["error"]
    item: str
    reason: str
    given_up: bool = False
    permanent: bool = False


class Waiting(NamedTuple):
    """The item's task sleeps or waits for an event (``reason`` says which): run it again at ``until`` (epoch s).

    ``event``: the event it waits for (taken again as soon as its inbox holds it; ``until`` is the
    fallback look). ``children``: the child items it joins (taken again once each is done or failed).
    """

    kind: Literal["waiting"]
    item: str
    until: float
    reason: str
    event: str | None = None
    children: tuple[str, ...] = ()


class Busy(NamedTuple):
    """Another process holds the item's lease: nothing ran; the item is watched as a foreign holder."""

    kind: Literal["busy"]
    item: str
    reason: str


class Stopped(NamedTuple):
    """The run is stopping: the attempt did not start; the item stays queued."""

    kind: Literal["stopped"]
    item: str
    reason: str


class Exhausted(NamedTuple):
    """A quota is spent: the attempt did not start; the item stays queued."""

    kind: Literal["exhausted"]
    item: str
    reason: str


# -- a Dask task to its slot ----------------------------------------------------------------


class Hello(NamedTuple):
    """A task connecting back: its submission's ``token`` and the process it runs in."""

    kind: Literal["hello"]
    token: str
    pid: int
    host: str
    started: int | None


class Welcome(NamedTuple):
    kind: Literal["ok"]


class TurnedAway(NamedTuple):
    """The token is not the slot's current one: the task opens nothing and ends."""

    kind: Literal["no"]


ToSlot = Run | Stop | Quit
Reply = Grant | Stop | Spent
Answer = Done | Blocked | Failed | Busy | Stopped | Exhausted | Waiting
FromSlot = Reserve | Leased | Died | Answer

#: a slot's messages by kind (a quota's "exhausted" reply goes the other way: :class:`Spent`)
_FROM_SLOT: Final[dict[str, type[FromSlot]]] = {
    "reserve": Reserve, "leased": Leased, "died": Died, "done": Done, "blocked": Blocked,
    "error": Failed, "busy": Busy, "stopped": Stopped, "exhausted": Exhausted, "waiting": Waiting,
}  # fmt: skip


def from_slot(msg: tuple[Any, ...]) -> FromSlot:
    """The typed message a slot sent (a typed one as is; a plain tuple by its kind); ValueError if unknown."""
    if isinstance(msg, (Reserve, Leased, Died, Done, Blocked, Failed, Busy, Stopped, Exhausted, Waiting)):
        return msg
    cls = _FROM_SLOT.get(msg[0]) if msg else None
    if cls is None:
        raise ValueError(f"a slot sent {msg!r}, which is no message of the worker protocol")
    return cls(*msg)
