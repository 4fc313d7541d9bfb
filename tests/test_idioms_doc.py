"""The example in docs/idioms.md runs: it waits for the review, is signalled, and its re-run replays the record."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import intentlog
from intentlog.checker import verify_path
from intentlog.projections.idioms import EVENT_AWAITED, RETURNED, VALUE_RECORDED

ROOT = Path(__file__).resolve().parents[1]


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "idioms.md").read_text(), re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_the_idioms_example_waits_is_signalled_and_replays(tmp_path: Path) -> None:
    """First run: waits for the review until `intentlog signal`, then prints. A re-run prints it from the record."""
    script = tmp_path / "example.py"
    script.write_text(_example())
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    stream = tmp_path / "evidence" / "tasks" / "weekly-digest.jsonl"
    try:
        while not (stream.exists() and EVENT_AWAITED.encode() in stream.read_bytes()):
            assert proc.poll() is None, "the example ended before waiting for the review"
            time.sleep(0.02)  # waiting for the record to appear
        signal = subprocess.run(
            [sys.executable, "-m", "intentlog.cli", "--root", "evidence", "signal", "weekly-digest", "review",
             "--payload", '{"ok": true}'],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert signal.returncode == 0, signal.stderr
        first, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    line = r"\d{4} True \['summary of alpha for batch \d{4}', 'summary of beta for batch \d{4}'\]\n"
    assert re.fullmatch(line, first)
    again = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout == first
    with intentlog.open(tmp_path / "evidence") as ledger:
        task = ledger.task("weekly-digest")
        kinds = [ev.kind for ev in task.events()]
        assert kinds.count(VALUE_RECORDED) == 3  # the batch and two steps
        for doc in ("alpha", "beta"):
            assert [ev.kind for ev in ledger.task(f"digest-{doc}").events()].count(RETURNED) == 1
        assert task.status().waiting is None
    assert verify_path(tmp_path / "evidence").ok
