"""Links never lead outside the ledger, for verify and export (issue 12 item 1).

Each case replaces one part of a sealed ledger by a symbolic link to a copy outside it
(the copy holds exactly the bytes that belong there, so reading through the link would
pass unnoticed). ``verify`` must report the link (code ``link``, naming it) and never
open a path outside the ledger; ``export`` must refuse naming the link, write nothing
under its targets and leave no staging behind.
"""

from __future__ import annotations

import builtins
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog.bundle import export_bundle
from intentlog.errors import LedgerError
from intentlog.heads import seal
from intentlog.projections.verify import verify_path

BIG = b"y" * 6000  # above the inline threshold: a blob in objects/


def send(request: Any) -> bytes:
    return BIG


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    root = tmp_path / "ev"
    with intentlog.open(root) as led:
        t = led.task("t")
        t.effect("k", {"q": 1}, send)
        led.task("v").append("note", {"n": 1})
    (root / "quarantine").mkdir(exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    seal(intentlog.open(root, create=False))
    assert verify_path(root).ok
    return root


def _blob(root: Path) -> str:
    shard = next(p for p in sorted((root / "objects").iterdir()) if p.is_dir())
    return f"objects/{shard.name}/{next(shard.iterdir()).name}"


def link_out(root: Path, rel: str) -> Path:
    """Move ``rel`` outside the ledger and put a symbolic link to it in its place; return the outside copy."""
    outside = root.parent / "outside" / rel.replace("/", "_")
    outside.parent.mkdir(exist_ok=True)
    shutil.move(str(root / rel), outside)
    os.symlink(outside, root / rel)
    return outside


CASES: dict[str, Callable[[Path], str]] = {
    "stream": lambda root: "tasks/v.jsonl",
    "tasks folder": lambda root: "tasks",
    "object": _blob,
    "shard folder": lambda root: _blob(root).rsplit("/", 1)[0],
    "objects folder": lambda root: "objects",
    "heads.json": lambda root: "heads.json",
    "marker": lambda root: "intentlog.json",
}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every path opened (os.open and open), resolved: to see whether anything outside the ledger was read."""
    seen: list[str] = []
    real_os_open, real_open = os.open, builtins.open

    def os_open(path: Any, *a: Any, **k: Any) -> int:
        if "dir_fd" not in k:
            seen.append(os.path.realpath(path))
        return real_os_open(path, *a, **k)

    def b_open(path: Any, *a: Any, **k: Any) -> Any:
        if isinstance(path, (str, os.PathLike)):
            seen.append(os.path.realpath(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", b_open)
    yield seen


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_reports_a_link_and_never_reads_through_it(case: str, ledger_dir: Path, opened: list[str]) -> None:
    """A link anywhere in the ledger is an error naming it; no file outside the ledger is opened."""
    rel = CASES[case](ledger_dir)
    outside = link_out(ledger_dir, rel)
    before = _snapshot(outside.parent)
    opened.clear()
    report = verify_path(ledger_dir)
    assert not report.ok
    links = report.by_code("link")
    assert {p.locator for p in links} == {rel}, report.render()
    assert "symbolic link" in links[0].message
    assert not [p for p in opened if p.startswith(str(outside.parent))], "read through the link"
    assert _snapshot(outside.parent) == before


@pytest.mark.parametrize("rel", ["tmp", "quarantine", "tasks/t.jsonl.lock"])
def test_verify_reports_links_in_tmp_quarantine_and_lock_files(rel: str, ledger_dir: Path) -> None:
    """tmp/, quarantine/ and lock files are part of the ledger too: a link there is reported."""
    target = ledger_dir.parent / "elsewhere"
    target.mkdir(exist_ok=True)
    path = ledger_dir / rel
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    os.symlink(target, path)
    report = verify_path(ledger_dir)
    assert {p.locator for p in report.by_code("link")} == {rel}
    assert not report.ok


def test_a_link_inside_tmp_is_reported(ledger_dir: Path) -> None:
    os.symlink("/etc/passwd", ledger_dir / "tmp" / "put.x.staged")
    report = verify_path(ledger_dir)
    assert [p.locator for p in report.by_code("link")] == ["tmp/put.x.staged"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_refuses_a_link_naming_it_and_writes_nothing(case: str, ledger_dir: Path, tmp_path: Path) -> None:
    """export never copies through a link: LedgerError naming it, no bundle, no tar, no staging left."""
    rel = CASES[case](ledger_dir)
    link_out(ledger_dir, rel)
    out = tmp_path / "dest"
    out.mkdir()
    before = sorted(os.listdir(out))
    with pytest.raises(LedgerError, match="symbolic link") as info:
        export_bundle(ledger_dir, out=out / "bundle", tar=out / "bundle.tar")
    assert str(ledger_dir / rel) in str(info.value)
    assert sorted(os.listdir(out)) == before


def test_export_refuses_a_linked_quarantine_file(ledger_dir: Path, tmp_path: Path) -> None:
    """A repaired stream's quarantined bytes behind a link: refused like any other link."""
    with open(ledger_dir / "tasks" / "v.jsonl", "ab") as f:
        f.write(b'{"torn')
    with intentlog.open(ledger_dir, create=False) as led:
        led.task("v").append("note", {"n": 2})  # the writer moves the torn tail to quarantine/
    q = next((ledger_dir / "quarantine").iterdir())
    link_out(ledger_dir, f"quarantine/{q.name}")
    with pytest.raises(LedgerError, match="symbolic link"):
        export_bundle(ledger_dir, out=tmp_path / "b")
    assert not (tmp_path / "b").exists()
    assert [p.locator for p in verify_path(ledger_dir).by_code("link")] == [f"quarantine/{q.name}"]
