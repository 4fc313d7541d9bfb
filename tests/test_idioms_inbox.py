"""A task and its inbox (``<task>.inbox``, where signals are written) are one unit for retention.

gc keeps or expires them together: a waiting task keeps its inbox (a signal it has not yet
received is never lost), a kept task keeps its inbox, an inbox held for its own reason keeps
its task, and an idle task with its inbox goes with it. The same plan on a folder and on an
``s3://`` ledger (a real SeaweedFS).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import s3_server
from click.testing import CliRunner

import intentlog
from intentlog.cli import main
from intentlog.idioms import Suspended
from intentlog.retention import apply_gc, keep, plan_gc

LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=60)


def _build(ledger: intentlog.Ledger) -> None:
    with pytest.raises(Suspended):
        ledger.task("waiter").wait_for_event("go", block=False)
    ledger.task("waiter").close()  # the waiter's process ended: its script continues when re-run
    ledger.signal("waiter", "go", {"approved": True})  # arrived; not yet received by the task
    ledger.task("done").finish(1)
    ledger.signal("done", "late", 2)
    ledger.task("marked").finish(3)
    ledger.signal("marked", "note", 4)
    ledger.task("plain").finish(5)
    ledger.signal("alone", "early", 6)  # an inbox whose task was never started
    ledger.task("held-box").finish(7)
    ledger.signal("held-box", "x", 8)


def _scenario(opener: Callable[[], intentlog.Ledger]) -> None:
    with opener() as ledger:
        _build(ledger)  # closed: no writer holds a stream any more
    with opener() as ledger:
        keep(ledger, "marked", "evidence")
        keep(ledger, "held-box.inbox", "the sender's receipt")
        plan = plan_gc(ledger, max_age="30d", now=LATER)
        kept = {k.task: k.rule for k in plan.kept}
        assert sorted(t.task for t in plan.expired) == ["alone.inbox", "done", "done.inbox", "plain"]
        assert kept["waiter"] == "protected" and kept["waiter.inbox"] == "unit"
        assert kept["marked"] == "keep" and kept["marked.inbox"] == "unit"
        assert kept["held-box.inbox"] == "keep" and kept["held-box"] == "unit"
        details = {k.task: k.detail for k in plan.kept}
        assert "waiter" in details["waiter.inbox"] and "held-box.inbox" in details["held-box"]
        result = apply_gc(ledger, plan)
        assert sorted(result.deleted) == ["alone.inbox", "done", "done.inbox", "plain"]
    with opener() as ledger:
        assert ledger.task("waiter").wait_for_event("go") == {"approved": True}  # the signal was not lost


def test_a_task_and_its_inbox_are_kept_or_expired_together(ledger_root: Path) -> None:
    _scenario(lambda: intentlog.open(ledger_root))


def test_a_task_and_its_inbox_are_one_unit_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3_server.ledger_url(monkeypatch)
    _scenario(lambda: intentlog.open(url))


def _tasks_json(root: str) -> list[dict[str, Any]]:
    got = CliRunner().invoke(main, ["--root", root, "tasks", "--json"])
    assert got.exit_code == 0, got.output
    rows: list[dict[str, Any]] = json.loads(got.output)
    return rows


def _listing(opener: Callable[[], intentlog.Ledger], root: str) -> None:
    with opener() as ledger:
        _build(ledger)
    rows = {r["task"]: r for r in _tasks_json(root)}
    assert "waiter.inbox" not in rows and "done.inbox" not in rows  # folded into their tasks' rows
    assert rows["alone.inbox"]["pending_events"] == []  # no task of its own to fold into: listed
    waiter = rows["waiter"]
    assert waiter["pending_events"] == ["go"] and "arrived" in waiter["next_step"], waiter
    assert rows["done"]["pending_events"] == ["late"] and rows["plain"]["pending_events"] == []
    table = CliRunner().invoke(main, ["--root", root, "tasks"]).output
    assert "waiter (1 pending event)" in table and "waiter.inbox" not in table
    status = CliRunner().invoke(main, ["--root", root, "status", "waiter", "--json"])
    assert "arrived" in json.loads(status.output)["next_step"]
    with opener() as ledger:
        assert ledger.task("waiter").wait_for_event("go") == {"approved": True}
    rows = {r["task"]: r for r in _tasks_json(root)}
    assert rows["waiter"]["pending_events"] == [] and rows["waiter"]["state"] != "interrupted"


def test_tasks_lists_an_inbox_under_its_task_with_the_events_pending(ledger_root: Path) -> None:
    _listing(lambda: intentlog.open(ledger_root), str(ledger_root))


def test_tasks_folds_inboxes_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3_server.ledger_url(monkeypatch)
    _listing(lambda: intentlog.open(url), url)


def test_a_size_cap_takes_a_task_and_its_inbox_together(ledger_root: Path) -> None:
    """The cap is met by deleting the oldest task alone; its inbox goes with it, the newer task stays."""
    with intentlog.open(ledger_root) as ledger:
        ledger.task("a").finish(1)
        ledger.signal("a", "late", 2)
        ledger.task("z").finish(3)
    with intentlog.open(ledger_root) as ledger:
        total = plan_gc(ledger, max_age="none", max_size="none", now=LATER).bytes_before
        cap = total - (ledger_root / "tasks" / "a.jsonl").stat().st_size
        plan = plan_gc(ledger, max_age="none", max_size=cap, now=LATER)
        assert sorted(t.task for t in plan.expired) == ["a", "a.inbox"]
        assert [k.task for k in plan.kept] == ["z"]


def _race(monkeypatch: pytest.MonkeyPatch, session: type, opener: Callable[[], intentlog.Ledger]) -> None:
    """A writer takes the task up again after the apply's plan, before its streams go: the inbox stays with it."""
    real = session.delete_streams
    calls: list[list[str]] = []

    def resumed_first(self: Any, expired: Any, *args: Any) -> None:
        if not calls:
            with opener() as other:
                other.task("done").append("note", {"resumed": True})  # the task changes: gc must skip it
        calls.append([t.task for t in expired])
        real(self, expired, *args)

    monkeypatch.setattr(session, "delete_streams", resumed_first)
    with opener() as ledger:
        ledger.task("done").finish(1)
        ledger.signal("done", "late", 2)
        ledger.task("plain").finish(5)
        ledger.task("marked").finish(6)
    with opener() as ledger:
        keep(ledger, "marked")  # a plan that keeps nothing is refused
        result = apply_gc(ledger, max_age="30d", now=LATER)
        skipped = dict(result.skipped)
        assert result.deleted == ("plain",) and "done" in skipped, result
        assert "kept with its task 'done'" in skipped["done.inbox"]
        assert ledger.signal("done", "late", 2) is not None  # the recorded signal is still there: the same again
        assert [ev.kind for ev in ledger.task("done.inbox").events()].count("task.signalled") == 1


def test_an_inbox_stays_when_its_task_is_taken_up_during_the_apply(
    ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from intentlog.retention.folder import FolderSession

    _race(monkeypatch, FolderSession, lambda: intentlog.open(ledger_root))


def test_an_inbox_stays_with_its_task_taken_up_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    from intentlog.s3.gcsource import StoreSession

    url = s3_server.ledger_url(monkeypatch)
    _race(monkeypatch, StoreSession, lambda: intentlog.open(url))
