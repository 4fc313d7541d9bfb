"""`intentlog demo`: the seed experiment end to end, every claim in its table asserted."""

from __future__ import annotations

import json
from pathlib import Path

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
    }
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
    for case in ("1-killed-after-manifest", "2-drift-refused", "3-effect-unknown", "4-killed-after-observation"):
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
