"""Dask workers SIGKILLed at random under a backlog: the receipt log as ground truth, 0 duplicate effects.

A real LocalCluster of 2 worker processes; a killer thread SIGKILLs whichever Dask worker
holds a running item, three times, at random moments. Each killed item is run again by
Dask on a worker that resumes it; unknown effects block it. Settling them from the receipt
log (served: its answer as evidence; not served: not served), unblocking and running again
ends with every item done, each key served exactly once, and the ledger verifying. Also a
running cluster given by address (``--scheduler``), which the run leaves running.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from backlog_chaos import receipt_counts as _counts
from backlog_chaos import running_holders, settle
from backlog_steps import step as effects_step

import intentlog

TESTS = Path(__file__).parent
ITEMS, EFFECTS, KILLS = 8, 2, 3

if os.environ.get("CI"):
    import distributed
else:
    distributed = pytest.importorskip("distributed", reason="the Dask engine tests need: pip install 'intentlog[dask]'")

from intentlog.backlog.dask_engine import DaskEngine  # noqa: E402


@pytest.fixture
def receipts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "receipts.jsonl"
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return path


def _killer(root: Path, stop: threading.Event, killed: list[int]) -> None:
    rng = random.Random(int(os.environ.get("BACKLOG_DASK_SEED", "0")) or None)
    ledger = intentlog.open(root)
    try:
        while len(killed) < KILLS and not stop.is_set():
            time.sleep(rng.uniform(0.2, 0.8))
            items = [f"i{n}" for n in range(ITEMS)]
            pids = [p for p in running_holders(ledger, "m", items) if p not in killed and p != os.getpid()]
            if pids:
                pid = rng.choice(pids)
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
    finally:
        ledger.close()


def test_random_worker_kills_settle_to_all_done_with_one_receipt_per_key(
    tmp_path: Path, receipts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_SLEEP", "0.3")
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    bl = ledger.backlog("m")
    bl.add_many([{"item": f"i{n}", "payload": {"item": f"i{n}", "effects": EFFECTS}} for n in range(ITEMS)])
    stop, killed = threading.Event(), []  # type: ignore[var-annotated]
    killer = threading.Thread(target=_killer, args=(root, stop, killed))
    killer.start()
    try:
        bl.run(effects_step, workers=2, engine=DaskEngine(workers=2), until_idle=True, inactivity=60)
    finally:
        stop.set()
        killer.join()
    assert killed, "no worker was killed: the test proved nothing"
    assert all(v == 1 for v in _counts(receipts).values()), _counts(receipts)
    died = [e for e in bl.task.events() if e.kind == "backlog.holder_died"]
    assert len(died) >= 1
    monkeypatch.setenv("BACKLOG_SLEEP", "0")
    for _ in range(4):
        if bl.view().counts["done"] == ITEMS:
            break
        settle(ledger, "m", set(_counts(receipts)))
        bl.run(effects_step, workers=2, engine="dask", until_idle=True)
        assert all(v == 1 for v in _counts(receipts).values()), _counts(receipts)
    assert bl.view().counts["done"] == ITEMS, bl.view().to_json()
    assert _counts(receipts) == {f"i{n}:{j}": 1 for n in range(ITEMS) for j in range(EFFECTS)}
    ledger.close()
    r = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), "verify"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_running_scheduler_by_address_is_used_and_left_running(tmp_path: Path, receipts: Path) -> None:
    """``intentlog run --engine dask --scheduler ADDRESS``: the items run on that cluster's workers, which stay up."""
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        worker_pids = set(client.run(os.getpid).values())
        root = tmp_path / "led"
        with intentlog.open(root) as ledger:
            ledger.backlog("s").add_many([{"item": f"i{n}", "payload": {"item": f"i{n}"}} for n in range(3)])
        env = dict(os.environ)
        r = subprocess.run(
            [
                sys.executable, "-m", "intentlog.cli", "--root", str(root), "run", "s", "--step", "backlog_steps:step",
                "--engine", "dask", "--scheduler", cluster.scheduler_address, "--workers", "2", "--until-idle",
                "--json",
            ],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        with intentlog.open(root) as ledger:
            leases = [
                e.data["pid"]
                for n in range(3)
                for e in ledger.task(f"s.item.i{n}").events()
                if e.kind == "lease.acquired"
            ]
        assert set(leases) == worker_pids  # every item ran on the given cluster's worker
        assert set(client.run(os.getpid).values()) == worker_pids  # and the cluster is still up
        assert _counts(receipts) == {"i0:0": 1, "i1:0": 1, "i2:0": 1}
