"""A ledger on a read-only file system opens for reading with the default ``intentlog.open(root)``.

A clone leaves out ``cache/`` (the ledger's ``.gitignore`` excludes it); opening such a
ledger read-only must read it as the CLI does, not refuse it as "not a ledger". Uses a
read-only bind mount (the tests run as root, so a chmod would not stop a write); where
``mount`` is not allowed the test is skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import intentlog
from intentlog import LedgerError


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


def test_a_read_only_ledger_without_its_cache_folder_opens_for_reading(tmp_path: Path) -> None:
    """open(root) reads the tasks and their status; a write is refused with the library's error; nothing changes."""
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        led.task("t").append("note", {"n": 1})
        led.task("t").checkpoint("planned", evidence=[b"plan"])
    shutil.rmtree(root / "cache")
    before = _snapshot(root)
    _mount(["--bind", str(root), str(root)])
    try:
        _mount(["-o", "remount,ro,bind", str(root)])
        led = intentlog.open(root)
        t = led.task("t")
        assert [e.kind for e in t.events()] == ["task.created", "note", "task.checkpoint"]
        assert t.status().phase == "planned"
        assert sorted(led.task_ids()) == ["t"]
        with pytest.raises(LedgerError, match="Read-only"):
            t.append("note", {"n": 2})
        led.close()
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)
    assert _snapshot(root) == before
