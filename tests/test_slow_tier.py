"""The test tiers stay true: every name in the slow tier names a test, and CI runs the README's full command."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from slow_tier import SLOW

TESTS = Path(__file__).parent
ROOT = TESTS.parent


def _defined(path: Path) -> set[str]:
    """The names a test file defines at module level (functions, classes, assigned names)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_every_slow_entry_names_a_test_that_exists() -> None:
    stale = []
    for file, names in SLOW.items():
        path = TESTS / file
        if not path.is_file():
            stale.append(file)
            continue
        defined = _defined(path)
        stale += [f"{file}::{n}" for n in names if n != "*" and n not in defined]
    assert stale == [], f"tests/slow_tier.py names tests that no longer exist: {stale}"


def _pytest_commands(text: str) -> list[str]:
    """Each ``python -m pytest ...`` command in the text's sh code blocks, from ``python`` on."""
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [m for b in blocks for m in re.findall(r"python -m pytest[^\n&;|]*", b)]


def test_ci_runs_the_readmes_full_command_and_the_quick_one_leaves_out_only_the_slow_tier() -> None:
    commands = [c.strip() for c in _pytest_commands((ROOT / "README.md").read_text(encoding="utf-8"))]
    quick = [c for c in commands if "not slow" in c]
    full = [c for c in commands if "not slow" not in c]
    assert len(quick) == 1 and len(full) == 1, commands
    assert quick[0] == full[0] + ' -m "not slow"', commands
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert full[0] in ci, f".ci/run does not run the README's full test command {full[0]!r}"
