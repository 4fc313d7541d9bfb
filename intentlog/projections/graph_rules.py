"""The graph rules table: rules stated once, applied by the library's checker, copied into ``verify_bundle.py``.

Each :class:`TableRule` names the event kind it judges and states the rule in one
sentence. The library's checker applies :data:`GRAPH_RULES` to every event of that kind,
before the kind's own graph rule folds the event into the graph, through the checks
registered here by name (:data:`CHECKS`); ``tools/gen_bundle_tables.py`` writes the same
table -- names, kinds, statements and the bounds they use -- into the standalone
``verify_bundle.py``, whose own code implements each rule by name and fails closed on a
name it does not know. A finding of a table rule is a ``graph`` error whose message begins
with ``[name]`` in both verifiers.

Pure: reads the :class:`~intentlog.projections.graph.TaskGraph`, never the disk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from ..dedup import MAX_WINDOW_S, parse_ts, within
from .fields import Finding, show
from .graph import CallNode, TaskGraph
from .graph_idioms import idioms_of

__all__ = [
    "CHECKS", "GRAPH_RULES", "MAX_DEDUP_WINDOW_S", "TASK_CHECKS", "TableRule", "approvals_of", "table_findings",
]  # fmt: skip

#: The longest provider dedup window a declaration may rely on (seconds); longer is refused.
MAX_DEDUP_WINDOW_S: Final = MAX_WINDOW_S


@dataclass(frozen=True, slots=True)
class TableRule:
    """One graph rule: its name, the event kind it judges, and what must hold."""

    name: str
    kind: str
    statement: str


GRAPH_RULES: Final = (
    TableRule(
        "approved_before_send",
        "attempt.started",
        "an attempt of a call bound to an approval (by its key, or by its request hash as a digest) starts only "
        "after an approve decision of that exact request hash, made after the approval's latest request",
    ),
    TableRule(
        "reconciled_inside_dedup_window",
        "effect.reconciled",
        "a provider_dedup reconciliation rests on the manifest's declared window (no longer than "
        f"{MAX_WINDOW_S:.0f} s) and lies, by the events' ts, at most window_s - margin_s after the call's first "
        "attempt started",
    ),
    TableRule(
        "resend_inside_dedup_window",
        "attempt.started",
        "every attempt after a provider_dedup reconciliation of its call starts, by the events' ts, at most "
        "window_s - margin_s after the call's first attempt, of a window the manifest declares and no longer than "
        f"{MAX_WINDOW_S:.0f} s (30 days)",
    ),
    TableRule(
        "completed_once",
        "call.completed",
        "a call completes once: every later call.completed of it says it is a reinterpretation",
    ),
    TableRule(
        "started_while_open",
        "attempt.started",
        "an attempt starts only while its call is open: no attempt.started follows the call's call.completed or "
        "call.failed",
    ),
    TableRule(
        "reconciled_while_open",
        "effect.reconciled",
        "an attempt is reconciled only while its call is open: no effect.reconciled follows the call's "
        "call.completed or call.failed",
    ),
    TableRule(
        "interpreted_its_response",
        "attempt.interpreted",
        "an interpretation that names the response it read (response: {digest, size}) names exactly the ref its "
        "attempt's attempt.observed stored",
    ),
    TableRule(
        "value_recorded_once",
        "task.value_recorded",
        "a value is recorded once: no second task.value_recorded of a name follows the first (a re-run returns "
        "the first)",
    ),
    TableRule(
        "woke_after_wake_time",
        "task.woke",
        "a sleep wakes once, only after its task.sleep_started, and, by the events' ts, not before the wake time "
        "that record holds",
    ),
    TableRule(
        "event_outcome_once",
        "task.event_received",
        "an event is received only after the task recorded waiting for it (task.event_awaited), and a wait has "
        "one outcome",
    ),
    TableRule(
        "timed_out_after_deadline",
        "task.event_timed_out",
        "a wait times out once, only after its task.event_awaited with no outcome before it, and, by the events' "
        "ts, not before the deadline that record holds, which the timeout names",
    ),
)


# -- the approvals the graph follows ----------------------------------------------------------


@dataclass(slots=True)
class ApprovalNode:
    """An approval as its latest request bound it, and the decision counted for that request."""

    binding: str | None  # the request hash a decision must name
    key: str | None  # the bound call's key (None for a digest)
    seq: int
    decision: str | None = None  # the first decision naming ``binding`` after the latest request


def approvals_of(g: TaskGraph) -> dict[str, ApprovalNode]:
    """The approvals of the stream so far, by id (kept in the graph's ``extra``)."""
    got: dict[str, ApprovalNode] = g.extra.setdefault("approval_nodes", {})
    return got


def bound_by(g: TaskGraph) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(key -> approvals that ever bound a call of it, digest -> approvals that ever bound it as a digest)."""
    got: tuple[dict[str, list[str]], dict[str, list[str]]] = g.extra.setdefault("approval_bounds", ({}, {}))
    return got


# -- the checks, by rule name -------------------------------------------------------------------


def _approved_before_send(g: TaskGraph, node: CallNode, d: Mapping[str, Any]) -> Iterator[str]:
    by_key, by_digest = bound_by(g)
    of_key = by_key.get(node.key, [])
    about = [a for a in by_digest.get(node.request_hash or "", []) if a not in of_key]
    nodes = approvals_of(g)
    for aid in (*of_key, *about):
        a = nodes[aid]
        key = node.key if aid in about else a.key
        if key != node.key or a.binding != node.request_hash:
            yield (
                f"approval {aid!r} now binds {a.binding} (key {key!r}), not this call's request "
                f"{node.request_hash} (key {node.key!r}): no decision approves what was sent"
            )
        elif a.decision is None:
            yield f"approval {aid!r} of request {a.binding} has no decision before it: sent while pending"
        elif a.decision != "approve":
            yield f"approval {aid!r} of request {a.binding} was decided {a.decision!r}: sent though refused"


def _outside_window(g: TaskGraph, node: CallNode, what: str) -> Iterator[str]:
    """What is wrong with relying, now (the event's ts), on the window the call's manifest declares."""
    if type(node.dedup) is not dict:
        yield f"{what}, but {node.call}'s call.manifest declares no provider dedup window"
        return
    window, margin = node.dedup.get("window_s"), node.dedup.get("margin_s")
    if isinstance(window, (int, float)) and window > MAX_WINDOW_S:
        yield f"{what} under a declared window of {window!r} s, longer than any provider keeps a key"
        return
    start = parse_ts(node.first_started_ts) if node.first_started_ts is not None else None
    now = parse_ts(g.extra.get("ts", ""))
    if start is None or now is None or not within(window, margin, now - start):
        age = "at an unknown time" if start is None or now is None else f"{now - start:.3f} s"
        yield (
            f"{what} {age} after the first attempt started, outside the declared window ({window!r} s less a "
            f"margin of {margin!r} s): the provider may not recognise the resend"
        )


def _reconciled_inside_dedup_window(g: TaskGraph, node: CallNode, d: Mapping[str, Any]) -> Iterator[str]:
    if d.get("outcome") == "provider_dedup":
        yield from _outside_window(g, node, f"effect.reconciled 'provider_dedup' of {node.call}")


def _resend_inside_dedup_window(g: TaskGraph, node: CallNode, d: Mapping[str, Any]) -> Iterator[str]:
    if node.dedup_relied:
        yield from _outside_window(g, node, f"attempt {d['attempt']} of {node.call} relies on the provider's window")


def _completed_once(g: TaskGraph, node: CallNode, d: Mapping[str, Any]) -> Iterator[str]:
    if node.completed and "reinterpretation" not in d:
        yield f"{node.call} completes a second time without saying it is a reinterpretation"


def _ended(node: CallNode) -> str | None:
    return "completed" if node.completed else "failed" if node.failed else None


def _started_while_open(g: TaskGraph, node: CallNode, d: Mapping[str, Any]) -> Iterator[str]:
    ended = _ended(node)
    if ended is not None:
        yield f"attempt {d['attempt']} of {node.call} started after the call {ended}"


def _reconciled_while_open(g: TaskGraph, node: CallNode, d: Mapping[str, Any]) -> Iterator[str]:
    ended = _ended(node)
    if ended is not None:
        yield (
            f"effect.reconciled {d['outcome']!r} of attempt {d['attempt']} of {node.call} after the call {ended}: "
            "only an open call's unknown effect is reconciled"
        )


def _interpreted_its_response(g: TaskGraph, node: CallNode, d: Mapping[str, Any]) -> Iterator[str]:
    ref = d.get("response")
    if ref is None:
        return  # written before interpretations named their response: nothing to compare
    seen = node.responses.get(d["attempt"])
    if seen is None:
        yield f"attempt {d['attempt']} of {node.call} names the response {show(ref)}, but no observation stored one"
    elif type(ref) is not dict or (ref.get("digest"), ref.get("size")) != seen:
        yield (
            f"attempt {d['attempt']} of {node.call} is interpreted from the response {show(ref)}, not the one its "
            f"attempt.observed stored ({seen[0]}, {seen[1]} bytes): the observation or the interpretation was edited "
            "(a response moved between calls, say)"
        )


def _value_recorded_once(g: TaskGraph, d: Mapping[str, Any]) -> Iterator[str]:
    if d["name"] in idioms_of(g).values:
        yield f"value {d['name']!r} is recorded a second time: a re-run returns the first, never this one"


def _not_before(g: TaskGraph, recorded: str, what: str) -> Iterator[str]:
    due, now = parse_ts(recorded), parse_ts(g.extra.get("ts", ""))
    if due is None or now is None or now < due:
        yield f"{what} at {g.extra.get('ts', '?')}, before the recorded time {recorded}"


def _woke_after_wake_time(g: TaskGraph, d: Mapping[str, Any]) -> Iterator[str]:
    s = idioms_of(g)
    until = s.sleeps.get(d["sleep"])
    if until is None:
        yield f"sleep {d['sleep']!r} wakes, but it never started (no task.sleep_started before it)"
    elif d["sleep"] in s.woke:
        yield f"sleep {d['sleep']!r} wakes a second time"
    else:
        yield from _not_before(g, until, f"sleep {d['sleep']!r} wakes")


def _outcome(g: TaskGraph, d: Mapping[str, Any], what: str) -> tuple[bool, str | None, Iterator[str]]:
    s = idioms_of(g)
    name = d["event"]
    if name not in s.waits:
        return False, None, iter((f"event {name!r} is {what}, but the task never recorded waiting for it",))
    if name in s.outcomes:
        return False, None, iter((f"event {name!r} is {what} after its wait already had an outcome",))
    return True, s.waits[name], iter(())


def _event_outcome_once(g: TaskGraph, d: Mapping[str, Any]) -> Iterator[str]:
    yield from _outcome(g, d, "received")[2]


def _timed_out_after_deadline(g: TaskGraph, d: Mapping[str, Any]) -> Iterator[str]:
    ok, deadline, found = _outcome(g, d, "timed out")
    yield from found
    if not ok:
        return
    if deadline is None or deadline != d["deadline"]:
        yield f"event {d['event']!r} times out at deadline {d['deadline']!r}, but its wait recorded {deadline!r}"
    else:
        yield from _not_before(g, deadline, f"event {d['event']!r} times out")


_TaskCheck = Callable[[TaskGraph, Mapping[str, Any]], Iterator[str]]
#: rule name -> the library's check of a rule about a task's own records (no call), as text.
TASK_CHECKS: Final[Mapping[str, _TaskCheck]] = MappingProxyType(
    {
        "value_recorded_once": _value_recorded_once,
        "woke_after_wake_time": _woke_after_wake_time,
        "event_outcome_once": _event_outcome_once,
        "timed_out_after_deadline": _timed_out_after_deadline,
    }
)

_Check = Callable[[TaskGraph, CallNode, Mapping[str, Any]], Iterator[str]]
_CALL_CHECKS: Final[Mapping[str, _Check]] = MappingProxyType(
    {
        "approved_before_send": _approved_before_send,
        "reconciled_inside_dedup_window": _reconciled_inside_dedup_window,
        "resend_inside_dedup_window": _resend_inside_dedup_window,
        "completed_once": _completed_once,
        "started_while_open": _started_while_open,
        "reconciled_while_open": _reconciled_while_open,
        "interpreted_its_response": _interpreted_its_response,
    }
)
#: rule name -> the library's check of it (each yields what it found, as text).
CHECKS: Final[Mapping[str, _Check | _TaskCheck]] = MappingProxyType({**_CALL_CHECKS, **TASK_CHECKS})
_BY_KIND: Final = {r.kind: tuple(x for x in GRAPH_RULES if x.kind == r.kind) for r in GRAPH_RULES}


def table_findings(g: TaskGraph, kind: str, d: Mapping[str, Any]) -> Iterator[Finding]:
    """What the table's rules for ``kind`` find in one event (of a well-shaped ``d``), before it is folded in."""
    rules = _BY_KIND.get(kind)
    if not rules:
        return
    for rule in rules:
        task_check = TASK_CHECKS.get(rule.name)
        if task_check is not None:
            for found in task_check(g, d):
                yield Finding("graph", f"[{rule.name}] {found}")
    rules = tuple(r for r in rules if r.name not in TASK_CHECKS)
    if not rules:
        return
    cid = d.get("call")
    node = g.calls.get(cid) if isinstance(cid, str) else None
    if node is None:
        return  # the kind's own rule reports a call that does not exist
    for rule in rules:
        for found in _CALL_CHECKS[rule.name](g, node, d):
            yield Finding("graph", f"[{rule.name}] {found}")
