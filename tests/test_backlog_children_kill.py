"""A fan-out backlog killed mid fan-out, with real processes: each child's effect is sent once.

``intentlog run`` (a real supervisor process, two workers) runs a parent that spawns six
children, joins them and merges their summaries; each child makes one effect through the
receipt-logging provider (:mod:`backlog_steps`, the ground truth outside the ledger).
Round 1: the worker running the parent is SIGKILLed once every child is spawned (the parent
is taken again and spawns nothing twice), then the supervisor is SIGKILLed while a child's
send is served but not yet answered (its workers die with it). Round 2 runs until idle: the
child whose answer was lost is blocked for a person and its parent keeps waiting for it. The
effect is reconciled from the receipt log and unblocked; round 3 runs to completion.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from backlog_children_steps import WAIT
from backlog_steps import open_gate, read_receipts, response_for, wait_at_gate

import intentlog

TESTS = Path(__file__).parent
DOCS = [f"d{n}" for n in range(6)]


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["BACKLOG_RECEIPTS"] = str(tmp / "receipts.jsonl")
    for name in ("CHILDREN_MEET", "CHILDREN_FAIL"):
        env.pop(name, None)
    return env


def _cli(root: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", root, *args],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def _run(root: str) -> list[str]:
    return [
        sys.executable, "-m", "intentlog.cli", "--root", root, "run", "fan",
        "--step", "backlog_children_steps:fanout", "--workers", "2", "--until-idle", "--inactivity",
        "5" if root.startswith("s3://") else "30",
        "--grace", "1",
    ]  # fmt: skip


def _wait_file(path: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)  # waiting for the file the step writes


def _children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


@pytest.fixture(params=["folder", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ledger: a folder, or a fresh prefix of a real SeaweedFS (its variables in every child's environment)."""
    if request.param == "folder":
        return str(tmp_path / "l")
    import s3_server

    server = s3_server.seaweed()
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    loc = s3_server.fresh_location()
    return f"s3://{loc.bucket}/{loc.prefix}"


def test_a_fan_out_killed_mid_way_sends_each_childs_effect_once(tmp_path: Path, root: str) -> None:
    env = _env(tmp_path)
    hold, gate = tmp_path / "hold", tmp_path / "gate"
    hold.mkdir()
    gate.mkdir()
    env.update(CHILDREN_HOLD=str(hold), BACKLOG_GATE=str(gate), BACKLOG_GATE_KEYS="sum:d2", BACKLOG_GATE_AT="after")
    with intentlog.open(root) as led:
        led.backlog("fan").add("digest", {"docs": DOCS, "name": "c"})

    # round 1: the parent's worker killed once every child is spawned, then the supervisor mid-send
    sup = subprocess.Popen(_run(root), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_file(hold / "spawned")
        first = int((hold / "spawned").read_text())
        assert first in _children_of(sup.pid)  # a worker of this supervisor
        os.kill(first, 9)
        (hold / "spawned").unlink()
        _wait_file(hold / "spawned")  # taken again by a new worker: it spawned again (nothing twice)
        # the new worker's pid from the step itself: its lease.acquired is deferred on purpose (it rides the next
        # durable append, and a re-spawn writes none), so the record may name the killed one until the join
        again = int((hold / "spawned").read_text())
        assert again != first and again in _children_of(sup.pid), (first, again)
        wait_at_gate(str(gate), "sum:d2")  # served (its receipt written), the answer not yet recorded
        sup.kill()
    finally:
        if sup.poll() is None:
            sup.kill()
        sup.communicate()
    keys = [r["key"] for r in read_receipts(env["BACKLOG_RECEIPTS"])]
    assert "sum:d2" in keys and len(keys) == len(set(keys)) and set(keys) <= {f"sum:{d}" for d in DOCS}, keys

    # round 2: until idle; the child whose answer was lost is blocked, its parent waits for it
    open_gate(str(gate))
    (hold / "go").touch()
    r = subprocess.run(_run(root), env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 3 and "c-d2: blocked (unknown effect" in r.stdout, r.stdout + r.stderr  # needs a person
    with intentlog.open(root) as led:
        rows = {row.item: row for row in led.backlog("fan").view().items}
        assert rows["c-d2"].state == "blocked", rows["c-d2"]
        assert rows["digest"].state == "scheduled" and rows["digest"].children == {"done": 5, "blocked": 1}
        calls = [cid for cid, c in led.task("c-d2").work_state().calls.items() if c.stage == "effect_unknown"]
    assert len(calls) == 1
    served = {x["key"] for x in read_receipts(env["BACKLOG_RECEIPTS"])}
    assert "sum:d2" in served  # the ground truth: the provider served it
    evidence = tmp_path / "evidence"
    evidence.write_bytes(response_for("sum:d2"))
    r = _cli(root, env, "reconcile", "c-d2", calls[0], "--served", "--evidence", str(evidence), "--by", "test")
    assert r.returncode == 0, r.stderr
    r = _cli(root, env, "unblock", "fan", "c-d2", "--by", "test")
    assert r.returncode == 0, r.stdout + r.stderr

    # round 3: to completion
    r = subprocess.run(_run(root), env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    keys = [x["key"] for x in read_receipts(env["BACKLOG_RECEIPTS"])]
    assert sorted(keys) == sorted(f"sum:{d}" for d in DOCS) and len(keys) == len(set(keys))  # each sent once
    with intentlog.open(root) as led:
        view = led.backlog("fan").view()
        assert view.counts["done"] == 1 + len(DOCS), view.to_json()
        res = [e.data["result"] for e in led.task("fan.item.digest").events() if e.kind == "item.returned"]
        assert res == [{"merged": [f"sum:{d}" for d in DOCS]}]
        added = [e.data["item"] for e in led.backlog("fan").task.events() if e.kind == "backlog.item_added"]
        assert added == ["digest"] + [f"c-{d}" for d in DOCS]  # each child added once
        spawned = [e for e in led.task("fan.item.digest").events() if e.kind == "task.child_spawned"]
        assert len(spawned) == len(DOCS)
    shown = _cli(root, env, "backlog", "fan")
    assert shown.returncode == 0 and "c-d2" in shown.stdout
    v = _cli(root, env, "verify")
    assert v.returncode == 0, v.stdout + v.stderr
