"""An item task whose step returned without an effect call is complete, not "queued / run the script".

Its stream holds the creation record, the lease, ``item.returned``, the release: no call. The
status projection used to read "no call recorded" as "never run" and told the operator to run
the script; ``tasks`` listed a finished item as queued. Folder and store: one projection.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import intentlog

TESTS = Path(__file__).parent


def plain(task: intentlog.Task, payload: Any) -> dict[str, Any]:
    return {"echo": payload}


def with_call(task: intentlog.Task, payload: Any) -> dict[str, Any]:
    task.effect("e", {"n": payload}, lambda request: b"ok")
    return {"echo": payload}


@pytest.fixture(params=["folder", "store"])
def root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    if request.param == "folder":
        return str(tmp_path / "ledger")
    import s3_server

    return s3_server.ledger_url(monkeypatch)


def test_an_item_that_returned_without_a_call_is_complete(root: str) -> None:
    with intentlog.open(root) as ledger:
        b = ledger.backlog("b")
        b.add("plain", 1)
        view = b.run(plain, workers=1, until_idle=True)
        assert view.counts["done"] == 1
        (task_id,) = [t for t in ledger.task_ids() if ".item." in t]
        kinds = [ev.kind for ev in ledger.task(task_id).events()]
        assert "item.returned" in kinds and not any(k.startswith("attempt.") for k in kinds), kinds
        st = ledger.task(task_id).status()
        assert (st.state, st.next_operation) == ("complete", "none"), st
        assert st.next_step.startswith("nothing"), st.next_step
    out = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", root, "tasks", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = {r["task"]: r for r in json.loads(out.stdout)}
    assert rows[task_id]["state"] == "complete", rows[task_id]


def test_an_item_with_a_call_is_still_complete_and_a_fresh_task_still_queued(root: str) -> None:
    """The other two cases are unchanged: an item that made a call, and a task with nothing recorded."""
    with intentlog.open(root) as ledger:
        b = ledger.backlog("b")
        b.add("called", 2)
        assert b.run(with_call, workers=1, until_idle=True).counts["done"] == 1
        (task_id,) = [t for t in ledger.task_ids() if ".item." in t]
        assert ledger.task(task_id).status().state == "complete"
        fresh = ledger.task("fresh")
        fresh.append("note", {"n": 1})
        fresh.close()
        st = fresh.status()
        assert (st.state, st.next_operation) == ("queued", "run the script"), st
