"""A sealed stream that is gone: lost (refused) or deleted by gc (a new task may take the id).

Before the fix the writer read ``heads.json`` only for a stream that exists: a sealed
stream deleted or moved away by anything but gc was silently re-created and every effect
in it paid again. And the opposite: after gc deleted a sealed task (recorded in
``gc.jsonl``), a task re-created under the same id worked once, then every reopen was
refused as "rewritten" against the old stream's seal, and ``verify`` reported an error.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog.heads import seal
from intentlog.projections.verify import verify_path
from intentlog.retention import apply_gc, keep


class Provider:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def __call__(self, request: Any) -> bytes:
        self.sent.append(request)
        return b'{"answer": 42}'


def _tree(root: Path) -> dict[str, bytes]:
    """Every evidence file's bytes (lock files hold only the last writer's pid)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def _sealed_ledger(root: Path) -> intentlog.Ledger:
    led = intentlog.open(root)
    t = led.task("t")
    t.effect("k", {"q": 1}, Provider())
    t.close()
    u = led.task("u")
    u.append("note", {})
    u.close()
    seal(led)
    return led


def test_a_sealed_stream_that_is_gone_is_refused_not_recreated(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led = _sealed_ledger(root)
    os.rename(root / "tasks" / "t.jsonl", tmp_path / "elsewhere.jsonl")
    before = _tree(root)

    p = Provider()
    with pytest.raises(intentlog.CorruptStream) as err:
        led.task("t").effect("k", {"q": 1}, p)
    led.task("t").close()
    assert p.sent == [], "a re-run of a lost sealed stream paid again"
    assert "heads.json" in str(err.value) and "gone" in str(err.value) and "intentlog seal" in str(err.value)
    assert _tree(root) == before, "nothing written"
    with pytest.raises(intentlog.CorruptStream):
        led.repair("t")
    with pytest.raises(intentlog.CorruptStream):
        led.repair("t", accept_damage=True)
    assert _tree(root) == before

    # the operator's explicit path: re-seal without it (the ledger no longer anchors it)
    seal(led)
    led.task("t").append("note", {"fresh": True})
    led.close()


def test_a_task_recreated_after_gc_deleted_its_sealed_stream_is_writable_and_verifies(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led = _sealed_ledger(root)
    keep(led, "u")
    result = apply_gc(led, max_age="30d", now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400))
    assert result.deleted == ("t",)

    p = Provider()
    led.task("t").effect("k", {"q": 1}, p)  # a new task under the old id: gc recorded the deletion
    led.task("t").close()
    assert len(p.sent) == 1
    led.task("t").append("note", {"reopened": True})  # reopening it must not be refused
    led.task("t").close()
    led.close()

    report = verify_path(root)
    assert report.ok, [(x.code, x.message) for x in report.problems if x.severity == "error"]
    assert any(x.code == "deleted_by_gc" and x.task == "t" for x in report.problems)


def test_gc_interrupted_before_the_unlink_keeps_the_seal_in_force(tmp_path: Path) -> None:
    """gc.jsonl names the stream, but the same stream is still there: it is still sealed."""
    root = tmp_path / "l"
    led = _sealed_ledger(root)
    keep(led, "u")
    path = root / "tasks" / "t.jsonl"
    saved = path.read_bytes()
    apply_gc(led, max_age="30d", now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400))
    lines = saved.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-2]))  # the old stream is back, cut short
    p = Provider()
    with pytest.raises(intentlog.CorruptStream):
        led.task("t").effect("k", {"q": 1}, p)
    led.task("t").close()
    assert p.sent == []
    led.close()


def test_export_of_a_task_recreated_after_gc(tmp_path: Path) -> None:
    from intentlog.bundle import export_bundle

    root = tmp_path / "l"
    led = _sealed_ledger(root)
    keep(led, "u")
    apply_gc(led, max_age="30d", now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400))
    led.task("t").effect("k", {"q": 1}, Provider())
    led.close()
    result = export_bundle(root, out=tmp_path / "b")
    assert result.ok
    assert (tmp_path / "b" / "tasks" / "t.jsonl").read_bytes() == (root / "tasks" / "t.jsonl").read_bytes()
