"""A FIFO at a stream's name never hangs a reader.

Before the fix, ``os.open(O_RDONLY)`` on a FIFO in ``tasks/`` blocked until some process
opened it for writing: ``task.events()``, ``plan_gc``/``apply_gc``, ``seal`` and ``export``
hung forever (``intentlog tasks`` too). Now the stream is opened non-blocking and checked:
readers raise ``LedgerError`` naming it, gc keeps it as unreadable (scan incomplete), and
``verify`` reports it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import intentlog

CALLS = {
    "events": "list(led.task('x').events())",
    "plan_gc": "from intentlog.retention import plan_gc; p = plan_gc(led); assert p.incomplete, p",
    "seal": "from intentlog.heads import seal; seal(led)",
    "export": "from intentlog.bundle import export_bundle; export_bundle(led.root, out=led.root.parent / 'b')",
}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_fifo_in_tasks_never_hangs_a_reader(tmp_path: Path, call: str) -> None:
    root = tmp_path / "l"
    led = intentlog.open(root)
    led.task("t").append("note", {})
    led.close()
    os.mkfifo(root / "tasks" / "x.jsonl")
    code = (
        "import intentlog, sys\n"
        f"led = intentlog.open({str(root)!r})\n"
        "try:\n"
        f"    {CALLS[call]}\n"
        "except intentlog.LedgerError as e:\n"
        "    assert 'x.jsonl' in str(e) and 'not a regular file' in str(e), e\n"
        "    print('refused')\n"
        "else:\n"
        "    print('ok')\n"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{call} hung on a FIFO in tasks/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("ok" if call == "plan_gc" else "refused"), out.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_as_keep_json_refuses_the_plan_without_hanging(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led = intentlog.open(root)
    led.task("t").append("note", {})
    led.close()
    os.mkfifo(root / "keep.json")
    code = (
        "import intentlog\nfrom intentlog.retention import plan_gc\n"
        f"p = plan_gc(intentlog.open({str(root)!r}))\n"
        "assert p.refused is not None and 'keep.json' in p.refused, p.refused\nprint('refused')\n"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("plan_gc hung on a FIFO keep.json")
    assert out.returncode == 0 and out.stdout.strip() == "refused", out.stderr
