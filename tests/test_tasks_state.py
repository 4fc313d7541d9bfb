"""``intentlog tasks``: a backlog's row says when its items need a person; ``--state`` picks rows by state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from backlog_steps import approval_step, noop, refused_step
from click.testing import CliRunner

import intentlog
from intentlog.cli import main
from intentlog.views import STATES


def _mixed(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    if payload.get("approval"):
        return approval_step(task, payload)
    if payload.get("refused"):
        return refused_step(task, payload)
    return noop(task, payload)


def _cli(root: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["--root", str(root), *args], catch_exceptions=False)


@pytest.fixture
def blocked_backlog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Backlog ``nb``: one item done, one awaiting approval (a run ended idle)."""
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    root = tmp_path / "led"
    with intentlog.open(root) as led:
        b = led.backlog("nb")
        b.add("a", {"item": "a"})
        b.add("b", {"item": "b", "approval": True})
        b.run(_mixed, until_idle=True)
    return root


def _rows(root: Path, *args: str) -> list[dict[str, Any]]:
    r = _cli(root, "tasks", "--json", *args)
    assert r.exit_code == 0, r.output
    return list(json.loads(r.output))


def test_a_backlog_with_an_item_awaiting_a_person_is_not_shown_complete(blocked_backlog: Path) -> None:
    row = next(r for r in _rows(blocked_backlog) if r["task"] == "nb.backlog")
    assert row["state"] == "awaiting approval", row
    assert "intentlog" in row["next_step"] and "backlog nb" in row["next_step"], row
    st = intentlog.open(blocked_backlog).task("nb.backlog").status()
    assert st.state == "awaiting approval" and "'b'" in str(st.reason)


def test_the_backlog_row_follows_its_items_queued_awaiting_complete_or_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    with intentlog.open(tmp_path / "l") as led:
        b = led.backlog("pb")
        b.add("b", {"item": "b", "approval": True})
        st = led.task("pb.backlog").status()
        assert (st.state, st.next_operation) == ("interrupted", "run the script"), st  # not run yet: run it
        assert "intentlog run pb --step" in st.next_step
        b.run(_mixed, until_idle=True)
        st = led.task("pb.backlog").status()
        assert (st.state, st.next_operation) == ("awaiting approval", "decide approval"), st
        assert "intentlog unblock pb ITEM" in st.next_step
        item = led.task("pb.item.b")
        item.decide("go", "approve", by="ana", request_hash=item.approvals()["go"].binding)
        item.close()
        b.unblock("b")
        b.run(_mixed, until_idle=True)
        assert b.view().counts["done"] == 1
        st = led.task("pb.backlog").status()
        assert (st.state, st.next_step) == ("complete", "nothing: the task is complete"), st
        r = led.backlog("pr")
        r.add("r", {"item": "r", "refused": True})
        r.run(_mixed, until_idle=True)
        st = led.task("pr.backlog").status()
        assert (st.state, st.next_operation) == ("paused for review", "operator decides"), st
        assert "item 'r' waits for a person" in str(st.reason)


def test_tasks_state_filters_the_rows_table_and_json(blocked_backlog: Path) -> None:
    waiting = _rows(blocked_backlog, "--state", "awaiting approval")
    assert sorted(r["task"] for r in waiting) == ["nb.backlog", "nb.item.b"]
    assert [r["task"] for r in _rows(blocked_backlog, "--state", "complete")] == ["nb.item.a"]
    both = _rows(blocked_backlog, "--state", "complete", "--state", "awaiting approval")
    assert len(both) == 3
    table = _cli(blocked_backlog, "tasks", "--state", "complete")
    assert table.exit_code == 0
    assert "nb.item.a" in table.output and "nb.item.b" not in table.output
    none = _cli(blocked_backlog, "tasks", "--state", "failed")
    assert none.exit_code == 0 and none.output == "no tasks in state 'failed'\n"


def test_an_unknown_state_is_usage_naming_the_states(blocked_backlog: Path) -> None:
    r = CliRunner().invoke(main, ["--root", str(blocked_backlog), "tasks", "--state", "done", "--json"])
    assert r.exit_code == 2
    assert all(s in r.output for s in STATES)
    assert '"exit_code": 2' in r.output


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and "cache" not in p.parts}


def test_unblock_dry_run_says_what_it_would_append_and_writes_nothing(blocked_backlog: Path) -> None:
    """Refused while the approval is pending; once decided, the event it would append; never a byte written."""
    before = _snapshot(blocked_backlog)
    refused = _cli(blocked_backlog, "unblock", "nb", "b", "--dry-run")
    assert refused.exit_code == 1 and "still awaiting approval" in refused.output
    assert _snapshot(blocked_backlog) == before
    with intentlog.open(blocked_backlog) as led:
        item = led.task("nb.item.b")
        item.decide("go", "approve", by="ana", request_hash=item.approvals()["go"].binding)
    before = _snapshot(blocked_backlog)
    r = _cli(blocked_backlog, "unblock", "nb", "b", "--by", "ana", "--dry-run")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("dry run: would append backlog.item_unblocked to nb.backlog at seq ")
    assert '"by":"ana"' in r.output and "nothing was written" in r.output
    j = _cli(blocked_backlog, "unblock", "nb", "b", "--dry-run", "--json")
    got = json.loads(j.output)
    assert got["dry_run"] is True and got["kind"] == "backlog.item_unblocked" and got["data"]["item"] == "b"
    assert _snapshot(blocked_backlog) == before
    done = _cli(blocked_backlog, "unblock", "nb", "b")
    assert done.exit_code == 0 and "queued again" in done.output
    missing = _cli(blocked_backlog, "unblock", "nb", "zz", "--dry-run")
    assert missing.exit_code == 1 and "no item 'zz'" in missing.output
