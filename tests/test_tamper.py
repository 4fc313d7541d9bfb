"""Tampering that a repair could otherwise launder, and one bad file hiding the others."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import intentlog
from intentlog.cli import main
from intentlog.heads import seal
from intentlog.projections.verify import verify_path


def _ledger_with_edit(root: Path) -> Path:
    """Three notes, then the middle one's value edited in place: the last line no longer chains."""
    t = intentlog.open(root).task("a")
    for amount in (1, 10, 2):
        t.append("note", {"amount": amount})
    t.close()
    stream = root / "tasks" / "a.jsonl"
    stream.write_bytes(stream.read_bytes().replace(b'"amount":10', b'"amount":99'))
    return stream


def test_a_repair_does_not_launder_an_edited_line(tmp_path: Path) -> None:
    """A writer refuses the suspect last line; accepting it by repair leaves verify reporting an error."""
    _ledger_with_edit(tmp_path / "ev")
    assert not verify_path(tmp_path / "ev").ok
    ledger = intentlog.open(tmp_path / "ev")
    t = ledger.task("a")
    with pytest.raises(intentlog.CorruptStream, match="does not chain"):
        t.append("note", {"x": 1})
    ledger.repair("a", accept_damage=True)
    t.append("note", {"x": 1})
    t.close()
    repaired = [ev for ev in t.events() if ev.kind == "stream.repaired"]
    assert len(repaired) == 1 and repaired[0].data["suspect"] is True
    report = verify_path(tmp_path / "ev")
    assert not report.ok
    assert [p.code for p in report.problems if p.severity == "error"] == ["suspect_repair"]


def test_seal_refuses_a_suspect_tail(tmp_path: Path) -> None:
    """seal never anchors a stream whose last whole line fails to chain; heads.json is not written."""
    _ledger_with_edit(tmp_path / "ev")
    with pytest.raises(intentlog.CorruptStream, match="does not chain"):
        seal(intentlog.open(tmp_path / "ev", create=False))
    assert not (tmp_path / "ev" / "heads.json").exists()


def test_a_stray_file_and_a_garbage_tail_do_not_hide_other_tasks(tmp_path: Path) -> None:
    """tasks lists every readable task despite a stray file in tasks/ and a garbage tail; seal still works."""
    ledger = intentlog.open(tmp_path / "ev")
    for tid in ("good", "torn"):
        with ledger.task(tid) as t:
            t.append("note", {"tid": tid})
    (tmp_path / "ev" / "tasks" / "bad name.jsonl").write_bytes(b"{}\n")
    with open(tmp_path / "ev" / "tasks" / "torn.jsonl", "ab") as f:
        f.write(b"garbage\x00\x00zz\n")
    r = CliRunner().invoke(main, ["--root", str(tmp_path / "ev"), "tasks", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "good" in r.output and "torn" in r.output
    assert CliRunner().invoke(main, ["--root", str(tmp_path / "ev"), "seal"]).exit_code == 0
    r = CliRunner().invoke(main, ["--root", str(tmp_path / "ev"), "status", "torn", "--json"])
    assert r.exit_code == 0, r.output


def test_a_quarantined_tail_without_its_record_is_reported(tmp_path: Path) -> None:
    """A repair that crashed after moving the tail aside leaves quarantine/ bytes no event names: info, not silence."""
    ledger = intentlog.open(tmp_path / "ev")
    with ledger.task("a") as t:
        t.append("note", {"n": 1})
    (tmp_path / "ev" / "quarantine" / "a.0123456789abcdef0123456789abcdef.bin").write_bytes(b'{"half":')
    report = verify_path(tmp_path / "ev")
    assert report.ok
    found = report.by_code("unrecorded_quarantine")
    assert len(found) == 1 and found[0].severity == "info"
    assert found[0].locator == "quarantine/a.0123456789abcdef0123456789abcdef.bin"
