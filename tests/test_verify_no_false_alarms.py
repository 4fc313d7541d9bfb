"""Legal states are not problems (issue 12 item 9): a pending resume, an append in flight by a live writer."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from effect_child import Killed, kill_before

import intentlog
from intentlog.projections.verify import verify_path


def ok(request: Any) -> bytes:
    return b"served"


def independent_failures(folder: Path) -> tuple[list[str], list[str]]:
    """(failed claims, claim texts) of verify_bundle.py over ``folder`` (a ledger is a bundle without its files)."""
    path = Path(intentlog.__file__).parent / "verify_bundle.py"
    spec = importlib.util.spec_from_file_location("verify_bundle_nfa", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    v = mod.Verifier(str(folder), inventory=False)
    v.run()
    return [f"{c.text} :: {c.details}" for c in v.claims if c.status == "FAIL"], [c.text for c in v.claims]


def test_a_crash_between_call_resumed_and_the_new_call_is_not_a_graph_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """call.resumed durable, the new call's call.requested not: verify reports info, not graph; a re-run resumes."""
    root = tmp_path / "ev"
    with intentlog.open(root) as led:
        led.task("t").prepare("k", {"q": 1})  # a manifest, no attempt: a re-run resumes it as a new call
    with monkeypatch.context() as mp:
        kill_before(mp, "call.requested")
        with intentlog.open(root) as led, pytest.raises(Killed):
            led.task("t").effect("k", {"q": 1}, ok)
    assert b'"kind":"call.resumed"' in (root / "tasks" / "t.jsonl").read_bytes().splitlines()[-1]
    report = verify_path(root)
    assert report.ok, report.render()
    assert not report.by_code("graph")
    assert [p.severity for p in report.by_code("resume_pending")] == ["info"]
    failed, texts = independent_failures(root)
    assert not [f for f in failed if "identity graph" in f], failed
    assert any("follows the resume yet" in t for t in texts)
    with intentlog.open(root) as led:  # the pending resume is continued, and then nothing is pending
        assert led.task("t").effect("k", {"q": 1}, ok) == b"served"
    report = verify_path(root)
    assert report.ok and not report.by_code("resume_pending"), report.render()


def test_an_append_in_flight_by_a_live_writer_is_not_a_torn_tail(tmp_path: Path) -> None:
    """A last line without newline while a live process holds the writer lock: info in_flight; without: torn_tail."""
    root = tmp_path / "ev"
    led = intentlog.open(root)
    t = led.task("t")
    t.append("note", {"n": 1})  # the handle now holds the writer lock, as a writer mid-append does
    with open(root / "tasks" / "t.jsonl", "ab") as f:
        f.write(b'{"data":{"big":"' + b"x" * 100_000)  # the first part of a large line, still being written
    report = verify_path(root)
    assert report.ok, report.render()
    found = report.by_code("in_flight")
    assert len(found) == 1 and found[0].severity == "info" and found[0].line == 3
    assert not report.by_code("torn_tail")
    led.close()  # the writer is gone: the same bytes are now what a crash left
    report = verify_path(root)
    assert not report.ok
    assert [p.line for p in report.by_code("torn_tail")] == [3]
    assert not report.by_code("in_flight")


def test_a_crash_between_a_reconciliation_and_its_observation_is_not_a_graph_error(tmp_path: Path) -> None:
    """effect.reconciled 'served' durable, its attempt.observed not: info for both verifiers; a re-run finishes it."""
    root = tmp_path / "ev"

    def lost(request: Any) -> bytes:
        raise ConnectionResetError("the answer never came")

    with intentlog.open(root) as led, pytest.raises(intentlog.IntentlogError):
        led.task("t").effect("k", {"q": 1}, lost)
    with intentlog.open(root) as led:
        call = next(e.data["call"] for e in led.task("t").events() if e.kind == "attempt.started")
        led.task("t").reconcile(call, "served", evidence=b"served", note="the provider's log")
    stream = root / "tasks" / "t.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    assert b'"kind":"attempt.observed"' in lines[-1] and b'"kind":"effect.reconciled"' in lines[-2]
    stream.write_bytes(b"".join(lines[:-1]))  # the power cut took the observation (both shared one sync)
    report = verify_path(root)
    assert report.ok and not report.by_code("graph"), report.render()
    assert [p.severity for p in report.by_code("observation_pending")] == ["info"]
    failed, _ = independent_failures(root)
    assert not [f for f in failed if "identity graph" in f], failed
    with intentlog.open(root) as led:  # the re-run observes the stored evidence, sends nothing
        assert led.task("t").effect("k", {"q": 1}, lost) == b"served"
    report = verify_path(root)
    assert report.ok and not report.by_code("observation_pending"), report.render()
    kinds = [e.kind for e in intentlog.open(root).task("t").events()]
    assert kinds.count("attempt.started") == 1 and kinds[-2:] == ["attempt.observed", "call.completed"]
