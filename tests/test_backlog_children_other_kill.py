"""A worker SIGKILLed between a child's link and its add to another backlog: the parent's re-run adds it, once.

The parent's step (run in a real ``intentlog run`` process) kills its own worker with SIGKILL
right after the first child's link and stream are written and before that child is added to
the other backlog (a marker file outside the ledger says it happened, once). The supervisor
takes the parent again; the other backlog then runs each child once (the provider's receipt
log is the ground truth) and the parent joins them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from backlog_chaos import receipt_counts

import intentlog
from intentlog.backlog import children as children_mod

TESTS = Path(__file__).parent
DOCS = ["alpha", "beta"]
_add = children_mod.BacklogChildren.spawned


def _killing_spawned(self: Any, parent: Any, child_id: str, payload: Any) -> None:
    marker = os.environ["KILL_MARKER"]
    if not os.path.exists(marker):
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o644)
        os.fsync(fd)
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)  # the link is recorded, the child not yet an item of the other backlog
    _add(self, parent, child_id, payload)


def killing_parent(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    children_mod.BacklogChildren.spawned = _killing_spawned  # type: ignore[method-assign]
    from test_backlog_children_other import parent

    return parent(task, payload)


def test_a_kill_between_link_and_add_in_the_other_backlog_adds_the_child_once(tmp_path: Path) -> None:
    root = str(tmp_path / "l")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["BACKLOG_RECEIPTS"] = str(tmp_path / "receipts.jsonl")
    env["KILL_MARKER"] = str(tmp_path / "killed")
    env.pop("OTHER_FAIL", None)
    with intentlog.open(root) as led:
        led.backlog("fan").add("digest", {"docs": DOCS, "name": "k", "to": "sums"})

    def run(name: str, step: str) -> None:
        r = subprocess.run(
            [sys.executable, "-m", "intentlog.cli", "--root", root, "run", name, "--step", step, "--until-idle"],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr

    run("fan", "test_backlog_children_other_kill:killing_parent")
    assert (tmp_path / "killed").exists()  # the ground truth: the worker was killed in the window
    with intentlog.open(root) as led:
        fan = [e.kind for e in led.backlog("fan").task.events()]
        assert "backlog.holder_died" in fan
        links = [e.data["child"] for e in led.task("fan.item.digest").events() if e.kind == "task.child_spawned"]
        assert links == [f"k-{d}" for d in DOCS]  # each link once
    run("sums", "test_backlog_children_other:child")
    run("fan", "test_backlog_children_other:parent")
    with intentlog.open(root) as led:
        added = [e.data["item"] for e in led.backlog("sums").task.events() if e.kind == "backlog.item_added"]
        assert sorted(added) == [f"k-{d}" for d in DOCS]  # each child added once, to the other backlog
        res = [e.data["result"] for e in led.task("fan.item.digest").events() if e.kind == "item.returned"]
        assert res == [{"merged": [f"sum:{d}" for d in DOCS]}]
    assert receipt_counts(tmp_path / "receipts.jsonl") == {f"sum:{d}": 1 for d in DOCS}
