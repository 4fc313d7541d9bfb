"""Layers point one way (DESIGN §8, STYLE 1 and 4): checked by walking the imports.

``eventlog`` and ``artifacts`` know nothing of calls, projections never write, the public
face is pinned, and importing intentlog stays cheap (no filelock, no click).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import intentlog

PKG = Path(intentlog.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports (relative imports resolved; ``from a import b`` gives a and a.b)."""
    tree = ast.parse(path.read_text(), str(path))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    return found


def _files(sub: str) -> list[Path]:
    target = PKG / sub
    return sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")]


def _violations(subs: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for sub in subs:
        for f in _files(sub):
            for mod in sorted(imports_of(f)):
                if any(mod == x or mod.startswith(x + ".") for x in forbidden):
                    bad.append(f"{f.relative_to(PKG.parent)} imports {mod}")
    return bad


def test_the_import_walker_resolves_relative_imports() -> None:
    """imports_of resolves ``from ..x import y`` against the module's package (so the layer checks can fail)."""
    writer = imports_of(PKG / "eventlog" / "writer.py")
    assert {"intentlog._fsutil", "intentlog.errors", "intentlog.eventlog.format"} <= writer
    assert "intentlog.eventlog.writer" in imports_of(PKG / "eventlog" / "__init__.py")
    assert _violations(("eventlog",), ("intentlog._fsutil",)), "a forbidden import is reported"


def test_eventlog_and_artifacts_know_nothing_above_them() -> None:
    """intentlog/eventlog and intentlog/artifacts import nothing from projections, effects, cli, task or ledger."""
    assert (
        _violations(
            ("eventlog", "artifacts"),
            ("intentlog.projections", "intentlog.effects", "intentlog.cli", "intentlog.task", "intentlog.ledger"),
        )
        == []
    )


def test_projections_import_no_writer() -> None:
    """intentlog/projections imports neither the stream writer nor the atomic-write helper: projections never write."""
    assert (
        _violations(("projections",), ("intentlog.eventlog.writer", "intentlog._fsutil", "intentlog.eventlog.lock"))
        == []
    )


def test_public_names_are_pinned() -> None:
    """intentlog.__all__ is exactly this sorted list, and every name in it exists."""
    expected = [
        "CANON_VERSION",
        "NO_RETRY",
        "ApprovalConflict",
        "ApprovalPending",
        "ApprovalRejected",
        "ApprovalState",
        "ApprovalVoid",
        "ArtifactError",
        "ArtifactMissing",
        "ArtifactStore",
        "Call",
        "CallFailed",
        "CallState",
        "Checkpoint",
        "CompilationState",
        "Conflict",
        "CorruptStream",
        "DigestMismatch",
        "EffectUnknown",
        "Event",
        "IntentlogError",
        "InvalidDigest",
        "InvalidTaskId",
        "KeyReused",
        "Ledger",
        "LedgerError",
        "LinkRefused",
        "NotALedger",
        "NotSent",
        "NotSerializable",
        "OutsideWorkspace",
        "Package",
        "PreparationFailed",
        "ProviderDedup",
        "ProviderFailure",
        "Redact",
        "Ref",
        "ReinterpretFailed",
        "RepairReport",
        "RequiredContextMissing",
        "ReservedKind",
        "ResumeRefused",
        "RetryHandedBack",
        "RetryPolicy",
        "Served",
        "Session",
        "StreamPoisoned",
        "Task",
        "TaskBusy",
        "Turn",
        "UnknownApproval",
        "UnknownCall",
        "UsageError",
        "WorkState",
        "WrongType",
        "__version__",
        "canonicalize",
        "heartbeat",
        "open",
        "request_hash",
        "work_state",
    ]
    assert list(intentlog.__all__) == expected
    assert expected == sorted(expected, key=lambda n: (not n.isupper(), n[0].islower() or n.startswith("_"), n))
    for name in expected:
        assert hasattr(intentlog, name), name


@pytest.mark.parametrize("heavy", ["filelock", "click"])
def test_importing_intentlog_loads_no_filelock_or_click(heavy: str) -> None:
    """``import intentlog`` in a fresh interpreter leaves filelock and click unimported (they load on first use)."""
    code = "import sys, json, intentlog; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    modules = json.loads(out)
    assert "intentlog" in modules
    assert not [m for m in modules if m == heavy or m.startswith(heavy + ".")]
