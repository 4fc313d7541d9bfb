"""Items in flight and Dask batches with the ledger on an object store (a real SeaweedFS).

The async step's lanes run in a spawned worker process that opens the store itself; the
Dask engine keeps one Dask task per slot and sends it item after item. The provider on
127.0.0.1 keeps its own fsync'd receipt log, the ground truth: every key served once,
each receipt covered by an ``attempt.started`` in the store's record.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import s3_server
from backlog_inflight_steps import receipts, start_provider, step, sync_step

import intentlog

if os.environ.get("CI"):
    import distributed  # noqa: F401  (under CI a missing extra fails, never skips)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = s3_server.ledger_url(monkeypatch)
    proc, env = start_provider(tmp_path)
    monkeypatch.setenv("INFLIGHT_PORTFILE", env["INFLIGHT_PORTFILE"])
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])  # a spawned worker imports the step
    try:
        yield url
    finally:
        proc.kill()
        proc.wait()


def _started(ledger: intentlog.Ledger, tasks: list[str]) -> int:
    return sum(1 for t in tasks for ev in ledger.task(t).events() if ev.kind == "attempt.started")


def test_items_in_flight_on_the_store(tmp_path: Path, store: str) -> None:
    ledger = intentlog.open(store)
    b = ledger.backlog("fly")
    items = [f"i{n}" for n in range(12)]
    b.add_many([{"item": i, "payload": {"item": i}} for i in items])
    view = b.run(step, workers=1, in_flight=6, until_idle=True)
    assert view.counts["done"] == 12, view.to_json()
    tasks = [f"fly.item.{i}" for i in items]
    pids = {ev.data["pid"] for t in tasks for ev in ledger.task(t).events() if ev.kind == "lease.acquired"}
    assert len(pids) == 1  # one worker process held them all
    assert collections.Counter(receipts(tmp_path)) == {f"{i}:{e}": 1 for i in items for e in range(2)}
    assert _started(ledger, tasks) == 24
    ledger.close()
    v = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", store, "verify"], capture_output=True, text=True
    )
    assert v.returncode == 0, v.stdout + v.stderr


def test_dask_carries_batches_of_items_per_task_on_the_store(tmp_path: Path, store: str) -> None:
    """Ten items on two slots: two Dask tasks in all (one scheduler round trip per slot, not per item)."""
    pytest.importorskip("distributed", reason="the Dask engine tests need: pip install 'intentlog[dask]'")
    from intentlog.backlog.dask_engine import DaskEngine

    ledger = intentlog.open(store)
    b = ledger.backlog("dq")
    items = [f"d{n}" for n in range(10)]
    b.add_many([{"item": i, "payload": {"item": i}} for i in items])
    engine = DaskEngine(workers=2)
    view = b.run(sync_step, workers=2, engine=engine, until_idle=True)
    assert view.counts["done"] == 10, view.to_json()
    assert engine.submitted == 2
    assert collections.Counter(receipts(tmp_path)) == {f"{i}:{e}": 1 for i in items for e in range(2)}
    ledger.close()
