"""Reconciling an unknown effect (DESIGN §5): recorded answers, never assumptions.

An attempt that started and left nothing after it may or may not have been served. Only
a recorded reconciliation -- by an operator, or by a provider ``lookup`` -- moves such a
call on; everything else about it is refused, and a refusal appends nothing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from effect_child import KEY, TASK, Killed, disk_events, request, review, snapshot

import intentlog
from intentlog import EffectUnknown, ResumeRefused, Served, UnknownCall, UsageError
from intentlog.artifacts.inline import INLINE_MAX
from intentlog.demo.provider import SyntheticProvider, read_receipts

REQ = {"model": "m", "prompt": "p"}


def send_dies(request: Any) -> bytes:
    raise Killed("died while the provider held the request")


def never(request: Any) -> bytes:
    raise AssertionError("send must not be called")


class Counting:
    def __init__(self, answer: bytes = b'{"v": 1}') -> None:
        self.answer = answer
        self.sent = 0

    def __call__(self, request: Any) -> bytes:
        self.sent += 1
        return self.answer


def parse(raw: bytes) -> Any:
    return orjson.loads(raw)


def unknown(ledger: intentlog.Ledger, key: str = "k") -> intentlog.Task:
    """A task whose call for ``key`` started and left nothing after it; reopened as a new process would."""
    task = ledger.task("t")
    with pytest.raises(Killed):
        task.effect(key, REQ, send_dies)
    task.close()
    return intentlog.open(ledger.root).task("t")


def events(ledger: intentlog.Ledger, kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in disk_events(ledger.root / "tasks" / "t.jsonl") if e["kind"] == kind]


def test_not_served_makes_the_next_attempt_safe(ledger: intentlog.Ledger) -> None:
    """Reconciled not_served: the next run sends attempt 2 of the same call and completes it."""
    task = unknown(ledger)
    ev = task.reconcile("call-1", "not_served", note="no request in the provider's log", by="ops")
    assert ev.kind == "effect.reconciled"
    provider = Counting()
    assert task.effect("k", REQ, provider, interpret=parse) == {"v": 1}
    assert provider.sent == 1
    rec = events(ledger, "effect.reconciled")
    assert rec == [
        {
            "call": "call-1",
            "attempt": 1,
            "outcome": "not_served",
            "evidence": None,
            "note": "no request in the provider's log",
            "by": "ops",
            "source": "operator",
        }
    ]
    assert [d["attempt"] for d in events(ledger, "attempt.started")] == [1, 2]
    st = intentlog.open(ledger.root).task("t").work_state().calls["call-1"]
    assert (st.stage, st.attempts) == ("completed", 2)


def test_served_with_bytes_continues_as_observed_and_sends_nothing(ledger: intentlog.Ledger) -> None:
    """Reconciled served with the response bytes: an observation from the reconciliation, then reinterpretation."""
    task = unknown(ledger)
    task.reconcile("call-1", "served", evidence=b'{"v": "from the dashboard"}')
    observed = events(ledger, "attempt.observed")
    assert observed[0]["source"] == "reconciliation" and observed[0]["attempt"] == 1
    st = task.work_state().calls["call-1"]
    assert (st.stage, st.next_operation, st.provider_effect) == ("observed", "reinterpret", "happened")
    assert task.effect("k", REQ, never, interpret=parse) == {"v": "from the dashboard"}
    assert events(ledger, "effect.reconciled")[0]["evidence"]["digest"] == observed[0]["response"]["digest"]


def test_large_evidence_is_a_blob_durable_before_the_reconciliation(ledger: intentlog.Ledger) -> None:
    """Evidence over 4 KiB goes to objects/; raw replay returns exactly those bytes."""
    task = unknown(ledger)
    body = b"z" * (INLINE_MAX * 2)
    task.reconcile("call-1", "served", evidence=body)
    ref = events(ledger, "effect.reconciled")[0]["evidence"]
    hexd = ref["digest"].split(":", 1)[1]
    assert (ledger.root / "objects" / hexd[:2] / hexd[2:]).read_bytes() == body
    assert task.effect("k", REQ, never) == body


def test_served_without_bytes_waits_for_an_operator_then_resend_accepts_the_risk(ledger: intentlog.Ledger) -> None:
    """Served but the response lost: runs are refused; 'resend' records the accepted duplicate risk, then sends."""
    task = unknown(ledger)
    task.reconcile("call-1", "served")
    st = task.work_state().calls["call-1"]
    assert (st.stage, st.next_operation, st.provider_effect) == ("reconciled_served", "operator decides", "happened")
    before = snapshot(ledger.root)
    with pytest.raises(ResumeRefused) as info:
        task.effect("k", REQ, never)
    assert not isinstance(info.value, EffectUnknown)
    assert info.value.next_operation == "operator decides"
    assert snapshot(ledger.root) == before
    task.reconcile("call-1", "resend", note="accepting a second charge", by="ops")
    st = task.work_state().calls["call-1"]
    assert (st.stage, st.next_operation, st.duplicate_effect_risk) == ("risk_accepted", "start next attempt", True)
    provider = Counting(b"again")
    assert task.effect("k", REQ, provider) == b"again"
    assert provider.sent == 1
    assert [d["outcome"] for d in events(ledger, "effect.reconciled")] == ["served", "resend"]


def test_resend_straight_from_unknown_is_the_explicit_accepted_risk(ledger: intentlog.Ledger) -> None:
    """'resend' on an unknown effect records the decision; only then does a run send again."""
    task = unknown(ledger)
    task.reconcile("call-1", "resend", by="ops")
    provider = Counting()
    task.effect("k", REQ, provider)
    assert provider.sent == 1
    assert events(ledger, "effect.reconciled")[0]["outcome"] == "resend"


def test_an_operator_can_fail_an_unknown_call(ledger: intentlog.Ledger) -> None:
    """task.fail records call.failed; the call then raises CallFailed and sends nothing."""
    task = unknown(ledger)
    task.fail("call-1", "charged once; not worth a second try", by="ops")
    with pytest.raises(intentlog.CallFailed):
        task.effect("k", REQ, never)
    assert events(ledger, "call.failed") == [
        {"call": "call-1", "reason": "charged once; not worth a second try", "by": "ops"}
    ]
    with pytest.raises(ResumeRefused):
        task.fail("call-1", "again")


def test_reconciling_a_call_whose_effect_is_known_is_refused(ledger: intentlog.Ledger) -> None:
    """Completed, prepared or unknown calls cannot be reconciled; bad arguments are refused; nothing is appended."""
    task = ledger.task("t")
    task.effect("done", REQ, Counting())
    task.prepare("prepared", {"q": 2})
    before = snapshot(ledger.root)
    for cid, stage in (("call-1", "completed"), ("call-2", "manifest_recorded")):
        with pytest.raises(ResumeRefused) as info:
            task.reconcile(cid, "not_served")
        assert info.value.call_id == cid and stage in str(info.value)
    with pytest.raises(UnknownCall):
        task.reconcile("call-99", "served")
    assert snapshot(ledger.root) == before
    task.close()
    task = unknown(ledger, "u")
    before = snapshot(ledger.root)
    with pytest.raises(UsageError):
        task.reconcile("call-3", "maybe")
    with pytest.raises(UsageError):
        task.reconcile("call-3", "not_served", evidence=b"x")
    with pytest.raises(UsageError):
        task.reconcile("call-3", "served", evidence="text")  # type: ignore[arg-type]
    assert snapshot(ledger.root) == before


# -- lookup ------------------------------------------------------------------------------


def test_a_lookup_that_cannot_tell_changes_nothing(ledger: intentlog.Ledger) -> None:
    """lookup returning None: EffectUnknown as before, and nothing is appended."""
    task = unknown(ledger)
    asked: list[tuple[str, str, int]] = []

    def lookup(key: str, call_id: str, attempt: int) -> None:
        asked.append((key, call_id, attempt))
        return None

    before = snapshot(ledger.root)
    with pytest.raises(EffectUnknown):
        task.effect("k", REQ, never, lookup=lookup)
    assert asked == [("k", "call-1", 1)]
    assert snapshot(ledger.root) == before


def test_a_lookup_answer_is_recorded_with_source_lookup(ledger: intentlog.Ledger) -> None:
    """lookup answering not_served: recorded as a reconciliation from 'lookup', then the next attempt is sent."""
    task = unknown(ledger)
    provider = Counting()
    assert task.effect("k", REQ, provider, lookup=lambda k, c, a: "not_served") == b'{"v": 1}'
    assert provider.sent == 1
    rec = events(ledger, "effect.reconciled")[0]
    assert (rec["outcome"], rec["source"]) == ("not_served", "lookup")


def test_a_lookup_that_finds_the_response_reinterprets_it(ledger: intentlog.Ledger) -> None:
    """lookup answering Served(bytes): recorded, observed from the reconciliation, interpreted; nothing is sent."""
    task = unknown(ledger)
    result = task.effect("k", REQ, never, interpret=parse, lookup=lambda k, c, a: Served(b'{"v": "kept"}'))
    assert result == {"v": "kept"}
    rec = events(ledger, "effect.reconciled")[0]
    assert (rec["outcome"], rec["source"]) == ("served", "lookup")
    assert events(ledger, "attempt.observed")[0]["source"] == "reconciliation"


def test_a_lookup_that_knows_only_it_was_served_leaves_it_to_an_operator(ledger: intentlog.Ledger) -> None:
    """lookup answering Served() without bytes: recorded, then refused for an operator to decide."""
    task = unknown(ledger)
    with pytest.raises(ResumeRefused) as info:
        task.effect("k", REQ, never, lookup=lambda k, c, a: Served())
    assert info.value.next_operation == "operator decides"
    assert events(ledger, "effect.reconciled")[0]["source"] == "lookup"


def test_a_lookup_with_a_nonsense_answer_is_refused_and_appends_nothing(ledger: intentlog.Ledger) -> None:
    """An answer that is neither Served, 'not_served' nor None is a UsageError, recorded nowhere."""
    task = unknown(ledger)
    before = snapshot(ledger.root)
    with pytest.raises(UsageError):
        task.effect("k", REQ, never, lookup=lambda k, c, a: True)
    assert snapshot(ledger.root) == before


# -- after a real kill ---------------------------------------------------------------------


def test_reconciling_after_a_real_kill_resumes_with_exactly_one_more_receipt(tmp_path: Path) -> None:
    """A producer SIGKILLed while the provider held the request; reconciled not_served; the resume sends once."""
    root, receipts = tmp_path / "ledger", tmp_path / "receipts.jsonl"
    child = str(Path(__file__).with_name("effect_child.py"))
    proc = subprocess.Popen([sys.executable, child, str(root), str(receipts), "--hold", "30"])
    deadline = time.monotonic() + 30
    while not read_receipts(receipts):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    proc.kill()
    assert proc.wait(30) == -signal.SIGKILL
    with intentlog.open(root) as ledger:
        task = ledger.task(TASK)
        st = task.work_state().calls["call-1"]
        assert st.stage == "effect_unknown"
        # the operator looked at the provider's log: it was served, but the answer is lost -> accept the risk
        task.reconcile("call-1", "resend", note="provider log shows 1 receipt, answer lost", by="ops")
        provider = SyntheticProvider(receipts)
        result = task.effect(KEY, request("model-a"), provider.send, interpret=review)
        assert result["verdict"] == "accept"
    assert len(read_receipts(receipts)) == 2  # the accepted, recorded duplicate
    ws = intentlog.open(root).task(TASK).work_state()
    assert ws.calls["call-1"].stage == "completed" and ws.calls["call-1"].attempts == 2
