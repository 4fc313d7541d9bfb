"""Checkpoints: a named phase with its accepted evidence; a later process continues from the latest that verifies.

Every test ends by reading the record back from disk (a reopened ledger or a fresh interpreter).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from effect_child import disk_events, snapshot

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.artifacts.inline import INLINE_MAX
from intentlog.errors import ArtifactMissing, UsageError
from intentlog.projections.verify import verify_ledger

BIG = b"z" * (INLINE_MAX + 100)


def obj(root: Path, digest: str) -> Path:
    hexd = digest.split(":", 1)[1]
    return root / "objects" / hexd[:2] / hexd[2:]


def test_a_checkpoint_records_its_phase_evidence_and_workspace(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """Evidence given as bytes (inline or a blob), a recorded file's Ref, a call's response ref or a digest is recorded
    as refs; revision, changed files, status and note are kept; verify passes."""
    task = ledger.task("t")
    task.effect("k", {"q": 1}, lambda r: b"an answer")
    (tmp_path / "notes.md").write_text("# notes\n")
    ref = task.record_artifact("notes.md")
    response = task.work_state().calls["call-1"].response
    task.checkpoint(
        "drafted",
        evidence=[b"small", BIG, ref, response, ref.digest],
        status="accepted",
        revision="0a1b2c3",
        changed_files=["chapter.md", "notes.md"],
        note="draft 1 passes the style check",
        by="ci",
    )
    ledger.close()
    [cp] = [e["data"] for e in disk_events(task.path) if e["kind"] == "task.checkpoint"]
    assert [e["digest"] for e in cp["evidence"]] == [
        digest_bytes(b"small"),
        digest_bytes(BIG),
        ref.digest,
        digest_bytes(b"an answer"),
        ref.digest,
    ]
    assert (cp["phase"], cp["revision"], cp["changed_files"], cp["by"]) == (
        "drafted",
        "0a1b2c3",
        ["chapter.md", "notes.md"],
        "ci",
    )
    led = intentlog.open(ledger.root)
    latest = led.task("t").latest_checkpoint()
    assert latest is not None and latest.verified and latest.phase == "drafted" and latest.skipped == ()
    assert led.task("t").status().phase == "drafted"
    assert verify_ledger(led).ok


def test_evidence_that_is_not_stored_is_refused_and_nothing_is_written(ledger: intentlog.Ledger) -> None:
    """A digest or ref naming bytes the store does not have raises ArtifactMissing; bad arguments are UsageErrors."""
    task = ledger.task("t")
    task.append("note", {})
    before = snapshot(ledger.root)
    ghost = digest_bytes(b"never stored")
    with pytest.raises(ArtifactMissing):
        task.checkpoint("p", evidence=[ghost])
    with pytest.raises(ArtifactMissing):
        task.checkpoint("p", evidence=[{"digest": ghost, "size": 12}])
    for bad in ({"evidence": b"bytes, not a list"}, {"evidence": [42]}, {"changed_files": "a.py"}):
        with pytest.raises(UsageError):
            task.checkpoint("p", **bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        task.checkpoint("")
    ledger.close()
    assert snapshot(ledger.root) == before


def test_a_later_process_continues_from_the_latest_checkpoint_whose_evidence_verifies(
    ledger: intentlog.Ledger, run_child: Any
) -> None:
    """The newest checkpoint's blob is corrupted and the one before's deleted: a fresh process skips both, saying
    why, and continues from the oldest; verified=False still names the newest."""
    task = ledger.task("t")
    task.checkpoint("outline", evidence=[b"outline"])
    task.checkpoint("draft", evidence=[BIG + b"1"])
    task.checkpoint("review", evidence=[BIG + b"2"])
    ledger.close()
    obj(ledger.root, digest_bytes(BIG + b"1")).unlink()
    corrupt = obj(ledger.root, digest_bytes(BIG + b"2"))
    corrupt.chmod(0o644)
    corrupt.write_bytes(BIG + b"X")
    out = run_child(
        """
        import sys, intentlog
        t = intentlog.open(sys.argv[1]).task("t")
        cp = t.latest_checkpoint()
        print(cp.phase)
        for seq, phase, why in cp.skipped:
            print(phase, "|", why)
        print(t.latest_checkpoint(verified=False).phase)
        """,
        ledger.root,
    ).stdout.splitlines()
    assert out[0] == "outline"
    assert out[1].startswith("review |") and "hash" in out[1]
    assert out[2].startswith("draft |") and "not in the store" in out[2]
    assert out[3] == "review"


def test_the_status_phase_comes_from_the_latest_checkpoint(ledger: intentlog.Ledger) -> None:
    """A note carrying a phase after a checkpoint does not override it; without checkpoints the note's phase shows."""
    task = ledger.task("t")
    task.append("note", {"phase": "warming up"})
    assert task.status().phase == "warming up"
    task.checkpoint("planned", evidence=[b"plan"])
    task.append("note", {"phase": "something else"})
    ledger.close()
    st = intentlog.open(ledger.root).task("t").status()
    assert st.phase == "planned" and st.checkpoint is not None and st.checkpoint.phase == "planned"


def test_verify_catches_a_checkpoint_accepting_a_call_that_did_not_complete(ledger: intentlog.Ledger) -> None:
    """A checkpoint naming a call never requested, or one not completed, is an identity-graph error."""
    task = ledger.task("t")
    task.prepare("k", {"q": 1})
    task.checkpoint("p", call="call-1")
    task.checkpoint("p", call="call-5")
    task.checkpoint("p", turn="turn-1")
    ledger.close()
    messages = [p.message for p in verify_ledger(intentlog.open(ledger.root)).problems if p.severity == "error"]
    assert any("accepts 'call-1', which has not completed" in m for m in messages), messages
    assert any("names call 'call-5', which was never requested" in m for m in messages), messages
    assert any("accepts turn 'turn-1', which has no completed call" in m for m in messages), messages


def test_status_names_the_checkpoint_latest_checkpoint_returns_when_the_newest_evidence_is_corrupt(
    ledger: intentlog.Ledger,
) -> None:
    """The newest checkpoint's blob is corrupted: status() names the same (older) checkpoint and phase that
    latest_checkpoint() continues from, not the one whose evidence fails to verify."""
    task = ledger.task("t")
    task.checkpoint("draft", evidence=[b"draft"])
    task.checkpoint("review", evidence=[BIG + b"r"], status="failed")
    ledger.close()
    corrupt = obj(ledger.root, digest_bytes(BIG + b"r"))
    corrupt.chmod(0o644)
    corrupt.write_bytes(BIG + b"X")
    t = intentlog.open(ledger.root).task("t")
    cp = t.latest_checkpoint()
    st = t.status()
    assert cp is not None and cp.phase == "draft" and [s[1] for s in cp.skipped] == ["review"]
    assert st.phase == "draft"
    assert st.checkpoint is not None and st.checkpoint.seq == cp.seq
    assert st.state != "paused for review", "a checkpoint whose evidence is corrupt must not pause the task"
