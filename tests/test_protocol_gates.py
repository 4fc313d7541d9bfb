"""The protocol's gates: an approval gates the send it binds; intent is checked from the first event.

Sends are counted in the provider's own fsync'd receipt log, never in the ledger.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from effect_child import disk_events, snapshot

import intentlog
from intentlog.demo.provider import SyntheticProvider, read_receipts
from intentlog.errors import ApprovalPending, ApprovalRejected, ApprovalVoid, ResumeRefused
from intentlog.projections.verify import verify_ledger

DRIFT = "DRIFT"


def provider(tmp_path: Path) -> SyntheticProvider:
    return SyntheticProvider(tmp_path / "receipts.jsonl")


def sends(tmp_path: Path) -> int:
    return len(read_receipts(tmp_path / "receipts.jsonl"))


def pay(amount: int) -> dict[str, Any]:
    return {"amount": amount, "to": "acme"}


def approved_setup(ledger: intentlog.Ledger, decision: str | None, note: str | None = None) -> intentlog.Task:
    task = ledger.task("deploy")
    call = task.prepare("pay-5", pay(5))
    task.request_approval("pay-ok", "Pay 5 EUR?", binds=call)
    if decision is not None:
        task.decide("pay-ok", decision, by="alice", note=note)
    return task


def test_an_approved_call_is_sent_once(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """With the bound approval approved for the current request, the effect runs: one receipt, completed."""
    task = approved_setup(ledger, "approve")
    task.effect("pay-5", pay(5), provider(tmp_path).send)
    assert sends(tmp_path) == 1
    assert task.work_state().call_for_key("pay-5").stage == "completed"  # type: ignore[union-attr]
    assert verify_ledger(ledger).ok


@pytest.mark.parametrize(
    ("decision", "error", "words"),
    [
        ("reject", ApprovalRejected, ["rejected by alice", "over budget"]),
        (None, ApprovalPending, ["not decided yet", "intentlog approve deploy pay-ok"]),
    ],
)
def test_a_rejected_or_pending_approval_stops_the_send(
    ledger: intentlog.Ledger, tmp_path: Path, decision: str | None, error: type[Exception], words: list[str]
) -> None:
    """A rejected approval raises ApprovalRejected (who, why), a pending one ApprovalPending; nothing is appended,
    the provider receives nothing -- from this process and from a fresh one."""
    task = approved_setup(ledger, decision, note="over budget")
    before = snapshot(ledger.root)
    with pytest.raises(error) as info:
        task.effect("pay-5", pay(5), provider(tmp_path).send)
    for w in words:
        assert w in str(info.value)
    if isinstance(info.value, ApprovalRejected):
        assert (info.value.decision, info.value.by, info.value.note) == ("reject", "alice", "over budget")
        assert isinstance(info.value, ResumeRefused)
    assert snapshot(ledger.root) == before
    ledger.close()
    again = intentlog.open(ledger.root)
    with pytest.raises(error):
        again.task("deploy").effect("pay-5", pay(5), provider(tmp_path).send)
    assert snapshot(ledger.root) == before
    assert sends(tmp_path) == 0
    kinds = [e["kind"] for e in disk_events(ledger.root / "tasks" / "deploy.jsonl")]
    assert "attempt.started" not in kinds


def test_a_rejected_approval_is_visible_in_status(ledger: intentlog.Ledger) -> None:
    """After a rejection, status does not claim the record proves starting the call safe."""
    approved_setup(ledger, "reject", note="over budget")
    ledger.close()
    st = intentlog.open(ledger.root).task("deploy").status()
    assert "will start call" not in st.next_step, st.next_step
    assert st.state == "paused for review"
    assert "approval 'pay-ok' rejected by alice: over budget" in (st.reason or "")
    assert "intentlog fail deploy call-1" in st.next_step


def test_a_void_approval_stops_the_send(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """Approved for pay-5, then the approval is requested again for pay-7: pay-5's approval is void (the hash it
    now binds is named), pay-7's is pending; neither is sent, nothing is appended by the refusals."""
    task = approved_setup(ledger, "approve")
    seven = task.prepare("pay-7", pay(7))
    task.request_approval("pay-ok", "Pay 7 EUR?", binds=seven)
    before = snapshot(ledger.root)
    with pytest.raises(ApprovalVoid) as info:
        task.effect("pay-5", pay(5), provider(tmp_path).send)
    assert seven.request_hash in str(info.value)
    assert intentlog.request_hash(pay(5)) in str(info.value)
    with pytest.raises(ApprovalPending):
        task.effect("pay-7", pay(7), provider(tmp_path).send)
    assert snapshot(ledger.root) == before
    assert sends(tmp_path) == 0
    task.decide("pay-ok", "approve", by="bob")
    task.effect("pay-7", pay(7), provider(tmp_path).send)
    assert sends(tmp_path) == 1
    with pytest.raises(ApprovalVoid):
        task.effect("pay-5", pay(5), provider(tmp_path).send)
    assert sends(tmp_path) == 1
    assert verify_ledger(ledger).ok


