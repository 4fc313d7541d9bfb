"""The LangGraph checkpointer passes LangGraph's published conformance suite, on a folder and on s3://.

``langgraph-checkpoint-conformance`` is the suite LangGraph publishes for checkpointer
implementations: every capability it knows (put, put_writes, get_tuple, list,
delete_thread, and the extended delete_for_runs, copy_thread, prune) must be detected on
``IntentlogSaver`` and pass every one of its tests. Without the extra the test is skipped
loudly; under CI (``CI`` set) a missing extra is a failure.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import langgraph.checkpoint.conformance  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip(
        "langgraph.checkpoint.conformance",
        reason="SKIPPED LOUDLY: the LangGraph tests need: "
        "pip install 'intentlog[langgraph]' langgraph-checkpoint-conformance",
    )

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport

import intentlog
from intentlog.langgraph import IntentlogSaver


def _run_suite(root: str) -> CapabilityReport:
    roots: list[str] = []

    async def make() -> AsyncGenerator[IntentlogSaver, None]:
        # a fresh ledger per capability suite, as the suite asks of a factory
        where = f"{root}/suite-{len(roots)}"
        roots.append(where)
        saver = IntentlogSaver(where)
        yield saver
        saver.close()

    registered = checkpointer_test(name=f"IntentlogSaver[{root}]")(make)
    return asyncio.run(validate(registered))


def _assert_full(report: CapabilityReport) -> None:
    failures = {name: r.failures for name, r in report.results.items() if r.passed is not True}
    assert not failures, f"conformance failures: {failures}"
    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}
    assert all(r.detected and r.tests_passed > 0 and r.tests_failed == 0 for r in report.results.values())
    assert report.conformance_level() == "FULL"


def test_the_saver_passes_the_whole_conformance_suite_on_a_folder(tmp_path: Path) -> None:
    """Every capability of LangGraph's conformance suite is detected and passes on a folder ledger; it verifies."""
    report = _run_suite(str(tmp_path))
    _assert_full(report)
    for suite in sorted(tmp_path.iterdir()):
        assert intentlog.open(suite, create=False).task_ids(), suite
        done = subprocess.run(
            [sys.executable, "-m", "intentlog.cli", "--root", str(suite), "verify"], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_saver_passes_the_whole_conformance_suite_on_s3(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same suite, unchanged, on an s3:// ledger in a real SeaweedFS."""
    import s3_server

    url = s3_server.ledger_url(monkeypatch)
    _assert_full(_run_suite(url))
