"""A backlog never adopts a task it did not start: ``add`` refuses it, ``run`` and the view never take it.

An item's task is ``NAME.item.ID``; a task of that name can exist without the backlog
(a user's own task, or one left by an earlier backlog of the same name). Its records
are not the item's: the tests check that nothing reads its result as the item's, that
the step never runs in it (the provider's receipt log stays empty) and that nothing is
written into it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from backlog_steps import read_receipts, step

import intentlog
from intentlog.backlog import ItemTaskTaken, StillBlocked
from intentlog.backlog.model import foreign_records

TESTS = Path(__file__).parent


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("BACKLOG_ORDER", str(tmp_path / "order.jsonl"))
    monkeypatch.setenv("BACKLOG_SLEEP", "0")


def _receipts(tmp_path: Path) -> list[str]:
    p = tmp_path / "receipts.jsonl"
    return [r["key"] for r in read_receipts(str(p))] if p.exists() else []


def _old_item_task(ledger: intentlog.Ledger, task_id: str, backlog: str, item: str) -> list[str]:
    """What an earlier backlog's run left in an item task: a lease, a result, a release."""
    t = ledger.task(task_id)
    t.append("lease.acquired", {"epoch": 1, "pid": 1, "host": "old", "start_time": None, "backlog": backlog,
                                "item": item})  # fmt: skip
    t.append("item.returned", {"result": {"old": "result of 2023"}, "epoch": 1})
    t.append("lease.released", {"epoch": 1})
    t.close()
    return [e.digest for e in t.events()]


def test_add_refuses_an_item_whose_task_already_exists(ledger: intentlog.Ledger) -> None:
    digests = _old_item_task(ledger, "reports.item.2024", "reports", "2024")
    b = ledger.backlog("reports")
    b.add("2023", {"year": 2023})  # the backlog exists; its stream is what must not move
    before = [e.digest for e in b.task.events()]
    with pytest.raises(ItemTaskTaken, match=r"reports\.item\.2024.*already exists.*nothing was written"):
        b.add("2024", {"year": 2024})
    with pytest.raises(ItemTaskTaken):  # all or nothing: the good item is not added either
        b.add_many([{"item": "2025", "payload": {}}, {"item": "2024", "payload": {}}])
    assert [e.digest for e in b.task.events()] == before
    assert [e.digest for e in ledger.task("reports.item.2024").events()] == digests
    assert [r.item for r in b.view().items] == ["2023"]


def test_add_refuses_a_users_plain_task_of_the_items_name(ledger: intentlog.Ledger) -> None:
    t = ledger.task("mail.item.x")
    t.append("note", {"mine": True})
    t.close()
    with pytest.raises(ItemTaskTaken, match=r"'note'"):
        ledger.backlog("mail").add("x", {"to": "a"})
    assert not any(e.kind.startswith("backlog.") for e in ledger.task("mail.backlog").events())


def test_run_never_adopts_a_task_written_after_the_add(ledger: intentlog.Ledger, env: None, tmp_path: Path) -> None:
    b = ledger.backlog("reports")
    b.add("2024", {"item": "2024"})
    b.add("ok", {"item": "ok"})
    b.task.close()
    digests = _old_item_task(ledger, "reports.item.2024", "reports-old", "2024")  # appears between add and run
    row = b.item("2024")
    assert row.state == "blocked" and "first leased for backlog 'reports-old'" in (row.reason or "")
    view = b.run(step, workers=1, until_idle=True)
    states = {r.item: r.state for r in view.items}
    assert states == {"2024": "blocked", "ok": "done"}
    assert _receipts(tmp_path) == ["ok:0"], "the step never ran for the foreign task"
    assert [e.digest for e in ledger.task("reports.item.2024").events()] == digests, "nothing written into it"
    kinds = [(e.kind, e.data.get("item")) for e in b.task.events() if e.kind.startswith("backlog.item_")]
    assert ("backlog.item_done", "2024") not in kinds
    assert ("backlog.item_blocked", "2024") in kinds
    with pytest.raises(StillBlocked, match="another item id"):
        b.unblock("2024")


