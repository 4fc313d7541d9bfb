"""gc never deletes, moves or reads through a link inside the ledger.

Before the fix, ``apply_gc`` on a ledger whose ``tasks/`` or ``objects/`` folder was a
symbolic link to an outside folder deleted the outside folder's files (the expired
stream, every unreferenced blob); a linked ``keep.json`` was read through. Now such a
ledger is refused with ``LinkRefused`` naming the link, and the outside folder keeps
every byte.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest

import intentlog
from intentlog.retention import apply_gc, keep, plan_gc


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _ledger(root: Path) -> intentlog.Ledger:
    led = intentlog.open(root)
    led.task("t").effect("k", {"q": "x" * 9000}, lambda r: b"y" * 9000)
    led.task("t").close()
    led.task("u").append("note", {})
    led.task("u").close()
    led.artifacts.put(b"orphan" * 2000)
    keep(led, "u")
    return led


LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400)


@pytest.mark.parametrize("which", ["tasks", "objects", "quarantine"])
def test_gc_refuses_a_linked_folder_and_deletes_nothing_outside(tmp_path: Path, which: str) -> None:
    root = tmp_path / "l"
    led = _ledger(root)
    outside = tmp_path / "outside"
    shutil.move(str(root / which), str(outside))
    os.symlink(outside, root / which)
    before = _files(outside)

    with pytest.raises(intentlog.LinkRefused) as err:
        plan_gc(led, max_age="30d", grace="0s", now=LATER)
    assert str(root / which) in str(err.value)
    with pytest.raises(intentlog.LinkRefused):
        apply_gc(led, max_age="30d", grace="0s", now=LATER)
    assert _files(outside) == before
    assert not (root / "gc.jsonl").exists(), "nothing recorded: nothing was to be deleted"
    led.close()


def test_gc_refuses_a_linked_shard_swapped_in_after_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard folder replaced by a link between the plan and the deletion: the outside file stays."""
    from intentlog import retention

    root = tmp_path / "l"
    led = _ledger(root)
    real_carry_out = retention.apply._carry_out
    outside = tmp_path / "outside"
    seen: dict[str, bytes] = {}

    def swap_then_carry_out(ledger: intentlog.Ledger, plan: retention.GcPlan) -> retention.GcResult:
        shard = led.artifacts.path_for(plan.blobs[0].digest).parent
        shutil.move(str(shard), str(outside))
        os.symlink(outside, shard)
        seen.update(_files(outside))
        return real_carry_out(ledger, plan)

    monkeypatch.setattr(retention.apply, "_carry_out", swap_then_carry_out)
    with pytest.raises(intentlog.IntentlogError):
        apply_gc(led, max_age="30d", grace="0s", now=LATER)
    assert seen, "the test swapped no shard"
    assert _files(outside) == seen, "gc deleted files of an outside folder through a shard link"
    led.close()


def test_a_linked_keep_file_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led = _ledger(root)
    outside = tmp_path / "keep.json"
    shutil.move(str(root / "keep.json"), str(outside))
    os.symlink(outside, root / "keep.json")
    plan = plan_gc(led, max_age="30d", grace="0s", now=LATER)
    assert plan.refused is not None and "link" in plan.refused
    led.close()


def test_gc_works_on_a_ledger_whose_root_is_a_link(tmp_path: Path) -> None:
    """The root is the user's choice and may be a link; gc refused it as a linked tasks folder."""
    intentlog.open(tmp_path / "real").close()
    os.symlink(tmp_path / "real", tmp_path / "link")
    led = _ledger(tmp_path / "link")
    result = apply_gc(led, max_age="30d", grace="0s", now=LATER)
    assert result.deleted == ("t",)
    assert not (tmp_path / "real" / "tasks" / "t.jsonl").exists()
    assert (tmp_path / "real" / "gc.jsonl").is_file() and not (tmp_path / "real" / "gc.jsonl").is_symlink()
    led.close()