def test_an_approval_gates_the_next_attempt_too(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """A retry after a failure starts a new attempt: it too needs the approval (rejected after the first try)."""
    task = ledger.task("deploy")
    call = task.prepare("pay-5", pay(5))
    task.request_approval("pay-ok", "Pay 5 EUR?", binds=call)
    task.decide("pay-ok", "approve", by="alice")

    def not_sent(request: Any) -> bytes:
        raise intentlog.NotSent("connection refused")

    with pytest.raises(intentlog.RetryHandedBack):
        call.run(not_sent, retry=intentlog.RetryPolicy(hand_back=True))
    # a changed request for the same key is refused as drift, so the approval can only be replaced by re-binding
    other = task.prepare("pay-6", pay(6))
    task.request_approval("pay-ok", "Pay 6 EUR?", binds=other)
    before = snapshot(ledger.root)
    with pytest.raises(ApprovalVoid):
        task.effect("pay-5", pay(5), provider(tmp_path).send)
    assert snapshot(ledger.root) == before and sends(tmp_path) == 0


# -- intent checked from the first event --------------------------------------------

KILL_AFTER_REQUESTED = """
import os, signal, sys
import intentlog
from intentlog.stream import TaskStream

real = TaskStream.append

def append(self, kind, data, **kw):
    ev = real(self, kind, data, **kw)
    if kind == "call.requested":
        self.sync()
        os.kill(os.getpid(), signal.SIGKILL)
    return ev

TaskStream.append = append
task = intentlog.open(sys.argv[1]).task("t")
task.effect("k", {"model": "m", "prompt": sys.argv[2]}, send=lambda r: b"never")
"""


def test_a_run_killed_after_call_requested_refuses_a_changed_request(ledger_root: Path, tmp_path: Path) -> None:
    """SIGKILL right after call.requested (no manifest); a re-run with another request is ResumeRefused(DRIFT)
    naming both hashes, appends nothing and sends nothing; the same request resumes and is sent once."""
    intentlog.open(ledger_root).close()
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_REQUESTED, str(ledger_root), "first"], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    events = disk_events(ledger_root / "tasks" / "t.jsonl")
    assert [e["kind"] for e in events] == ["task.created", "call.requested"]
    recorded = intentlog.request_hash({"model": "m", "prompt": "first"})
    assert events[1]["data"]["request_hash"] == recorded
    before = snapshot(ledger_root)
    led = intentlog.open(ledger_root)
    task = led.task("t")
    changed = {"model": "m", "prompt": "second"}
    with pytest.raises(ResumeRefused) as info:
        task.effect("k", changed, provider(tmp_path).send)
    assert info.value.reason == DRIFT
    assert recorded in str(info.value) and intentlog.request_hash(changed) in str(info.value)
    assert snapshot(ledger_root) == before
    assert sends(tmp_path) == 0
    task.effect("k", {"model": "m", "prompt": "first"}, provider(tmp_path).send)
    assert sends(tmp_path) == 1
    assert verify_ledger(led).ok


def test_drift_names_the_first_differing_path(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """Once the manifest's bytes are recorded, DRIFT names where the rebuilt request first differs."""
    task = ledger.task("t")
    req = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "temperature": 0}
    task.prepare("k", req)
    before = snapshot(ledger.root)
    changed = {**req, "messages": [{"role": "user", "content": "hello!"}]}
    with pytest.raises(ResumeRefused) as info:
        task.effect("k", changed, provider(tmp_path).send)
    assert info.value.reason == DRIFT
    assert "$.messages[0].content: recorded 'hello', now 'hello!'" in str(info.value)
    assert snapshot(ledger.root) == before and sends(tmp_path) == 0
    done = ledger.task("done")
    done.effect("k", req, provider(tmp_path).send)
    with pytest.raises(ResumeRefused, match=r"\$\.temperature: recorded 0, now 1"):
        done.effect("k", {**req, "temperature": 1}, provider(tmp_path).send)
    assert sends(tmp_path) == 1
    os.environ.pop("UNUSED", None)
