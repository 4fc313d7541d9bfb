"""After gc retires tasks on a store, every reader takes what is left for no task, as a folder does.

What gc leaves of a retired stream (segment 0 and the leases a fenced holder could still put
at) is no stream: the backlog's view and runs, ``report``, and ``merge`` into the store see the
retired task as gone (a folder after gc has no file), and none of them reads it as a damaged
stream to restore. Payments are checked against the synthetic provider's receipt log.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
import s3_server
from backlog_steps import read_receipts, step
from click.testing import CliRunner

import intentlog
from intentlog.checker import verify_ledger
from intentlog.cli import main
from intentlog.merge import merge
from intentlog.retention import apply_gc, keep

LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=60)


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    return s3_server.ledger_url(monkeypatch)


def _keys() -> list[str]:
    return [r["key"] for r in read_receipts(os.environ["BACKLOG_RECEIPTS"])]


def test_a_backlog_whose_done_items_gc_retired_still_views_and_runs(url: str) -> None:
    with intentlog.open(url) as led:
        bl = led.backlog("jobs")
        bl.add("i0", {"item": "i0", "effects": 1})
        assert bl.run(step, until_idle=True).counts["done"] == 1
    keep(intentlog.open(url), "jobs.backlog")
    assert list(apply_gc(intentlog.open(url), now=LATER).deleted) == ["jobs.item.i0"]
    r = CliRunner().invoke(main, ["--root", url, "backlog", "jobs", "--json"])
    assert r.exit_code == 0, r.output
    with intentlog.open(url) as led:
        bl = led.backlog("jobs")
        assert bl.add("i0", {"item": "i0", "effects": 1}).done  # the same item again: done, nothing to run
        bl.add("i1", {"item": "i1", "effects": 1})
        view = bl.run(step, until_idle=True)
        rows = [(i.item, i.state, i.reason) for i in view.items]
        assert view.counts["done"] == 2 and view.counts["queued"] == 0, rows
    assert sorted(_keys()) == ["i0:0", "i1:0"]  # each paid once


def test_report_and_merge_after_gc_agree_with_verify(url: str, tmp_path: Path) -> None:
    with intentlog.open(url) as led:
        led.task("old").append("note", {})
        led.task("kept").append("note", {})
    folder = tmp_path / "before-gc"
    assert merge(url, folder).verify is not None  # a copy that still holds "old"
    keep(intentlog.open(url), "kept")
    assert list(apply_gc(intentlog.open(url), now=LATER).deleted) == ["old"]
    assert verify_ledger(intentlog.open(url, create=False)).ok
    r = CliRunner().invoke(main, ["--root", url, "report", "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "r.html").read_text()
    assert "verify: ok" in page and "problem(s)" not in page  # as verify says
    assert 'id="task-kept"' in page and 'id="task-old"' not in page  # the retired task is no task
    result = merge(folder, url)  # the old copy merged back: the retired id is not copied, the rest verifies
    assert result.plan.retired == ["old"] and result.verify is not None and result.verify.ok
