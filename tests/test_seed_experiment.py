"""The seed experiment (Part 3, "The step that didn't finish"), with real processes and real kills.

Every phase runs as its own operating-system process over one case folder: a producer
(``tests/effect_child.py``) killed with ``SIGKILL`` at a durable checkpoint, inspecting
processes, resuming processes and a naive restart on a copy. Provider effects are counted
with the synthetic provider's own fsync'd receipt log, never with the ledger.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from effect_child import KEY, SECRET, TASK, disk_events, files_containing, snapshot

import intentlog
from intentlog.demo.provider import read_receipts

try:  # the independent checker, when it exists
    from intentlog.projections.verify import verify_ledger
except ImportError:  # pragma: no cover - written by someone else
    verify_ledger = None

CHILD = str(Path(__file__).with_name("effect_child.py"))


class Case:
    """One case folder: a ledger and the provider's receipt log beside it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ledger = root / "ledger"
        self.receipts = root / "receipts.jsonl"
        self.stream = self.ledger / "tasks" / f"{TASK}.jsonl"

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, CHILD, str(self.ledger), str(self.receipts), *args]

    def run(self, *args: str, expect_rc: int | None = 0) -> dict[str, Any]:
        """Run one phase in its own process; return the JSON line it printed."""
        p = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=60)
        if expect_rc is not None:
            assert p.returncode == expect_rc, f"rc {p.returncode}\n{p.stdout}\n{p.stderr}"
        lines = p.stdout.strip().splitlines()
        return orjson.loads(lines[-1]) if lines else {"rc": p.returncode}

    def killed(self, *args: str) -> None:
        """Run a producer that kills itself at a boundary: it must die by SIGKILL."""
        p = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=60)
        assert p.returncode == -signal.SIGKILL, f"rc {p.returncode}\n{p.stdout}\n{p.stderr}"
        self.check_record()

    def inspect(self) -> dict[str, Any]:
        """The work state as a separate process projects it (appending nothing)."""
        before = snapshot(self.ledger)
        ws: dict[str, Any] = self.run("--mode", "inspect")["work_state"]
        assert snapshot(self.ledger) == before
        return ws

    def receipts_log(self) -> list[dict[str, Any]]:
        return read_receipts(self.receipts)

    def events(self) -> list[dict[str, Any]]:
        return disk_events(self.stream)

    def check_record(self) -> None:
        """After any kill the ledger still parses and chains (and verifies, where verify exists)."""
        led = intentlog.open(self.ledger, create=False)
        events = list(led.task(TASK).events())
        assert events and events[0].kind == "task.created"
        assert [e.seq for e in events] == list(range(len(events)))
        if verify_ledger is not None:
            assert verify_ledger(led).ok
        assert files_containing(self.ledger, SECRET.encode()) == []


@pytest.fixture
def case(tmp_path: Path) -> Case:
    return Case(tmp_path / "case")


def _manifest(events: list[dict[str, Any]], call: str) -> dict[str, Any]:
    return next(e["data"] for e in events if e["kind"] == "call.manifest" and e["data"]["call"] == call)


def test_killed_after_manifest_a_later_process_resumes_once(case: Case) -> None:
    """Killed right after call.manifest, a later process resumes: one receipt, the recorded request, linked calls."""
    case.killed("--kill-after", "call.manifest")
    assert case.receipts_log() == []
    assert [e["kind"] for e in case.events()][-2:] == ["call.requested", "call.manifest"]

    ws = case.inspect()
    c1 = ws["calls"]["call-1"]
    assert (c1["stage"], c1["next_operation"], c1["provider_effect"]) == ("manifest_recorded", "start call", "none")
    assert ws["next_operation"] == "start call"

    out = case.run()
    assert out["result"]["verdict"] == "accept"

    receipts = case.receipts_log()
    assert len(receipts) == 1
    events = case.events()
    old, new = _manifest(events, "call-1"), _manifest(events, "call-2")
    assert receipts[0]["body_hash"] == old["request_hash"] == new["request_hash"]
    assert receipts[0]["key"] == KEY
    resumed = [e["data"] for e in events if e["kind"] == "call.resumed"]
    assert resumed == [{"call": "call-1", "new_call": "call-2", "key": KEY}]
    requested2 = next(e["data"] for e in events if e["kind"] == "call.requested" and e["data"]["call"] == "call-2")
    assert requested2["resumes"] == "call-1"

    ws = case.inspect()
    assert ws["calls"]["call-1"]["stage"] == "superseded"
    assert ws["calls"]["call-1"]["superseded_by"] == "call-2"
    assert ws["calls"]["call-2"]["stage"] == "completed"
    assert ws["calls"]["call-2"]["resumes"] == "call-1"
    assert ws["next_operation"] == "check and accept"

    again = case.run()  # running it once more replays the record
    assert again == out
    assert len(case.receipts_log()) == 1
    case.check_record()


