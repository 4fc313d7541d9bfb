"""Children in another backlog: ``task.spawn(child_id, payload, backlog=NAME)`` in a step makes the child an item
of NAME, run by that backlog's own step on its workers; the parent's run is woken when they settle there.

On a folder and on the object store (a real SeaweedFS), through the public API and the CLI.
The provider's receipt log (outside the ledger) is the ground truth for each child's effect.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from backlog_chaos import receipt_counts
from backlog_steps import serve

import intentlog
from intentlog.backlog import Backlog, ItemTaskTaken
from intentlog.projections.idioms import idiom_state

TESTS = Path(__file__).parent
DOCS = ["alpha", "beta", "gamma"]
WAIT = 120.0


def parent(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """Sends one child per doc to the backlog ``payload['to']``, joins them, merges their summaries."""
    for doc in payload["docs"]:
        task.spawn(f"{payload['name']}-{doc}", {"doc": doc}, backlog=payload["to"])
    results = task.join()
    return {"merged": [results[k]["summary"] for k in sorted(results)]}


def parent_waiting_first(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """:func:`parent`, but it waits for the event ``go`` between its spawns and its join."""
    for doc in payload["docs"]:
        task.spawn(f"{payload['name']}-{doc}", {"doc": doc}, backlog=payload["to"])
    task.wait_for_event("go")
    results = task.join()
    return {"merged": [results[k]["summary"] for k in sorted(results)]}


def child(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """The other backlog's own step: one effect through the receipt-logging provider ($OTHER_FAIL: a bad input)."""
    if os.environ.get("OTHER_FAIL") == payload["doc"]:
        raise intentlog.UsageError(f"no summary for {payload['doc']}")  # permanent: failed at once, not retried
    raw = task.effect("summarise", {"pkey": f"sum:{payload['doc']}"}, serve)
    return {"summary": json.loads(raw)["served"]}


@pytest.fixture(params=["folder", "store"])
def root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("OTHER_FAIL", raising=False)
    if request.param == "folder":
        return str(tmp_path / "ledger")
    import s3_server

    return s3_server.ledger_url(monkeypatch)


def _cli(root: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", root, *args], capture_output=True, text=True, timeout=WAIT
    )


def _records(led: intentlog.Ledger, name: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in led.backlog(name).task.events() if e.kind == kind]


def _wait_for_record(
    led: intentlog.Ledger, name: str, kind: str, proc: subprocess.Popen[str], item: str | None = None
) -> None:
    """Until backlog ``name`` holds a ``kind`` record (of ``item``, if given), while ``proc`` runs."""
    deadline = time.monotonic() + WAIT
    while not [d for d in _records(led, name, kind) if item is None or d.get("item") == item]:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{kind} never recorded in backlog {name!r}"
        time.sleep(0.02)


def _assert_tree(view: intentlog.BacklogView, name: str) -> None:
    """Every child the parent spawned there is listed under it, with its backlog, and counted (whether the parent
    ever waited for it or not)."""
    rows = {r.item: r for r in view.items}
    assert rows["digest"].children == {"done": 3}, view.to_json()
    for doc in DOCS:
        r = rows[f"{name}-{doc}"]
        assert (r.backlog, r.parent, r.state, r.task) == ("sums", "fan.item.digest", "done", f"{name}-{doc}")


def _assert_tree_shown(root: str, name: str) -> None:
    shown = _cli(root, "backlog", "fan")
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("digest "))
    assert "children: 3 done" in lines[at], shown.stdout
    assert [line.split()[:5] for line in lines[at + 1 : at + 4]] == [
        ["+-", f"{name}-{d}", "(in", "backlog", "sums)"] for d in DOCS
    ]  # the tree: each child under its parent, with its backlog
    js = json.loads(_cli(root, "backlog", "fan", "--json").stdout)
    items = {i["item"]: i for i in js["items"]}
    assert items[f"{name}-beta"]["backlog"] == "sums" and items["digest"]["backlog"] is None


