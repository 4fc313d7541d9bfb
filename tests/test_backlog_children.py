"""Child tasks in a backlog: spawned children are items of the backlog, run on its workers; the parent
joining them holds no worker and is taken again once they are done (through the public API, a folder)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from backlog_children_steps import afanout, fanout
from backlog_steps import read_receipts

import intentlog
from intentlog.backlog import ItemTaskTaken
from intentlog.projections.idioms import idiom_state

DOCS = ["alpha", "beta", "gamma"]


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    for name in ("CHILDREN_MEET", "CHILDREN_FAIL", "CHILDREN_HOLD"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _kinds(led: intentlog.Ledger, task_id: str) -> list[str]:
    return [e.kind for e in led.task(task_id).events()]


def test_children_are_items_run_at_once_and_the_parent_joins_them(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    meet = env / "meet"
    meet.mkdir()
    monkeypatch.setenv("CHILDREN_MEET", str(meet))  # the children pass only if all three run at once
    root = env / "l"
    with intentlog.open(root) as led:
        led.backlog("fan").add("digest", {"docs": DOCS, "name": "d"})
        # three workers: the parent holds none while it joins, so the three children meet
        view = led.backlog("fan").run(fanout, workers=3, until_idle=True, poll=0.02)
        assert view.counts["done"] == 4, view.to_json()
        rows = {r.item: r for r in view.items}
        parent = rows["digest"]
        assert parent.children == {"done": 3} and parent.parent is None
        for doc in DOCS:
            child = rows[f"d-{doc}"]
            assert child.task == f"d-{doc}"  # a child item's task is the child itself
            assert child.parent == "fan.item.digest" and child.state == "done"
        result = [e for e in led.task("fan.item.digest").events() if e.kind == "item.returned"]
        assert result[0].data["result"] == {"merged": [f"sum:{d}" for d in DOCS]}
        # the parent suspended on its children (no failure counted), then was taken again
        sched = [e.data for e in led.backlog("fan").task.events() if e.kind == "backlog.item_scheduled"]
        assert sched == [
            {**sched[0], "item": "digest", "children": [f"d-{d}" for d in DOCS], "not_before": None, "failures": 0}
        ]
        for doc in DOCS:
            kinds = _kinds(led, f"d-{doc}")
            assert kinds.index("task.spawned") < kinds.index("lease.acquired")
            assert kinds.index("task.returned") < kinds.index("item.returned")
            assert idiom_state(led.task(f"d-{doc}").events()).parent == "fan.item.digest"
        added = [e.data for e in led.backlog("fan").task.events() if e.kind == "backlog.item_added"]
        assert [a["item"] for a in added] == ["digest"] + [f"d-{d}" for d in DOCS]
        assert all(a["parent"] == "fan.item.digest" for a in added[1:])
    keys = sorted(r["key"] for r in read_receipts(str(env / "receipts.jsonl")))
    assert keys == sorted(f"sum:{d}" for d in DOCS)  # each child's effect sent once
    r = subprocess.run([sys.executable, "-m", "intentlog.cli", "--root", str(root), "verify"], capture_output=True,
                       text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    shown = subprocess.run([sys.executable, "-m", "intentlog.cli", "--root", str(root), "backlog", "fan"],
                           capture_output=True, text=True)  # fmt: skip
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("digest "))
    assert "children: 3 done" in lines[at]
    assert [line.split()[:2] for line in lines[at + 1 : at + 4]] == [["+-", f"d-{d}"] for d in DOCS]  # the tree
    js = subprocess.run([sys.executable, "-m", "intentlog.cli", "--root", str(root), "backlog", "fan", "--json"],
                        capture_output=True, text=True)  # fmt: skip
    items = {i["item"]: i for i in json.loads(js.stdout)["items"]}
    assert items["digest"]["children"] == {"done": 3} and items["d-beta"]["parent"] == "fan.item.digest"


def test_a_re_run_adds_no_child_twice_and_a_spawned_child_is_not_refused(env: Path) -> None:
    root = env / "l"
    with intentlog.open(root) as led:
        b = led.backlog("fan")
        b.add("p", {"docs": ["a"], "name": "x"})
        parent = led.task("fan.item.p")
        parent.append("note", {"n": 1})  # the parent's own record (a run would lease it first)
        from intentlog.backlog.children import BacklogChildren
        from intentlog.idioms.suspend import suspending

        with suspending(BacklogChildren(led, "fan")):
            parent.spawn("x-a", {"doc": "a", "siblings": ["a"]})
            parent.spawn("x-a", {"doc": "a", "siblings": ["a"]})  # the re-run: idempotent by the child id
        parent.close()
        added = [e.data["item"] for e in b.task.events() if e.kind == "backlog.item_added"]
        assert added == ["p", "x-a"]
        # a task of that id that no item spawned is refused, and nothing is written
        led.task("stray").append("note", {})
        before = (root / "tasks" / "fan.backlog.jsonl").read_bytes()
        with pytest.raises(ItemTaskTaken, match="already exists"):
            b.add_child("stray", {}, parent="fan.item.p")
        assert (root / "tasks" / "fan.backlog.jsonl").read_bytes() == before


def test_a_failed_child_fails_its_parents_join_at_once(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHILDREN_FAIL", "beta")
    root = env / "l"
    with intentlog.open(root) as led:
        led.backlog("fan").add("digest", {"docs": DOCS, "name": "d"}, max_attempts=1)
        view = led.backlog("fan").run(fanout, workers=2, until_idle=True, poll=0.02)
        rows = {r.item: r for r in view.items}
        assert rows["d-beta"].state == "failed"  # it inherited its parent's max_attempts
        assert rows["d-alpha"].state == rows["d-gamma"].state == "done"
        assert rows["digest"].state == "failed"
        assert "d-beta" in (rows["digest"].reason or "") and "failed in backlog" in (rows["digest"].reason or "")
        assert rows["digest"].children == {"done": 2, "failed": 1}
        # the parent was run twice (spawn+join, then the join that names the failure), never retried
        leases = [e for e in led.task("fan.item.digest").events() if e.kind == "lease.acquired"]
        assert len(leases) == 2
        out = json.dumps(view.to_json())
        assert '"parent": "fan.item.digest"' in out


def test_an_async_step_on_lanes_fans_out_and_joins(env: Path) -> None:
    with intentlog.open(env / "l") as led:
        led.backlog("fan").add("digest", {"docs": DOCS, "name": "a"})
        view = led.backlog("fan").run(afanout, workers=1, in_flight=3, until_idle=True, poll=0.02)
        assert view.counts["done"] == 4, view.to_json()
        res = [e.data["result"] for e in led.task("fan.item.digest").events() if e.kind == "item.returned"]
        assert res == [{"merged": [f"of {d}" for d in DOCS]}]
        for doc in DOCS:
            assert idiom_state(led.task(f"a-{doc}").events()).result == {"summary": f"of {doc}"}


def test_a_child_linked_but_never_added_is_added_by_the_re_run(env: Path) -> None:
    """A crash between the parent's link and the item's add: the parent's re-run adds it, once, and it runs."""
    with intentlog.open(env / "l") as led:
        b = led.backlog("fan")
        b.add("digest", {"docs": DOCS, "name": "d"})
        parent = led.task("fan.item.digest")
        parent.spawn("d-alpha", {"doc": "alpha", "siblings": DOCS})  # linked and created, not an item (no runner)
        parent.close()
        assert [e.data["item"] for e in b.task.events() if e.kind == "backlog.item_added"] == ["digest"]
        view = b.run(fanout, workers=2, until_idle=True, poll=0.02)
        assert view.counts["done"] == 4, view.to_json()
        added = [e.data["item"] for e in b.task.events() if e.kind == "backlog.item_added"]
        assert added == ["digest"] + [f"d-{d}" for d in DOCS]
    keys = sorted(r["key"] for r in read_receipts(str(env / "receipts.jsonl")))
    assert keys == sorted(f"sum:{d}" for d in DOCS)


def test_a_child_id_that_names_another_items_task_is_refused_and_nothing_written(env: Path) -> None:
    root = env / "l"
    with intentlog.open(root) as led:
        b = led.backlog("fan")
        b.add("p", {"docs": [], "name": "x"})
        b.add("x-a", {"plain": True})  # a plain item whose id a child might take
        before = (root / "tasks" / "fan.backlog.jsonl").read_bytes()
        with pytest.raises(intentlog.errors.UsageError, match="names one of the backlog's own tasks"):
            b.add_child("fan.item.p", {}, parent="fan.item.p")
        with pytest.raises(ItemTaskTaken, match="an item id names one task"):
            b.add_child("x-a", {"plain": True}, parent="fan.item.p")
        assert (root / "tasks" / "fan.backlog.jsonl").read_bytes() == before
