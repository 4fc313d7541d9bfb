"""A step that raises intentlog's UsageError (bad input, misuse) fails its item at once, never retried.

A retry would raise the same refusal again: the item is failed on its first attempt with the
error's message, and ``intentlog backlog`` names it. The ground truth for "ran once" is a
call log outside the ledger, appended by the step itself before it raises. A transient error
beside it is still retried (the control).
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

MISUSE = "payload field 'doc' must be text, not 7"


def _called(payload: dict[str, Any]) -> int:
    """Append the item to the call log (outside the ledger); how many times it ran so far."""
    path = os.environ["USAGE_CALLS"]
    with open(path, "a", encoding="utf-8") as f:
        f.write(payload["item"] + "\n")
        f.flush()
        os.fsync(f.fileno())
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip() == payload["item"])


def misuse_step(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    n = _called(payload)
    if payload["kind"] == "usage":
        raise intentlog.UsageError(MISUSE)
    if payload["kind"] == "wrong-type":  # a subclass of UsageError is as permanent
        list(task.events(since="start"))  # type: ignore[arg-type]
    if payload["kind"] == "not-json":  # a value that is not exact JSON
        task.value("v", lambda: {1, 2})
    if payload["kind"] == "bad-id":  # a malformed child id
        task.spawn("no/slashes", {})
    if payload["kind"] == "reserved":  # a kind only intentlog writes
        task.append("attempt.started", {})
    if payload["kind"] == "transient" and n < 2:
        raise RuntimeError(f"transient failure {n}")
    return {"calls": n}


async def amisuse_step(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    return misuse_step(task, payload)


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "calls.log"
    monkeypatch.setenv("USAGE_CALLS", str(path))
    return path


def _runs(calls: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in calls.read_text(encoding="utf-8").split():
        out[line] = out.get(line, 0) + 1
    return out


@pytest.mark.parametrize("in_flight", [1, 2], ids=["sync", "async-lanes"])
def test_a_usage_error_fails_the_item_at_once_with_its_message(calls: Path, tmp_path: Path, in_flight: int) -> None:
    root = tmp_path / "l"
    step = misuse_step if in_flight == 1 else amisuse_step
    with intentlog.open(root) as led:
        bl = led.backlog("jobs")
        for kind in ("usage", "transient"):
            bl.add(kind, {"item": kind, "kind": kind}, max_attempts=5)
        # a retry of the usage error would be scheduled (then run) within 0.01 s: the record and the call log say
        view = bl.run(step, workers=1, until_idle=True, poll=0.02, backoff=0.01, max_backoff=0.01, in_flight=in_flight)
        rows = {r.item: r for r in view.items}
        assert rows["transient"].state == "done", view.to_json()  # the control: a transient error is retried
        assert rows["usage"].state == "failed"
        assert rows["usage"].reason is not None and MISUSE in rows["usage"].reason
        assert "UsageError" in rows["usage"].reason
        evs = [e for e in bl.task.events() if e.data.get("item") == "usage"]
        kinds = [e.kind for e in evs]
        assert "backlog.item_scheduled" not in kinds  # no retry was ever scheduled
        failed = [e.data for e in evs if e.kind == "backlog.item_failed"]
        assert len(failed) == 1 and failed[0]["failures"] == 1 and MISUSE in failed[0]["reason"]
    assert _runs(calls) == {"usage": 1, "transient": 2}  # the ground truth: the misused step ran once
    shown = subprocess.run([sys.executable, "-m", "intentlog.cli", "--root", str(root), "backlog", "jobs"],
                           capture_output=True, text=True)  # fmt: skip
    line = next(ln for ln in shown.stdout.splitlines() if ln.startswith("usage "))
    assert "failed" in line and "UsageError" in line and MISUSE in line, shown.stdout
    js = subprocess.run([sys.executable, "-m", "intentlog.cli", "--root", str(root), "backlog", "jobs", "--json"],
                        capture_output=True, text=True)  # fmt: skip
    item = {i["item"]: i for i in json.loads(js.stdout)["items"]}["usage"]
    assert item["state"] == "failed" and MISUSE in item["reason"] and item["failures"] == 1


def test_a_subclass_of_usage_error_raised_by_intentlog_is_as_permanent(calls: Path, tmp_path: Path) -> None:
    with intentlog.open(tmp_path / "l") as led:
        bl = led.backlog("jobs")
        bl.add("wrong", {"item": "wrong", "kind": "wrong-type"}, max_attempts=3)
        view = bl.run(misuse_step, workers=1, until_idle=True, poll=0.02, backoff=0.01, max_backoff=0.01)
        row = view.items[0]
        assert row.state == "failed" and row.reason is not None and "WrongType" in row.reason, view.to_json()
    assert _runs(calls) == {"wrong": 1}


@pytest.mark.parametrize(
    ("kind", "error"),
    [("not-json", "NotSerializable"), ("bad-id", "InvalidTaskId"), ("reserved", "ReservedKind")],
)
def test_a_refusal_of_what_the_step_records_is_as_permanent(calls: Path, tmp_path: Path, kind: str, error: str) -> None:
    with intentlog.open(tmp_path / "l") as led:
        bl = led.backlog("jobs")
        bl.add(kind, {"item": kind, "kind": kind}, max_attempts=3)
        view = bl.run(misuse_step, workers=1, until_idle=True, poll=0.02, backoff=0.01, max_backoff=0.01)
        row = view.items[0]
        assert row.state == "failed" and row.reason is not None and error in row.reason, view.to_json()
        assert "backlog.item_scheduled" not in [e.kind for e in bl.task.events()]  # no retry was ever scheduled
    assert _runs(calls) == {kind: 1}  # the ground truth: the step ran once