def test_children_run_on_the_other_backlogs_workers_and_wake_the_parent(root: str, tmp_path: Path) -> None:
    led = intentlog.open(root)
    led.backlog("fan").add("digest", {"docs": DOCS, "name": "o", "to": "sums"})
    led.backlog("sums").add("own", {"doc": "own"})  # an item of its own beside the children it is sent
    # the other backlog's run, in another process, with its own step; open until it is told to stop
    other = subprocess.Popen(
        [sys.executable, "-m", "intentlog.cli", "--root", root, "run", "sums", "--step",
         "test_backlog_children_other:child", "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for_record(led, "sums", "backlog.run_started", other)
        # until_idle: this run ends only once the parent is done (the children may settle in the open run)
        view = led.backlog("fan").run(parent, workers=1, until_idle=True, poll=0.02)
        for item in ("own", *(f"o-{d}" for d in DOCS)):  # every item recorded done there before it is stopped
            _wait_for_record(led, "sums", "backlog.item_done", other, item)
    finally:
        other.send_signal(signal.SIGTERM)
        out, err = other.communicate(timeout=WAIT)
    assert other.returncode == 0, out + err
    assert {r.item: r.state for r in view.items}["digest"] == "done", view.to_json()
    # the parent joins from its children's tasks; the other backlog records a child done a moment later, in its
    # own stream: the tree is read once that run recorded them and ended
    view = led.backlog("fan").view()
    assert view.counts["done"] == 1 and sum(view.counts.values()) == 1  # the children are counted in their backlog
    _assert_tree(view, "o")
    res = [e.data["result"] for e in led.task("fan.item.digest").events() if e.kind == "item.returned"]
    assert res == [{"merged": [f"sum:{d}" for d in DOCS]}]
    # the record: the link names the backlog, the other backlog's item names the parent, the join names both
    links = [e.data for e in led.task("fan.item.digest").events() if e.kind == "task.child_spawned"]
    assert [(li["child"], li["backlog"]) for li in links] == [(f"o-{d}", "sums") for d in DOCS]
    assert idiom_state(led.task("fan.item.digest").events()).child_backlogs == {f"o-{d}": "sums" for d in DOCS}
    added = {a["item"]: a for a in _records(led, "sums", "backlog.item_added")}
    assert all(added[f"o-{d}"]["parent"] == "fan.item.digest" and added[f"o-{d}"]["task"] == f"o-{d}" for d in DOCS)
    assert "parent" not in added["own"]
    assert not any(a["item"].startswith("o-") for a in _records(led, "fan", "backlog.item_added"))
    sched = _records(led, "fan", "backlog.item_scheduled")
    # each wait names the children not returned yet (a child may return before its parent joins; a parent woken
    # early by the other backlog's stream waits again for fewer), each one in the backlog its link names
    waits = [d for d in sched if "children" in d]
    assert all(set(d["children"]) <= {f"o-{doc}" for doc in DOCS} for d in waits), waits
    assert all(d["backlogs"] == {c: "sums" for c in d["children"]} and d["failures"] == 0 for d in waits), waits
    done = {d["item"] for d in _records(led, "sums", "backlog.item_done")}
    assert done == {"own", *(f"o-{d}" for d in DOCS)}  # run on the other backlog's workers, by its step
    led.close()
    assert receipt_counts(tmp_path / "receipts.jsonl") == {**{f"sum:{d}": 1 for d in DOCS}, "sum:own": 1}
    _assert_tree_shown(root, "o")
    verified = _cli(root, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_parent_waits_across_runs_until_the_other_backlog_is_run(root: str, tmp_path: Path) -> None:
    led = intentlog.open(root)
    fan = led.backlog("fan")
    fan.add("digest", {"docs": DOCS, "name": "s", "to": "sums"})
    # no run of the other backlog is open: this run ends idle with the parent waiting for its children
    view = fan.run(parent, workers=1, until_idle=True, poll=0.02)
    row = {r.item: r for r in view.items}["digest"]
    assert row.state == "scheduled" and row.reason is not None and "3 child task(s)" in row.reason, view.to_json()
    assert row.children == {"queued": 3}
    assert receipt_counts(tmp_path / "receipts.jsonl") == {}
    other = led.backlog("sums").run(child, workers=2, until_idle=True, poll=0.02)
    assert other.counts["done"] == 3 and {r.parent for r in other.items} == {"fan.item.digest"}
    view = fan.run(parent, workers=1, until_idle=True, poll=0.02)  # a new run reads the other backlog whole
    assert {r.item: r for r in view.items}["digest"].state == "done", view.to_json()
    res = [e.data["result"] for e in led.task("fan.item.digest").events() if e.kind == "item.returned"]
    assert res == [{"merged": [f"sum:{d}" for d in DOCS]}]
    assert len(_records(led, "fan", "backlog.item_scheduled")) == 1  # woken once, never re-suspended
    led.close()
    assert receipt_counts(tmp_path / "receipts.jsonl") == {f"sum:{d}": 1 for d in DOCS}


def test_a_parent_run_until_idle_ends_when_the_other_backlogs_supervisor_was_killed(root: str, tmp_path: Path) -> None:
    """The other backlog's run is open in its record, but its supervisor was killed (SIGKILL): no live run can
    settle the children, so the parent's run ends idle with the parent waiting, as with no run open (it waited
    forever)."""
    led = intentlog.open(root)
    led.backlog("sums").add("warm", {"doc": "warm"})  # the backlog exists; its step refuses this one (no receipt)
    step = "test_backlog_children_other:child"
    other = subprocess.Popen(
        [sys.executable, "-m", "intentlog.cli", "--root", root, "run", "sums", "--step", step],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OTHER_FAIL": "warm"},
    )  # fmt: skip
    try:
        _wait_for_record(led, "sums", "backlog.run_started", other)
    finally:
        other.kill()
        other.communicate()
    assert not _records(led, "sums", "backlog.run_stopped")  # its run is left open in the record
    fan = led.backlog("fan")
    fan.add("digest", {"docs": DOCS, "name": "k", "to": "sums"})
    led.close()
    run = _cli(root, "run", "fan", "--step", "test_backlog_children_other:parent", "--until-idle")  # ends, or times out
    assert "Traceback" not in run.stderr, run.stderr
    with intentlog.open(root) as led:
        row = {r.item: r for r in led.backlog("fan").view().items}["digest"]
        assert row.state == "scheduled" and row.children == {"queued": 3}, row
        assert receipt_counts(tmp_path / "receipts.jsonl") == {}


def test_the_tree_lists_children_the_parent_never_waited_for(root: str, tmp_path: Path) -> None:
    # children settled in the other backlog before their parent joins: the join returns at once, the parent never
    # waits for them (no backlog.item_scheduled {children}); the tree still lists each one, from the parent's links
    led = intentlog.open(root)
    fan = led.backlog("fan")
    fan.add("digest", {"docs": DOCS, "name": "w", "to": "sums"})
    got: list[intentlog.BacklogView] = []
    run = threading.Thread(target=lambda: got.append(fan.run(parent_waiting_first, until_idle=True, poll=0.02)))
    run.start()
    try:
        deadline = time.monotonic() + WAIT
        while not [d for d in _records(led, "fan", "backlog.item_scheduled") if d.get("event") == "go"]:
            assert run.is_alive() and time.monotonic() < deadline, "the parent never waited for its event"
            time.sleep(0.02)  # waiting for the record
        other = led.backlog("sums").run(child, workers=2, until_idle=True, poll=0.02)
        assert other.counts["done"] == 3, other.to_json()
        led.signal("fan.item.digest", "go", {"ok": True})
    finally:
        run.join(timeout=WAIT)
    assert not run.is_alive() and got, "the parent's run never ended"
    assert {r.item: r.state for r in got[0].items}["digest"] == "done", got[0].to_json()
    assert not [d for d in _records(led, "fan", "backlog.item_scheduled") if "children" in d]  # never waited
    _assert_tree(got[0], "w")
    _assert_tree(fan.view(), "w")
    led.close()
    _assert_tree_shown(root, "w")
    assert receipt_counts(tmp_path / "receipts.jsonl") == {f"sum:{d}": 1 for d in DOCS}


def test_a_child_failed_in_the_other_backlog_fails_its_parent_at_once(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTHER_FAIL", "beta")
    led = intentlog.open(root)
    fan = led.backlog("fan")
    fan.add("digest", {"docs": DOCS, "name": "f", "to": "sums"}, max_attempts=1)
    fan.run(parent, workers=1, until_idle=True, poll=0.02)
    other = led.backlog("sums").run(child, workers=2, until_idle=True, poll=0.02, backoff=0.01)
    assert other.counts == {**other.counts, "done": 2, "failed": 1}
    view = fan.run(parent, workers=1, until_idle=True, poll=0.02)
    row = {r.item: r for r in view.items}["digest"]
    assert row.state == "failed" and row.reason is not None, view.to_json()
    assert "f-beta" in row.reason and "failed in backlog 'sums'" in row.reason
    assert not any(r.item == "f-beta" for r in fan.fold().items.values())  # never added to the parent's backlog
    led.close()


def test_a_plain_join_of_a_child_failed_in_its_backlog_is_answered_at_once(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script (no runner) that sent children to a backlog and joins them, waiting: the one that backlog failed is
    named at once, with the backlog's reason, instead of the join polling to its deadline and calling it queued."""
    monkeypatch.setenv("OTHER_FAIL", "beta")
    led = intentlog.open(root)
    script = led.task("script")
    for doc in DOCS:
        script.spawn(f"s-{doc}", {"doc": doc}, backlog="sums")  # added to the backlog at once, outside a runner
    other = led.backlog("sums").run(child, workers=2, until_idle=True, poll=0.02, backoff=0.01)
    assert other.counts == {**other.counts, "done": 2, "failed": 1}
    before = [e.kind for e in script.events()]
    with pytest.raises(intentlog.ChildrenPending) as got:
        script.join(wait=3600.0)  # a join that polled to its deadline would hold this test for an hour
    assert [c for c, _, _ in got.value.blocked] == ["s-beta"], got.value
    (_, state, step), = got.value.blocked
    assert state.startswith("failed in backlog 'sums': UsageError: no summary for beta"), state
    assert "spawn the work under a new child id" in step
    assert [e.kind for e in script.events()] == before  # nothing joined, nothing written
    # the two that returned are joined once the failed one is left out
    joined = script.join(["s-alpha", "s-gamma"])
    assert joined == {"s-alpha": {"summary": "sum:alpha"}, "s-gamma": {"summary": "sum:gamma"}}
    led.close()


def _boom(task: intentlog.Task, payload: dict[str, Any]) -> None:
    raise ValueError("the plain item fails")


def test_a_plain_item_of_the_childs_id_is_not_the_child(root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain item ``c`` (its task ``kids.item.c``) failed in backlog ``kids`` kept a child ``c`` from being added
    there: the join must not report the child as failed in that backlog (it never ran there), and a runner's join
    names the refusal instead of the plain item's failure."""
    from intentlog.backlog.children import BacklogChildren

    led = intentlog.open(root)
    kids = led.backlog("kids")
    kids.add("c", {"n": 1}, max_attempts=1)
    assert kids.run(_boom, workers=1, until_idle=True, poll=0.02).counts["failed"] == 1
    script = led.task("script")
    # the link landed while the plain item was being added (the spawn's check before it saw no item 'c')
    with monkeypatch.context() as m:
        m.setattr(Backlog, "check_child", lambda *a, **k: None)
        with pytest.raises(ItemTaskTaken):
            script.spawn("c", {"n": 2}, backlog="kids")  # the parent's link is written first: the child stays pending
    with pytest.raises(intentlog.ChildrenPending) as got:
        script.join(["c"])
    (cid, state, _), = got.value.blocked
    assert cid == "c" and "failed in backlog" not in state and "plain item fails" not in state, state
    with pytest.raises(ItemTaskTaken):  # a runner adds it again, and is refused again: never "failed"
        BacklogChildren(led, "script-backlog").failed(script.stream, ["c"])
    led.close()


def _ledger_state(led: intentlog.Ledger, root: str) -> object:
    """What a refused spawn must leave as it was: the folder's bytes, or on a store each stream's records."""
    from test_provider_dedup import folder_bytes

    if not root.startswith("s3://"):
        return folder_bytes(Path(root))
    return {t: [e.digest for e in led.task(t).events()] for t in led.task_ids()}


def test_a_child_its_backlog_refuses_leaves_no_link(root: str) -> None:
    """``task.spawn(..., backlog=NAME)`` of a child its backlog refuses -- the id is a plain item's, or the payload
    holds a credential -- raises and writes nothing: no parent link to a child that could never be added (the
    parent's join would wait for it forever), no child stream."""
    led = intentlog.open(root)
    led.backlog("kids").add("c", {"n": 1})
    script = led.task("script")
    script.checkpoint("begun")
    before = _ledger_state(led, root)
    with pytest.raises(ItemTaskTaken, match=r"'kids' item 'c' is done by task 'kids\.item\.c'"):
        script.spawn("c", {"n": 2}, backlog="kids")
    with pytest.raises(intentlog.UsageError, match="holds a credential"):
        script.spawn("d", {"api_key": "sk-abc"}, backlog="kids")  # by its name
    with pytest.raises(intentlog.UsageError, match=r"holds a credential at \$\.note"):
        script.spawn("d", {"note": "call me with Bearer abcdefghijklmnop123456"}, backlog="kids")  # by its shape
    for cid in ("ghp_" + "a1B2c3D4e5" * 4, "AKIAIOSFODNN7EXAMPLE"):  # an id a record would redact
        for where in (None, "kids"):
            with pytest.raises(intentlog.UsageError, match="child id has the shape of a credential"):
                script.spawn(cid, {"n": 3}, backlog=where)
            with pytest.raises(intentlog.UsageError, match="parent id has the shape of a credential"):
                led.task(cid).spawn("c7", {"n": 3}, backlog=where)
    assert _ledger_state(led, root) == before
    assert idiom_state(script.events()).children == {} and not led.task("c").stream.exists()
    script.spawn("e", {"n": 3}, backlog="kids")  # a child the backlog takes is still added, its read reused
    assert [r["item"] for r in _records(led, "kids", "backlog.item_added")] == ["c", "e"]
    led.close()


def test_a_fan_out_reads_the_childs_backlog_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step spawning many children into one backlog reads that backlog once, not once per child: the check
    before each link and each add reuse the handle's fold while the stream is unchanged."""
    from intentlog.backlog.children import BacklogChildren
    from intentlog.idioms.suspend import suspending

    led = intentlog.open(tmp_path / "l")
    led.backlog("kids").add_many([{"item": f"x{i}", "payload": i} for i in range(20)])
    reads = []
    real = Backlog.fold
    monkeypatch.setattr(Backlog, "fold", lambda self, *a: reads.append(self.name) or real(self, *a))
    script = led.task("script")
    runner = BacklogChildren(led, "jobs")  # one step's runner: one handle per backlog
    with suspending(runner):
        for i in range(6):
            script.spawn(f"c{i}", {"n": i}, backlog="kids")
    assert reads == ["kids"], reads
    assert len(_records(led, "kids", "backlog.item_added")) == 26
    # another process adds a plain item 'c9' between two spawns: the next check sees the stream changed
    with intentlog.open(tmp_path / "l") as other:
        other.backlog("kids").add("c9", {"plain": True})
    with suspending(runner), pytest.raises(ItemTaskTaken):
        script.spawn("c9", {"n": 9}, backlog="kids")
    assert "c9" not in idiom_state(script.events()).children and not led.task("c9").stream.exists()
    led.close()


def test_a_join_names_the_next_step_of_a_child_waiting_in_its_backlog_or_never_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child sent to a backlog that has not returned: the join's hint is to run that backlog when the child is an
    item there, and to re-run the parent's script when the add was lost (a crash between the link and the add) --
    never "run the child's script", which has none."""
    led = intentlog.open(tmp_path / "l")
    script = led.task("script")
    script.spawn("c1", {"n": 1}, backlog="kids")
    with monkeypatch.context() as m:  # the process dies after the link and the child's stream, before the add
        m.setattr(Backlog, "add_child", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            script.spawn("c2", {"n": 2}, backlog="kids")
    with pytest.raises(intentlog.ChildrenPending) as got:
        script.join()
    said = {c: (state, step) for c, state, step in got.value.blocked}
    run = f"intentlog --root {tmp_path / 'l'} run kids --step MODULE:FUNCTION"  # runs as pasted from any folder
    assert "in backlog 'kids'" in said["c1"][0] and run in said["c1"][1], said
    assert said["c2"] == (
        "not an item of backlog 'kids' yet",
        "re-run the parent's script: its spawn adds the child to that backlog, once",
    ), said
    script.spawn("c2", {"n": 2}, backlog="kids")  # the re-run adds it
    assert [r["item"] for r in _records(led, "kids", "backlog.item_added")] == ["c1", "c2"]
    with monkeypatch.context() as m:  # lost again, and then a plain item 'c3' takes the id: it can never be added
        m.setattr(Backlog, "add_child", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            script.spawn("c3", {"n": 3}, backlog="kids")
    led.backlog("kids").add("c3", {"plain": True})
    with pytest.raises(intentlog.ChildrenPending) as got:
        script.join(["c3"])
    (_, state, step), = got.value.blocked
    assert "its item 'c3' is task 'kids.item.c3'" in state and "another child id" in step, (state, step)
    led.close()


def _refuse(task: intentlog.Task, payload: Any) -> None:
    raise intentlog.UsageError("not this one")  # a permanent error: the item fails at once


def test_a_waiting_join_reads_a_stream_again_only_once_it_changed(root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain ``join(wait=...)`` polls: each poll takes the stamps of the children and their backlog, and reads
    only the streams whose stamp changed -- standing still, each is read once, not once per poll -- and a change
    is seen at the next poll (the children failing in their backlog ends the wait at once)."""
    from intentlog.idioms import children as children_mod
    from intentlog.stream import TaskStream

    led = intentlog.open(root)
    led.backlog("kids").add_many([{"item": f"x{i}", "payload": i} for i in range(10)])
    script = led.task("script")
    kids = [f"c{i}" for i in range(3)]
    for c in kids:
        script.spawn(c, {"n": c}, backlog="kids")
    reads: list[str] = []
    real = TaskStream.events
    monkeypatch.setattr(TaskStream, "events", lambda self, *a, **k: reads.append(self.id) or real(self, *a, **k))
    before_run: list[str] = []
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 4:
            before_run.extend(reads)
            led.backlog("kids").run(_refuse, workers=1, until_idle=True, poll=0.02)

    monkeypatch.setattr(children_mod, "_pause", pause)
    with pytest.raises(intentlog.ChildrenPending) as got:
        script.join(wait=3600.0, poll=0.01)
    assert len(pauses) == 4, pauses  # the run's record ended the wait at the next poll
    assert sorted(c for c, _, _ in got.value.blocked) == kids
    assert all("failed in backlog 'kids'" in st for _, st, _ in got.value.blocked), got.value.blocked
    watched = [r for r in before_run if r in {*kids, "kids.backlog"}]
    assert sorted(watched) == sorted([*kids, "kids.backlog"]), watched  # four polls, one read of each
    led.close()


def _child_here(child: intentlog.Task) -> int:
    with open(os.environ["BACKLOG_RECEIPTS"], "a") as f:  # the child's effect, seen outside the ledger
        f.write(f"{child.id}\n")
    return 42


def _spawns_or_answers(task: intentlog.Task, payload: dict[str, Any]) -> Any:
    if "child" not in payload:
        return payload["n"]
    task.spawn(payload["child"], {"n": 9}, run=_child_here if payload.get("here") else None)
    return task.join()


def test_a_step_spawning_a_child_its_backlog_refuses_fails_at_once_with_no_link(root: str) -> None:
    """Inside a run, a step's spawn of a child its own backlog refuses (the id is a plain item's) fails the parent
    item at once -- every attempt would be refused the same way -- and records no link in the parent's task."""
    led = intentlog.open(root)
    b = led.backlog("jobs")
    b.add("c", {"n": 1}, max_attempts=5)
    b.add("p", {"child": "c"}, max_attempts=5)
    b.add("q", {"child": "c", "here": True}, max_attempts=5)  # run= here: the child is handed over once it returned
    view = b.run(_spawns_or_answers, workers=1, until_idle=True, poll=0.02)
    rows = {r.item: r for r in view.items}
    assert rows["c"].state == "done", rows["c"]
    for item in ("p", "q"):
        assert rows[item].state == "failed" and "ItemTaskTaken" in (rows[item].reason or ""), rows[item]
        assert rows[item].failures == 1, rows[item]  # at once, not after five attempts
        assert idiom_state(led.task(b.task_id(item)).events()).children == {}
    assert not led.task("c").stream.exists()
    assert not Path(os.environ["BACKLOG_RECEIPTS"]).exists()  # the run= child never ran
    led.close()


def _two_children(task: intentlog.Task, payload: dict[str, Any]) -> Any:
    task.spawn("c1", {"n": 1}, backlog="sums")
    task.spawn("c2", {"n": 2}, backlog="sums")
    return task.join()


@pytest.mark.parametrize("damage", ["chain broken", "re-chained with a malformed field"])
def test_a_damaged_or_edited_other_backlog_neither_stops_the_parents_run_nor_its_view(
    tmp_path: Path, damage: str
) -> None:
    """The children's backlog stream edited in the middle (its chain broken, or re-chained with a field no backlog
    writes): the parents' run still runs and ends (the parent's attempts fail naming the damage) and its view still
    shows; a parent's link edited to name ``../etc`` or ``a.b`` names no backlog the view reads."""
    from test_provider_dedup import rechain

    from intentlog.backlog.model import task_extras

    root = tmp_path / "l"
    with intentlog.open(root) as led:
        led.backlog("fan").add("p", {}, max_attempts=2)
        led.backlog("fan").run(_two_children, workers=1, until_idle=True, poll=0.02)
    stream = root / "tasks" / "sums.backlog.jsonl"
    if damage == "chain broken":
        lines = stream.read_bytes().splitlines(keepends=True)
        lines[2] = lines[2].replace(b'"c1"', b'"c9"')
        stream.write_bytes(b"".join(lines))
        said = "sums.backlog.jsonl"
    else:
        evs = [orjson.loads(x) for x in stream.read_bytes().splitlines()]
        evs[2]["data"]["priority"] = "high"
        rechain(stream, evs)
        said = "MalformedRecord"
    with intentlog.open(root) as led:
        view = led.backlog("fan").run(_two_children, workers=1, until_idle=True, poll=0.02)
        row = {r.item: r for r in view.items}["p"]
        assert row.state == "failed" and said in (row.reason or ""), row
        assert [r.item for r in led.backlog("fan").view().items] == ["p"]  # the damaged backlog's rows left out
    stream.unlink()  # gone: the edited links below must not send the view anywhere else
    path = root / "tasks" / "fan.item.p.jsonl"
    for bad in ("../etc", "a.b"):
        evs = [orjson.loads(x) for x in path.read_bytes().splitlines()]
        for ev in evs:
            if ev["kind"] == "task.child_spawned":
                ev["data"]["backlog"] = bad
        rechain(path, evs)
        with intentlog.open(root) as led:
            assert task_extras(led.task("fan.item.p").events()).children_in == {}, bad  # the link names no backlog
            assert [(r.item, r.backlog) for r in led.backlog("fan").view().items] == [("p", None)], bad
        done = _cli(str(root), "backlog", "fan")
        assert done.returncode == 0 and "fan.item.p" in done.stdout, (bad, done.stderr)


def test_a_plain_join_reads_no_backlog_it_cannot_trust(tmp_path: Path) -> None:
    """A damaged backlog stream, or a link (re-chained by an editor) naming a path instead of a backlog: a plain join
    still answers with the child pending (verify names the damage), and writes nothing."""
    from test_provider_dedup import folder_bytes, rechain

    root = tmp_path / "l"
    with intentlog.open(root) as led:
        script = led.task("script")
        script.spawn("c1", {"n": 1}, backlog="sums")
        script.spawn("c2", {"n": 2}, backlog="sums")
    stream = root / "tasks" / "sums.backlog.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    assert b'"item":"c1"' in lines[2] and len(lines) == 4  # created, the backlog's checkpoint, c1, c2
    lines[2] = lines[2].replace(b'"c1"', b'"c9"')  # an edit in the middle: the chain breaks there
    stream.write_bytes(b"".join(lines))
    before = folder_bytes(root)
    with intentlog.open(root) as led:
        with pytest.raises(intentlog.ChildrenPending) as got:
            led.task("script").join()
        assert sorted(c for c, _, _ in got.value.blocked) == ["c1", "c2"]
    assert folder_bytes(root) == before
    # the parent's own link edited to name '../etc' and its chain rewritten: no backlog is read by that name
    path = root / "tasks" / "script.jsonl"
    evs = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    for ev in evs:
        if ev["kind"] == "task.child_spawned" and ev["data"]["child"] == "c1":
            ev["data"]["backlog"] = "../etc"
    rechain(path, evs)
    before = folder_bytes(root)
    with intentlog.open(root) as led:
        st = idiom_state(led.task("script").events())
        assert "c1" in st.children and "c1" not in st.child_backlogs
        assert any("'../etc'" in a for a in st.anomalies), st.anomalies
        with pytest.raises(intentlog.ChildrenPending) as got:
            led.task("script").join()
        assert sorted(c for c, _, _ in got.value.blocked) == ["c1", "c2"]
    assert folder_bytes(root) == before


def test_spawn_refuses_a_bad_or_changed_backlog_and_writes_nothing(tmp_path: Path) -> None:
    with intentlog.open(tmp_path / "l") as led:
        t = led.task("p")
        t.spawn("c1", {"n": 1}, backlog="sums")
        path = tmp_path / "l" / "tasks" / "p.jsonl"
        before = path.read_bytes() if path.exists() else None
        with pytest.raises(intentlog.UsageError, match="first sent"):
            t.spawn("c1", {"n": 1}, backlog="other")  # a spawned child runs where it was first sent
        with pytest.raises(intentlog.UsageError, match="first sent"):
            t.spawn("c1", {"n": 1})
        with pytest.raises(intentlog.UsageError, match="backlog name"):
            t.spawn("c2", {"n": 2}, backlog="no.dots")
        with pytest.raises(intentlog.UsageError, match="run= runs the child here"):
            t.spawn("c3", {"n": 3}, backlog="sums", run=lambda c: 1)
        assert before is None or path.read_bytes() == before
        assert not led.task("c2").stream.exists() and not led.task("c3").stream.exists()
        # outside a backlog run, the child is added to the backlog at once (once: a re-run adds nothing)
        t.spawn("c1", {"n": 1}, backlog="sums")
        added = [e.data for e in led.backlog("sums").task.events() if e.kind == "backlog.item_added"]
        assert [(a["item"], a["parent"]) for a in added] == [("c1", "p")]
