"""The graph rules table: one forgery per rule, re-chained and re-sealed, rejected by all three checkers.

The table (``intentlog.projections.graph_rules.GRAPH_RULES``) states each rule once; the
library's checker applies it and ``verify_bundle.py`` carries a generated copy. Every rule
here has at least one forgery that passes the chain and the seal and is named, by the
rule, by ``verify`` on the ledger, by ``check_bundle`` and by the standalone verifier; and
the legal records the forgeries start from pass all three.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_verify_forgery import Events, at, load_verifier, read_events, rechain, reseal, tamper

import intentlog
from intentlog import ProviderDedup, UsageError
from intentlog.bundle import check_bundle, export_bundle
from intentlog.projections.graph_rules import GRAPH_RULES, MAX_DEDUP_WINDOW_S
from intentlog.projections.verify import verify_path

HOUR = 3600.0
REQ = {"amount": 4200, "to": "acme"}


def send(request: Any) -> bytes:
    return b'{"paid": true}'


# -- the legal records the forgeries start from ---------------------------------------------------


def approved(root: Path) -> None:
    """A call bound to an approval, approved, then sent and completed."""
    with intentlog.open(root) as led:
        t = led.task("t")
        call = t.prepare("pay", REQ)
        t.request_approval("pay-ok", "Pay 4200?", binds=call)
        t.decide("pay-ok", "approve", by="alice", request_hash=t.approval("pay-ok").binding)
        t.effect("pay", REQ, send)


def approved_by_digest(root: Path) -> None:
    """An approval of the request's digest before the call exists (how a turn is approved in advance)."""
    with intentlog.open(root) as led:
        t = led.task("t")
        digest = intentlog.request_hash(REQ)
        t.request_approval("pay-ok", "Pay 4200?", binds=digest)
        t.decide("pay-ok", "approve", by="alice", request_hash=digest)
        t.effect("pay", REQ, send)


def rejected(root: Path) -> None:
    """A call bound to an approval that was rejected: the runtime refuses to send."""
    with intentlog.open(root) as led:
        t = led.task("t")
        call = t.prepare("pay", REQ)
        t.request_approval("pay-ok", "Pay 4200?", binds=call)
        t.decide("pay-ok", "reject", by="alice", note="no", request_hash=t.approval("pay-ok").binding)
        with pytest.raises(intentlog.ApprovalRejected):
            t.effect("pay", REQ, send)


def _shift(ts: str, seconds: float) -> str:
    when = dt.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ") + dt.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _copy(ev: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = orjson.loads(orjson.dumps(ev))
    return out


def deduped(root: Path) -> None:
    """A call declaring a provider dedup window of an hour; attempt 1 unknown, resolved by provider_dedup and
    resent 10 minutes later (inside the window) as attempt 2, which completed. Written as the runtime would."""
    with intentlog.open(root) as led:
        led.task("t").effect("pay", REQ, send, dedup=ProviderDedup(window=HOUR, header="Idempotency-Key"))
    stream = root / "tasks" / "t.jsonl"
    events = read_events(stream)
    i = at(events, "attempt.started")
    first = events[i]
    reconciled = {
        "kind": "effect.reconciled",
        "ts": _shift(first["ts"], 599),
        "data": {
            "call": first["data"]["call"],
            "attempt": 1,
            "outcome": "provider_dedup",
            "evidence": None,
            "note": "resent under key 'pay': the provider deduplicates it for 3600 s",
            "by": None,
            "source": "provider_dedup",
            "window_s": HOUR,
            "margin_s": 180.0,
            "age_s": 599.0,
        },
    }
    second = _copy(first)
    second["data"]["attempt"] = 2
    second["ts"] = _shift(first["ts"], 600)
    rest = [_copy(e) for e in events[i + 1 :]]
    for e in rest:
        if "attempt" in e["data"]:
            e["data"]["attempt"] = 2
        e["ts"] = _shift(e["ts"], 600)
    rechain(stream, [*events[: i + 1], reconciled, second, *rest])
    reseal(root)


def named_responses(events: Events) -> Events:
    """Each attempt.interpreted names {digest, size} of the response its attempt's attempt.observed stored."""
    stored: dict[tuple[str, int], dict[str, Any]] = {}
    for e in events:
        d = e["data"]
        if e["kind"] == "attempt.observed":
            stored[(d["call"], d["attempt"])] = {"digest": d["response"]["digest"], "size": d["response"]["size"]}
        elif e["kind"] == "attempt.interpreted":
            d["response"] = stored[(d["call"], d["attempt"])]
    return events


