"""A fork of a fork: the second fork copies the first's ``task.forked`` in its prefix, and
the record is as valid as any fork -- ``verify`` and the standalone bundle verifier pass,
``check_fork`` proves each prefix, and a re-run in the second fork sends only what its
own cut left out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import intentlog
from intentlog.bundle import export_bundle
from intentlog.cli import main
from intentlog.fork import check_fork


class Provider:
    def __init__(self) -> None:
        self.receipts: list[Any] = []

    def __call__(self, request: Any) -> bytes:
        self.receipts.append(request)
        return b'{"ok": 1}'


def test_a_fork_of_a_fork_verifies(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    p = Provider()
    with ledger.task("t") as t:
        for i, key in enumerate("abc"):
            t.effect(key, {"q": i}, p)
    first = ledger.fork("t", "call-2")
    with ledger.task(first.id) as t:
        t.effect("a", {"q": 0}, p)
        t.effect("b", {"q": 11}, p)
        t.effect("c", {"q": 22}, p)
    second = ledger.fork(first.id, "call-3", "t2")
    with ledger.task("t2") as t:
        for i, key in enumerate("ab"):
            t.effect(key, {"q": (0, 11)[i]}, p)
        t.effect("c", {"q": 222}, p)
    assert len(p.receipts) == 3 + 2 + 1  # each fork re-sent only from its own cut
    kinds = [e.kind for e in ledger.task(second.id).events()]
    assert kinds.count("task.forked") == 2
    assert check_fork(ledger, first.id) == [] and check_fork(ledger, "t2") == []
    r = CliRunner().invoke(main, ["--root", str(ledger.root), "verify", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = tmp_path / "bundle"
    export_bundle(ledger.root, out=out, check=False)
    proc = subprocess.run(
        [sys.executable, "-I", str(out / "verify_bundle.py"), str(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-2000:]

