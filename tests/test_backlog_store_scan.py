"""A live supervisor's backlog lease on a store is never taken as stale while it reads its items at start.

``add``, ``unblock`` and the next ``run`` take back a backlog stream whose tail stood still for
``BACKLOG_STALE`` s (a SIGKILLed supervisor's). A supervisor starting on a large backlog reads every
item task before its first turn; it used to hold the lease through that read, so an ``add`` meanwhile
fenced the live supervisor, whose next record was refused (``LeaseLost``): the run died with a
traceback as soon as the read recorded an item it found done in its task. The read is slowed here
to past the stale limit (a real process, a real SeaweedFS).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import s3_server

import intentlog
from intentlog.backlog.leases import BACKLOG_STALE
from intentlog.backlog.worker import run_item

TESTS = Path(__file__).parent

#: a supervisor whose start-up read of the item tasks takes longer than the stale limit
SLOW_SCAN = """
import sys, time, intentlog
import intentlog.backlog.supervisor as sup
from backlog_steps import step
real = sup.read_returned_and_reserved
def slow(*a, **k):
    print("scanning", flush=True)
    time.sleep(float(sys.argv[2]))
    return real(*a, **k)
sup.read_returned_and_reserved = slow
view = intentlog.open(sys.argv[1]).backlog("g").run(step, workers=1, until_idle=True, poll=0.02)
print("done", view.counts["done"], flush=True)
"""


class _NoQuota:
    def poll(self) -> bool:
        return False


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


def test_an_add_during_a_long_start_does_not_fence_the_live_supervisor(url: str, tmp_path: Path) -> None:
    with intentlog.open(url) as led:
        bl = led.backlog("g")
        recs = bl.add_many([{"item": f"i{n}", "payload": {"item": f"i{n}", "effects": 0}} for n in range(3)])
        name = bl.stream_id
        # i0 ran to its end but its backlog record was lost (a crash): the start finds it in its task and records it
        conn: Any = _NoQuota()
        answer = run_item(led.task(recs[0].task), conn, "i0", "g", {}, lambda task, payload: {"ok": 1}, asks=False)
        assert answer[0] == "done"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "BACKLOG_RECEIPTS": str(tmp_path / "receipts.jsonl"),
    }
    sup = subprocess.Popen(
        [sys.executable, "-c", SLOW_SCAN, url, str(BACKLOG_STALE + 4)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert sup.stdout is not None and sup.stdout.readline().strip() == "scanning"
        time.sleep(1)  # the add then waits for a held lease to stand still BACKLOG_STALE s: inside the scan
        with intentlog.open(url) as led:
            led.backlog("g").add("late", {"item": "late", "effects": 1})
        out, err = sup.communicate(timeout=120)
    finally:
        sup.kill()
    assert sup.returncode == 0, err
    assert "LeaseLost" not in err
    assert out.split()[-2:] == ["done", "4"], out  # the live run went on and ran the late item too
    with intentlog.open(url, create=False) as led:
        kinds = [e.kind for e in led.task(name).events()]
    assert kinds.count("backlog.run_stopped") == 1 and kinds[-1] == "backlog.run_stopped"
    assert kinds.count("backlog.item_done") == 4
