"""A gc plan's scratch file with no usable temp folder: the library's error naming TMPDIR and what to
do, never the bare ``FileNotFoundError`` of :mod:`tempfile`, and nothing written in the ledger."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

import intentlog
from intentlog.errors import IntentlogError
from intentlog.retention import plan_gc, rows

TS = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def no_temp_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: ["/nonexistent-intentlog-test"])
    monkeypatch.setattr(rows, "SPOOL_BYTES", 64)


@pytest.mark.usefixtures("no_temp_folder")
def test_the_scratch_file_with_no_temp_folder_raises_the_library_error() -> None:
    r = rows.TaskRows()
    with pytest.raises(IntentlogError, match="TMPDIR") as err:
        for i in range(10):
            r.append([f"t{i:04d}", None, "", 1, TS, "complete", None, 1, "s", [1, 2, 3]])
    msg = str(err.value)
    assert "scratch file" in msg and "writable folder" in msg
    assert not isinstance(err.value, FileNotFoundError)


def _tree(root: Path) -> dict[str, bytes]:
    return {os.path.join(d, f): Path(d, f).read_bytes() for d, _, fs in os.walk(root) for f in fs}


def test_a_plan_with_no_temp_folder_raises_the_library_error_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "led"
    with intentlog.open(root) as led:
        for i in range(5):
            t = led.task(f"t{i}")
            t.append("note", {"x": i})
            t.close()
    before = _tree(root)
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: ["/nonexistent-intentlog-test"])
    monkeypatch.setattr(rows, "SPOOL_BYTES", 64)
    with intentlog.open(root) as led, pytest.raises(IntentlogError, match="TMPDIR"):
        plan_gc(led)
    assert _tree(root) == before
