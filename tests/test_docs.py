"""The examples in README.md run, and what they leave on disk is what the text says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import intentlog

ROOT = Path(__file__).resolve().parents[1]


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_readme_example_runs_twice_and_resumes(tmp_path: Path) -> None:
    """The README example prints what it claims; a second run replays from the record and sends nothing new."""
    code = _python_blocks(ROOT / "README.md")[0]
    script = tmp_path / "example.py"
    script.write_text(code)
    for _ in range(2):
        p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, check=True)
        assert p.stdout.strip() == "accept completed check and accept"
    ws = intentlog.open(tmp_path / "evidence", create=False).task("chapter-16").work_state()
    assert list(ws.calls) == ["call-1"]
    assert ws.calls["call-1"].attempts == 1
    for f in (tmp_path / "evidence").rglob("*"):
        if f.is_file():
            assert b"sk-not-recorded" not in f.read_bytes(), f
