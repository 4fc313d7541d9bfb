"""The identity graph of one task stream (DESIGN §7): the state the graph rules fold events into.

Pure: a :class:`TaskGraph` is built event by event from what the stream said before;
nothing here reads the disk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .fields import Finding

__all__ = ["CallNode", "Compilation", "GraphRule", "TaskGraph"]


@dataclass(slots=True)
class CallNode:
    """What the stream has said so far about one call (memory per call, not per event)."""

    call: str
    key: str
    seq: int
    resumes: str | None = None
    manifest: bool = False
    preparation_failed: bool = False
    attempt: int = 0  # the latest started attempt (0: none)
    settled: bool = False  # the latest attempt may be followed by another (retry, not sent, not served)
    outcome: bool = False  # the latest attempt has an outcome: observed, not sent or reconciled
    observed: set[int] = field(default_factory=set)  # attempts with an attempt.observed
    resumed_by: str | None = None
    completed: bool = False
    failed: bool = False
    request_hash: str | None = None  # the manifest's
    requested_hash: str | None = None  # the request hash call.requested carried, if any
    timed_out: bool = False  # the latest attempt was recorded timed out
    responses: dict[int, tuple[str, int]] = field(default_factory=dict)  # attempt -> its latest observed (digest, size)
    #: the most recent attempt.interpreted not yet completed: (attempt, its token from projections/derive.py, or
    #: None when it recorded an error); a completion consumes it
    interpretation: tuple[int, bytes | None] | None = None
    dedup: Any = None  # the manifest's provider-dedup declaration (window_s, header, margin_s), if any
    first_started_ts: str | None = None  # ts of the call's first attempt.started (the provider's window opens there)
    dedup_relied: bool = False  # some attempt was reconciled 'provider_dedup': later sends rely on the window


@dataclass(slots=True)
class Compilation:
    offered: frozenset[str]


class TaskGraph:
    """The identity graph of one task stream, built event by event (DESIGN §7).

    Rules read and update it. ``extra`` is room for later kinds (sessions, approvals) to
    keep their own state under their own name; :meth:`expect` / :meth:`fulfil` record a
    promise an event makes about a later one (a resume names a call that must follow),
    and :meth:`finish` reports the promises the stream never kept.
    """

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.calls: dict[str, CallNode] = {}
        self.compilations: dict[str, Compilation] = {}
        self.extra: dict[str, Any] = {}
        self._expect: dict[str, tuple[int, Finding]] = {}

    def expect(self, tag: str, seq: int, unkept: Finding) -> None:
        """Record that a later event must :meth:`fulfil` ``tag``; else ``unkept`` is reported at ``seq``."""
        self._expect[tag] = (seq, unkept)

    def fulfil(self, tag: str) -> bool:
        """Mark ``tag`` kept; False if nothing expected it."""
        return self._expect.pop(tag, None) is not None

    def expects(self, tag: str) -> bool:
        return tag in self._expect

    def finish(self) -> list[tuple[int, Finding]]:
        """The promises never kept, by the seq of the event that made them."""
        out = sorted(self._expect.values(), key=lambda x: x[0])
        self._expect.clear()
        return out

    def call(self, d: Mapping[str, Any]) -> CallNode | Finding:
        """The call an event names, or the finding that it names none (or another key)."""
        cid = d["call"]
        node = self.calls.get(cid)
        if node is None:
            return Finding("graph", f"names call {cid!r}, which no call.requested before it introduced")
        key = d.get("key")
        if isinstance(key, str) and key != node.key:
            return Finding(
                "graph", f"names call {cid!r} with key {key!r}, but that call was requested with key {node.key!r}"
            )
        return node


GraphRule = Callable[[TaskGraph, int, Mapping[str, Any]], Iterable[Finding]]
