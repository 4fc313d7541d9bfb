"""What the protocol records stays whole: forks never re-send an unknown effect, reconciliation evidence is
durable before the event naming it, stored bytes can be reinterpreted, lines stay small.

Sends are counted in the provider's own fsync'd receipt log; crash tests use real SIGKILLs.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from effect_child import disk_events, snapshot

import intentlog
from intentlog.demo.provider import SyntheticProvider, read_receipts
from intentlog.projections.verify import verify_ledger

REQ = {"model": "m", "prompt": "review chapter 16", "idempotency_key": "k"}


def receipts(tmp_path: Path) -> int:
    return len(read_receipts(tmp_path / "receipts.jsonl"))


def dies_after_receipt(tmp_path: Path) -> Any:
    """A send that reaches the provider (one receipt) and then loses the connection: the effect is unknown."""
    provider = SyntheticProvider(tmp_path / "receipts.jsonl")

    def send(request: Any) -> bytes:
        provider.send(request)
        raise ConnectionResetError("reset mid-answer")

    return send


def answers(tmp_path: Path) -> Any:
    return SyntheticProvider(tmp_path / "receipts.jsonl").send


def parse(raw: bytes) -> Any:
    return orjson.loads(raw)


# -- 13.5: a fork never re-sends an unknown effect -------------------------------------


def test_a_fork_never_resends_an_unknown_effect(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """Forking from (or before) a call whose effect is unknown is refused (EffectUnknown, nothing written); with
    accept_risk the fork is made, records the risk and the calls, and only then can a re-run send it again."""
    task = ledger.task("t")
    task.effect("a", {**REQ, "idempotency_key": "a"}, answers(tmp_path), interpret=parse)
    with pytest.raises(intentlog.EffectUnknown):
        task.effect("b", {**REQ, "idempotency_key": "b"}, dies_after_receipt(tmp_path))
    assert receipts(tmp_path) == 2
    before = snapshot(ledger.root)
    for where in ("b", "call-2", "a"):
        with pytest.raises(intentlog.EffectUnknown, match="call-2.*unknown") as info:
            ledger.fork("t", where, "t.v2")
        assert "accept_risk=True" in str(info.value) and "intentlog reconcile t call-2" in str(info.value)
    assert snapshot(ledger.root) == before
    fork = ledger.fork("t", "b", "t.v2", accept_risk=True)
    forked = [e["data"] for e in disk_events(fork.path) if e["kind"] == "task.forked"]
    assert forked[0]["accept_risk"] is True and forked[0]["unknown"] == ["call-2"]
    assert verify_ledger(ledger).ok
    fork.effect("b", {**REQ, "idempotency_key": "b"}, answers(tmp_path), interpret=parse)
    assert receipts(tmp_path) == 3  # the accepted duplicate, and only with the risk recorded


def test_a_fork_after_reconciliation_needs_no_risk(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """Once the unknown effect is reconciled (not served), forking before it is plain: nothing to accept."""
    task = ledger.task("t")
    with pytest.raises(intentlog.EffectUnknown):
        task.effect("b", REQ, dies_after_receipt(tmp_path))
    task.reconcile("call-1", "not_served", by="ops")
    fork = ledger.fork("t", "b", "t.v2")
    forked = [e["data"] for e in disk_events(fork.path) if e["kind"] == "task.forked"]
    assert "accept_risk" not in forked[0]


# -- 12.4: reconciliation evidence is durable before the event naming it ------------------

RECONCILE_AND_DIE = """
import os, signal, sys
import intentlog
from intentlog.artifacts.store import ArtifactStore
from intentlog.task import Task

point = sys.argv[2]
real_append, real_put = Task._append, ArtifactStore.put

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def append(self, kind, data, **kw):
    ev = real_append(self, kind, data, **kw)
    if kind == point:
        die()
    return ev

def put(self, *a, **kw):
    ref = real_put(self, *a, **kw)
    if point == "put":
        die()
    return ref

Task._append = append
ArtifactStore.put = put
task = intentlog.open(sys.argv[1]).task("t")
task.reconcile("call-1", "served", evidence=sys.argv[3].encode(), by="ops", note="from the provider's console")
print("returned", flush=True)
"""


@pytest.mark.parametrize("point", ["put", "effect.reconciled", "attempt.observed", "none"])
def test_a_kill_at_any_point_of_reconcile_keeps_the_evidence(tmp_path: Path, point: str) -> None:
    """SIGKILL after each step of reconcile (the evidence put, effect.reconciled, attempt.observed, or none):
    the record holds either no reconciliation or one whose bytes are readable; a re-run completes from them
    without a send, and the ledger verifies."""
    root = tmp_path / "ledger"
    with intentlog.open(root) as led:
        with pytest.raises(intentlog.EffectUnknown):
            led.task("t").effect("k", REQ, dies_after_receipt(tmp_path))
    evidence = '{"verdict": "accept", "review": "recovered from the console"}'
    proc = subprocess.run(
        [sys.executable, "-c", RECONCILE_AND_DIE, str(root), point, evidence], capture_output=True, text=True
    )
    if point == "none":
        assert proc.returncode == 0 and "returned" in proc.stdout, proc.stderr
    else:
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    led = intentlog.open(root)
    st = led.task("t").work_state().calls["call-1"]
    events = disk_events(root / "tasks" / "t.jsonl")
    reconciled = [e["data"] for e in events if e["kind"] == "effect.reconciled"]
    if not reconciled:
        assert point == "put" and st.stage == "effect_unknown"
    else:
        assert reconciled[0]["outcome"] == "served"
        assert led.artifacts.get(reconciled[0]["evidence"]["digest"]) == evidence.encode()
        assert st.stage == "observed" and st.provider_effect == "happened"
    if st.stage == "effect_unknown":
        led.task("t").reconcile("call-1", "served", evidence=evidence.encode())
    result = led.task("t").effect("k", REQ, answers(tmp_path), interpret=parse)
    assert result["review"] == "recovered from the console"
    assert receipts(tmp_path) == 1
    observed = [e["data"] for e in disk_events(root / "tasks" / "t.jsonl") if e["kind"] == "attempt.observed"]
    assert len(observed) == 1 and observed[0]["source"] == "reconciliation"
    report = verify_ledger(led)
    assert report.ok, report
    led.close()
    shutil.rmtree(root)
