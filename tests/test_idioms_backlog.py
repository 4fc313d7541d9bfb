"""Inside a backlog, a sleeping or waiting item releases its worker and is taken again when due.

The worker runs the step suspending (:func:`intentlog.idioms.suspend.suspending`): the
sleep or the wait is recorded, the item's lease released, and the backlog records the
item scheduled again (``backlog.item_scheduled``, no failure counted).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog.backlog import worker as worker_mod
from intentlog.eventlog.format import parse_utc
from intentlog.projections.idioms import EVENT_AWAITED, SLEEP_STARTED, WOKE


def sleepy(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """Sleeps ``payload['sleep']`` seconds (if any) between two lines of $IDIOMS_LOG."""
    with open(os.environ["IDIOMS_LOG"], "a", encoding="utf-8") as f:
        f.write(f"{payload['item']} start\n")
    if payload.get("sleep"):
        task.sleep_for(payload["sleep"], name="nap")
    with open(os.environ["IDIOMS_LOG"], "a", encoding="utf-8") as f:
        f.write(f"{payload['item']} end\n")
    return {"item": payload["item"]}


def waiting(task: intentlog.Task, payload: dict[str, Any]) -> Any:
    return task.wait_for_event("go")


def _kinds(task: intentlog.Task) -> list[str]:
    return [ev.kind for ev in task.events()]


def test_a_sleeping_item_releases_its_worker_and_is_taken_again_when_due(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker: the sleeper suspends (scheduled at its recorded wake time, no failure), the other item runs."""
    monkeypatch.setenv("IDIOMS_LOG", str(tmp_path / "log"))
    b = ledger.backlog("naps")
    b.add("a", {"item": "a", "sleep": 1.0}, priority=5)
    b.add("b", {"item": "b"})
    view = b.run(sleepy, workers=1, until_idle=True)
    assert {r.item: r.state for r in view.items} == {"a": "done", "b": "done"}
    a = ledger.task(view.items[0].task if view.items[0].item == "a" else view.items[1].task)
    kinds = _kinds(a)
    assert kinds.count("lease.acquired") == 2 and kinds.count(SLEEP_STARTED) == 1 and kinds.count(WOKE) == 1
    until = next(ev.data["until"] for ev in a.events() if ev.kind == SLEEP_STARTED)
    sched = [ev.data for ev in ledger.task("naps.backlog").events() if ev.kind == "backlog.item_scheduled"]
    assert len(sched) == 1 and sched[0]["item"] == "a" and sched[0]["failures"] == 0
    assert sched[0]["reason"] == f"sleeping until {until}"
    assert sched[0]["not_before"] == pytest.approx(parse_utc(until).timestamp())
    log = (tmp_path / "log").read_text().split("\n")
    assert log.count("a start") == 2 and log.count("a end") == 1 and log.count("b end") == 1


def test_a_waiting_item_is_taken_again_and_receives_its_event(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The item waits for 'go': suspended and looked at again; signalled, it returns the payload."""
    monkeypatch.setattr(worker_mod, "EVENT_POLL", 0.2)  # the workers are forked from this process
    b = ledger.backlog("hooks")
    b.add("w", {})
    task_id = b.view().items[0].task
    got: list[Any] = []
    run = threading.Thread(target=lambda: got.append(b.run(waiting, workers=1, until_idle=True)))
    run.start()
    try:
        stream = ledger.stream_path("hooks.backlog")
        while b"backlog.item_scheduled" not in stream.read_bytes():
            assert run.is_alive()
            time.sleep(0.02)  # waiting for the record to appear
        assert ledger.task(task_id).status().waiting == "waiting for event 'go'"
        row = b.view().items[0]
        assert row.state in ("scheduled", "running") and (row.state == "running" or "waits for an event" in row.reason)
        ledger.signal(task_id, "go", {"n": 1})
    finally:
        run.join(timeout=120)
    assert not run.is_alive()
    view = got[0]
    assert view.items[0].state == "done"
    returned = [ev.data["result"] for ev in ledger.task(task_id).events() if ev.kind == "item.returned"]
    assert returned == [{"n": 1}] and _kinds(ledger.task(task_id)).count(EVENT_AWAITED) == 1