def amount(raw: bytes) -> Any:
    return orjson.loads(raw)["paid"]


def two_interpreted_as_written(root: Path) -> None:
    """Two calls whose responses are the same size, each interpreted (the second one reinterpreted too)."""
    with intentlog.open(root) as led:
        t = led.task("t")
        t.effect("pay-a", {"to": "a"}, lambda r: b'{"paid": 1}', interpret=amount)
        t.effect("pay-b", {"to": "b"}, lambda r: b'{"paid": 2}', interpret=amount)
        t.reinterpret("pay-b", amount)


def two_interpreted(root: Path) -> None:
    """:func:`two_interpreted_as_written`, each interpretation naming the response it read."""
    two_interpreted_as_written(root)
    tamper(root, "t", named_responses)


# -- the forgeries ------------------------------------------------------------------------------------


def flip_to_reject(events: Events) -> Events:
    events[at(events, "approval.decided")]["data"]["decision"] = "reject"
    return events


def decision_after_send(events: Events) -> Events:
    decision = events.pop(at(events, "approval.decided"))
    i = at(events, "call.completed")
    decision["ts"] = events[i]["ts"]
    return [*events[: i + 1], decision, *events[i + 1 :]]


def decision_removed(events: Events) -> Events:
    del events[at(events, "approval.decided")]
    return events


def key_left_out_and_flipped(events: Events) -> Events:
    """The approval's binding loses its key (so no key seems bound) and its decision says reject."""
    del events[at(events, "approval.requested")]["data"]["binds"]["key"]
    return flip_to_reject(events)


def send_after_rejection(events: Events) -> Events:
    manifest = events[at(events, "call.manifest")]
    ts = events[-1]["ts"]
    started = {"kind": "attempt.started", "ts": ts, "data": {"call": manifest["data"]["call"], "attempt": 1}}
    return [*events, started]


def decided_for_another_request(events: Events) -> Events:
    """The approval re-requested for another request hash and approved; the call sends its own."""
    i = at(events, "approval.decided")
    other = "blake3:" + "cd" * 32
    again = _copy(events[at(events, "approval.requested")])
    again["data"]["binds"] = {"digest": other}
    again["ts"] = events[i]["ts"]
    decided = _copy(events[i])
    decided["data"]["request_hash"] = other
    return [*events[: i + 1], again, decided, *events[i + 1 :]]


def resend_two_days_late(events: Events) -> Events:
    """The resend that relied on the provider's window started two days after the first attempt."""
    i = at(events, "attempt.started", 1)
    for e in events[i:]:
        e["ts"] = _shift(e["ts"], 2 * 86400)
    return events


def third_attempt_two_days_later(events: Events) -> Events:
    """Attempt 2 (inside the window) retried: attempt 3 starts two days after the first attempt, under the same key."""
    observed = events[at(events, "attempt.observed")]
    end = at(events, "attempt.interpreted") if any(e["kind"] == "attempt.interpreted" for e in events) else None
    cut = end if end is not None else at(events, "call.completed")
    retry = {
        "kind": "attempt.retry_decided",
        "ts": observed["ts"],
        "data": {"call": observed["data"]["call"], "attempt": 2, "decision": "retry", "reason": "a 503 answer"},
    }
    third = {
        "kind": "attempt.started",
        "ts": _shift(observed["ts"], 2 * 86400),
        "data": {"call": observed["data"]["call"], "attempt": 3},
    }
    return [*events[:cut], retry, third]


def reconciled_two_hours_late(events: Events) -> Events:
    """The provider_dedup reconciliation (and all after it) two hours later: past the hour's window."""
    i = at(events, "effect.reconciled")
    for e in events[i:]:
        e["ts"] = _shift(e["ts"], 2 * HOUR)
    return events


def declaration_removed(events: Events) -> Events:
    """The manifest no longer declares a dedup window: the reconciliation rests on nothing."""
    del events[at(events, "call.manifest")]["data"]["dedup"]
    return events


def window_beyond_the_bound(events: Events) -> Events:
    """The manifest declares a window of 31 years, so a resend decades later would be 'inside' it."""
    d = events[at(events, "call.manifest")]["data"]
    d["dedup"] = {**d["dedup"], "window_s": 1e10}
    return events


def reconciled_after_completion(events: Events) -> Events:
    """A 'not_served' reconciliation of the completed call's attempt appended after its call.completed."""
    done = events[at(events, "call.completed")]
    forged = {
        "kind": "effect.reconciled",
        "ts": done["ts"],
        "data": {
            "call": done["data"]["call"],
            "attempt": done["data"]["attempt"],
            "outcome": "not_served",
            "evidence": None,
            "note": "never reached the provider",
            "by": "mallory",
            "source": "operator",
        },
    }
    return [*events, forged]


