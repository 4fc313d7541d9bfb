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


def both_verifiers_pass(root: Path, tmp_path: Path) -> None:
    """The ledger verifies, and an exported bundle passes the library's check and the standalone verify_bundle.py."""
    import importlib.util

    from intentlog.bundle import VERIFIER_FILE, export_bundle

    report = verify_ledger(intentlog.open(root, create=False))
    assert report.ok, report.render()
    out = tmp_path / f"bundle-{len(list(tmp_path.glob('bundle-*')))}"
    result = export_bundle(root, out=out)
    assert result.ok, result
    spec = importlib.util.spec_from_file_location(f"vb_{abs(hash(out))}", out / VERIFIER_FILE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    v = mod.Verifier(str(out), inventory=True)
    v.run()
    failed = [f"{c.text} :: {' | '.join(c.details)}" for c in v.claims if c.status == "FAIL"]
    assert not failed, failed


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
        with pytest.raises(intentlog.EffectUnknown, match=r"call-2.*unknown") as info:
            ledger.fork("t", where, "t.v2")
        assert "accept_risk=True" in str(info.value) and "intentlog reconcile t call-2" in str(info.value)
    assert snapshot(ledger.root) == before
    fork = ledger.fork("t", "b", "t.v2", accept_risk=True)
    forked = [e["data"] for e in disk_events(fork.path) if e["kind"] == "task.forked"]
    assert forked[0]["accept_risk"] is True and forked[0]["unknown"] == ["call-2"]
    fork.close()
    both_verifiers_pass(ledger.root, tmp_path)
    fork.effect("b", {**REQ, "idempotency_key": "b"}, answers(tmp_path), interpret=parse)
    assert receipts(tmp_path) == 3  # the accepted duplicate, and only with the risk recorded


def test_a_fork_never_copies_an_unknown_effect_unsaid(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """A fork from a call AFTER an unknown effect would hold that same unknown attempt: settled in each task on
    its own (reconcile --resend), the provider could be paid twice. Refused, nothing written; with accept_risk the
    fork is made and records the copied call among its risks."""
    task = ledger.task("t")
    with pytest.raises(intentlog.EffectUnknown):
        task.effect("a", {**REQ, "idempotency_key": "a"}, dies_after_receipt(tmp_path))
    task.effect("b", {**REQ, "idempotency_key": "b"}, answers(tmp_path), interpret=parse)
    assert receipts(tmp_path) == 2
    before = snapshot(ledger.root)
    with pytest.raises(intentlog.EffectUnknown, match=r"copies call-1.*pay twice") as info:
        ledger.fork("t", "b", "t.v2")
    assert "intentlog reconcile t call-1" in str(info.value)
    assert snapshot(ledger.root) == before
    fork = ledger.fork("t", "b", "t.v2", accept_risk=True)
    forked = [e["data"] for e in disk_events(fork.path) if e["kind"] == "task.forked"]
    assert forked[0]["accept_risk"] is True and forked[0]["unknown"] == ["call-1"]
    fork.close()
    both_verifiers_pass(ledger.root, tmp_path)


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
from intentlog.stream import TaskStream

point = sys.argv[2]
real_append, real_put = TaskStream.append, ArtifactStore.put

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

TaskStream.append = append
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
    with intentlog.open(root) as led, pytest.raises(intentlog.EffectUnknown):
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
    led.close()
    both_verifiers_pass(root, tmp_path)
    shutil.rmtree(root)


# -- 13.4: stored bytes can be reinterpreted --------------------------------------------


def review_v1(raw: bytes) -> Any:
    raise ValueError("v1 cannot read the 'review' field")


review_v1.version = "1"  # type: ignore[attr-defined]


def review_v2(raw: bytes) -> Any:
    value = orjson.loads(raw)
    return {"verdict": value["verdict"]}


review_v2.version = "2"  # type: ignore[attr-defined]


def review_v3(raw: bytes) -> Any:
    return {"verdict": orjson.loads(raw)["verdict"].upper()}


review_v3.version = "3"  # type: ignore[attr-defined]


def same_name_v1(raw: bytes) -> Any:
    raise ValueError("still broken")


def test_a_newer_interpreter_reinterprets_the_stored_bytes(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """v1 raises: the call fails. A re-run with v1 stays refused (CallFailed, nothing appended); a re-run with v2
    reads the stored bytes and completes -- the provider's receipt count stays 1 -- beside v1's record."""
    task = ledger.task("t")
    with pytest.raises(intentlog.CallFailed):
        task.effect("k", REQ, answers(tmp_path), interpret=review_v1)
    before = snapshot(ledger.root)
    with pytest.raises(intentlog.CallFailed):
        task.effect("k", REQ, answers(tmp_path), interpret=review_v1)
    assert snapshot(ledger.root) == before
    assert task.effect("k", REQ, answers(tmp_path), interpret=review_v2) == {"verdict": "accept"}
    assert receipts(tmp_path) == 1
    events = disk_events(task.path)
    interpreted = [e["data"] for e in events if e["kind"] == "attempt.interpreted"]
    assert [i["interpreter"]["version"] for i in interpreted] == ["1", "2"]
    assert "error" in interpreted[0] and interpreted[1]["reinterpretation"] == 1
    completed = [e["data"] for e in events if e["kind"] == "call.completed"]
    assert completed == [
        {"call": "call-1", "attempt": 1, "result": {"value": {"verdict": "accept"}}, "reinterpretation": 1}
    ]
    ledger.close()
    again = intentlog.open(ledger.root)
    assert again.task("t").effect("k", REQ, answers(tmp_path), interpret=review_v2) == {"verdict": "accept"}
    assert receipts(tmp_path) == 1
    again.close()
    both_verifiers_pass(ledger.root, tmp_path)


def test_reinterpret_records_beside_a_completed_call(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """task.reinterpret over a completed call appends a new interpretation and completion (reinterpretation 1, 2),
    never replacing the first; the work state and a re-run return the latest value; no send."""
    task = ledger.task("t")
    assert task.effect("k", REQ, answers(tmp_path), interpret=review_v2) == {"verdict": "accept"}
    assert task.reinterpret("k", review_v3) == {"verdict": "ACCEPT"}
    assert task.reinterpret("call-1", review_v2) == {"verdict": "accept"}
    completed = [e["data"] for e in disk_events(task.path) if e["kind"] == "call.completed"]
    assert [c.get("reinterpretation") for c in completed] == [None, 1, 2]
    assert [c["result"]["value"]["verdict"] for c in completed] == ["accept", "ACCEPT", "accept"]
    with pytest.raises(intentlog.ReinterpretFailed, match="reinterpretation 3 of call-1"):
        task.reinterpret("k", review_v1)
    assert task.effect("k", REQ, answers(tmp_path), interpret=review_v2) == {"verdict": "accept"}
    assert task.work_state().calls["call-1"].result == {"value": {"verdict": "accept"}}
    assert receipts(tmp_path) == 1
    task.close()
    both_verifiers_pass(ledger.root, tmp_path)
    before = snapshot(ledger.root)
    with pytest.raises(intentlog.UnknownCall):
        task.reinterpret("nope", review_v2)
    assert snapshot(ledger.root) == before


def test_reinterpret_refuses_a_call_without_stored_bytes(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """An unknown effect has no stored response: reinterpret is refused and appends nothing."""
    task = ledger.task("t")
    with pytest.raises(intentlog.EffectUnknown):
        task.effect("k", REQ, dies_after_receipt(tmp_path))
    before = snapshot(ledger.root)
    with pytest.raises(intentlog.ResumeRefused, match="nothing to reinterpret"):
        task.reinterpret("k", review_v2)
    assert snapshot(ledger.root) == before


# -- 12.5: lines stay small --------------------------------------------------------------


def test_a_large_result_is_stored_as_a_ref(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """An interpreter returning a 30 MB string leaves a stream of a few KiB (the value is canonical JSON in
    objects/); a re-run in a fresh process returns the same value without a send."""
    big = "x" * 30_000_000

    def grow(raw: bytes) -> Any:
        return {"text": big, "n": 1}

    task = ledger.task("t")
    assert task.effect("k", REQ, answers(tmp_path), interpret=grow)["text"] == big
    assert task.path.stat().st_size < 64 * 1024
    ledger.close()
    again = intentlog.open(ledger.root)
    got = again.task("t").effect("k", REQ, answers(tmp_path), interpret=grow)
    assert got == {"text": big, "n": 1}
    assert receipts(tmp_path) == 1
    again.close()
    both_verifiers_pass(ledger.root, tmp_path)


def test_a_large_error_text_is_cut(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """An interpreter whose exception quotes 5 MB records a cut error text: the stream stays small."""

    def loud(raw: bytes) -> Any:
        raise ValueError("y" * 5_000_000)

    task = ledger.task("t")
    with pytest.raises(intentlog.CallFailed):
        task.effect("k", REQ, answers(tmp_path), interpret=loud)
    assert task.path.stat().st_size < 64 * 1024


# -- 12.7 / 12.9: smaller -----------------------------------------------------------------


def test_a_deeply_nested_result_is_a_recorded_interpretation_error(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """Data nested 10,000 deep from an interpreter is recorded as an interpretation error (the call is decided,
    not left half-done), and a fixed interpreter then reinterprets it."""
    deep: Any = []
    for _ in range(10_000):
        deep = [deep]

    def nest(raw: bytes) -> Any:
        return deep

    task = ledger.task("t")
    with pytest.raises(intentlog.CallFailed):
        task.effect("k", REQ, answers(tmp_path), interpret=nest)
    st = task.work_state().calls["call-1"]
    assert st.stage == "failed" and "levels deep" in (st.interpret_error or "")
    assert task.effect("k", REQ, answers(tmp_path), interpret=review_v2) == {"verdict": "accept"}
    assert receipts(tmp_path) == 1
    task.close()
    both_verifiers_pass(ledger.root, tmp_path)


@pytest.mark.parametrize("interpreted", [True, False])
def test_a_damaged_response_ref_is_a_library_error(ledger: intentlog.Ledger, tmp_path: Path, interpreted: bool) -> None:
    """A re-chained record whose observation lost its digest gives an IntentlogError on re-run, not a KeyError,
    and appends nothing (with an interpreter, and for a raw result)."""
    from intentlog._internal.digest import digest_bytes
    from intentlog.eventlog.format import encode_line

    task = ledger.task("t")

    def kill(raw: bytes) -> Any:
        raise KeyboardInterrupt  # stops the run after the observation (not an Exception: nothing records it)

    with pytest.raises(KeyboardInterrupt):
        task.effect("k", REQ, answers(tmp_path), interpret=kill)
    ledger.close()
    lines = task.path.read_bytes().splitlines(keepends=True)
    out, prev = [], None
    for line in lines:
        ev = orjson.loads(line)
        if ev["kind"] == "attempt.observed":
            ev["data"]["response"] = {"size": 3, "inline": "abc"}
        new = encode_line(ev["kind"], orjson.dumps(ev["data"], option=orjson.OPT_SORT_KEYS), prev, ev["seq"], ev["ts"])
        prev = digest_bytes(new)
        out.append(new)
    task.path.write_bytes(b"".join(out))
    again = intentlog.open(ledger.root).task("t")
    before = snapshot(ledger.root)
    with pytest.raises(intentlog.IntentlogError) as info:
        again.effect("k", REQ, answers(tmp_path), interpret=review_v2 if interpreted else None)
    assert snapshot(ledger.root) == before
    assert not isinstance(info.value, KeyError)
    assert "not an artifact ref" in str(info.value)
    assert receipts(tmp_path) == 1


def test_a_response_that_cannot_be_stored_is_kept_aside(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk full after the send: the paid-for bytes are written to a second place, the EffectUnknown names that
    file, and reconciling with its bytes completes the call without a second send."""
    import errno

    from intentlog.artifacts.store import ArtifactStore

    big = b'{"verdict": "accept", "review": "' + b"z" * 10_000 + b'"}'
    provider = SyntheticProvider(tmp_path / "receipts.jsonl")

    def send(request: Any) -> bytes:
        provider.send(request)
        return big

    real = ArtifactStore.put

    def full(self: Any, data: Any, **kw: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ArtifactStore, "put", full)
    task = ledger.task("t")
    with pytest.raises(intentlog.EffectUnknown) as info:
        task.effect("k", REQ, send, interpret=review_v2)
    text = str(info.value)
    assert "No space left" in text
    kept = Path(text.split("kept in ")[1].split(" ")[0].rstrip(";,"))
    assert kept.read_bytes() == big and kept.parent == ledger.root / "quarantine"
    monkeypatch.setattr(ArtifactStore, "put", real)
    assert task.work_state().calls["call-1"].stage == "effect_unknown"
    errored = [e["data"] for e in disk_events(task.path) if e["kind"] == "attempt.errored"]
    assert str(kept) in errored[0]["error"]  # the record says where the paid-for bytes are
    task.reconcile("call-1", "served", evidence=kept.read_bytes(), by="ops")
    assert task.effect("k", REQ, send, interpret=review_v2) == {"verdict": "accept"}
    assert receipts(tmp_path) == 1
    report = verify_ledger(ledger)
    assert report.ok, report.render()


def test_a_session_turn_with_a_large_value_reads_it_back(ledger: intentlog.Ledger) -> None:
    """A turn whose interpreter returns a value over the inline threshold keeps its value in objects/, and the
    turn read back from the record (a fresh ledger's turns()) carries the same value."""
    value = {"summary": "s" * 20_000}
    session = ledger.session("chat")
    req = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    turn = session.turn(req, lambda r: b'{"ok": true}', interpret=lambda raw: value)
    assert turn.result == value
    ledger.close()
    again = intentlog.open(ledger.root).session("chat").turns()
    assert again[0].result == value
    assert (ledger.root / "tasks" / "chat.jsonl").stat().st_size < 16 * 1024
