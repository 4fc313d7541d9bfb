"""Graph rules for calls and their attempts: every attempt has a call with a manifest, every
observation an attempt, every completion an observation, every resume links two calls of one key.

Each rule reads the :class:`~intentlog.projections.graph.TaskGraph`, updates it and yields
:class:`~intentlog.projections.fields.Finding` values; pure, never raises for bad data.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .derive import completion_token, interpretation_token
from .fields import Finding, is_ref, show
from .graph import CallNode, TaskGraph

# -- graph rules: calls --------------------------------------------------------------


def on_requested(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
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


def on_manifest(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
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


def on_preparation_failed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = g.call(d)
    if isinstance(node, Finding):
        yield node
        return
    if node.manifest:
        yield Finding("graph", f"{node.call} failed preparation after its manifest was recorded")
    node.preparation_failed = True


def on_resumed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
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


def _gone_on(g: TaskGraph, node: CallNode) -> Iterator[Finding]:
    """A reconciliation's pending observation is legal only while nothing else of its call follows."""
    tag = f"evidence:{node.call}:{node.attempt}"
    if g.expects(tag):
        g.fulfil(tag)
        yield Finding(
            "graph", f"effect.reconciled 'served' of {node.call} carries evidence, but the call goes on without "
            "the attempt.observed {source: 'reconciliation'} naming those bytes"
        )


def on_attempt_started(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = g.call(d)
    if isinstance(node, Finding):
        yield node
        return
    yield from _gone_on(g, node)
    n = d["attempt"]
    if not node.manifest:
        yield Finding(
            "graph",
            f"attempt {n} of {node.call} started, but the call has no call.manifest: the intent was never recorded",
        )
    # an attempt after the call ended: judged by the table's started_while_open (graph_rules.py)
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


def on_not_sent(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node
        return
    if d["attempt"] in node.observed:
        yield Finding("graph", f"attempt {d['attempt']} of {node.call} is recorded not sent after an observation")
    node.settled = node.outcome = True


def on_errored(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node


def on_observed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
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


def on_interpreted(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    if sum(k in d for k in ("result", "result_ref", "error")) != 1:
        yield Finding("shape", "carries not exactly one of 'result', 'result_ref' and 'error'")
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node
        return
    yield from _gone_on(g, node)
    if d["attempt"] not in node.observed:
        yield Finding("graph", f"attempt {d['attempt']} of {node.call} is interpreted but was never observed")
    node.interpretation = (d["attempt"], interpretation_token(d))


def on_retry_decided(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = _attempt_of(g, d)
    if isinstance(node, Finding):
        yield node
        return
    yield from _gone_on(g, node)
    if not node.outcome:
        yield Finding(
            "graph", f"a retry decision for attempt {d['attempt']} of {node.call}, whose effect is unknown "
            "(no observation, not-sent record or reconciliation): reconcile before deciding"
        )
    node.settled = d["decision"] == "retry"


def on_reconciled(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
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
    if d["outcome"] == "provider_dedup":  # judged by the table's reconciled_inside_dedup_window (graph_rules.py)
        node.dedup_relied = True
    if d["evidence"] is not None:
        g.expect(
            f"evidence:{node.call}:{d['attempt']}",
            seq,
            Finding(
                "observation_pending",
                f"effect.reconciled 'served' of {node.call} carries evidence, and no attempt.observed "
                "{source: 'reconciliation'} follows it yet (a crash between the two lines leaves this; the "
                "evidence is in objects/): the next run of the call records the observation",
                "info",
            ),
        )


def on_completed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = g.call(d)
    if isinstance(node, Finding):
        yield node
        return
    yield from _gone_on(g, node)
    n = d["attempt"]
    # a second completion that does not say reinterpretation: the table's completed_once (graph_rules.py)
    if n not in node.observed:
        yield Finding(
            "graph", f"{node.call} completes with attempt {n}, which has no attempt.observed: a result from nowhere"
        )
    elif n != node.attempt:
        yield Finding("graph", f"{node.call} completes with attempt {n}, but attempt {node.attempt} started after it")
    else:
        yield from _derivable(node, n, d["result"])
    node.completed = True


def _derivable(node: CallNode, n: int, result: Any) -> Iterator[Finding]:
    """A completion carries only what the events before it hold (issue 12 item 6).

    ``{"value": V}``: V is, byte for byte as canonical JSON, the result of the most recent
    ``attempt.interpreted`` of this attempt that no completion consumed yet.
    ``{"raw": true, "response": ref}``: ref names the bytes this attempt's observation stored.
    """
    carried = completion_token(result)
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
                "forgery", f"{node.call} completes attempt {n} with the raw response {show(ref)}, which is not the "
                "response its attempt.observed stored: the completion was edited"
            )
    else:
        yield Finding(
            "shape",
            "result must be {'value': V}, {'value_ref': ref} or {'raw': true, 'response': ref}, "
            f"not {show(result)}",
        )


def on_failed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    node = g.call(d)
    if isinstance(node, Finding):
        yield node
        return
    if node.completed:
        yield Finding("graph", f"{node.call} is recorded failed after it completed")
    node.failed = True



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


def on_progress(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    yield from _open_attempt(g, d, "a heartbeat")


def on_timed_out(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    found = list(_open_attempt(g, d, "a timeout"))
    yield from found
    node = g.calls.get(d["call"])
    if node is not None and not found:
        node.timed_out = True
    if d["after"] < 0 or d["timeout"] <= 0:
        yield Finding("shape", "after must be >= 0 and timeout > 0 seconds")