def reconciled_after_failure(events: Events) -> Events:
    """The completion replaced by an operator's call.failed, then a 'resend' reconciliation after it."""
    i = at(events, "call.completed")
    done = events[i]
    failed = {
        "kind": "call.failed",
        "ts": done["ts"],
        "data": {"call": done["data"]["call"], "reason": "gave up", "by": "op"},
    }
    forged = reconciled_after_completion([done])[-1]
    forged["data"]["outcome"] = "resend"
    return [*events[:i], failed, forged]


def attempt_after_completion(events: Events) -> Events:
    """A second attempt of the completed call appended after its call.completed, with a retry decision before it."""
    done = events[at(events, "call.completed")]
    call, n = done["data"]["call"], done["data"]["attempt"]
    retry = {
        "kind": "attempt.retry_decided",
        "ts": done["ts"],
        "data": {"call": call, "attempt": n, "decision": "retry", "reason": "a 503 answer"},
    }
    started = {"kind": "attempt.started", "ts": done["ts"], "data": {"call": call, "attempt": n + 1}}
    return [*events, retry, started]


def attempt_after_failure(events: Events) -> Events:
    """The completion replaced by an operator's call.failed, then another attempt of the call."""
    i = at(events, "call.completed")
    done = events[i]
    failed = {
        "kind": "call.failed",
        "ts": done["ts"],
        "data": {"call": done["data"]["call"], "reason": "gave up", "by": "op"},
    }
    started = {"kind": "attempt.started", "ts": done["ts"], "data": {"call": done["data"]["call"], "attempt": 2}}
    return [*events[:i], failed, started]


def completion_repeated(events: Events) -> Events:
    """The call.completed line repeated right after itself, without 'reinterpretation'."""
    i = at(events, "call.completed")
    return [*events[: i + 1], _copy(events[i]), *events[i + 1 :]]


def completion_repeated_at_the_end(events: Events) -> Events:
    """A copy of the call.completed appended as the stream's last line."""
    return [*events, _copy(events[at(events, "call.completed")])]


def responses_swapped(events: Events) -> Events:
    """The two calls' attempt.observed trade their (same-size) responses; the interpretations stay as they were."""
    first, second = at(events, "attempt.observed"), at(events, "attempt.observed", 1)
    a, b = events[first]["data"], events[second]["data"]
    a["response"], b["response"] = b["response"], a["response"]
    return events


def response_named_unobserved(events: Events) -> Events:
    """The reinterpretation names the response of the other call (its own call's observation is untouched)."""
    i = at(events, "attempt.interpreted", 2)
    events[i]["data"]["response"] = _copy(events[at(events, "attempt.observed")])["data"]["response"]
    return events


def idioms_record(root: Path) -> None:
    """A recorded value, a sleep that woke, an event received and a wait that timed out, as the runtime writes them."""
    with intentlog.open(root) as led:
        t = led.task("t")
        t.value("seed", lambda: 7)
        t.sleep_for(0, name="nap")
        led.signal("t", "review", {"ok": True}, event_id="r-1")
        t.wait_for_event("review")
        with pytest.raises(intentlog.EventTimedOut):
            t.wait_for_event("late", timeout=0)


def value_recorded_again(events: Events) -> Events:
    """A second task.value_recorded of the same name with another value, appended at the end."""
    extra = _copy(events[at(events, "task.value_recorded")])
    extra["data"]["value"] = 8
    return [*events, extra]


def woke_before_its_wake_time(events: Events) -> Events:
    """The sleep's recorded wake time moved an hour later: it woke before it."""
    d = events[at(events, "task.sleep_started")]["data"]
    d["until"] = _shift(d["until"], HOUR)
    return events


def woke_twice(events: Events) -> Events:
    """The task.woke repeated at the end."""
    return [*events, _copy(events[at(events, "task.woke")])]


def received_twice(events: Events) -> Events:
    """The task.event_received repeated at the end: a wait with two outcomes."""
    return [*events, _copy(events[at(events, "task.event_received")])]


def received_never_awaited(events: Events) -> Events:
    """The event_awaited of the received event removed."""
    i = at(events, "task.event_awaited")
    return [*events[:i], *events[i + 1 :]]


def timed_out_before_its_deadline(events: Events) -> Events:
    """The wait's deadline moved an hour later in both records: the timeout came before it."""
    for kind in ("task.event_awaited", "task.event_timed_out"):
        i = at(events, kind, 1) if kind == "task.event_awaited" else at(events, kind)
        events[i]["data"]["deadline"] = _shift(events[i]["data"]["deadline"], HOUR)
    return events


