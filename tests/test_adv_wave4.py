"""Adversarial checks of the backlog's child items, event wake-ups and revisions: forged links between
streams, ids that collide, operators acting on a waiting parent's children, paths that escape."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from backlog_children_steps import fanout

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.bundle import HASHES_FILE, STATES_FILE, check_bundle, encode_hashes, encode_states, export_bundle
from intentlog.bundle import file_hashes as bundle_file_hashes
from intentlog.eventlog.canonical import dumps
from intentlog.eventlog.format import encode_line
from intentlog.eventlog.reader import StreamScan
from intentlog.heads import stream_head
from intentlog.projections.verify import HEADS_FILE, encode_heads, verify_path
from intentlog.projections.workstate import work_state

Events = list[dict[str, Any]]
DOCS = ["alpha", "beta"]


# -- the tamper tool: edit, re-chain, re-seal (the chain and the seal then hold) --------------------


def _read(stream: Path) -> Events:
    return [orjson.loads(line) for line in stream.read_bytes().splitlines()]


def _rechain(stream: Path, events: Events) -> None:
    out, prev = [], None
    for i, ev in enumerate(events):
        line = encode_line(ev["kind"], dumps(ev["data"]), prev, i, ev["ts"])
        out.append(line)
        prev = digest_bytes(line)
    stream.write_bytes(b"".join(out))


def _reseal(root: Path) -> None:
    tasks = sorted(p.stem for p in (root / "tasks").glob("*.jsonl"))
    (root / HEADS_FILE).write_bytes(encode_heads({t: stream_head(root / "tasks" / f"{t}.jsonl", t) for t in tasks}))
    if (root / STATES_FILE).exists():
        states = {t: work_state(StreamScan(root / "tasks" / f"{t}.jsonl"), task_id=t) for t in tasks}
        (root / STATES_FILE).write_bytes(encode_states(states))
    if (root / HASHES_FILE).exists():
        (root / HASHES_FILE).write_bytes(encode_hashes(bundle_file_hashes(root)))


def _tamper(root: Path, task: str, edit: Callable[[Events], Events]) -> None:
    stream = root / "tasks" / f"{task}.jsonl"
    _rechain(stream, edit(_read(stream)))
    _reseal(root)


def _standalone() -> ModuleType:
    path = Path(intentlog.__file__).parent / "verify_bundle.py"
    spec = importlib.util.spec_from_file_location("verify_bundle_standalone_w4", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _verdicts(root: Path, tmp_path: Path, task: str, edit: Callable[[Events], Events]) -> tuple[bool, bool, bool]:
    """Whether verify, check_bundle and verify_bundle.py each refuse the edited record (True: refused)."""
    bundle = tmp_path / "bundle"
    export_bundle(root, out=bundle, check=False)
    _tamper(root, task, edit)
    _tamper(bundle, task, edit)
    ledger = any(p.severity == "error" for p in verify_path(root).problems)
    library = any(p.severity != "info" for p in check_bundle(bundle).problems)
    v = _standalone().Verifier(str(bundle), inventory=True)
    v.run()
    independent = any(c.status == "FAIL" for c in v.claims)
    return ledger, library, independent


@pytest.fixture
def fanned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A backlog 'fan' whose item 'digest' spawned and joined two child items; sealed; every checker passes it."""
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    for name in ("CHILDREN_MEET", "CHILDREN_FAIL", "CHILDREN_HOLD"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        led.backlog("fan").add("digest", {"docs": DOCS, "name": "d"})
        view = led.backlog("fan").run(fanout, workers=1, until_idle=True, poll=0.02)
        assert view.counts["done"] == 3, view.to_json()
    _reseal(root)
    assert verify_path(root).ok
    return root


def test_the_untouched_fan_out_passes_every_checker(fanned: Path, tmp_path: Path) -> None:
    assert _verdicts(fanned, tmp_path, "d-alpha", lambda evs: evs) == (False, False, False)


def _repoint_parent(evs: Events) -> Events:
    for ev in evs:
        if ev["kind"] == "task.spawned":
            ev["data"]["parent"] = "fan.item.ghost"
    return evs


def test_a_child_naming_a_parent_that_never_spawned_it_is_refused(fanned: Path, tmp_path: Path) -> None:
    assert _verdicts(fanned, tmp_path, "d-alpha", _repoint_parent) == (True, True, True)


def _forge_item_parent(evs: Events) -> Events:
    for ev in evs:
        if ev["kind"] == "backlog.item_added" and ev["data"].get("item") == "d-alpha":
            ev["data"]["parent"] = "fan.item.ghost"
    return evs


def test_a_child_item_added_under_a_parent_that_never_spawned_it_is_refused(fanned: Path, tmp_path: Path) -> None:
    assert _verdicts(fanned, tmp_path, "fan.backlog", _forge_item_parent) == (True, True, True)


# -- a child id that is already another task's -------------------------------------------------------


def _spawner(child: str) -> Callable[[intentlog.Task, dict[str, Any]], Any]:
    def step(task: intentlog.Task, payload: dict[str, Any]) -> Any:
        if payload.get("parent"):
            task.spawn(child, {"leaf": True})
            return task.join()
        return {"leaf": "ran"}

    return step


def _bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "tasks").glob("*.jsonl"))}


