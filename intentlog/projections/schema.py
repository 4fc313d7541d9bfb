"""What each event kind must look like, and how it must fit the identity graph (DESIGN §5, §7).

One registry, one entry per kind: a :class:`KindRule` names the kind's required and
optional fields with their types, which fields hold artifact refs, which hold free user
values (scanned for refs), which name files inside the ledger or the workspace, and the
kind's *graph rule* -- the function that checks the event against what the task's stream
said before it (every attempt has a call with a manifest, every observation an attempt,
every completion an observation, every resume links two calls of one key).

The replay checker (:mod:`intentlog.projections.verify`) reads this registry and nothing
else about kinds, so a new kind is one call::

    register(KindRule("approval.requested", required={"approval": STR}, graph=_on_approval))

Everything here is pure: rules read a :class:`TaskGraph` and the event's data and return
:class:`Finding` values; they never raise for bad data and never touch the disk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, NamedTuple, final

import orjson

from .._digest import digest_bytes, is_digest
from ..errors import UsageError
from ..eventlog.format import FORMAT, TASK_CREATED

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


# -- field types ---------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class FieldType:
    """A named predicate on a JSON value; ``name`` is what a shape message says was expected."""

    name: str
    check: Callable[[Any], bool]


def _is_int(v: Any) -> bool:
    return type(v) is int


def is_ref(v: Any) -> bool:
    """True for an artifact ref object: ``{"digest": "blake3:<64 hex>", "size": N >= 0, ...}``."""
    if type(v) is not dict or not is_digest(v.get("digest")):
        return False
    size = v.get("size")
    mt = v.get("media_type")
    return type(size) is int and size >= 0 and (mt is None or type(mt) is str)


def _is_file(v: Any) -> bool:
    if type(v) is not dict or type(v.get("file")) is not str or not is_digest(v.get("digest")):
        return False
    size = v.get("size")
    return type(size) is int and size >= 0


ANY: Final = FieldType("any value", lambda v: True)
STR: Final = FieldType("a string", lambda v: type(v) is str)
INT: Final = FieldType("an integer", _is_int)
NAT: Final = FieldType("an integer >= 0", lambda v: type(v) is int and v >= 0)
POS: Final = FieldType("an integer >= 1", lambda v: type(v) is int and v >= 1)
NUMBER: Final = FieldType("a number", lambda v: type(v) in (int, float))
BOOL: Final = FieldType("true or false", lambda v: type(v) is bool)
DICT: Final = FieldType("an object", lambda v: type(v) is dict)
DIGEST: Final = FieldType("a digest 'blake3:<64 hex>'", is_digest)
REF: Final = FieldType("an artifact ref {digest, size}", is_ref)
FILE: Final = FieldType("a file record {file, digest, size}", _is_file)


def nullable(t: FieldType) -> FieldType:
    """``t`` or ``null``."""
    return FieldType(f"{t.name} or null", lambda v: v is None or t.check(v))


def list_of(t: FieldType) -> FieldType:
    return FieldType(f"a list of {t.name}", lambda v: type(v) is list and all(t.check(x) for x in v))


def dict_of(t: FieldType) -> FieldType:
    """An object whose values are all ``t`` (keys are strings in JSON anyway)."""
    return FieldType(f"an object of {t.name}", lambda v: type(v) is dict and all(t.check(x) for x in v.values()))


def one_of(*values: str) -> FieldType:
    allowed = frozenset(values)
    return FieldType("one of " + ", ".join(repr(x) for x in values), lambda v: type(v) is str and v in allowed)


# -- findings and the per-task graph -------------------------------------------------


class Finding(NamedTuple):
    """One thing a rule found wrong with an event; the checker adds where it is."""

    code: str
    message: str
    severity: str = "error"


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
    #: the most recent attempt.interpreted not yet completed: (attempt, digest of its canonical result, or
    #: None when it recorded an error); a completion consumes it
    interpretation: tuple[int, str | None] | None = None
    dedup: Any = None  # the manifest's provider-dedup declaration (window_s, header, margin_s), if any
    first_started_ts: str | None = None  # ts of the call's first attempt.started (the provider's window opens there)


@dataclass(slots=True)
class _Compilation:
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
        self.compilations: dict[str, _Compilation] = {}
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
            out.append(Finding("shape", f"field {name!r} must be {t.name}, not {_show(data[name])}"))
    for name, t in rule.optional.items():
        if name in data and not t.check(data[name]):
            out.append(Finding("shape", f"field {name!r} must be {t.name}, not {_show(data[name])}"))
    return out


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


# -- graph rules: tasks and streams --------------------------------------------------


def _on_task_created(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    if seq != 0:
        yield Finding("graph", f"at seq {seq}: a stream has exactly one task.created, at seq 0")
    if d["task"] != g.task_id:
        yield Finding(
            "graph", f"names task {d['task']!r} but the stream is {g.task_id!r}: a copied or renamed file"
        )
    if d["format"] != FORMAT:
        yield Finding("shape", f"declares format {d['format']!r}; this checker reads {FORMAT!r}")


def _on_stream_repaired(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    # The writer appends stream.repaired right after the trusted lines it kept: at seq
    # line-1, or at seq 1 after a new task.created when nothing could be kept.
    expected = d["line"] - 1 if d["offset"] > 0 else 1
    if seq != expected:
        yield Finding(
            "graph", f"says the bad region began at line {d['line']} (offset {d['offset']}), "
            f"so it belongs at seq {expected}, not {seq}"
        )
    if d.get("suspect") is True:
        # a crash leaves a torn or garbage tail, never a whole event that fails to chain:
        # the line before it may have been edited (DESIGN §4 rule 4: reported loudly)
        yield Finding(
            "suspect_repair",
            f"a whole event line that did not chain was quarantined to {d['quarantined'].get('file')}: "
            f"the line before it (line {d['line'] - 1}) may have been edited; compare with a copy or git",
        )


# -- graph rules: calls --------------------------------------------------------------


def _on_requested(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    cid, key = d["call"], d["key"]
    if cid in g.calls:
        yield Finding("graph", f"call {cid!r} is requested a second time (first at seq {g.calls[cid].seq})")
        return
    old_id = d.get("resumes")
    node = CallNode(cid, key, seq, resumes=old_id, requested_hash=d.get("request_hash"))
    g.calls[cid] = node
    if old_id is None:
        if g.expects(f"resumed:{cid}"):
            g.fulfil(f"resumed:{cid}")
            yield Finding("graph", f"call.resumed introduced {cid!r}, but its call.requested does not say resumes")
        return
    old = g.calls.get(old_id)
    if old is None:
        yield Finding("graph", f"{cid!r} resumes call {old_id!r}, which was never requested")
    elif old.key != key:
        yield Finding("graph", f"{cid!r} (key {key!r}) resumes {old_id!r}, a call of another key ({old.key!r})")
    elif old.resumed_by != cid or not g.fulfil(f"resumed:{cid}"):
        yield Finding("graph", f"{cid!r} says it resumes {old_id!r}, but no call.resumed from {old_id!r} names it")


def _on_manifest(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = g.call(d)
    if isinstance(node, Finding):
        yield node
        return
    if node.manifest:
        yield Finding("graph", f"{node.call} has a second call.manifest")
    if node.preparation_failed:
        yield Finding("graph", f"{node.call} has a manifest after its preparation failed")
    node.manifest = True
    node.request_hash = d["request_hash"]
    node.dedup = d.get("dedup")
    if d["request_hash"] != d["request"]["digest"]:
        yield Finding(
            "graph", f"request_hash {d['request_hash']} is not the digest of the recorded request "
            f"({d['request']['digest']}): the manifest does not describe its own request"
        )
    if node.requested_hash is not None and node.requested_hash != d["request_hash"]:
        yield Finding(
            "forgery", f"{node.call}'s call.requested recorded request hash {node.requested_hash}, but its manifest "
            f"records {d['request_hash']}: the intent changed between the two events"
        )


def _on_preparation_failed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = g.call(d)
    if isinstance(node, Finding):
        yield node
        return
    if node.manifest:
        yield Finding("graph", f"{node.call} failed preparation after its manifest was recorded")
    node.preparation_failed = True


def _on_resumed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = g.call(d)
    if isinstance(node, Finding):
        yield node
        return
    new = d["new_call"]
    if node.completed:
        yield Finding("graph", f"{node.call} is resumed after it completed")
    if node.resumed_by is not None:
        yield Finding("graph", f"{node.call} is resumed a second time (already by {node.resumed_by!r})")
    if new in g.calls:
        yield Finding(
            "graph", f"{node.call} is resumed by {new!r}, a call that already exists; a resume starts a new call"
        )
        return
    node.resumed_by = new
    # A crash between call.resumed and the new call's records is legal: the next run of the key
    # finds the pending resume and writes them. Worth knowing, never a failure.
    g.expect(
        f"resumed:{new}",
        seq,
        Finding(
            "resume_pending",
            f"call.resumed links {node.call} to {new!r}, and no call.requested {{resumes: {node.call!r}}} follows "
            f"yet (a crash right after the resume leaves this): the next run of key {node.key!r} continues it",
            "info",
        ),
    )


def _attempt_of(g: TaskGraph, d: Mapping[str, Any]) -> CallNode | Finding:
    """The call of an attempt event, when the attempt it names is the call's latest started one."""
    node = g.call(d)
    if isinstance(node, Finding):
        return node
    n = d["attempt"]
    if node.attempt == 0:
        return Finding("graph", f"names attempt {n} of {node.call}, which never started an attempt")
    if n != node.attempt:
        return Finding(
            "graph", f"names attempt {n} of {node.call}, but its latest started attempt is {node.attempt}"
        )
    return node


