"""The example in docs/pydantic-ai.md runs as the page says: killed mid-tool, refused, reconciled, completed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import pydantic_ai  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip(
        "pydantic_ai.durable_exec",
        reason="SKIPPED LOUDLY: the pydantic-ai tests need pip install 'intentlog[pydantic-ai]'",
    )

import intentlog

PAGE = Path(__file__).resolve().parents[1] / "docs" / "pydantic-ai.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(), re.S)


def _run(cwd: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=120, env=env or dict(os.environ))


def test_the_mailer_example_is_killed_refused_reconciled_and_completed_with_one_email(tmp_path: Path) -> None:
    """The page's steps, in order: a real SIGKILL after the email left; the re-run refuses (EffectUnknown) and
    sends nothing; the reconcile command with the tool's return as evidence; the last run prints the answer."""
    (tmp_path / "mailer.py").write_text(_blocks("python")[0])
    killed = _run(tmp_path, sys.executable, "mailer.py", env={**os.environ, "CRASH_AFTER_SENDING": "1"})
    assert killed.returncode == -9
    outbox = tmp_path / "outbox.txt"
    assert outbox.read_text().splitlines() == ["to=ana@example.com subject=Minutes"]
    refused = _run(tmp_path, sys.executable, "mailer.py")
    assert (
        refused.returncode != 0 and "EffectUnknown" in refused.stderr and "reconcile mail-ana call-2" in refused.stderr
    )
    assert len(outbox.read_text().splitlines()) == 1
    steps = [line.split("#")[0].strip() for line in _blocks("sh")[1].splitlines()]
    evidence = next(s for s in steps if s.startswith("python -c"))
    reconcile = next(s for s in steps if s.startswith("intentlog --root evidence reconcile"))
    made = _run(tmp_path, sys.executable, "-c", evidence.split('"')[1])
    assert made.returncode == 0, made.stderr
    done = _run(tmp_path, sys.executable, "-m", "intentlog.cli", *reconcile.split()[1:])
    assert done.returncode == 0, done.stderr
    last = _run(tmp_path, sys.executable, "mailer.py")
    assert last.returncode == 0, last.stderr
    assert last.stdout.strip() == "Mailed Ana."
    assert len(outbox.read_text().splitlines()) == 1
    checked = _run(tmp_path, sys.executable, "-m", "intentlog.cli", "--root", "evidence", "verify")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    state = intentlog.open(tmp_path / "evidence", create=False).task("mail-ana").work_state()
    assert [c.stage for c in state.calls.values()] == ["completed"] * 3


def test_the_other_examples_on_the_page_compile() -> None:
    """The configuration and provider snippets are Python (they need a key or a server, so they are not run)."""
    for code in _blocks("python")[1:]:
        compile(code, str(PAGE), "exec")
