"""The identity graph of the idioms' records: what each must follow in its own stream.

The table's rules (:mod:`.graph_rules`, ``value_recorded_once``, ``woke_after_wake_time``,
``event_outcome_once``, ``timed_out_after_deadline``) judge each event first; these
graph rules then fold it into :func:`idioms_of`, the idioms' part of the graph. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .fields import Finding
from .graph import TaskGraph

__all__ = [
    "IdiomGraph",
    "idioms_of",
    "on_child_spawned",
    "on_event_awaited",
    "on_event_outcome",
    "on_joined",
    "on_returned",
    "on_signalled",
    "on_sleep_started",
    "on_spawned",
    "on_value_recorded",
    "on_woke",
]


@dataclass(slots=True)
class IdiomGraph:
    """What the stream said so far of values, sleeps, waits and children."""

    values: set[str] = field(default_factory=set)
    sleeps: dict[str, str] = field(default_factory=dict)  # sleep -> recorded wake time
    woke: set[str] = field(default_factory=set)
    waits: dict[str, str | None] = field(default_factory=dict)  # event -> recorded deadline
    outcomes: set[str] = field(default_factory=set)
    signalled: set[str] = field(default_factory=set)
    children: set[str] = field(default_factory=set)
    parent: str | None = None
    returned: bool = False


def idioms_of(g: TaskGraph) -> IdiomGraph:
    got: IdiomGraph = g.extra.setdefault("idioms", IdiomGraph())
    return got


def on_value_recorded(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    idioms_of(g).values.add(d["name"])
    return iter(())


def on_sleep_started(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    s = idioms_of(g)
    if d["sleep"] in s.sleeps:
        yield Finding("graph", f"sleep {d['sleep']!r} starts a second time: its first wake time counts")
    else:
        s.sleeps[d["sleep"]] = d["until"]


def on_woke(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    idioms_of(g).woke.add(d["sleep"])
    return iter(())


def on_event_awaited(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    s = idioms_of(g)
    if d["event"] in s.waits:
        yield Finding("graph", f"event {d['event']!r} is awaited a second time: its first deadline counts")
    else:
        s.waits[d["event"]] = d["deadline"]


def on_event_outcome(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    idioms_of(g).outcomes.add(d["event"])
    return iter(())


def on_signalled(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    s = idioms_of(g)
    if d["event"] in s.signalled:
        yield Finding("graph", f"event {d['event']!r} is signalled a second time in this inbox: the first counts")
    s.signalled.add(d["event"])


def on_child_spawned(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    s = idioms_of(g)
    if d["child"] in s.children:
        yield Finding("graph", f"child {d['child']!r} is spawned a second time: its id is its idempotency key")
    s.children.add(d["child"])


def on_spawned(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    s = idioms_of(g)
    if s.parent is not None:
        yield Finding("graph", f"the task names a parent a second time ({d['parent']!r}; first {s.parent!r})")
    else:
        s.parent = d["parent"]


def on_returned(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    s = idioms_of(g)
    if s.returned:
        yield Finding("graph", "the task returns a second time: its first result counts")
    s.returned = True


def on_joined(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    s = idioms_of(g)
    stray = [c for c in d["children"] if c not in s.children]
    if stray:
        yield Finding("graph", f"joins {stray}, never spawned by this task")
