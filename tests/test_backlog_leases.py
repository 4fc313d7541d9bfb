"""Leases that fence, with real processes: a live holder is never taken, a stalled one is ended
(pid and start time checked) and its item resumed, a SIGSTOPped worker is ended and never
writes or sends again, SIGTERM stops a run cleanly. The provider's receipt log is the truth.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from backlog_steps import open_gate, read_receipts, response_for, step, wait_at_gate

import intentlog

TESTS = Path(__file__).parent

HOLDER = textwrap.dedent(
    """
    import os, sys, time
    import intentlog
    from intentlog.backlog.procs import host_name, start_time
    from backlog_steps import serve
    root, mode = sys.argv[1], sys.argv[2]
    t = intentlog.open(root).task("lease.item.x")
    me = os.getpid()
    t.append("lease.acquired", {"epoch": 1, "pid": me, "host": host_name(), "start_time": start_time(me),
                                "boot_id": None, "backlog": "lease", "item": "x"})
    t.effect("e0", {"pkey": "x:0"}, serve)
    print("ready", flush=True)
    if mode == "live":
        for i in range(15):
            time.sleep(0.2)
            t.append("holder.progress", {"i": i})
        t.close()
    else:
        time.sleep(60)
    """
)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("BACKLOG_SLEEP", "0")
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(TESTS), e.get("PYTHONPATH", "")])
    return e


def _receipts(tmp_path: Path) -> list[str]:
    p = tmp_path / "receipts.jsonl"
    return [r["key"] for r in read_receipts(str(p))] if p.exists() else []


def _holder(root: Path, env: dict[str, str], mode: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), mode], env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _backlog_events(ledger: intentlog.Ledger, name: str, kind: str) -> list[dict[str, object]]:
    return [e.data for e in ledger.task(f"{name}.backlog").events() if e.kind == kind]


def test_a_live_progressing_holder_is_never_taken(
    ledger: intentlog.Ledger, env: dict[str, str], tmp_path: Path
) -> None:
    b = ledger.backlog("lease")
    b.add("x", {"item": "x", "effects": 2})
    holder = _holder(ledger.root, env, "live")
    row = b.view().items[0]
    assert row.state == "running" and row.holder is not None and row.holder["pid"] == holder.pid
    assert row.holder["epoch"] == 1 and row.last_progress is not None
    view = b.run(step, inactivity=1.0, until_idle=True, poll=0.02)  # the holder runs 3 s: three limits
    assert holder.wait(timeout=10) == 0  # it finished on its own: never ended
    assert _backlog_events(ledger, "lease", "backlog.holder_ended") == []
    assert view.items[0].state == "done"
    evs = list(ledger.task("lease.item.x").events())
    assert sum(e.kind == "holder.progress" for e in evs) == 15
    first_worker = next(e.seq for e in evs if e.kind == "lease.acquired" and e.data["epoch"] == 2)
    assert first_worker > max(e.seq for e in evs if e.kind == "holder.progress")  # taken only after it let go
    assert _receipts(tmp_path) == ["x:0", "x:1"]  # e0 replayed from the record, not resent


def test_a_stalled_holder_is_ended_and_its_item_resumed(
    ledger: intentlog.Ledger, env: dict[str, str], tmp_path: Path
) -> None:
    b = ledger.backlog("lease")
    b.add("x", {"item": "x", "effects": 2})
    holder = _holder(ledger.root, env, "stall")
    try:
        view = b.run(step, inactivity=1.0, until_idle=True, poll=0.02)
        assert holder.wait(timeout=5) == -signal.SIGKILL
    finally:
        holder.kill()
    ended = _backlog_events(ledger, "lease", "backlog.holder_ended")
    assert len(ended) == 1 and ended[0]["pid"] == holder.pid and "stalled" in str(ended[0]["reason"])
    assert ended[0]["start_time"] is not None
    assert view.items[0].state == "done"
    assert _receipts(tmp_path) == ["x:0", "x:1"]
    epochs = [e.data["epoch"] for e in ledger.task("lease.item.x").events() if e.kind == "lease.acquired"]
    assert epochs == [1, 2]


def test_a_holder_whose_start_time_differs_is_not_ended(ledger: intentlog.Ledger) -> None:
    from intentlog.backlog.procs import end_holder, start_time

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        st = start_time(p.pid)
        assert st is not None
        assert end_holder(p.pid, st + 1) is False  # the pid names another process now: untouched
        assert p.poll() is None
        assert end_holder(p.pid, st) is True
        assert p.wait(timeout=5) == -signal.SIGKILL
    finally:
        p.kill()


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
        return [int(x) for x in f.read().split()]


def _wait_for(pred: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting")


def test_a_sigstopped_worker_is_ended_and_never_sends_again(
    ledger: intentlog.Ledger, env: dict[str, str], tmp_path: Path
) -> None:
    root = ledger.root
    b = ledger.backlog("stop")
    b.add("x", {"item": "x", "effects": 1})
    ledger.close()
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**env, "BACKLOG_GATE": str(gate)}  # the send is held after the receipt until the gate opens
    cli = [sys.executable, "-m", "intentlog.cli", "--root", str(root)]
    sup = subprocess.Popen(
        [*cli, "run", "stop", "--step", "backlog_steps:step", "--inactivity", "2", "--until-idle"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_at_gate(str(gate), "x:0")  # the provider served; the answer is on its way
        assert _receipts(tmp_path) == ["x:0"]
        (worker,) = _children(sup.pid)
        os.kill(worker, signal.SIGSTOP)
        open_gate(str(gate))  # only a stopped worker could still be held: the answer never comes
        _, err = sup.communicate(timeout=30)
        assert sup.returncode == 3, err  # the run ended with an item only a person can move on
    finally:
        open_gate(str(gate))
        sup.kill()
    with pytest.raises(ProcessLookupError):
        os.kill(worker, signal.SIGCONT)  # resumed later: it was ended, it can neither write nor send
    ended = _backlog_events(ledger, "stop", "backlog.holder_ended")
    assert [e["pid"] for e in ended] == [worker] and "stalled" in str(ended[0]["reason"])
    row = b.view().items[0]
    assert row.state == "blocked" and "unknown effect" in str(row.reason)
    assert "intentlog reconcile stop.item.x call-1" in row.next_step and "intentlog unblock stop x" in row.next_step
    time.sleep(1)  # had the stopped worker lived on, its send would have finished by now
    assert _receipts(tmp_path) == ["x:0"]
    ev = tmp_path / "evidence"
    ev.write_bytes(response_for("x:0"))
    r = subprocess.run([*cli, "reconcile", "stop.item.x", "call-1", "--served", "--evidence", str(ev)], env=env)
    assert r.returncode == 0
    assert subprocess.run([*cli, "unblock", "stop", "x"], env=env).returncode == 0
    view = b.run(step, until_idle=True)
    assert view.items[0].state == "done"
    assert _receipts(tmp_path) == ["x:0"]


def test_sigterm_stops_taking_work_lets_the_effect_finish_and_records_it(
    ledger: intentlog.Ledger, env: dict[str, str], tmp_path: Path
) -> None:
    root = ledger.root
    b = ledger.backlog("term")
    for i in range(2):
        b.add(f"i{i}", {"item": f"i{i}", "effects": 3})
    ledger.close()
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**env, "BACKLOG_GATE": str(gate)}  # every send is held after its receipt until the gate opens
    args = [sys.executable, "-m", "intentlog.cli", "--root", str(root), "run", "term", "--step", "backlog_steps:step"]
    sup = subprocess.Popen([*args, "--grace", "5"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stream = root / "tasks" / "term.backlog.jsonl"
    try:
        wait_at_gate(str(gate), "i0:0")  # the first effect is in flight
        sup.send_signal(signal.SIGTERM)
        _wait_for(lambda: b"backlog.run_stopping" in stream.read_bytes())  # the run knows it is stopping
        open_gate(str(gate))  # only now can the effect in flight finish
        sup.communicate(timeout=30)
        assert sup.returncode == 0
    finally:
        open_gate(str(gate))
        sup.kill()
    assert _receipts(tmp_path) == ["i0:0"]
    kinds = [e.kind for e in ledger.task("term.backlog").events()]
    assert kinds[-2:] == ["backlog.run_stopping", "backlog.run_stopped"]
    stopped = _backlog_events(ledger, "term", "backlog.run_stopped")[-1]
    assert stopped["reason"] == "SIGTERM" and stopped["ended"] == []
    task = ledger.task("term.item.i0")
    ws = task.work_state()
    assert ws.calls["call-1"].stage == "completed"  # the effect in flight finished
    assert all(c.stage != "effect_unknown" for c in ws.calls.values())
    assert [e.kind for e in task.events()][-1] == "lease.released"
    view = b.run(step, workers=2, until_idle=True)
    assert view.counts["done"] == 2
    assert sorted(_receipts(tmp_path)) == sorted(f"i{i}:{j}" for i in range(2) for j in range(3))


def test_a_hard_timeout_is_recorded_and_the_attempt_is_never_resent(
    ledger: intentlog.Ledger, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = ledger.backlog("slow")
    b.add("x", {"item": "x"}, max_duration=1.0, max_attempts=3)
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("BACKLOG_GATE", str(gate))  # the send is held before the provider serves: ended first
    monkeypatch.setenv("BACKLOG_GATE_AT", "before")
    t0 = time.monotonic()
    view = b.run(step, inactivity=30, until_idle=True, backoff=0.05)
    assert time.monotonic() - t0 < 60  # ended by its timeout, long before the held send would give up (120 s)
    timed = _backlog_events(ledger, "slow", "backlog.item_timed_out")
    assert len(timed) == 1 and "timed out" in str(timed[0]["reason"])
    row = view.items[0]
    assert row.state == "blocked" and "unknown effect" in str(row.reason)
    kinds = [e.kind for e in ledger.task("slow.item.x").events()]
    assert kinds.count("attempt.started") == 1  # the retry after the timeout resumed: it sent nothing
    assert _receipts(tmp_path) == []
    cli = [sys.executable, "-m", "intentlog.cli", "--root", str(ledger.root)]
    ledger.close()
    assert subprocess.run([*cli, "reconcile", "slow.item.x", "call-1", "--not-served"], env=env).returncode == 0
    assert subprocess.run([*cli, "unblock", "slow", "x"], env=env).returncode == 0
    monkeypatch.delenv("BACKLOG_GATE")
    assert b.run(step, until_idle=True).items[0].state == "done"
    assert _receipts(tmp_path) == ["x:0"]