def test_a_child_id_that_is_a_users_task_is_refused_and_the_task_untouched(tmp_path: Path) -> None:
    """A user's own task 'report' (a value recorded) is not adopted as the child 'report' of a backlog item."""
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        led.task("report").value("v", lambda: 41)
        led.close()
        before = (root / "tasks" / "report.jsonl").read_bytes()
        led.backlog("fan").add("p", {"parent": True}, max_attempts=1)
        view = led.backlog("fan").run(_spawner("report"), workers=1, until_idle=True, poll=0.02)
        rows = {r.item: r for r in view.items}
        assert "report" not in rows, view.to_json()  # never an item of the backlog
        assert rows["p"].state == "failed" and "report" in str(rows["p"].reason), view.to_json()
    assert (root / "tasks" / "report.jsonl").read_bytes() == before


@pytest.mark.parametrize("child", ["other.item.x"])
def test_a_child_id_that_is_another_backlogs_item_task_is_refused(tmp_path: Path, child: str) -> None:
    """The child 'other.item.x' would be backlog 'other''s item task: spawning it is refused, 'other' untouched."""
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        led.backlog("other").add("x", {"leaf": True})
        led.close()
        before = _bytes(root)
        led.backlog("fan").add("p", {"parent": True}, max_attempts=1)
        view = led.backlog("fan").run(_spawner(child), workers=1, until_idle=True, poll=0.02)
        rows = {r.item: r for r in view.items}
        assert "other.item.x" not in rows, view.to_json()  # it used to be adopted and run with fan's step
        assert rows["p"].state == "failed" and "item task" in str(rows["p"].reason), view.to_json()
        other = led.backlog("other").run(_spawner("unused"), workers=1, until_idle=True, poll=0.02)
        assert {r.item: r.state for r in other.items} == {"x": "done"}
        res = [e.data for e in led.task("other.item.x").events() if e.kind == "item.returned"]
        assert res and res[0]["result"] == {"leaf": "ran"}
    assert set(before) <= set(_bytes(root))


@pytest.mark.parametrize("child", ["other.item.x", "other.backlog", "a.item.b"])
def test_spawning_an_id_of_a_backlogs_own_form_writes_nothing(ledger: intentlog.Ledger, child: str) -> None:
    """Outside a backlog too: the id would be some backlog's stream or item task, so nothing is written."""
    parent = ledger.task("p")
    parent.value("v", lambda: 1)
    before = [e.kind for e in parent.events()]
    with pytest.raises(intentlog.UsageError, match="backlog"):
        parent.spawn(child, {"x": 1})
    assert [e.kind for e in parent.events()] == before
    assert child not in ledger.task_ids()


# -- revisions of a path that escapes; a git= folder that is no repository ----------------------------


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/"])
def test_revisions_of_a_path_outside_the_workspace_is_refused(ledger: intentlog.Ledger, path: str) -> None:
    with pytest.raises(intentlog.OutsideWorkspace):
        ledger.revisions(path)


def test_a_checkpoint_with_git_on_a_folder_outside_any_repository_writes_nothing(
    ledger: intentlog.Ledger, tmp_path: Path
) -> None:
    bare = tmp_path / "not-a-repo"
    bare.mkdir()
    link = tmp_path / "link-to-it"
    link.symlink_to(bare)
    task = ledger.task("t")
    task.value("v", lambda: 1)
    before = [e.kind for e in task.events()]
    for folder in (bare, link):
        with pytest.raises(intentlog.UsageError, match="git"):
            task.checkpoint("drafted", git=folder)
    assert [e.kind for e in task.events()] == before