def timed_out_at_another_deadline(events: Events) -> Events:
    """The timeout names a deadline its wait never recorded (a minute earlier)."""
    d = events[at(events, "task.event_timed_out")]["data"]
    d["deadline"] = _shift(d["deadline"], -60)
    return events


Forgery = tuple[Callable[[Path], None], Callable[[Events], Events]]
#: rule name -> forgeries of that rule (each starts from a legal record)
FORGERIES: dict[str, dict[str, Forgery]] = {
    "approved_before_send": {
        "decision flipped to reject": (approved, flip_to_reject),
        "decision moved after the send": (approved, decision_after_send),
        "decision deleted": (approved, decision_removed),
        "digest approval flipped to reject": (approved_by_digest, flip_to_reject),
        "the binding's key left out, the decision flipped": (approved, key_left_out_and_flipped),
        "an attempt added after a rejection": (rejected, send_after_rejection),
        "the approval re-bound to another request": (approved, decided_for_another_request),
    },
    "reconciled_inside_dedup_window": {
        "reconciliation two hours after the first attempt": (deduped, reconciled_two_hours_late),
        "the manifest's declaration removed": (deduped, declaration_removed),
        "a declared window beyond the bound": (deduped, window_beyond_the_bound),
    },
    "resend_inside_dedup_window": {
        "resend two days after the first attempt": (deduped, resend_two_days_late),
        "a third attempt two days after a resend inside the window": (deduped, third_attempt_two_days_later),
        "a declared window beyond the bound": (deduped, window_beyond_the_bound),
    },
    "completed_once": {
        "the completion repeated": (approved, completion_repeated),
        "the completion repeated at the end": (approved, completion_repeated_at_the_end),
    },
    "started_while_open": {
        "an attempt appended after the call completed": (approved, attempt_after_completion),
        "an attempt appended after the call failed": (approved, attempt_after_failure),
    },
    "reconciled_while_open": {
        "a reconciliation appended after the call completed": (approved, reconciled_after_completion),
        "a reconciliation appended after the call failed": (approved, reconciled_after_failure),
    },
    "interpreted_its_response": {
        "two same-size responses swapped between calls": (two_interpreted, responses_swapped),
        "a reinterpretation naming another call's response": (two_interpreted, response_named_unobserved),
    },
    "value_recorded_once": {
        "a value recorded again with another value": (idioms_record, value_recorded_again),
    },
    "woke_after_wake_time": {
        "a wake time moved after the waking": (idioms_record, woke_before_its_wake_time),
        "a sleep woken twice": (idioms_record, woke_twice),
    },
    "event_outcome_once": {
        "an event received twice": (idioms_record, received_twice),
        "an event received but never awaited": (idioms_record, received_never_awaited),
    },
    "timed_out_after_deadline": {
        "a deadline moved after the timeout": (idioms_record, timed_out_before_its_deadline),
        "a timeout naming another deadline": (idioms_record, timed_out_at_another_deadline),
    },
}
CASES = [(rule, name) for rule in sorted(FORGERIES) for name in sorted(FORGERIES[rule])]


def three_verdicts(root: Path, tmp_path: Path) -> tuple[list[str], list[str], list[str]]:
    """Errors of verify on the ledger, of check_bundle and of verify_bundle.py on a bundle of it."""
    bundle = tmp_path / "bundle"
    export_bundle(root, out=bundle, check=False)
    reseal(bundle)
    ledger = [p.render() for p in verify_path(root).problems if p.severity == "error"]
    library = [p.render() for p in check_bundle(bundle).problems if p.severity != "info"]
    v = load_verifier().Verifier(str(bundle), inventory=True)
    v.run()
    independent = [f"{c.text} :: {' | '.join(c.details)}" for c in v.claims if c.status == "FAIL"]
    return ledger, library, independent


def test_every_rule_of_the_table_has_a_forgery_here() -> None:
    """A rule added to the table without a forgery fails here."""
    assert sorted(FORGERIES) == sorted(r.name for r in GRAPH_RULES)


@pytest.mark.parametrize(
    "base", [approved, approved_by_digest, rejected, deduped, two_interpreted, idioms_record], ids=lambda f: f.__name__
)
def test_the_legal_records_pass_all_three(base: Callable[[Path], None], tmp_path: Path) -> None:
    """The records the forgeries start from (re-chained and re-sealed unchanged) pass every checker."""
    root = tmp_path / "ev"
    base(root)
    tamper(root, "t", lambda ev: ev)
    assert three_verdicts(root, tmp_path) == ([], [], [])


