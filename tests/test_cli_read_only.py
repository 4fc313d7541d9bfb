"""``seal`` and ``export`` where the ledger (or the bundle's folder) is on a read-only file system.

The error is one line saying what could not be written, where, and what to do instead,
never a bare "Read-only file system"; the ledger's bytes stay unchanged. Uses a read-only
bind mount (the tests run as root, so a chmod would not stop a write); where ``mount`` is
not allowed the test is skipped, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import intentlog


def _mount(args: list[str]) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"SKIPPED LOUDLY: cannot mount ({' '.join(args)}): {proc.stderr.strip()}")


def _snapshot(root: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.join(dirpath, d) + "/"] = b""
        for f in files:
            p = os.path.join(dirpath, f)
            out[p] = Path(p).read_bytes()
    return out


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        led.task("t").effect("k", {"q": 1}, lambda r: b"answer")
    _mount(["--bind", str(root), str(root)])
    try:
        _mount(["-o", "remount,ro,bind", str(root)])
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), *args], capture_output=True, text=True, timeout=60
    )


def test_seal_on_a_read_only_ledger_says_what_where_and_what_next(read_only: Path) -> None:
    before = _snapshot(read_only)
    r = _cli(read_only, "seal")
    assert r.returncode == 1
    line = r.stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line, r.stderr
    assert "heads.json" in line and str(read_only) in line and "not writable" in line, line
    assert "nothing was written" in line and " merge " in line and "--root COPY seal" in line, line
    j = _cli(read_only, "seal", "--json")
    assert j.returncode == 1 and json.loads(j.stdout)["exit_code"] == 1
    assert _snapshot(read_only) == before


def test_export_into_a_read_only_folder_says_so_and_export_elsewhere_works(read_only: Path, tmp_path: Path) -> None:
    before = _snapshot(read_only)
    r = _cli(read_only, "export", "--out", str(read_only / "bundle"))
    assert r.returncode == 1
    line = r.stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line, r.stderr
    assert str(read_only / "bundle") in line and "not writable" in line and "--out" in line, line
    ok = _cli(read_only, "export", "--out", str(tmp_path / "bundle"))  # reading a read-only ledger is fine
    assert ok.returncode == 0, ok.stderr
    assert _snapshot(read_only) == before
