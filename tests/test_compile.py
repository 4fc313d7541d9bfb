"""Context compilation (DESIGN §6): the offered inventory and every outcome are recorded.

A compilation records what it was offered (id, required, size and whether the size is
estimated, lineage) before it decides anything, then either the package it compiled or
why it failed -- so a later process can recompile, or fix the inputs, from the record.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from effect_child import disk_events, snapshot

import intentlog
from intentlog import PreparationFailed, RequiredContextMissing, ResumeRefused, UsageError
from intentlog.artifacts.inline import INLINE_MAX

OFFERED: list[dict[str, Any]] = [
    {"id": "A", "required": True, "content": "paragraph7", "lineage": {"from": "ch16.md#p7"}},
    {"id": "B", "required": True, "size": 0, "lineage": {"artifact": "style"}},
    {"id": "D", "size": 0},
]


def recorded(ledger: intentlog.Ledger, task_id: str = "t") -> list[dict[str, Any]]:
    return disk_events(ledger.root / "tasks" / f"{task_id}.jsonl")


def test_a_compilation_records_its_inventory_then_its_package(ledger: intentlog.Ledger) -> None:
    """compilation_requested (inventory without content), then compiled with the package ref and selected ids."""
    task = ledger.task("t")
    package = task.compile("ctx", OFFERED, select=lambda items: ["A", "B"])
    events = recorded(ledger)
    assert [e["kind"] for e in events[1:]] == ["context.compilation_requested", "context.compiled"]
    req = events[1]["data"]
    assert req["offered"] == [
        {"id": "A", "required": True, "size": 12, "estimated": True, "lineage": {"from": "ch16.md#p7"}},
        {"id": "B", "required": True, "size": 0, "estimated": False, "lineage": {"artifact": "style"}},
        {"id": "D", "required": False, "size": 0, "estimated": False, "lineage": None},
    ]
    assert req["required"] == ["A", "B"]
    assert "content" not in orjson.dumps(req).decode()
    compiled = events[2]["data"]
    assert compiled["selected"] == ["A", "B"] == list(package.selected)
    assert compiled["package"]["digest"] == package.digest
    body = orjson.loads(ledger.artifacts.get(package.digest))
    assert body == {"compilation": "ctx", "items": [{"id": "A", "content": "paragraph7"}, {"id": "B", "content": None}]}
    assert package.size == compiled["package"]["size"]


def test_required_items_are_always_selected(ledger: intentlog.Ledger) -> None:
    """A select that leaves out a required id still gets it, after its own choices, once each."""
    package = ledger.task("t").compile("ctx", OFFERED, select=lambda items: ["D", "D"])
    assert package.selected == ("D", "A", "B")


def test_a_missing_required_input_is_a_recorded_failure(ledger: intentlog.Ledger) -> None:
    """Required but never offered: compilation_failed names RequiredContextMissing and missing = required - offered."""
    task = ledger.task("t")
    with pytest.raises(RequiredContextMissing) as info:
        task.compile("ctx", OFFERED, required=["C", "A"])
    assert info.value.missing == ["C"] and "C" in str(info.value)
    failed = recorded(ledger)[-1]
    assert failed["kind"] == "context.compilation_failed"
    assert failed["data"] == {"compilation": "ctx", "error": "RequiredContextMissing", "missing": ["C"]}
    comp = intentlog.open(ledger.root).task("t").work_state().compilations["ctx"]
    assert (comp.stage, comp.next_operation, comp.missing) == ("failed", "fix inputs", ("C",))
    assert [o["id"] for o in comp.offered] == ["A", "B", "D"]
    # fixing the inputs: compile again under the same id
    task.compile("ctx", [*OFFERED, {"id": "C", "size": 1}], required=["C", "A"])
    ws = task.work_state()
    assert ws.compilations["ctx"].stage == "compiled" and ws.next_operation == "none"


def test_a_select_that_raises_or_invents_ids_is_a_recorded_failure(ledger: intentlog.Ledger) -> None:
    """select raising, or choosing ids never offered, appends compilation_failed with the message."""
    task = ledger.task("t")

    def broken(items: list[dict[str, Any]]) -> list[str]:
        raise RuntimeError("ranker offline")

    with pytest.raises(PreparationFailed) as info:
        task.compile("ctx", OFFERED, select=broken)
    assert "ranker offline" in info.value.error
    with pytest.raises(PreparationFailed):
        task.compile("ctx2", OFFERED, select=lambda items: ["Z"])
    failures = [e["data"] for e in recorded(ledger) if e["kind"] == "context.compilation_failed"]
    assert failures[0]["error"] == "select raised RuntimeError: ranker offline"
    assert failures[1]["error"] == "selected ids not offered: 'Z'"
    ws = task.work_state()
    assert [ws.compilations[c].next_operation for c in ("ctx", "ctx2")] == ["fix inputs", "fix inputs"]


def test_content_that_is_not_json_is_a_recorded_failure(ledger: intentlog.Ledger) -> None:
    """An item whose content cannot be serialized is recorded with an unknown size, then the compilation fails."""
    task = ledger.task("t")
    with pytest.raises(PreparationFailed) as info:
        task.compile("ctx", [{"id": "A", "content": {1, 2}}])
    assert "'A'" in info.value.error
    req, failed = (e["data"] for e in recorded(ledger)[-2:])
    assert req["offered"] == [{"id": "A", "required": False, "size": None, "estimated": True, "lineage": None}]
    assert failed["missing"] == [] and "not JSON" in failed["error"]


def test_malformed_arguments_write_nothing(ledger: intentlog.Ledger) -> None:
    """Bad ids, duplicate items, bad sizes or a string for required are refused before the disk is touched."""
    task = ledger.task("t")
    task.append("note", {})
    before = snapshot(ledger.root)
    bad_calls: list[tuple[str, list[Any], dict[str, Any]]] = [
        ("", OFFERED, {}),
        ("ctx", [{"content": "no id"}], {}),
        ("ctx", [{"id": "A"}, {"id": "A"}], {}),
        ("ctx", [{"id": "A", "size": -1}], {}),
        ("ctx", [{"id": "A", "size": True}], {}),
        ("ctx", [{"id": "A"}], {"required": "A"}),
    ]
    for cid, offered, kw in bad_calls:
        with pytest.raises(UsageError):
            task.compile(cid, offered, **kw)
    with pytest.raises(intentlog.NotSerializable):
        task.compile("ctx", [{"id": "A", "lineage": {1, 2}}])
    assert snapshot(ledger.root) == before


def test_a_large_package_is_a_blob(ledger: intentlog.Ledger) -> None:
    """A package over 4 KiB is stored in objects/ before context.compiled refers to it."""
    package = ledger.task("t").compile("ctx", [{"id": "A", "content": "x" * (INLINE_MAX + 1)}])
    hexd = package.digest.split(":", 1)[1]
    assert (ledger.root / "objects" / hexd[:2] / hexd[2:]).stat().st_size == package.size
    assert "inline" not in recorded(ledger)[-1]["data"]["package"]


def test_a_call_bound_to_its_package_refuses_a_changed_context(ledger: intentlog.Ledger) -> None:
    """The package digest as a call input: recompiling other content makes the recorded call drift."""
    task = ledger.task("t")
    first = task.compile("ctx", [{"id": "A", "content": "v1"}])
    task.prepare("review", {"model": "m"}, inputs={"context": first.digest})
    task.close()
    task = intentlog.open(ledger.root).task("t")
    second = task.compile("ctx", [{"id": "A", "content": "v2"}])
    assert second.digest != first.digest
    with pytest.raises(ResumeRefused) as info:
        task.effect("review", {"model": "m"}, lambda r: b"x", inputs={"context": second.digest})
    assert info.value.reason == "DRIFT"
    again = task.compile("ctx", [{"id": "A", "content": "v1"}])
    assert again.digest == first.digest
    assert task.effect("review", {"model": "m"}, lambda r: b"ok", inputs={"context": again.digest}) == b"ok"
