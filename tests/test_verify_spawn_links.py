"""The rule across streams (spawn_link_matches): a real fan-out verifies clean; an absent parent is excused
only by the gc log; the library and verify_bundle.py carry the same table."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from backlog_children_steps import fanout
from pytest import MonkeyPatch

import intentlog
from intentlog.bundle import check_bundle, export_bundle
from intentlog.projections.graph_links import LINK_CHECKS, LINK_RULES, SpawnLinks
from intentlog.projections.verify import verify_path


def _standalone() -> ModuleType:
    path = Path(intentlog.__file__).parent / "verify_bundle.py"
    spec = importlib.util.spec_from_file_location("verify_bundle_links", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fan(root: Path) -> None:
    with intentlog.open(root) as led:
        parent = led.task("merge")
        for doc in ("a", "b"):
            child = parent.spawn(f"sum-{doc}", {"doc": doc})
            led.task(f"sum-{doc}").finish({"summary": doc})
            assert child.id == f"sum-{doc}"
        assert parent.join(["sum-a", "sum-b"]) == {"sum-a": {"summary": "a"}, "sum-b": {"summary": "b"}}


def test_a_real_fan_out_verifies_clean_in_all_three(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _fan(root)
    assert [p for p in verify_path(root).problems if p.severity == "error"] == []
    bundle = tmp_path / "b"
    export_bundle(root, out=bundle, check=False)
    assert [p for p in check_bundle(bundle).problems if p.severity != "info"] == []
    v = _standalone().Verifier(str(bundle), inventory=True)
    v.run()
    assert [c.text for c in v.claims if c.status == "FAIL"] == []


def test_exporting_a_child_carries_its_parent_and_verifies_clean(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _fan(root)
    bundle = tmp_path / "b"
    done = export_bundle(root, ["sum-a"], out=bundle)
    assert done.ok
    assert sorted(p.name for p in (bundle / "tasks").iterdir()) == ["merge.jsonl", "sum-a.jsonl"]
    v = _standalone().Verifier(str(bundle), inventory=True)
    v.run()
    assert [c.text for c in v.claims if c.status == "FAIL"] == []


def test_a_bundle_without_the_parent_fails_the_rule_and_says_to_export_it(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _fan(root)
    (root / "tasks" / "merge.jsonl").unlink()  # the parent's stream lost (not by gc: no gc log says so)
    bundle = tmp_path / "b"
    export_bundle(root, ["sum-a"], out=bundle, check=False)
    assert not (bundle / "tasks" / "merge.jsonl").exists()
    said = [p.message for p in check_bundle(bundle).problems if p.severity == "error"]
    assert any("[spawn_link_matches]" in m and "export the parent" in m for m in said), said
    v = _standalone().Verifier(str(bundle), inventory=True)
    v.run()
    failed = [d for c in v.claims if c.status == "FAIL" for d in c.details]
    assert any("[spawn_link_matches]" in d and "'merge'" in d for d in failed), failed


def test_a_parent_the_gc_log_deleted_excuses_the_link_as_info() -> None:
    links = SpawnLinks()
    links.note("child", 1, "task.spawned", {"parent": "p", "payload": 1})
    found = list(links.findings(lambda t: "was deleted by gc at T (gc.jsonl seq 3)" if t == "p" else None))
    assert [(f.severity, f.task, f.seq) for f in found] == [("info", "child", 1)]
    assert "not checked" in found[0].message
    unexcused = list(links.findings(lambda t: None))
    assert [f.severity for f in unexcused] == ["error"]


def test_another_payload_is_refused() -> None:
    links = SpawnLinks()
    links.note("p", 3, "task.child_spawned", {"child": "c", "payload": {"x": 1}})
    links.note("c", 1, "task.spawned", {"parent": "p", "payload": {"x": 2}})
    found = list(links.findings(lambda t: None))
    assert [f.severity for f in found] == ["error"] and "payload" in found[0].message


def test_both_verifiers_carry_the_same_links_table() -> None:
    mod = _standalone()
    assert [(n, k, s) for n, k, s in mod.LINK_RULES] == [(r.name, r.kinds, r.statement) for r in LINK_RULES]
    assert sorted(LINK_CHECKS) == sorted(r.name for r in LINK_RULES)
    assert all(callable(getattr(mod.Verifier, f"link_{r.name}", None)) for r in LINK_RULES)


def test_exporting_a_backlog_carries_its_child_items_and_parents(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    for name in ("CHILDREN_MEET", "CHILDREN_FAIL", "CHILDREN_HOLD"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        led.backlog("fan").add("digest", {"docs": ["a", "b"], "name": "d"})
        assert led.backlog("fan").run(fanout, workers=2, until_idle=True, poll=0.02).counts["done"] == 3
    done = export_bundle(root, ["fan.backlog"], out=tmp_path / "b")
    assert done.ok, [p.message for p in done.report.problems if p.severity == "error"] if done.report else done
    assert sorted(done.tasks) == ["d-a", "d-b", "fan.backlog", "fan.item.digest"]
