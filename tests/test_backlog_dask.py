"""The backlog runner on Dask: a real LocalCluster (2 worker processes), the receipt log as ground truth.

Each item is one Dask task that opens the ledger and resumes the item through the
protocol; a worker SIGKILLed mid-effect makes Dask run the item again on another worker,
where the unknown effect blocks it -- never a second send.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from backlog_steps import read_receipts, response_for
from backlog_steps import step as effects_step

import intentlog

TESTS = Path(__file__).parent

if os.environ.get("CI"):
    import distributed  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip("distributed", reason="the Dask engine tests need: pip install 'intentlog[dask]'")

from intentlog.backlog.dask_engine import DaskEngine  # noqa: E402


def _engine(workers: int = 2) -> DaskEngine:
    return DaskEngine(workers=workers)


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _receipt_counts(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in read_receipts(str(path)) if path.exists() else []:
        out[r["key"]] = out.get(r["key"], 0) + 1
    return out


@pytest.fixture
def receipts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "receipts.jsonl"
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(path))  # the cluster's workers inherit it
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return path


def test_every_item_done_on_dask_one_receipt_per_key(tmp_path: Path, receipts: Path) -> None:
    """6 items x 2 effects on 2 Dask workers: all done, each key served exactly once, the ledger verifies."""
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    bl = ledger.backlog("jobs")
    bl.add_many([{"item": f"i{n}", "payload": {"item": f"i{n}", "effects": 2}} for n in range(6)])
    view = bl.run(effects_step, workers=2, engine=_engine(), until_idle=True)
    assert view.counts["done"] == 6, view.to_json()
    assert _receipt_counts(receipts) == {f"i{n}:{j}": 1 for n in range(6) for j in range(2)}
    pids = set()
    for n in range(6):
        evs = list(ledger.task(f"jobs.item.i{n}").events())
        leases = [e for e in evs if e.kind == "lease.acquired"]
        assert len(leases) == 1 and evs[-1].kind == "lease.released"
        pids.add(leases[0].data["pid"])
    assert os.getpid() not in pids  # the items ran in the Dask workers, not here
    kinds = [e.kind for e in bl.task.events()]
    assert kinds.count("backlog.item_done") == 6 and kinds[-1] == "backlog.run_stopped"
    ledger.close()
    # a second run finds everything done and sends nothing
    view = intentlog.open(root).backlog("jobs").run(effects_step, workers=1, engine="dask", until_idle=True)
    assert view.counts["done"] == 6 and sum(_receipt_counts(receipts).values()) == 12
    assert _cli(root, "verify").returncode == 0


def test_the_engine_failing_while_carrying_an_item_never_hangs_the_run(
    tmp_path: Path, receipts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A carry that raises (the Dask client failing, say) used to end the slot's thread, and the supervisor then
    waited for that item's answer for ever. The item stays queued, is carried again, and is done once."""
    from intentlog.backlog import dask_engine

    real = dask_engine._DaskSlot.carry
    failed: list[str] = []

    def flaky(self: Any, item: str, *args: Any) -> tuple[Any, ...]:
        if not failed:
            failed.append(item)
            raise RuntimeError("the scheduler went away")
        return real(self, item, *args)

    monkeypatch.setattr(dask_engine._DaskSlot, "carry", flaky)
    ledger = intentlog.open(tmp_path / "led")
    bl = ledger.backlog("jobs")
    bl.add_many([{"item": f"i{n}", "payload": {"item": f"i{n}", "effects": 1}} for n in range(2)])
    result: dict[str, Any] = {}
    run = threading.Thread(
        target=lambda: result.update(view=bl.run(effects_step, workers=1, engine=_engine(1), until_idle=True))
    )
    run.start()
    run.join(timeout=90)
    assert not run.is_alive(), "the run hung after the engine failed"
    assert failed and result["view"].counts["done"] == 2
    assert _receipt_counts(receipts) == {"i0:0": 1, "i1:0": 1}
    ledger.close()


