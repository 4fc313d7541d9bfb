"""Killed exports leave nothing that blocks or bloats the next one (issue 12 item 8).

A child process exports and is killed with a real SIGKILL at one point of the export:
while staging files, right after the rename into place (before the tar), and while the
tar is being written. The next export to the same targets must then remove the staging
its dead predecessor left (and say so), succeed, and leave exactly the bundle and tar a
clean export writes -- byte for byte, with no hidden folder or temp file beside them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog.bundle import export_bundle

BIG = b"z" * 300_000

CHILD = r"""
import os, signal, sys
import intentlog.bundle.export as b

root, out, tar, point = sys.argv[1:5]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if point == "staging":
    real = b.publish_chunks
    n = [0]
    def publish(*a, **k):
        n[0] += 1
        if n[0] == 4:
            die()
        return real(*a, **k)
    b.publish_chunks = publish
elif point == "after-rename":
    real_rename = os.rename
    def rename(src, dst):
        real_rename(src, dst)
        die()
    b.os.rename = rename
elif point == "mid-tar":
    real_tar = b._tar_chunks
    def tar_chunks(bundle):
        for i, chunk in enumerate(real_tar(bundle)):
            if i == 6:
                die()
            yield chunk
    b._tar_chunks = tar_chunks
b.export_bundle(root, out=out, tar=tar)
print("finished")
"""


def send(request: Any) -> bytes:
    return BIG


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    root = tmp_path / "ev"
    with intentlog.open(root) as led:
        led.task("t").effect("k", {"q": 1}, send)
    return root


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _killed_export(root: Path, out: Path, tar: Path, point: str) -> None:
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), str(out), str(tar), point], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == -9, (p.returncode, p.stdout, p.stderr)


@pytest.mark.parametrize("point", ["staging", "after-rename", "mid-tar"])
def test_a_re_export_after_a_sigkill_works_and_removes_the_leftovers(
    point: str, ledger_dir: Path, tmp_path: Path
) -> None:
    """After a SIGKILL at ``point`` the same export succeeds, reports what it removed, and leaves a clean result."""
    clean = tmp_path / "clean"
    clean.mkdir()
    export_bundle(ledger_dir, out=clean / "bundle", tar=clean / "bundle.tar")
    dest = tmp_path / "dest"
    dest.mkdir()
    out, tar = dest / "bundle", dest / "bundle.tar"
    _killed_export(ledger_dir, out, tar, point)
    hidden = sorted(n for n in os.listdir(dest) if n.startswith("."))
    if point == "after-rename":  # the folder is in place, the tar never written: this blocked the next export
        assert out.is_dir() and not tar.exists() and not hidden
    else:
        assert hidden, "the kill left nothing to clean up: the test does not test"
    result = export_bundle(ledger_dir, out=out, tar=tar)
    assert result.ok, result.render()
    assert sorted(os.listdir(dest)) == ["bundle", "bundle.tar"]
    assert sorted(Path(r).name for r in result.removed) == hidden
    assert result.to_json()["removed"] == list(result.removed)
    if hidden:
        assert f"removed {len(hidden)} staging" in result.render()
    assert _tree(out) == _tree(clean / "bundle")
    assert tar.read_bytes() == (clean / "bundle.tar").read_bytes()
    if point == "after-rename":
        assert result.kept == (str(out),)


def test_repeated_kills_never_accumulate_staging(ledger_dir: Path, tmp_path: Path) -> None:
    """Kills accumulated staging (issue: 300 MB after 18); now each export first removes its dead predecessors'."""
    dest = tmp_path / "dest"
    dest.mkdir()
    for i in range(6):
        _killed_export(ledger_dir, dest / "b", dest / "b.tar", "staging" if i % 2 else "mid-tar")
        hidden = [n for n in os.listdir(dest) if n.startswith(".")]
        assert 1 <= len(hidden) <= 2, hidden  # what this kill left (a staging folder, a temp tar), no more
    result = export_bundle(ledger_dir, out=dest / "b", tar=dest / "b.tar")
    assert result.ok and result.removed
    assert sorted(os.listdir(dest)) == ["b", "b.tar"]


def test_staging_of_a_live_process_is_left_alone(ledger_dir: Path, tmp_path: Path) -> None:
    """A staging folder whose pid is alive may be an export in progress: never removed."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dest = tmp_path / "dest"
        dest.mkdir()
        busy = dest / f".b.{live.pid}.0123abcd.export"
        busy.mkdir()
        (busy / "x").write_bytes(b"in progress")
        result = export_bundle(ledger_dir, out=dest / "b")
        assert result.removed == ()
        assert (busy / "x").read_bytes() == b"in progress"
    finally:
        live.kill()
        live.wait()


def test_another_bundle_in_the_target_is_still_refused(ledger_dir: Path, tmp_path: Path) -> None:
    """Only exactly the same bundle is kept; a different one under the name is refused and left as it was."""
    out = tmp_path / "b"
    export_bundle(ledger_dir, out=out)
    with intentlog.open(ledger_dir, create=False) as led:
        led.task("t").append("note", {"more": 1})
    before = _tree(out)
    with pytest.raises(intentlog.UsageError, match="another bundle"):
        export_bundle(ledger_dir, out=out)
    assert _tree(out) == before
    assert sorted(os.listdir(tmp_path)) == sorted(n for n in os.listdir(tmp_path) if not n.startswith("."))
