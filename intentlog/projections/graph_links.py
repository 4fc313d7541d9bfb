"""The links between streams: a child names its parent, a backlog's child item names both; one rule judges them.

Every other graph rule judges one stream alone. A parent/child link is written in two
streams (:mod:`intentlog.idioms.children`): the parent records ``task.child_spawned
{child, payload}`` before the child exists, the child's first record after
``task.created`` is ``task.spawned {parent, payload}`` with the same payload; a backlog
adds a spawned child as an item, ``backlog.item_added {item, task, parent, payload}``
with the child's id as its item and task and the payload as the parent recorded it
(:mod:`intentlog.backlog.children`). :data:`LINK_RULES` states the rule once; the
library's checker feeds every stream's link records into :class:`SpawnLinks` and reports
:meth:`SpawnLinks.findings` once all are read; ``tools/gen_bundle_tables.py`` writes the
same table into the standalone ``verify_bundle.py``, whose own code checks each row by
name and fails closed on a name it does not know.

What may legitimately be absent: a stream the trusted gc log records deleting (the
checker says so, as ``info``: the link is not checked, not passed). A child whose parent's
``task.child_spawned`` has no child stream yet is a crash between the two appends, the
state the parent's re-run completes: not judged. Anything else a link names must be in
the record: a bundle exported without a child's parent cannot show the link and fails
the rule (export the parent with it).

Pure: folds events handed to it, reads nothing; memory is one entry per link (payloads
are kept as digests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final

import orjson

from .._internal.digest import digest_bytes
from ..errors import NotSerializable
from ..eventlog.canonical import dumps

__all__ = [
    "ITEM_ADDED",
    "LINK_CHECKS",
    "LINK_RULES",
    "LinkFinding",
    "LinkRule",
    "SpawnLinks",
    "StreamLinks",
]

ITEM_ADDED: Final = "backlog.item_added"
_CHILD_SPAWNED: Final = "task.child_spawned"  # intentlog.projections.idioms.CHILD_SPAWNED
_SPAWNED: Final = "task.spawned"  # intentlog.projections.idioms.SPAWNED


@dataclass(frozen=True, slots=True)
class LinkRule:
    """One rule across streams: its name, the kinds whose records it judges, and what must hold."""

    name: str
    kinds: tuple[str, ...]
    statement: str


LINK_RULES: Final = (
    LinkRule(
        "spawn_link_matches",
        (_SPAWNED, ITEM_ADDED),
        "a task.spawned {parent, payload} is matched by a task.child_spawned {child, payload} of this task with the "
        "same payload in its parent's stream, and a backlog.item_added that names a parent by that "
        "task.child_spawned of its task and by the task's own task.spawned {parent, payload} with the same parent "
        "and payload; a stream a link names must be in the record unless the gc log records deleting it",
    ),
)


@dataclass(frozen=True, slots=True)
class LinkFinding:
    """What the rule found: the stream and seq of the record judged, ``error`` or ``info``, and what."""

    task: str
    seq: int
    kind: str
    severity: str
    message: str


@dataclass(slots=True)
class StreamLinks:
    """The link records of one stream: its parent link, the children it spawned, the child items it added."""

    spawned: tuple[int, str, str] | None = None  # (seq, parent, payload digest) of the first task.spawned
    children: dict[str, str] = field(default_factory=dict)  # child -> payload digest of its first child_spawned
    items: list[tuple[int, str, str, str]] = field(default_factory=list)  # (seq, task, parent, payload digest)
    malformed: list[tuple[int, str]] = field(default_factory=list)  # (seq, what) of an item link not well typed


def payload_digest(value: Any) -> str:
    """The digest of a payload as canonical JSON (what two records of one link must agree on)."""
    try:
        raw = dumps(value)
    except NotSerializable:  # cannot come from a parsed line; compared by orjson's own sorted bytes then
        raw = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return digest_bytes(raw)


class SpawnLinks:
    """The link records of every stream read, and the rule's findings once all are in."""

    def __init__(self) -> None:
        self.streams: dict[str, StreamLinks] = {}

    def begin(self, task: str) -> StreamLinks:
        """Start (again) the links of ``task``'s stream: what an earlier read noted is dropped."""
        s = self.streams[task] = StreamLinks()
        return s

    def note(self, task: str, seq: int, kind: str, data: Mapping[str, Any]) -> None:
        """Fold one record of ``task``'s stream in (any kind; only the link kinds are kept).

        ``task.child_spawned`` and ``task.spawned`` are expected well shaped (the kind
        table checks them first); ``backlog.item_added`` has no shape rule, so an item
        that names a parent with fields of the wrong type is kept as malformed.
        """
        s = self.streams.get(task) or self.begin(task)
        if kind == _CHILD_SPAWNED and type(data.get("child")) is str:
            s.children.setdefault(data["child"], payload_digest(data.get("payload")))
        elif kind == _SPAWNED and type(data.get("parent")) is str:
            if s.spawned is None:
                s.spawned = (seq, data["parent"], payload_digest(data.get("payload")))
        elif kind == ITEM_ADDED and "parent" in data:
            child, parent = data.get("task"), data.get("parent")
            if type(child) is not str or type(parent) is not str or data.get("item") != child:
                s.malformed.append(
                    (seq, f"names parent {parent!r} for item {data.get('item')!r} of task {child!r}: a child item "
                     "is its task's own id and names its parent by task id")
                )  # fmt: skip
            else:
                s.items.append((seq, child, parent, payload_digest(data.get("payload"))))

    def findings(self, gone: Callable[[str], str | None]) -> Iterator[LinkFinding]:
        """What the rules of :data:`LINK_RULES` find across the streams noted, each message led by ``[name]``.

        ``gone(task)`` says why a stream that was not noted is legitimately absent (the gc
        log records deleting it: that clause), or None when nothing excuses its absence.
        """
        for rule in LINK_RULES:
            for f in LINK_CHECKS[rule.name](self, gone):
                yield replace(f, message=f"[{rule.name}] {f.message}")

    def spawned_by(
        self, child: str, parent: str, payload: str, gone: Callable[[str], str | None]
    ) -> Iterator[tuple[str, str]]:
        """Does ``parent``'s stream record spawning ``child`` with ``payload``?"""
        p = self.streams.get(parent)
        why = gone(parent)
        if p is None:
            if why is not None:
                yield "info", f"names parent {parent!r}, whose stream {why}: the link is not checked"
            else:
                yield "error", (
                    f"names parent {parent!r}, which has no stream in this record (nor does the gc log record "
                    f"deleting one): a parent that never spawned {child!r}; if the record was exported without "
                    "its parent, export the parent with it"
                )
            return
        theirs = p.children.get(child)
        if theirs is None:
            if why is not None:  # the parent's stream now is another one, created after gc deleted the first
                yield "info", (
                    f"names parent {parent!r}, whose earlier stream {why}; the stream now under that id records no "
                    f"task.child_spawned of {child!r}: the link is not checked"
                )
            else:
                yield "error", (
                    f"names parent {parent!r}, but {parent!r}'s stream records no task.child_spawned of {child!r}: "
                    "that task never spawned it"
                )
        elif theirs != payload:
            yield "error", (
                f"names parent {parent!r} with a payload other than the one {parent!r}'s task.child_spawned of "
                f"{child!r} recorded: one of the two was edited"
            )

    def item(
        self, child: str, parent: str, payload: str, gone: Callable[[str], str | None]
    ) -> Iterator[tuple[str, str]]:
        """Does the parent record spawning the item's task, and does that task name the parent?"""
        for sev, text in self.spawned_by(child, parent, payload, gone):
            yield sev, f"child item {child!r} {text}"
        c = self.streams.get(child)
        if c is None:
            why = gone(child)
            if why is not None:
                yield "info", f"adds child item {child!r}, whose stream {why}: its link to {parent!r} is not checked"
            else:
                yield "error", (
                    f"adds child item {child!r} of {parent!r}, but {child!r} has no stream in this record (nor does "
                    "the gc log record deleting one): a child is created before it is added; if the record was "
                    "exported without it, export the child with it"
                )
        elif c.spawned is None:
            yield "error", f"adds child item {child!r} of {parent!r}, but {child!r}'s stream records no task.spawned"
        elif c.spawned[1] != parent:
            yield "error", (
                f"adds child item {child!r} of {parent!r}, but {child!r}'s task.spawned names parent "
                f"{c.spawned[1]!r}"
            )
        elif c.spawned[2] != payload:
            yield "error", (
                f"adds child item {child!r} with a payload other than the one {child!r}'s task.spawned recorded: "
                "one of the two was edited"
            )


def _spawn_link_matches(links: SpawnLinks, gone: Callable[[str], str | None]) -> Iterator[LinkFinding]:
    for task in sorted(links.streams):
        s = links.streams[task]
        if s.spawned is not None:
            seq, parent, payload = s.spawned
            for sev, text in links.spawned_by(task, parent, payload, gone):
                yield LinkFinding(task, seq, _SPAWNED, sev, text)
        for seq, what in s.malformed:
            yield LinkFinding(task, seq, ITEM_ADDED, "error", what)
        for seq, child, parent, payload in s.items:
            for sev, text in links.item(child, parent, payload, gone):
                yield LinkFinding(task, seq, ITEM_ADDED, sev, text)


_LinkCheck = Callable[[SpawnLinks, Callable[[str], str | None]], Iterator[LinkFinding]]
#: rule name -> the library's check of it (the standalone verifier has its own, by the same name).
LINK_CHECKS: Final[Mapping[str, _LinkCheck]] = MappingProxyType({"spawn_link_matches": _spawn_link_matches})
