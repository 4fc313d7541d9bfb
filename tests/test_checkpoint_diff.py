"""``checkpoint_diff(a, b)``: what changed between two checkpoints, from their records alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from blake3 import blake3

import intentlog
from intentlog.checkpoints import CheckpointDiff, checkpoint_diff


def _digest(data: bytes) -> str:
    return "blake3:" + blake3(data).hexdigest()


def test_the_diff_names_evidence_added_and_removed_files_revision_status_and_phase(tmp_path: Path) -> None:
    with intentlog.open(tmp_path / "l") as led:
        t = led.task("t")
        t.checkpoint("outline", evidence=[b"plan", b"notes"], revision="aaa111", changed_files=["a.md"])
        t.checkpoint("draft", evidence=[b"plan", b"draft v1"], status="failed", revision="bbb222",
                     changed_files=["a.md", "b.md"])  # fmt: skip
        first, second = t.checkpoints()
    d = checkpoint_diff(first, second)
    assert isinstance(d, CheckpointDiff)
    assert (d.phase, d.status, d.revision) == (("outline", "draft"), ("accepted", "failed"), ("aaa111", "bbb222"))
    assert d.evidence_added == (_digest(b"draft v1"),) and d.evidence_removed == (_digest(b"notes"),)
    assert d.evidence_kept == (_digest(b"plan"),)
    assert d.files_added == ("b.md",) and d.files_removed == ()
    assert not d.same
    assert checkpoint_diff(second, second).same
    lines = d.lines()
    assert lines[0] == "seq 1 outline -> seq 2 draft"
    assert "status: accepted -> failed" in lines and "revision: aaa111 -> bbb222" in lines
    assert "+ file b.md" in lines and any(x.startswith("+ evidence blake3:") for x in lines)


def test_a_diff_of_something_else_is_refused() -> None:
    with pytest.raises(TypeError, match="two checkpoints"):
        checkpoint_diff("a", "b")  # type: ignore[arg-type]