@pytest.mark.parametrize(("rule", "name"), CASES)
def test_each_rules_forgery_is_rejected_by_all_three(rule: str, name: str, tmp_path: Path) -> None:
    """Re-chained and re-sealed, so chain and seal hold; each checker names the rule it breaks."""
    base, edit = FORGERIES[rule][name]
    root = tmp_path / "ev"
    base(root)
    tamper(root, "t", edit)
    report = verify_path(root)
    assert not report.by_code("chain") and not report.by_code("heads"), report.render()
    for said in three_verdicts(root, tmp_path):
        assert any(f"[{rule}]" in line for line in said), (rule, name, said)


def test_a_window_beyond_the_bound_is_refused_by_the_runtime() -> None:
    """ProviderDedup refuses a window longer than any provider keeps keys (a resend decades later)."""
    with pytest.raises(UsageError, match="window"):
        ProviderDedup(window=1e10)
    with pytest.raises(UsageError, match="window"):
        ProviderDedup(window=MAX_DEDUP_WINDOW_S + 1)
    assert ProviderDedup(window=MAX_DEDUP_WINDOW_S).window_s == MAX_DEDUP_WINDOW_S
    assert ProviderDedup(window=dt.timedelta(hours=24)).window_s == 86400.0


def test_both_verifiers_implement_exactly_the_table() -> None:
    """The library registers one check per rule of the table, and verify_bundle.py carries the same table."""
    from intentlog.projections.graph_rules import CHECKS

    names = [r.name for r in GRAPH_RULES]
    assert sorted(CHECKS) == sorted(names)
    mod = load_verifier()
    assert [(n, k, s) for n, k, s in mod.GRAPH_RULES] == [(r.name, r.kind, r.statement) for r in GRAPH_RULES]
    assert all(callable(getattr(mod.Graph, f"rule_{n}", None)) for n in names)
    assert mod.MAX_DEDUP_WINDOW_S == MAX_DEDUP_WINDOW_S


def test_the_standalone_verifier_fails_closed_on_a_rule_it_cannot_check(tmp_path: Path) -> None:
    """A table row without a check in verify_bundle.py fails every event of its kind, never passes it silently."""
    root = tmp_path / "ev"
    approved(root)
    bundle = tmp_path / "bundle"
    export_bundle(root, out=bundle)
    mod = load_verifier()
    mod.GRAPH_RULES = (*mod.GRAPH_RULES, ("no_such_rule", "attempt.started", "a rule from a newer table"))
    v = mod.Verifier(str(bundle), inventory=True)
    v.run()
    failed = [d for c in v.claims if c.status == "FAIL" for d in c.details]
    assert any("[no_such_rule]" in d and "no check" in d for d in failed), failed


def test_interpretations_that_name_no_response_stay_valid(tmp_path: Path) -> None:
    """Records written before interpretations named their response lack the field: they pass all three, and the
    rule has nothing to compare (so a swap there is not seen: only an anchored copy shows it)."""

    def unnamed(events: Events) -> Events:
        for e in events:
            if e["kind"] == "attempt.interpreted":
                e["data"].pop("response", None)
        return events

    root = tmp_path / "ev"
    two_interpreted(root)
    tamper(root, "t", unnamed)
    events = read_events(root / "tasks" / "t.jsonl")
    assert [e for e in events if e["kind"] == "attempt.interpreted" and "response" in e["data"]] == []
    assert three_verdicts(root, tmp_path / "unnamed") == ([], [], [])
    tamper(root, "t", responses_swapped)
    assert three_verdicts(root, tmp_path / "swapped") == ([], [], [])


def test_an_interpretation_names_the_response_it_read(tmp_path: Path) -> None:
    """Every attempt.interpreted, the reinterpretation too, records {digest, size} of its attempt's observed bytes."""
    root = tmp_path / "ev"
    two_interpreted_as_written(root)
    events = read_events(root / "tasks" / "t.jsonl")
    stored = {
        e["data"]["call"]: {k: e["data"]["response"][k] for k in ("digest", "size")}
        for e in events
        if e["kind"] == "attempt.observed"
    }
    named = [(e["data"]["call"], e["data"]["response"]) for e in events if e["kind"] == "attempt.interpreted"]
    assert named == [("call-1", stored["call-1"]), ("call-2", stored["call-2"]), ("call-2", stored["call-2"])]
    assert stored["call-1"] != stored["call-2"] and stored["call-1"]["size"] == stored["call-2"]["size"]