def _kill_mid_effect(
    root: Path, receipts: Path, gate: Path, victim: str, done: threading.Event, out: dict[str, Any]
) -> None:
    """SIGKILL the Dask worker holding ``victim`` once its attempt started and before the provider served
    (its send is held at the gate, before the receipt)."""
    ledger = intentlog.open(root)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and not done.is_set():
            if not (gate / f"{victim}:0.waiting").exists():
                time.sleep(0.01)
                continue
            t = ledger.task(f"crash.item.{victim}")
            evs = list(t.events()) if t.exists() else []
            if any(e.kind == "attempt.started" for e in evs) and f"{victim}:0" not in _receipt_counts(receipts):
                pid = [e for e in evs if e.kind == "lease.acquired"][-1].data["pid"]
                os.kill(pid, signal.SIGKILL)
                out["pid"] = pid
                out["receipts_at_kill"] = _receipt_counts(receipts)
                return
            time.sleep(0.01)
    finally:
        ledger.close()


def test_a_worker_killed_mid_effect_blocks_its_item_on_another_worker_never_a_second_send(
    tmp_path: Path, receipts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The item Dask re-runs elsewhere refuses the unknown effect (blocked, with the command); after reconcile
    and unblock a second run finishes it; one receipt per key, and the ledger verifies."""
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("BACKLOG_GATE", str(gate))  # v's send is held before the receipt: the kill lands before it
    monkeypatch.setenv("BACKLOG_GATE_AT", "before")
    monkeypatch.setenv("BACKLOG_GATE_KEYS", "v:0")
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    bl = ledger.backlog("crash")
    bl.add("v", {"item": "v"}, priority=10)  # taken first
    bl.add_many([{"item": f"o{n}", "payload": {"item": f"o{n}"}} for n in range(2)])
    done, out = threading.Event(), {}  # type: ignore[var-annotated]
    killer = threading.Thread(target=_kill_mid_effect, args=(root, receipts, gate, "v", done, out))
    killer.start()
    try:
        view = bl.run(effects_step, workers=2, engine=_engine(), until_idle=True, inactivity=60)
    finally:
        done.set()
        killer.join()
    assert "pid" in out, "the victim's worker was never seen mid-effect"
    assert "v:0" not in out["receipts_at_kill"]
    states = {r.item: r.state for r in view.items}
    assert states == {"v": "blocked", "o0": "done", "o1": "done"}, view.to_json()
    assert _receipt_counts(receipts) == {"o0:0": 1, "o1:0": 1}  # the unknown effect was never sent again
    evs = list(ledger.task("crash.item.v").events())
    leases = [e.data for e in evs if e.kind == "lease.acquired"]
    assert len(leases) == 2 and leases[0]["pid"] == out["pid"] and leases[1]["pid"] != out["pid"]
    assert [e.kind for e in evs].count("attempt.started") == 1
    kinds = [(e.kind, e.data.get("item")) for e in bl.task.events()]
    assert ("backlog.holder_died", "v") in kinds and ("backlog.item_blocked", "v") in kinds
    ledger.close()

    shown = _cli(root, "backlog", "crash")
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith("v "))
    assert (
        "blocked" in row and "unknown effect" in row and "intentlog --root" in row and "reconcile crash.item.v" in row
    )
    refused = _cli(root, "unblock", "crash", "v")
    assert refused.returncode == 1  # still unknown: refused, nothing written

    # the receipt log says the provider never served v:0: record it, unblock, run again
    call = json.loads(_cli(root, "backlog", "crash", "--json").stdout)
    item = next(i for i in call["items"] if i["item"] == "v")
    assert "--not-served" in item["next_step"]
    assert response_for("v:0")  # the provider's answer would be deterministic (not needed: not served)
    callid = item["next_step"].split("reconcile crash.item.v ", 1)[1].split()[0]
    r = _cli(root, "reconcile", "crash.item.v", callid, "--not-served")
    assert r.returncode == 0, r.stderr
    r = _cli(root, "unblock", "crash", "v")
    assert r.returncode == 0, r.stderr
    monkeypatch.delenv("BACKLOG_GATE")
    r = _cli(root, "run", "crash", "--step", "backlog_steps:step", "--engine", "dask", "--workers", "1", "--until-idle")
    assert r.returncode == 0, r.stderr
    final = json.loads(_cli(root, "backlog", "crash", "--json").stdout)
    assert final["counts"]["done"] == 3, final
    assert _receipt_counts(receipts) == {"o0:0": 1, "o1:0": 1, "v:0": 1}
    v = _cli(root, "verify")
    assert v.returncode == 0, v.stdout + v.stderr


def test_engine_choices_are_checked_and_the_core_never_imports_dask(tmp_path: Path) -> None:
    """A bad engine is refused before anything runs; ``import intentlog`` loads no dask; a missing extra names it."""
    ledger = intentlog.open(tmp_path / "led")
    bl = ledger.backlog("b")
    bl.add("x", {"item": "x"})
    before = (tmp_path / "led" / "tasks" / "b.backlog.jsonl").read_bytes()
    with pytest.raises(ValueError, match="engine 'ray' is unknown"):
        bl.run(effects_step, engine="ray", until_idle=True)
    with pytest.raises(TypeError, match="engine"):
        bl.run(effects_step, engine=object(), until_idle=True)
    assert (tmp_path / "led" / "tasks" / "b.backlog.jsonl").read_bytes() == before
    code = (
        "import sys, intentlog, intentlog.cli, intentlog.backlog\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')], 'dask loaded'\n"
        "sys.modules['distributed'] = None\n"
        "from intentlog.backlog.dask_engine import DaskEngine\n"
        "try:\n    DaskEngine()\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("UsageError") and "pip install 'intentlog[dask]'" in out, out
    r = _cli(tmp_path / "led", "run", "b", "--step", "backlog_steps:step", "--scheduler", "tcp://x:1", "--until-idle")
    assert r.returncode == 2 and "--engine dask" in r.stderr, r.stderr
    assert (tmp_path / "led" / "tasks" / "b.backlog.jsonl").read_bytes() == before


def test_ctrl_c_to_the_process_group_lets_the_dask_workers_finish_the_effects_in_flight(
    tmp_path: Path, receipts: Path
) -> None:
    """SIGINT to the whole group (a terminal's Ctrl-C) mid-effect: the cluster's workers ignore it like local
    workers do; the two items in flight finish within the grace (one receipt each), the rest stay queued."""
    root = tmp_path / "led"
    with intentlog.open(root) as ledger:
        ledger.backlog("g").add_many([{"item": f"i{n}", "payload": {"item": f"i{n}"}} for n in range(4)])
    gate = tmp_path / "gate"
    gate.mkdir()
    env = dict(os.environ, BACKLOG_GATE=str(gate))  # every send is held after its receipt until the gate opens
    args = ["run", "g", "--step", "backlog_steps:step", "--engine", "dask", "--workers", "2", "--until-idle"]
    p = subprocess.Popen(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), *args, "--grace", "10"],
        env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stream = root / "tasks" / "g.backlog.jsonl"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            started = sorted(int(w.name[1]) for w in gate.glob("i*:0.waiting"))
            if len(started) == 2:
                break
            time.sleep(0.02)
        assert len(started) == 2, "the two effects never started"
        os.killpg(p.pid, signal.SIGINT)
        while b"backlog.run_stopping" not in stream.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.02)  # the run knows it is stopping
        (gate / "open").touch()  # only now can the two effects in flight finish
        _out, err = p.communicate(timeout=60)
    finally:
        (gate / "open").touch()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 0, err
    assert "KeyboardInterrupt" not in err, err[-2000:]
    view = json.loads(_cli(root, "backlog", "g", "--json").stdout)
    states = {i["item"]: i["state"] for i in view["items"]}
    assert sorted(states.values()) == ["done", "done", "queued", "queued"], states
    assert _receipt_counts(receipts) == {f"i{n}:0": 1 for n in started}
    with intentlog.open(root) as ledger:
        kinds = [e.kind for e in ledger.backlog("g").task.events()]
    assert "backlog.run_stopping" in kinds and kinds[-1] == "backlog.run_stopped"