def test_a_result_written_by_someone_else_is_never_the_items(
    ledger: intentlog.Ledger, env: None, tmp_path: Path
) -> None:
    """A result is the item's only when written under one of the backlog's leases of that item."""
    b = ledger.backlog("reports")
    b.add("2024", {"item": "2024"})
    b.task.close()
    t = ledger.task("reports.item.2024")
    t.append("item.returned", {"result": "forged", "epoch": 1})
    t.close()
    assert b.item("2024").state == "queued"
    view = b.run(step, workers=1, until_idle=True)
    assert [r.state for r in view.items] == ["done"]
    assert _receipts(tmp_path) == ["2024:0"], "the item ran: the forged result was not taken for its own"
    returned = [e.data["result"] for e in t.events() if e.kind == "item.returned"]
    assert returned == ["forged", {"served": ["2024:0"]}]


def test_the_backlogs_own_item_tasks_are_its_own(ledger: intentlog.Ledger, env: None, tmp_path: Path) -> None:
    b = ledger.backlog("nightly")
    for i in range(3):
        b.add(f"i{i}", {"item": f"i{i}"})
    view = b.run(step, workers=1, until_idle=True)
    assert [r.state for r in view.items] == ["done"] * 3
    for i in range(3):
        tid = f"nightly.item.i{i}"
        assert foreign_records(tid, ledger.task(tid).events()) is None
    assert foreign_records("nightly.item.i0", ledger.task("nightly.item.i1").events()) is not None
    assert sorted(_receipts(tmp_path)) == ["i0:0", "i1:0", "i2:0"]


def test_the_view_cache_keeps_a_foreign_task_foreign(ledger: intentlog.Ledger) -> None:
    """A backlog large enough to be cached shows the foreign item the same from the cache."""
    b = ledger.backlog("big")
    b.add_many([{"item": f"i{i}", "payload": i} for i in range(70)])
    b.task.close()
    _old_item_task(ledger, "big.item.i5", "big", "i55")
    first = b.view()
    assert os.path.exists(ledger.root / "cache" / "backlog-big.json")
    second = b.view()
    for v in (first, second):
        assert v.counts["blocked"] == 1 and v.counts["done"] == 0
        assert v.items[5].state == "blocked"


def test_add_refuses_an_existing_task_on_a_store_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import s3_server

    with intentlog.open(s3_server.ledger_url(monkeypatch)) as led:
        digests = _old_item_task(led, "reports.item.2024", "reports", "2024")
        b = led.backlog("reports")
        b.add("2023", {"year": 2023})
        with pytest.raises(ItemTaskTaken, match="already exists"):
            b.add("2024", {"year": 2024})
        assert [r.item for r in b.view().items] == ["2023"]
        assert [e.digest for e in led.task("reports.item.2024").events()] == digests
        for i in range(3):  # the kept fold on a store: each add folds only its own record
            b.add(f"n{i}", {"n": i})
        assert [r.item for r in b.view().items] == ["2023", "n0", "n1", "n2"]


def test_a_backlog_never_adopts_a_task_named_like_its_stream(
    ledger: intentlog.Ledger, env: None, tmp_path: Path
) -> None:
    """A user's task ``reports.backlog`` is not a backlog: add, run and unblock refuse to write into it."""
    from intentlog.backlog import BacklogTaken

    t = ledger.task("reports.backlog")
    t.append("note", {"mine": True})
    t.append("backlog.item_added", {"item": "x", "task": "reports.item.x", "payload_hash": "h", "payload": {},
                                    "priority": 0})  # fmt: skip
    t.close()
    digests = [e.digest for e in t.events()]
    b = ledger.backlog("reports")
    with pytest.raises(BacklogTaken, match=r"'note' comes first.*nothing was written"):
        b.add("2024", {"item": "2024"})
    with pytest.raises(BacklogTaken):
        b.run(step, workers=1, until_idle=True)
    with pytest.raises(BacklogTaken):
        b.unblock("x")
    with pytest.raises(BacklogTaken):
        b.view()  # its records are not a backlog's: no view of them as one
    assert [e.digest for e in t.events()] == digests
    assert _receipts(tmp_path) == []
    assert not ledger.task("reports.item.x").exists()