def test_resume_with_a_changed_request_is_refused_for_drift(case: Case) -> None:
    """The same interruption resumed with another model is refused before anything is sent; nothing is appended."""
    case.killed("--kill-after", "call.manifest")
    before = snapshot(case.ledger)
    out = case.run("--model", "model-b", expect_rc=3)
    assert out["error"] == "ResumeRefused"
    assert out["reason"] == "DRIFT"
    assert out["call_id"] == "call-1"
    assert out["key"] == KEY
    assert "DRIFT" in out["message"] and "call-1" in out["message"] and KEY in out["message"]
    assert snapshot(case.ledger) == before
    assert case.receipts_log() == []
    assert case.inspect()["calls"]["call-1"]["stage"] == "manifest_recorded"


def _kill_while_held(case: Case) -> None:
    proc = subprocess.Popen(case.argv("--hold", "30"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not case.receipts_log():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the provider never received the request"
            time.sleep(0.01)
        proc.kill()  # SIGKILL: no cleanup runs
    finally:
        proc.wait(timeout=30)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    case.check_record()


def test_killed_while_the_provider_holds_the_request_is_refused_as_unknown(case: Case) -> None:
    """Killed mid-request: the projection says effect unknown; resume raises EffectUnknown and appends nothing."""
    _kill_while_held(case)
    assert len(case.receipts_log()) == 1
    assert case.events()[-1]["kind"] == "attempt.started"

    ws = case.inspect()
    c1 = ws["calls"]["call-1"]
    assert c1["stage"] == "effect_unknown"
    assert c1["next_operation"] == "reconcile effect"
    assert c1["provider_effect"] == "unknown"
    assert c1["duplicate_effect_risk"] is True
    assert ws["next_operation"] == "reconcile effect"

    before = snapshot(case.ledger)
    out = case.run(expect_rc=3)
    assert out["error"] == "EffectUnknown"
    assert out["next_operation"] == "reconcile effect"
    assert out["call_id"] == "call-1" and out["key"] == KEY
    assert "reconcile effect" in out["message"]
    assert snapshot(case.ledger) == before
    assert len(case.receipts_log()) == 1


def test_a_naive_restart_on_a_copy_pays_twice(case: Case, tmp_path: Path) -> None:
    """The hazard, shown: re-sending the recorded request of an unknown effect gives two identical receipts."""
    _kill_while_held(case)
    copy = Case(tmp_path / "copy")
    shutil.copytree(case.root, copy.root)
    out = copy.run("--mode", "naive", "--label", "naive")
    assert out["resent"] == "call-1"
    receipts = copy.receipts_log()
    assert len(receipts) == 2
    first, second = receipts
    assert first["body_hash"] == second["body_hash"] == _manifest(copy.events(), "call-1")["request_hash"]
    assert first["key"] == second["key"] == KEY
    assert first["pid"] != second["pid"]
    # the original folder is untouched, and its record still refuses to resend
    assert len(case.receipts_log()) == 1
    assert case.run(expect_rc=3)["error"] == "EffectUnknown"


def test_killed_after_observation_reinterprets_without_sending(case: Case) -> None:
    """Killed after attempt.observed: the next run reinterprets the stored bytes and the provider sees nothing new."""
    case.killed("--kill-after", "attempt.observed")
    assert len(case.receipts_log()) == 1
    assert case.events()[-1]["kind"] == "attempt.observed"
    c1 = case.inspect()["calls"]["call-1"]
    assert (c1["stage"], c1["next_operation"], c1["provider_effect"]) == ("observed", "reinterpret", "happened")
    assert c1["duplicate_effect_risk"] is False

    out = case.run()
    assert out["result"]["verdict"] == "accept"
    assert len(case.receipts_log()) == 1
    tail = [(e["kind"], e["data"].get("call"), e["data"].get("attempt")) for e in case.events()[-3:]]
    assert tail == [
        ("attempt.observed", "call-1", 1),
        ("attempt.interpreted", "call-1", 1),
        ("call.completed", "call-1", 1),
    ]
    interp = next(e["data"] for e in case.events() if e["kind"] == "attempt.interpreted")
    assert interp["interpreter"]["name"].endswith(".review") and interp["interpreter"]["version"] == "1"
    ws = case.inspect()
    assert ws["calls"]["call-1"]["stage"] == "completed"
    assert ws["next_operation"] == "check and accept"


def test_interrupted_compilation_recovers_its_inventory_and_recompiles(case: Case) -> None:
    """Killed after context.compilation_requested: a new process sees the offered inventory and 'recompile'."""
    case.killed("--mode", "compile", "--kill-after", "context.compilation_requested")
    kinds = [e["kind"] for e in case.events()]
    assert kinds == ["task.created", "context.compilation_requested"]
    ws = case.inspect()
    comp = ws["compilations"]["ctx-16"]
    assert (comp["stage"], comp["next_operation"]) == ("requested", "recompile")
    assert [(o["id"], o["required"], o["size"], o["estimated"]) for o in comp["offered"]] == [
        ("A", True, 12, True),
        ("B", True, 0, False),
        ("D", False, 0, False),
    ]
    assert comp["offered"][0]["lineage"] == {"from": "chapter-16.md#p7"}
    assert ws["next_operation"] == "recompile"

    out = case.run("--mode", "compile")
    assert out["selected"] == ["A", "B", "D"]
    ws = case.inspect()
    assert ws["compilations"]["ctx-16"]["stage"] == "compiled"
    assert ws["compilations"]["ctx-16"]["package"]["digest"] == out["package"]
    assert ws["next_operation"] == "none"


def test_failed_compilation_is_recorded_with_the_missing_ids_and_fixed(case: Case) -> None:
    """A missing required input is recorded, not just raised; fixing the inputs compiles under the same id."""
    out = case.run("--mode", "compile", "--required", "A,B,C", expect_rc=3)
    assert out["error"] == "RequiredContextMissing"
    assert out["missing"] == ["C"]
    failed = case.events()[-1]
    assert failed["kind"] == "context.compilation_failed"
    assert failed["data"]["error"] == "RequiredContextMissing"
    assert failed["data"]["missing"] == ["C"]

    ws = case.inspect()
    comp = ws["compilations"]["ctx-16"]
    assert (comp["stage"], comp["next_operation"]) == ("failed", "fix inputs")
    assert comp["missing"] == ["C"]
    assert comp["required"] == ["A", "B", "C"]
    assert [o["id"] for o in comp["offered"]] == ["A", "B", "D"]
    assert ws["next_operation"] == "fix inputs"

    fixed = case.run("--mode", "compile", "--required", "A,B,C", "--offer-extra", "C")
    assert fixed["selected"] == ["A", "B", "D", "C"]
    assert case.inspect()["compilations"]["ctx-16"]["stage"] == "compiled"


@pytest.mark.parametrize("wait", ["0", "30"])
def test_two_processes_resuming_the_same_call_send_once(case: Case, wait: str) -> None:
    """Two processes resume one call at once: one sends; the other gets TaskBusy or waits and replays the record."""
    case.killed("--kill-after", "call.manifest")
    procs = [
        subprocess.Popen(
            case.argv("--hold", "1.0", "--wait", wait, "--label", f"p{i}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        assert p.returncode in (0, 3), stderr
        outs.append(orjson.loads(stdout.strip().splitlines()[-1]))
    assert len(case.receipts_log()) == 1
    results = [o["result"] for o in outs if "result" in o]
    errors = [o["error"] for o in outs if "error" in o]
    assert results and all(r == results[0] for r in results)
    if wait == "30":
        assert errors == []
    else:
        assert errors in ([], ["TaskBusy"])
    ws = case.inspect()
    assert ws["calls"]["call-2"]["stage"] == "completed"
    assert len(ws["calls"]) == 2
    case.check_record()
