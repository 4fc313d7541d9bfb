"""What each event kind must look like, and how it must fit the identity graph (DESIGN §5, §7).

One registry, one entry per kind: a :class:`KindRule` names the kind's required and
optional fields with their types, which fields hold artifact refs, which hold free user
values (scanned for refs), which name files inside the ledger or the workspace, and the
kind's *graph rule* -- the function that checks the event against what the task's stream
said before it (every attempt has a call with a manifest, every observation an attempt,
every completion an observation, every resume links two calls of one key).

This module is the kind table and the registry; the value checks live in
:mod:`.fields`, the graph state in :mod:`.graph`, the graph rules in :mod:`.graph_calls`
and :mod:`.graph_tasks` (all re-exported here). The replay checker
(:mod:`intentlog.checker`) reads this registry and nothing else about kinds, so a new
kind is one call::

    register(KindRule("approval.requested", required={"approval": STR}, graph=_on_approval))

Everything here is pure: rules read a :class:`TaskGraph` and the event's data and return
:class:`Finding` values; they never raise for bad data and never touch the disk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, final

from ..errors import UsageError
from ..eventlog.format import TASK_CREATED
from .derive import canonical_digest
from .fields import (
    ANY,
    BOOL,
    DICT,
    DIGEST,
    FILE,
    INT,
    NAT,
    NUMBER,
    POS,
    REF,
    STR,
    FieldType,
    Finding,
    dict_of,
    is_ref,
    list_of,
    nullable,
    one_of,
    show,
)
from .graph import CallNode, GraphRule, TaskGraph
from .graph_calls import (
    on_attempt_started,
    on_completed,
    on_errored,
    on_failed,
    on_interpreted,
    on_manifest,
    on_not_sent,
    on_observed,
    on_preparation_failed,
    on_progress,
    on_reconciled,
    on_requested,
    on_resumed,
    on_retry_decided,
    on_timed_out,
)
from .graph_idioms import (
    on_child_spawned,
    on_event_awaited,
    on_event_outcome,
    on_joined,
    on_returned,
    on_signalled,
    on_sleep_started,
    on_spawned,
    on_value_recorded,
    on_woke,
)
from .graph_tasks import (
    on_approval_decided,
    on_approval_requested,
    on_checkpoint,
    on_comp_failed,
    on_comp_requested,
    on_compiled,
    on_forked,
    on_stream_repaired,
    on_task_created,
)

__all__ = [
    "ANY",
    "BOOL",
    "DICT",
    "DIGEST",
    "FILE",
    "INT",
    "NAT",
    "NUMBER",
    "POS",
    "REF",
    "RULES",
    "STR",
    "CallNode",
    "FieldType",
    "Finding",
    "GraphRule",
    "KindRule",
    "TaskGraph",
    "canonical_digest",
    "check_shape",
    "dict_of",
    "is_ref",
    "list_of",
    "nullable",
    "one_of",
    "register",
    "rule_for",
]


# -- the kind rule and the registry --------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class KindRule:
    """Everything the checker knows about one event kind.

    ``required`` / ``optional``: field name -> type (an optional field may be absent;
    extra fields are allowed, for forward compatibility). ``refs``: fields holding an
    artifact ref (or null, when the type allows) whose bytes must exist and hash right;
    ``self_ref``: the data object itself is the ref (``artifact.recorded``). ``scan``:
    fields holding free values searched for refs like user data. ``files``: fields naming
    a file inside the ledger ``{file, digest, size}`` (``stream.repaired``).
    ``locator``: the field naming a workspace file captured as the self ref, whose current
    bytes are compared (changed since capture). ``graph``: the identity-graph rule,
    run only when the shape is right.
    """

    kind: str
    required: Mapping[str, FieldType] = field(default_factory=dict)
    optional: Mapping[str, FieldType] = field(default_factory=dict)
    refs: tuple[str, ...] = ()
    self_ref: bool = False
    scan: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    locator: str | None = None
    graph: GraphRule | None = None


_RULES: dict[str, KindRule] = {}
#: Read-only view of the registry: kind -> rule.
RULES: Final[Mapping[str, KindRule]] = MappingProxyType(_RULES)


def register(rule: KindRule, *, replace: bool = False) -> KindRule:
    """Add ``rule`` to the registry; :class:`UsageError` (a ValueError) if the kind has one, unless ``replace``."""
    if rule.kind in _RULES and not replace:
        raise UsageError(f"kind {rule.kind!r} already has a rule; pass replace=True to change it")
    _RULES[rule.kind] = rule
    return rule


def rule_for(kind: str) -> KindRule | None:
    return _RULES.get(kind)


def check_shape(rule: KindRule, data: Mapping[str, Any]) -> list[Finding]:
    """Missing required fields and fields of the wrong type, each named (the caller adds the kind and place)."""
    out: list[Finding] = []
    for name, t in rule.required.items():
        if name not in data:
            out.append(Finding("shape", f"lacks the required field {name!r} ({t.name})"))
        elif not t.check(data[name]):
            out.append(Finding("shape", f"field {name!r} must be {t.name}, not {show(data[name])}"))
    for name, t in rule.optional.items():
        if name in data and not t.check(data[name]):
            out.append(Finding("shape", f"field {name!r} must be {t.name}, not {show(data[name])}"))
    return out


# -- the kinds intentlog writes ------------------------------------------------------

_CALL: Final = {"call": STR}
_ATTEMPT: Final = {"call": STR, "attempt": POS}
_OPT_STR: Final = nullable(STR)

for _rule in (
    KindRule(TASK_CREATED, {"format": STR, "stream": STR, "task": STR}, graph=on_task_created),
    KindRule("task.accepted", optional={"note": _OPT_STR, "by": _OPT_STR}),
    KindRule(
        "stream.repaired",
        {"line": POS, "offset": NAT, "reason": STR, "quarantined": FILE},
        {"suspect": BOOL, "accepted": STR},
        files=("quarantined",),
        graph=on_stream_repaired,
    ),
    KindRule(
        "artifact.recorded",
        {"locator": STR, "digest": DIGEST, "size": NAT},
        {"producer": _OPT_STR, "media_type": _OPT_STR},
        self_ref=True,
        locator="locator",
    ),
    KindRule(
        "call.requested",
        {**_CALL, "key": STR},
        # the intent's hash and input digests from the first event on (equal to the manifest's)
        {"name": _OPT_STR, "resumes": STR, "request_hash": DIGEST, "inputs": dict_of(DIGEST)},
        graph=on_requested,
    ),
    KindRule(
        "call.manifest",
        {
            **_CALL,
            "key": STR,
            "request_hash": DIGEST,
            "request": REF,
            "inputs": dict_of(DIGEST),
            "canon": STR,
            "dropped": list_of(STR),
            "redacted": list_of(STR),
        },
        # a session turn: each message of the conversation, in order; a provider dedup declaration
        {"messages": list_of(REF), "dedup": DICT},
        refs=("request",),
        scan=("inputs", "messages"),
        graph=on_manifest,
    ),
    KindRule("call.preparation_failed", {**_CALL, "key": STR, "error": STR}, graph=on_preparation_failed),
    KindRule("call.resumed", {**_CALL, "new_call": STR, "key": STR}, graph=on_resumed),
    KindRule(
        "call.completed",
        {**_ATTEMPT, "result": ANY},
        # a large value is {"value_ref": ref} (canonical JSON in objects/); a later interpretation of the same
        # stored bytes completes again beside the first, marked reinterpretation: n
        {"reinterpretation": POS},
        scan=("result",),
        graph=on_completed,
    ),
    KindRule("call.failed", {**_CALL, "reason": STR}, {"by": _OPT_STR}, graph=on_failed),
    KindRule("attempt.started", _ATTEMPT, graph=on_attempt_started),
    KindRule("attempt.not_sent", _ATTEMPT, {"reason": _OPT_STR}, graph=on_not_sent),
    KindRule("attempt.errored", _ATTEMPT, {"error": _OPT_STR}, graph=on_errored),
    KindRule(
        "attempt.observed",
        {**_ATTEMPT, "response": REF},
        {
            "error": _OPT_STR,
            "retryable": BOOL,
            "source": STR,
            "encoding": one_of("utf-8/surrogateescape", "utf-8/surrogatepass"),
        },
        refs=("response",),
        graph=on_observed,
    ),
    KindRule(
        "attempt.interpreted",
        {**_ATTEMPT, "interpreter": DICT},
        # response: the {digest, size} of the bytes interpreted, the ref its attempt.observed stored; records
        # written before interpretations named their response lack it
        {"result": ANY, "result_ref": REF, "error": STR, "reinterpretation": POS, "response": REF},
        refs=("result_ref",),
        scan=("result",),
        graph=on_interpreted,
    ),
    KindRule(
        "attempt.retry_decided",
        {**_ATTEMPT, "decision": one_of("retry", "fail"), "reason": STR},
        {"delay": nullable(NUMBER)},
        graph=on_retry_decided,
    ),
    KindRule(
        "attempt.progress",
        {**_ATTEMPT, "beats": POS},
        {"elapsed": NUMBER, "info": nullable(DICT)},
        graph=on_progress,
    ),
    KindRule(
        "attempt.timed_out",
        {**_ATTEMPT, "after": NUMBER, "limit": one_of("inactivity", "max_duration"), "timeout": NUMBER},
        graph=on_timed_out,
    ),
    KindRule(
        "task.checkpoint",
        {"phase": STR, "evidence": list_of(REF), "status": STR},
        {
            "revision": _OPT_STR,
            "changed_files": list_of(STR),
            "note": _OPT_STR,
            "by": _OPT_STR,
            "turn": STR,
            "call": STR,
        },
        scan=("evidence",),
        graph=on_checkpoint,
    ),
    KindRule("task.failed", {"reason": STR}, {"by": _OPT_STR}),
    KindRule(
        "task.forked",
        {"from_task": STR, "from_call": STR, "upto_seq": NAT, "from_head": nullable(DIGEST), "from_stream": STR},
        {"key": _OPT_STR, "note": _OPT_STR, "accept_risk": BOOL, "unknown": list_of(STR)},
        graph=on_forked,
    ),
    KindRule(
        "approval.requested",
        {"approval": STR, "question": STR, "binds": DICT},
        graph=on_approval_requested,
    ),
    KindRule(
        "approval.decided",
        {"approval": STR, "decision": one_of("approve", "reject"), "request_hash": nullable(DIGEST)},
        {"by": _OPT_STR, "note": _OPT_STR},
        graph=on_approval_decided,
    ),
    KindRule(
        "effect.reconciled",
        {**_ATTEMPT, "outcome": one_of("served", "not_served", "resend", "provider_dedup"), "evidence": nullable(REF)},
        {"note": _OPT_STR, "by": _OPT_STR, "source": STR, "window_s": NUMBER, "margin_s": NUMBER, "age_s": NUMBER},
        refs=("evidence",),
        graph=on_reconciled,
    ),
    KindRule(
        "context.compilation_requested",
        {"compilation": STR, "offered": list_of(DICT), "required": list_of(STR)},
        scan=("offered",),
        graph=on_comp_requested,
    ),
    KindRule(
        "context.compiled",
        {"compilation": STR, "package": REF, "selected": list_of(STR)},
        refs=("package",),
        graph=on_compiled,
    ),
    KindRule(
        "context.compilation_failed",
        {"compilation": STR, "error": STR, "missing": list_of(STR)},
        graph=on_comp_failed,
    ),
    # the idioms of durable execution (intentlog.idioms): values, sleeps, events, children
    KindRule("task.value_recorded", {"name": STR, "value": ANY}, {"step": STR, "args": DIGEST}, scan=("value",),
             graph=on_value_recorded),
    KindRule("task.sleep_started", {"sleep": STR, "until": STR, "seconds": nullable(NUMBER)}, graph=on_sleep_started),
    KindRule("task.woke", {"sleep": STR}, graph=on_woke),
    KindRule("task.event_awaited", {"event": STR, "deadline": nullable(STR)}, graph=on_event_awaited),
    KindRule(
        "task.event_received",
        {"event": STR, "id": STR, "payload": ANY, "payload_hash": DIGEST},
        {"inbox_seq": NAT},
        scan=("payload",),
        graph=on_event_outcome,
    ),
    KindRule("task.event_timed_out", {"event": STR, "deadline": STR}, graph=on_event_outcome),
    KindRule(
        "task.signalled",
        {"event": STR, "id": STR, "payload": ANY, "payload_hash": DIGEST, "task": STR},
        scan=("payload",),
        graph=on_signalled,
    ),
    KindRule("task.child_spawned", {"child": STR, "payload": ANY}, scan=("payload",), graph=on_child_spawned),
    KindRule("task.spawned", {"parent": STR, "payload": ANY}, scan=("payload",), graph=on_spawned),
    KindRule("task.returned", {"result": ANY}, scan=("result",), graph=on_returned),
    KindRule("task.joined", {"children": list_of(STR)}, graph=on_joined),
):
    register(_rule)
del _rule
