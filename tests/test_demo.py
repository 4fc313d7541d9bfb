"""`intentlog demo`: the crash experiment end to end, every claim in its table asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import intentlog
from intentlog.cli import main
from intentlog.demo.provider import read_receipts


def test_demo_claims_hold_and_folders_are_left(tmp_path: Path) -> None:
    """Every case's claims pass, the receipt logs say what the table says, and each ledger verifies."""
    r = CliRunner().invoke(main, ["demo", str(tmp_path / "d"), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["ok"] is True
    assert out["seconds"] < 30
    cases = {c["case"]: c for c in out["cases"]}
    assert set(cases) == {
        "1-killed-after-manifest",
        "2-drift-refused",
        "3-effect-unknown",
        "3b-naive-restart-copy",
        "4-killed-after-observation",
        "5-compilation-killed",
        "6-compilation-missing-input",
    }
    assert out["claims_checked"] >= 73 and out["claims_failed"] == 0
    assert len(out["corruptions"]) == 5 and all(c["claims"][0]["passed"] for c in out["corruptions"])
    for c in cases.values():
        assert c["expected"] and c["measured"] and c["verifier"]["claims"] > 0
    for c in cases.values():
        assert c["claims"] and all(x["passed"] for x in c["claims"]), c
    # the claims, re-checked here from the receipt logs themselves
    d = tmp_path / "d"
    assert len(read_receipts(d / "1-killed-after-manifest" / "receipts.jsonl")) == 1
    assert read_receipts(d / "2-drift-refused" / "receipts.jsonl") == []
    assert len(read_receipts(d / "3-effect-unknown" / "receipts.jsonl")) == 1
    naive = read_receipts(d / "3b-naive-restart-copy" / "receipts.jsonl")
    assert len(naive) == 2 and naive[0]["body_hash"] == naive[1]["body_hash"]
    assert len(read_receipts(d / "4-killed-after-observation" / "receipts.jsonl")) == 1
    ws = intentlog.open(d / "3-effect-unknown" / "ledger", create=False).task("chapter-16").work_state()
    assert ws.calls["call-1"].stage == "effect_unknown"
    comp = intentlog.open(d / "6-compilation-missing-input" / "ledger", create=False).task("chapter-16").work_state()
    assert comp.compilations["context-16"].missing == ("C",)
    for case in (
        "1-killed-after-manifest",
        "2-drift-refused",
        "3-effect-unknown",
        "4-killed-after-observation",
        "5-compilation-killed",
        "6-compilation-missing-input",
    ):
        v = CliRunner().invoke(main, ["--root", str(d / case / "ledger"), "verify"], catch_exceptions=False)
        assert v.exit_code == 0, (case, v.output)


def test_demo_refuses_a_foreign_folder(tmp_path: Path) -> None:
    """The demo never writes into a non-empty folder that is not a previous demo."""
    (tmp_path / "mine.txt").write_text("keep me")
    r = CliRunner().invoke(main, ["demo", str(tmp_path)])
    assert r.exit_code == 1
    assert (tmp_path / "mine.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_demo_reruns_in_the_same_folder(tmp_path: Path) -> None:
    """Running the demo twice in one folder starts the cases afresh."""
    for _ in range(2):
        r = CliRunner().invoke(main, ["demo", str(tmp_path / "d")], catch_exceptions=False)
        assert r.exit_code == 0, r.output
    assert "[FAILED]" not in r.output


def test_demo_fails_when_its_output_is_corrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's checks can fail: a seeded corruption that changes nothing, and a forged receipt, are caught."""
    from intentlog.demo import run as demo_run

    noop = (("an edited event", lambda b: None),)
    monkeypatch.setattr(demo_run, "_CORRUPTIONS", noop)
    r = CliRunner().invoke(main, ["demo", str(tmp_path / "a"), "--json"], catch_exceptions=False)
    assert r.exit_code == 1
    out = json.loads(r.output)
    assert out["ok"] is False and out["corruptions"][0]["claims"][0]["passed"] is False
    monkeypatch.undo()
    real = demo_run.read_receipts

    def forged(path: object) -> list[dict[str, object]]:
        return [*real(path), {"body_hash": "blake3:" + "0" * 64, "key": "x", "pid": 0, "label": "forged"}]

    monkeypatch.setattr(demo_run, "read_receipts", forged)
    r = CliRunner().invoke(main, ["demo", str(tmp_path / "b"), "--json"], catch_exceptions=False)
    assert r.exit_code == 1
    assert json.loads(r.output)["claims_failed"] > 0


def test_demo_ledgers_work_with_every_reading_command(tmp_path: Path) -> None:
    """The demo's folders are real ledgers: .gitignore, .gitattributes, and tasks/status/log/verify work on them."""
    r = CliRunner().invoke(main, ["demo", str(tmp_path / "d")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "claims checked (the reference experiment's verifier checked 73)" in r.output
    led = tmp_path / "d" / "1-killed-after-manifest" / "ledger"
    assert (led / ".gitignore").exists() and (led / ".gitattributes").exists()
    for argv in (["tasks"], ["status", "chapter-16"], ["log", "chapter-16"], ["verify"], ["gc"]):
        v = CliRunner().invoke(main, ["--root", str(led), *argv], catch_exceptions=False)
        assert v.exit_code == 0, (argv, v.output)


def test_demo_as_the_readme_runs_it(tmp_path: Path) -> None:
    """`intentlog demo` with no folder (the README's main job), run as a real process in a fresh folder, passes."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "FAILED" not in proc.stdout
    assert (tmp_path / "intentlog-demo").is_dir()