def _on_attempt_started(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = g.call(d)
    if isinstance(node, Finding):
        yield node
        return
    n = d["attempt"]
    if not node.manifest:
        yield Finding(
            "graph",
            f"attempt {n} of {node.call} started, but the call has no call.manifest: the intent was never recorded",
        )
    if node.completed or node.failed:
        ended = "completed" if node.completed else "failed"
        yield Finding("graph", f"attempt {n} of {node.call} started after the call {ended}")
    if n != node.attempt + 1:
        yield Finding(
            "graph", f"attempt {n} of {node.call} started, but attempts count 1, 2, 3…: {node.attempt + 1} was next"
        )
    elif node.attempt and not node.settled:
        yield Finding(
            "graph", f"attempt {n} of {node.call} started while attempt {node.attempt} had no retry decision, "
            "not-sent record or reconciliation: a blind resend"
        )
    if node.first_started_ts is None:
        node.first_started_ts = g.extra.get("ts")
    node.attempt = n
    node.settled = False
    node.outcome = False
    node.timed_out = False


def _on_not_sent(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node
        return
    if d["attempt"] in node.observed:
        yield Finding("graph", f"attempt {d['attempt']} of {node.call} is recorded not sent after an observation")
    node.settled = node.outcome = True


def _on_errored(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node


def _on_observed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node
        return
    node.observed.add(d["attempt"])
    node.responses[d["attempt"]] = (d["response"]["digest"], d["response"]["size"])
    node.outcome = True
    if d.get("source") == "reconciliation" and not g.fulfil(f"evidence:{node.call}:{d['attempt']}"):
        yield Finding(
            "graph", f"an observation of attempt {d['attempt']} of {node.call} comes from a reconciliation, "
            "but no effect.reconciled 'served' with evidence precedes it"
        )
    elif d.get("source") != "reconciliation" and node.timed_out:
        yield Finding(
            "graph", f"attempt {d['attempt']} of {node.call} is observed after it timed out: a late answer "
            "enters the record only through a reconciliation"
        )


def _on_interpreted(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    if sum(k in d for k in ("result", "result_ref", "error")) != 1:
        yield Finding("shape", "carries not exactly one of 'result', 'result_ref' and 'error'")
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node
        return
    if d["attempt"] not in node.observed:
        yield Finding("graph", f"attempt {d['attempt']} of {node.call} is interpreted but was never observed")
    node.interpretation = (d["attempt"], _interpreted_token(d))


def _interpreted_token(d: Mapping[str, Any]) -> str | None:
    """What a completion of this interpretation must carry: its value's canonical digest or its ref's digest."""
    if "result" in d:
        return f"value {canonical_digest(d['result'])}"
    ref = d.get("result_ref")
    return f"ref {ref['digest']}" if ref is not None and is_ref(ref) else None


def _on_retry_decided(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node
        return
    if not node.outcome:
        yield Finding(
            "graph", f"a retry decision for attempt {d['attempt']} of {node.call}, whose effect is unknown "
            "(no observation, not-sent record or reconciliation): reconcile before deciding"
        )
    node.settled = d["decision"] == "retry"


def _on_reconciled(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node
        return
    if d["evidence"] is not None and d["outcome"] != "served":
        yield Finding(
            "graph", f"effect.reconciled {d['outcome']!r} of {node.call} carries evidence; only 'served' does"
        )
    node.outcome = True
    node.settled = d["outcome"] in ("not_served", "resend", "provider_dedup")
    if d["outcome"] == "provider_dedup":
        yield from _dedup_findings(g, node)
    if d["evidence"] is not None:
        g.expect(
            f"evidence:{node.call}:{d['attempt']}",
            seq,
            Finding(
                "graph", f"effect.reconciled 'served' of {node.call} carries evidence, but no attempt.observed "
                "{source: 'reconciliation'} follows it with those bytes"
            ),
        )


def canonical_digest(value: Any) -> str | None:
    """The digest of ``value`` as canonical JSON (sorted keys, compact); None if it cannot be encoded."""
    try:
        return digest_bytes(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    except (orjson.JSONEncodeError, TypeError):
        return None
def _dedup_findings(g: TaskGraph, node: CallNode) -> Iterator[Finding]:
    """A ``provider_dedup`` reconciliation needs the manifest's declaration and a first attempt inside its window.

    Judged from the events' own timestamps: ``reconciled.ts - first attempt.started.ts``
    must lie in ``[0, window_s - margin_s]`` of the manifest's ``dedup``.
    """
    from ..dedup import parse_ts, within

    decl = node.dedup
    if type(decl) is not dict:
        yield Finding(
            "graph", f"effect.reconciled 'provider_dedup' of {node.call}, but its call.manifest declares no "
            "provider dedup window: an unknown effect was resent without a person or a declaration"
        )
        return
    start = parse_ts(node.first_started_ts) if node.first_started_ts is not None else None
    now = parse_ts(g.extra.get("ts", ""))
    window, margin = decl.get("window_s"), decl.get("margin_s")
    if start is None or now is None or not within(window, margin, now - start):
        age = "unknown" if start is None or now is None else f"{now - start:.3f} s"
        yield Finding(
            "graph", f"effect.reconciled 'provider_dedup' of {node.call} {age} after its first attempt started, "
            f"outside the declared window ({window!r} s less a margin of {margin!r} s): a resend the provider "
            "may not recognise"
        )


def _on_completed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = g.call(d)
    if isinstance(node, Finding):
        yield node
        return
    n = d["attempt"]
    if node.completed and "reinterpretation" not in d:
        yield Finding(
            "graph", f"{node.call} completes a second time without saying it is a reinterpretation"
        )
    if n not in node.observed:
        yield Finding(
            "graph", f"{node.call} completes with attempt {n}, which has no attempt.observed: a result from nowhere"
        )
    elif n != node.attempt:
        yield Finding("graph", f"{node.call} completes with attempt {n}, but attempt {node.attempt} started after it")
    else:
        yield from _derivable(node, n, d["result"])
    node.completed = True


def _completion_token(result: Any) -> str | None:
    """The interpretation token a value-carrying completion claims (None: not a value completion)."""
    if type(result) is dict and result.keys() == {"value"}:
        return f"value {canonical_digest(result['value'])}"
    if type(result) is dict and result.keys() == {"value_ref"} and is_ref(result["value_ref"]):
        return f"ref {result['value_ref']['digest']}"
    return None


def _derivable(node: CallNode, n: int, result: Any) -> Iterator[Finding]:
    """A completion carries only what the events before it hold (issue 12 item 6).

    ``{"value": V}``: V is, byte for byte as canonical JSON, the result of the most recent
    ``attempt.interpreted`` of this attempt that no completion consumed yet.
    ``{"raw": true, "response": ref}``: ref names the bytes this attempt's observation stored.
    """
    carried = _completion_token(result)
    if carried is not None:
        interp, node.interpretation = node.interpretation, None
        if interp is None or interp[0] != n:
            yield Finding(
                "forgery", f"{node.call} completes attempt {n} with a value, but no attempt.interpreted of that "
                "attempt precedes it: a result no recorded interpretation produced"
            )
        elif interp[1] is None:
            yield Finding(
                "forgery", f"{node.call} completes attempt {n} with a value, but its latest interpretation "
                "recorded an error, not a result"
            )
        elif carried != interp[1]:
            yield Finding(
                "forgery", f"{node.call} completes attempt {n} with a value that differs from the result its latest "
                "attempt.interpreted recorded: the completion was edited; restore the stream from a copy or git"
            )
    elif type(result) is dict and result.keys() == {"raw", "response"} and result["raw"] is True:
        ref, seen = result["response"], node.responses.get(n)
        if not is_ref(ref) or seen is None or (ref["digest"], ref["size"]) != seen:
            yield Finding(
                "forgery", f"{node.call} completes attempt {n} with the raw response {_show(ref)}, which is not the "
                "response its attempt.observed stored: the completion was edited"
            )
    else:
        yield Finding(
            "shape",
            "result must be {'value': V}, {'value_ref': ref} or {'raw': true, 'response': ref}, "
            f"not {_show(result)}",
        )


def _on_failed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = g.call(d)
    if isinstance(node, Finding):
        yield node
        return
    if node.completed:
        yield Finding("graph", f"{node.call} is recorded failed after it completed")
    node.failed = True


# -- graph rules: context compilation ------------------------------------------------


def _on_comp_requested(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    ids = frozenset(o["id"] for o in d["offered"] if isinstance(o.get("id"), str))
    g.compilations[d["compilation"]] = _Compilation(ids)
    return iter(())


def _compilation(g: TaskGraph, d: Mapping[str, Any]) -> _Compilation | Finding:
    c = g.compilations.get(d["compilation"])
    if c is None:
        return Finding("graph", f"names compilation {d['compilation']!r}, which was never requested")
    return c


def _on_compiled(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    c = _compilation(g, d)
    if isinstance(c, Finding):
        yield c
        return
    stray = [s for s in d["selected"] if s not in c.offered]
    if stray:
        yield Finding("graph", f"compilation {d['compilation']!r} selected {stray}, which were not offered")


def _on_comp_failed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    c = _compilation(g, d)
    if isinstance(c, Finding):
        yield c


# -- graph rules: long effects ------------------------------------------------------


def _open_attempt(g: TaskGraph, d: Mapping[str, Any], what: str) -> Iterator[Finding]:
    """An event that only belongs while an attempt is out: started, no outcome, not timed out."""
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node
        return
    if node.outcome or node.timed_out or node.completed:
        yield Finding(
            "graph", f"{what} for attempt {d['attempt']} of {node.call}, which already has an outcome or timed out"
        )


def _on_progress(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    yield from _open_attempt(g, d, "a heartbeat")


def _on_timed_out(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    found = list(_open_attempt(g, d, "a timeout"))
    yield from found
    node = g.calls.get(d["call"])
    if node is not None and not found:
        node.timed_out = True
    if d["after"] < 0 or d["timeout"] <= 0:
        yield Finding("shape", "after must be >= 0 and timeout > 0 seconds")


# -- graph rules: checkpoints, approvals, task verdicts, forks -----------------------


def _turn_completed(g: TaskGraph, key: str) -> bool:
    return any(n.key == key and n.completed for n in g.calls.values())


def _on_checkpoint(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    cid, turn = d.get("call"), d.get("turn")
    if cid is not None:
        node = g.calls.get(cid)
        if node is None:
            yield Finding("graph", f"checkpoint {d['phase']!r} names call {cid!r}, which was never requested")
        elif not node.completed:
            yield Finding("graph", f"checkpoint {d['phase']!r} accepts {cid!r}, which has not completed")
        elif turn is not None and node.key != turn:
            yield Finding("graph", f"checkpoint {d['phase']!r} names turn {turn!r} but {cid!r} is key {node.key!r}")
    elif turn is not None and not _turn_completed(g, turn):
        yield Finding("graph", f"checkpoint {d['phase']!r} accepts turn {turn!r}, which has no completed call")


def _approvals(g: TaskGraph) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = g.extra.setdefault("approvals", {})
    return got


def _on_approval_requested(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    binds = d["binds"]
    binding: str | None = None
    cid = binds.get("call")
    if cid is not None:
        node = g.calls.get(cid) if isinstance(cid, str) else None
        if node is None:
            yield Finding("graph", f"approval {d['approval']!r} binds call {cid!r}, which was never requested")
        else:
            if binds.get("key") not in (None, node.key):
                yield Finding("graph", f"approval {d['approval']!r} binds {cid!r} under key {binds.get('key')!r}, "
                              f"but that call's key is {node.key!r}")
            if binds.get("request_hash") != node.request_hash:
                yield Finding(
                    "graph", f"approval {d['approval']!r} binds {cid!r} with request hash "
                    f"{binds.get('request_hash')!r}, but that call's manifest records {node.request_hash!r}"
                )
        binding = binds.get("request_hash")
    elif "digest" in binds:
        binding = binds["digest"]
    if binding is not None and not is_digest(binding):
        yield Finding("shape", f"approval {d['approval']!r} binds {binding!r}, which is not a digest")
    _approvals(g)[d["approval"]] = {"binding": binding, "seq": seq, "decided": False}


def _on_approval_decided(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    a = _approvals(g).get(d["approval"])
    if a is None:
        yield Finding("graph", f"a decision for approval {d['approval']!r}, which was never requested before it")
        return
    if d["request_hash"] != a["binding"]:
        yield Finding(
            "graph", f"approval {d['approval']!r} is decided for {d['request_hash']!r}, but its latest request "
            f"(seq {a['seq']}) binds {a['binding']!r}: a decision must name what it approves"
        )
    elif a["decided"]:
        yield Finding("graph", f"approval {d['approval']!r} is decided a second time for the same request")
    a["decided"] = True


def _on_forked(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    earlier = g.extra.get("forked")
    if earlier is not None and earlier > d["upto_seq"]:  # a fork of a fork copies the first marker: legal
        yield Finding("graph", f"a second task.forked (the first at seq {earlier})")
    g.extra["forked"] = seq
    if seq != d["upto_seq"] + 1:
        yield Finding(
            "graph", f"task.forked copies seq 1..{d['upto_seq']} of {d['from_task']!r}, so it belongs at seq "
            f"{d['upto_seq'] + 1}, right after the copied prefix, not at {seq}"
        )


# -- the kinds intentlog writes ------------------------------------------------------

_CALL: Final = {"call": STR}
_ATTEMPT: Final = {"call": STR, "attempt": POS}
_OPT_STR: Final = nullable(STR)

for _rule in (
    KindRule(TASK_CREATED, {"format": STR, "stream": STR, "task": STR}, graph=_on_task_created),
    KindRule("task.accepted", optional={"note": _OPT_STR, "by": _OPT_STR}),
    KindRule(
        "stream.repaired",
        {"line": POS, "offset": NAT, "reason": STR, "quarantined": FILE},
        {"suspect": BOOL, "accepted": STR},
        files=("quarantined",),
        graph=_on_stream_repaired,
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
        graph=_on_requested,
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
        graph=_on_manifest,
    ),
    KindRule("call.preparation_failed", {**_CALL, "key": STR, "error": STR}, graph=_on_preparation_failed),
    KindRule("call.resumed", {**_CALL, "new_call": STR, "key": STR}, graph=_on_resumed),
    KindRule(
        "call.completed",
        {**_ATTEMPT, "result": ANY},
        # a large value is {"value_ref": ref} (canonical JSON in objects/); a later interpretation of the same
        # stored bytes completes again beside the first, marked reinterpretation: n
        {"reinterpretation": POS},
        scan=("result",),
        graph=_on_completed,
    ),
    KindRule("call.failed", {**_CALL, "reason": STR}, {"by": _OPT_STR}, graph=_on_failed),
    KindRule("attempt.started", _ATTEMPT, graph=_on_attempt_started),
    KindRule("attempt.not_sent", _ATTEMPT, {"reason": _OPT_STR}, graph=_on_not_sent),
    KindRule("attempt.errored", _ATTEMPT, {"error": _OPT_STR}, graph=_on_errored),
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
        graph=_on_observed,
    ),
    KindRule(
        "attempt.interpreted",
        {**_ATTEMPT, "interpreter": DICT},
        {"result": ANY, "result_ref": REF, "error": STR, "reinterpretation": POS},
        refs=("result_ref",),
        scan=("result",),
        graph=_on_interpreted,
    ),
    KindRule(
        "attempt.retry_decided",
        {**_ATTEMPT, "decision": one_of("retry", "fail"), "reason": STR},
        {"delay": nullable(NUMBER)},
        graph=_on_retry_decided,
    ),
    KindRule(
        "attempt.progress",
        {**_ATTEMPT, "beats": POS},
        {"elapsed": NUMBER, "info": nullable(DICT)},
        graph=_on_progress,
    ),
    KindRule(
        "attempt.timed_out",
        {**_ATTEMPT, "after": NUMBER, "limit": one_of("inactivity", "max_duration"), "timeout": NUMBER},
        graph=_on_timed_out,
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
        graph=_on_checkpoint,
    ),
    KindRule("task.failed", {"reason": STR}, {"by": _OPT_STR}),
    KindRule(
        "task.forked",
        {"from_task": STR, "from_call": STR, "upto_seq": NAT, "from_head": nullable(DIGEST), "from_stream": STR},
        {"key": _OPT_STR, "note": _OPT_STR, "accept_risk": BOOL, "unknown": list_of(STR)},
        graph=_on_forked,
    ),
    KindRule(
        "approval.requested",
        {"approval": STR, "question": STR, "binds": DICT},
        graph=_on_approval_requested,
    ),
    KindRule(
        "approval.decided",
        {"approval": STR, "decision": one_of("approve", "reject"), "request_hash": nullable(DIGEST)},
        {"by": _OPT_STR, "note": _OPT_STR},
        graph=_on_approval_decided,
    ),
    KindRule(
        "effect.reconciled",
        {**_ATTEMPT, "outcome": one_of("served", "not_served", "resend", "provider_dedup"), "evidence": nullable(REF)},
        {"note": _OPT_STR, "by": _OPT_STR, "source": STR, "window_s": NUMBER, "margin_s": NUMBER, "age_s": NUMBER},
        refs=("evidence",),
        graph=_on_reconciled,
    ),
    KindRule(
        "context.compilation_requested",
        {"compilation": STR, "offered": list_of(DICT), "required": list_of(STR)},
        scan=("offered",),
        graph=_on_comp_requested,
    ),
    KindRule(
        "context.compiled",
        {"compilation": STR, "package": REF, "selected": list_of(STR)},
        refs=("package",),
        graph=_on_compiled,
    ),
    KindRule(
        "context.compilation_failed",
        {"compilation": STR, "error": STR, "missing": list_of(STR)},
        graph=_on_comp_failed,
    ),
):
    register(_rule)
del _rule
