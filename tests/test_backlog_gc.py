"""gc never deletes what a backlog still needs: an unfinished item's task is the record a later run resumes from.

Found by trying gc on a ledger with a backlog: an item whose step had paid and then failed
was scheduled for a retry; its task, awaiting acceptance and unlocked, was old enough for
gc's age rule, gc deleted it, and the retry paid a second time.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

import pytest
from backlog_steps import read_receipts, serve, step

import intentlog
from intentlog.retention.apply import apply_gc
from intentlog.retention.plan import plan_gc


@pytest.fixture
def receipts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "receipts.jsonl"
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(path))
    return path


def _later() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(days=2)


def test_gc_keeps_an_unfinished_items_task_and_the_retry_pays_once(tmp_path: Path, receipts: Path) -> None:
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        b = led.backlog("nb")
        b.add("x", {"item": "x", "effects": 1})
        b.add("y", {"item": "y", "effects": 1})
        item_task = b.task_id("x")
        led.task(item_task).effect("e0", {"pkey": "x:0"}, serve)  # a run paid, then died before the backlog knew
    assert [r["key"] for r in read_receipts(str(receipts))] == ["x:0"]
    with intentlog.open(root) as led:
        plan = plan_gc(led, max_age="1d", now=_later())
        kept = {k.task: k for k in plan.kept}
        assert item_task not in {e.task for e in plan.expired}
        assert kept[item_task].rule == "backlog" and "'nb'" in kept[item_task].detail
        assert kept["nb.backlog"].rule == "backlog"  # its queue is the record of what is still to do
        apply_gc(led, plan)
        assert led.task(item_task).exists()
    with intentlog.open(root) as led:
        led.backlog("nb").run(step, until_idle=True)
        view = led.backlog("nb").view()
        assert view.counts["done"] == 2
    keys = [r["key"] for r in read_receipts(str(receipts))]
    assert sorted(keys) == ["x:0", "y:0"], "the retry replayed x's completed call instead of paying again"
    with intentlog.open(root) as led:  # both items done: nothing of the backlog holds their tasks any more
        plan = plan_gc(led, max_age="1d", now=_later())
        expired = {e.task for e in plan.expired}
        assert {item_task, led.backlog("nb").task_id("y"), "nb.backlog"} <= expired


def test_a_backlog_stream_gc_cannot_read_holds_every_task_named_like_its_items(tmp_path: Path, receipts: Any) -> None:
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        b = led.backlog("nb")
        b.add("x", {"item": "x"})
        led.task(b.task_id("x")).append("note", {})
        led.task("other").append("note", {})
    stream = root / "tasks" / "nb.backlog.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"', b"'", 2)  # a line in the middle no longer parses
    stream.write_bytes(b"".join(lines))
    with intentlog.open(root) as led:
        plan = plan_gc(led, max_age="1d", now=_later())
        kept = {k.task: k.rule for k in plan.kept}
        assert kept["nb.item.x"] == "backlog"
        assert "other" in {e.task for e in plan.expired}


def test_unblocking_an_item_that_never_ran_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        led.backlog("nb").add("x", {"item": "x"})
    before = (root / "tasks" / "nb.backlog.jsonl").read_bytes()
    with intentlog.open(root) as led, pytest.raises(intentlog.UsageError, match="not blocked"):
        led.backlog("nb").unblock("x")
    assert (root / "tasks" / "nb.backlog.jsonl").read_bytes() == before
