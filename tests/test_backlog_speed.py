"""The runner's cheaper per-item work keeps its guarantees: the lease check before every
attempt still refuses a holder whose lock file was replaced, and the supervisor's pruned
item list keeps run order. The provider's receipt log is the truth.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from backlog_steps import read_receipts, serve

import intentlog

TESTS = Path(__file__).parent

TAKER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(30)
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


_TAKERS: list[subprocess.Popen[str]] = []


def replaced_lock_step(task: intentlog.Task, payload: Any) -> Any:
    """Sends once, then has its lock file replaced and locked by another process, then tries to send again."""
    task.effect("first", {"pkey": "x:0"}, serve)
    lock = task.path.with_name(task.path.name + ".lock")
    os.unlink(lock)
    p = subprocess.Popen([sys.executable, "-c", TAKER, str(lock)], stdout=subprocess.PIPE, text=True)
    _TAKERS.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "locked"
    task.effect("second", {"pkey": "x:1"}, serve)
    return {"sent": 2}


def test_a_lock_file_replaced_under_the_holder_refuses_the_next_attempt(
    ledger: intentlog.Ledger, env: dict[str, str], tmp_path: Path
) -> None:
    b = ledger.backlog("lk")
    b.add("x", {"item": "x"}, max_attempts=1)
    try:
        view = b.run(replaced_lock_step, until_idle=True, inactivity=30)
    finally:
        for p in _TAKERS:
            p.kill()
            p.wait()
    assert _receipts(tmp_path) == ["x:0"]  # the second key never reached the provider
    row = view.items[0]
    # refused by the item's guard (LeaseLost) or, first, by the writer itself (its lock file is not the one it locked)
    assert row.state == "failed" and row.reason is not None, row
    assert "LeaseLost" in row.reason or "lock file was removed or replaced" in row.reason, row
    assert not any(e.kind == "lease.released" for e in ledger.task("lk.item.x").events())  # nothing after the loss
    kinds = [(e.kind, e.data.get("key")) for e in ledger.task("lk.item.x").events()]
    started = [k for k, key in kinds if k == "attempt.started"]
    assert len(started) == 1, kinds  # the refused attempt was never recorded as started


def test_run_order_holds_across_many_items(ledger: intentlog.Ledger, env: dict[str, str]) -> None:
    b = ledger.backlog("ord")
    b.add_many([{"item": f"i{i:03d}", "payload": i, "priority": i % 3} for i in range(80)])
    b.add("late", 0, priority=5)  # added last, runs first
    view = b.run("backlog_steps:noop", until_idle=True)
    assert view.counts["done"] == 81
    leased = []
    for row in view.items:
        ev = next(e for e in ledger.task(row.task).events() if e.kind == "lease.acquired")
        leased.append((ev.ts, row.item))
    started = [item for _, item in sorted(leased)]
    expected = ["late"] + [f"i{i:03d}" for p in (2, 1, 0) for i in range(80) if i % 3 == p]
    assert started == expected


def test_an_item_added_while_a_run_goes_on_is_taken(
    ledger: intentlog.Ledger, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor reads the backlog stream again only when it grew; an add by another process makes it grow."""
    import threading

    from backlog_steps import open_gate, step, wait_at_gate

    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("BACKLOG_GATE", str(gate))
    monkeypatch.setenv("BACKLOG_GATE_KEYS", "a:0")  # item a's send is held until the add is recorded
    b = ledger.backlog("grow")
    b.add("a", {"item": "a"})
    adder = textwrap.dedent(
        """
        import sys, intentlog
        with intentlog.open(sys.argv[1]) as led:
            led.backlog("grow").add("late", {"item": "late"})
        """
    )
    added: list[int] = []

    def add_while_a_runs() -> None:
        try:
            wait_at_gate(str(gate), "a:0")  # item a is running (the supervisor holds the backlog's lock at times)
            r = subprocess.run([sys.executable, "-c", adder, str(ledger.root)], env=env, timeout=60)
            added.append(r.returncode)
        finally:
            open_gate(str(gate))  # only now can item a finish, so the run is still going when late is added

    th = threading.Thread(target=add_while_a_runs)
    th.start()
    view = b.run(step, until_idle=True)
    th.join()
    assert added == [0]
    assert view.counts["done"] == 2, view.to_json()
    assert sorted(_receipts(tmp_path)) == ["a:0", "late:0"]
