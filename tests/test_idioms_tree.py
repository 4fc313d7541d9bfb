"""The parent/child tree in ``status`` and ``report``: a parent lists its children with their state
and next step, a child names its parent; the same on a folder and an ``s3://`` ledger (a real SeaweedFS)."""

from __future__ import annotations

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


def _build(ledger: intentlog.Ledger) -> None:
    parent = ledger.task("parent")
    parent.spawn("sum-1", {"doc": 1}, run=lambda child: "summary 1")
    waiter = parent.spawn("sum-2", {"doc": 2})
    with pytest.raises(Suspended):
        waiter.wait_for_event("review", block=False)
    waiter.close()


def _cli(root: str, *argv: str) -> Any:
    got = CliRunner().invoke(main, ["--root", root, *argv])
    assert got.exit_code in (0, 3), got.output
    return got


def _tree(opener: Callable[[], intentlog.Ledger], root: str) -> None:
    with opener() as ledger:
        _build(ledger)
    st = json.loads(_cli(root, "status", "parent", "--json").output)
    assert st["parent"] is None
    kids = {c["task"]: c for c in st["children"]}
    assert list(kids) == ["sum-1", "sum-2"]
    assert kids["sum-2"]["state"] == "interrupted" and "signal" in kids["sum-2"]["next_step"], kids
    assert kids["sum-1"]["state"] != "interrupted"
    child = json.loads(_cli(root, "status", "sum-2", "--json").output)
    assert child["parent"] == "parent" and child["children"] == []
    text = _cli(root, "status", "parent").output
    assert "child           sum-2 [interrupted]" in text, text
    assert "parent          parent" in _cli(root, "status", "sum-1").output


def test_status_shows_the_tree(ledger_root: Path) -> None:
    _tree(lambda: intentlog.open(ledger_root), str(ledger_root))


def test_status_shows_the_tree_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3_server.ledger_url(monkeypatch)
    _tree(lambda: intentlog.open(url), url)


def _report_tree(opener: Callable[[], intentlog.Ledger], root: str, tmp: Path) -> None:
    with opener() as ledger:
        _build(ledger)
    out = tmp / "report.html"
    _cli(root, "report", "--out", str(out))
    page = out.read_text()
    parent = page[page.index('id="task-parent"') :]
    parent = parent[: parent.index("</section>")]
    assert "<th>children</th>" in parent and 'href="#task-sum-1"' in parent and 'href="#task-sum-2"' in parent
    assert "interrupted" in parent  # sum-2's state beside its link
    child = page[page.index('id="task-sum-2"') :]
    child = child[: child.index("</section>")]
    assert "<th>parent</th>" in child and 'href="#task-parent"' in child


def test_report_shows_the_tree(ledger_root: Path, tmp_path: Path) -> None:
    _report_tree(lambda: intentlog.open(ledger_root), str(ledger_root), tmp_path)


def test_report_shows_the_tree_on_the_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    url = s3_server.ledger_url(monkeypatch)
    _report_tree(lambda: intentlog.open(url), url, tmp_path)
