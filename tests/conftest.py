"""Shared fixtures: a hypothesis profile, a fresh ledger, folder snapshots, child processes; the slow tier marked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))  # `import strategies` whether or not tests/ is a package

from slow_tier import is_slow

import intentlog

# Durable appends cost an fdatasync each; keep property tests few and free of deadlines.
settings.register_profile(
    "intentlog",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("intentlog-long", max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("INTENTLOG_HYPOTHESIS_PROFILE", "intentlog"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests listed in ``slow_tier.py`` ``slow`` (``-m "not slow"`` leaves them out).

    With workers (``-n``), the slow ones are handed out first, so a long test does not start
    last and leave one worker running it alone.
    """
    slow = {id(item) for item in items if is_slow(item)}
    for item in items:
        if id(item) in slow:
            item.add_marker(pytest.mark.slow)
    if getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput"):
        items.sort(key=lambda item: id(item) not in slow)  # stable: the order within each tier is kept


@pytest.fixture
def ledger_root(tmp_path: Path) -> Path:
    """A path where a ledger will be created (not created yet)."""
    return tmp_path / "ledger"


@pytest.fixture
def ledger(ledger_root: Path) -> Iterator[intentlog.Ledger]:
    """A fresh ledger, closed (locks released) after the test."""
    with intentlog.open(ledger_root) as led:
        yield led


ChildRunner = Callable[..., subprocess.CompletedProcess[str]]


def child_code(code: str) -> str:
    """Dedent a snippet for ``python -c``."""
    return textwrap.dedent(code).strip() + "\n"


@pytest.fixture
def run_child() -> ChildRunner:
    """Run a Python snippet in a fresh interpreter: ``run_child(code, *argv)`` → CompletedProcess."""

    def run(code: str, *argv: Any, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-c", child_code(code), *map(str, argv)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run
