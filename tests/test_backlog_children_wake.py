"""An item waiting for an event is taken again when the signal lands in its inbox, not at a poll.

The fallback look (``worker.EVENT_POLL``) is set to an hour here: the item can only finish
within the test if the supervisor noticed the inbox move (:mod:`intentlog.backlog.wake`).
The latency is measured from the signal's return to the task's ``task.event_received``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from backlog_children_steps import waiter
from backlog_steps import read_receipts

import intentlog
from intentlog.backlog import worker as worker_mod
from intentlog.eventlog.format import parse_utc
from intentlog.projections.idioms import EVENT_RECEIVED


def test_a_waiting_item_is_woken_by_its_signal_not_by_a_poll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_mod, "EVENT_POLL", 3600.0)  # the workers are forked from this process
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    with intentlog.open(tmp_path / "l") as led:
        b = led.backlog("hooks")
        b.add("w", {})
        b.add("other", {})  # a second waiter, signalled last: both wait at once on one worker
        got: list[Any] = []
        run = threading.Thread(target=lambda: got.append(b.run(waiter, workers=1, until_idle=True, poll=0.02)))
        run.start()
        try:
            stream = led.stream_path("hooks.backlog")
            while stream.read_bytes().count(b'"event":"go"') < 2:  # both scheduled for their event
                assert run.is_alive()
                time.sleep(0.02)  # waiting for the records to appear
            rows = {r.item: r for r in b.view().items}
            assert rows["w"].state == "scheduled" and "waits for an event" in (rows["w"].reason or "")
            assert "intentlog signal hooks.item.w go" in rows["w"].next_step
            led.signal("hooks.item.w", "go", {"n": 7})
            signalled = time.time()
            task = led.task("hooks.item.w")
            deadline = time.monotonic() + 60  # a bound for a broken wake only: the fallback look is an hour away
            while not any(e.kind == "item.returned" for e in task.events()):
                assert run.is_alive() and time.monotonic() < deadline, "the signal did not wake the item"
                time.sleep(0.02)  # waiting for the record to appear
        finally:
            led.signal("hooks.item.other", "go", {"n": 8})  # the run ends once both are done
            run.join(timeout=120)
        assert not run.is_alive() and got[0].counts["done"] == 2, got
        received = next(e for e in led.task("hooks.item.w").events() if e.kind == EVENT_RECEIVED)
        latency = parse_utc(received.ts).timestamp() - signalled
        print(f"wake latency: {latency:.3f} s")
        assert latency < worker_mod.EVENT_POLL
    assert [r["key"] for r in read_receipts(str(tmp_path / "receipts.jsonl"))] == ["after:7", "after:8"]
