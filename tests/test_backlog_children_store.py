"""Child tasks and event waits in a backlog whose ledger is on the object store (a real SeaweedFS).

The same code path as on a folder: children are items run on the workers (the local engine
and Dask), the parent joining them holds no worker; an event waiter is woken when its
inbox's last segment moves. The provider's receipt log is the ground truth.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import s3_server
from backlog_chaos import receipt_counts
from backlog_children_steps import fanout, waiter

import intentlog
from intentlog.backlog import worker as worker_mod

TESTS = Path(__file__).parent
DOCS = ["a", "b", "c", "d"]


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    server = s3_server.seaweed()
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    for name in ("CHILDREN_MEET", "CHILDREN_FAIL", "CHILDREN_HOLD"):
        monkeypatch.delenv(name, raising=False)
    loc = s3_server.fresh_location()
    return f"s3://{loc.bucket}/{loc.prefix}"


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_a_fan_out_on_the_store_runs_its_children_as_items(url: str, tmp_path: Path, engine: str) -> None:
    if engine == "dask":
        pytest.importorskip("distributed", reason="the Dask engine tests need: pip install 'intentlog[dask]'")
    ledger = intentlog.open(url)
    b = ledger.backlog("fan")
    b.add("digest", {"docs": DOCS, "name": "s"})
    view = b.run(fanout, workers=2, engine=engine, until_idle=True)
    assert view.counts["done"] == 1 + len(DOCS), view.to_json()
    assert receipt_counts(tmp_path / "receipts.jsonl") == {f"sum:{d}": 1 for d in DOCS}
    res = [e.data["result"] for e in ledger.task("fan.item.digest").events() if e.kind == "item.returned"]
    assert res == [{"merged": [f"sum:{d}" for d in DOCS]}]
    rows = {r.item: r for r in view.items}
    assert rows["digest"].children == {"done": len(DOCS)}
    assert all(rows[f"s-{d}"].parent == "fan.item.digest" for d in DOCS)
    ledger.close()
    shown = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", url, "backlog", "fan", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert orjson.loads(shown.stdout)["items"][0]["children"] == {"done": len(DOCS)}


def test_an_event_waiter_on_the_store_is_woken_by_its_signal(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_mod, "EVENT_POLL", 3600.0)  # only the inbox watch can wake it in time
    ledger = intentlog.open(url)
    b = ledger.backlog("hooks")
    b.add("w", {})
    got: list[Any] = []
    run = threading.Thread(target=lambda: got.append(b.run(waiter, workers=1, until_idle=True, poll=0.02)))
    run.start()
    try:
        deadline = time.monotonic() + 120
        while not any(e.data.get("event") == "go" for e in b.task.events() if e.kind == "backlog.item_scheduled"):
            assert run.is_alive() and time.monotonic() < deadline
            time.sleep(0.05)  # waiting for the record to appear
        ledger.signal("hooks.item.w", "go", {"n": 3})
    finally:
        run.join(timeout=120)
    assert not run.is_alive() and got and got[0].counts["done"] == 1, got
    assert receipt_counts(tmp_path / "receipts.jsonl") == {"after:3": 1}
    ledger.close()
