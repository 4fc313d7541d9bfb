"""docs/langgraph.md's example runs as the page says: killed mid-tool, refused, reconciled, finished, one email.

The page's Python block is written to ``mail_graph.py`` and run in a fresh folder, with the
shell steps the page gives: ``--crash`` (SIGKILLed right after the send), a re-run that
refuses and prints the reconcile commands, the ``--served --evidence`` command as printed,
and a last run that prints the message id. ``outbox.jsonl`` (the stand-in for the mail
provider's own record) holds one line at the end and ``intentlog verify`` passes.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import langgraph  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip(
        "langgraph", reason="SKIPPED LOUDLY: the LangGraph tests need: pip install 'intentlog[langgraph]'"
    )

DOC = Path(__file__).resolve().parents[1] / "docs" / "langgraph.md"


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_langgraph_page_example_refuses_after_a_crash_and_finishes_after_reconcile(tmp_path: Path) -> None:
    code = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    (tmp_path / "mail_graph.py").write_text(code)
    outbox = tmp_path / "outbox.jsonl"

    crashed = _run(tmp_path, "mail_graph.py", "--crash")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(outbox.read_text().splitlines()) == 1

    refused = _run(tmp_path, "mail_graph.py")
    assert refused.returncode == 0, refused.stderr
    commands = [line.strip() for line in refused.stdout.splitlines() if line.strip().startswith("intentlog ")]
    root = tmp_path / "evidence"
    assert commands == [
        f"intentlog --root {root} reconcile lg-order-7 call-1 --not-served",
        f"intentlog --root {root} reconcile lg-order-7 call-1 --served --evidence RESPONSE_FILE",
    ], refused.stdout
    assert len(outbox.read_text().splitlines()) == 1, "the re-run did not send again"

    (tmp_path / "answer.json").write_text('"msg-ana@example.com"\n')
    argv = shlex.split(commands[1].replace("RESPONSE_FILE", "answer.json"))
    reconciled = _run(tmp_path, "-m", "intentlog.cli", *argv[1:])
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr

    finished = _run(tmp_path, "mail_graph.py")
    assert finished.stdout.strip() == "msg-ana@example.com", finished.stdout + finished.stderr
    assert len(outbox.read_text().splitlines()) == 1
    assert _run(tmp_path, "-m", "intentlog.cli", "--root", "evidence", "verify").returncode == 0
