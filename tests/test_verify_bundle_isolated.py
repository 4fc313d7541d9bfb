"""verify_bundle.py stands alone: it runs where only the standard library and blake3 are installed.

The verifier is made in a fresh virtual environment without pip, intentlog or orjson; only
the ``blake3`` package is copied in (offline, from the test environment's own install).
There it checks an exported bundle and a corrupted copy of it, and what it imports at
run time is read back from ``-X importtime``.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import orjson
import pytest

import intentlog
from intentlog.bundle import HASHES_FILE, VERIFIER_FILE, encode_hashes, export_bundle, file_hashes
from intentlog.demo.provider import SyntheticProvider

VERIFIER = Path(intentlog.__file__).parent / VERIFIER_FILE
ALLOWED = set(sys.stdlib_module_names) | {"blake3", "__future__"}


@dataclass(frozen=True)
class Isolated:
    python: Path
    env: dict[str, str]

    def run(self, args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *args], cwd=cwd, env=self.env, capture_output=True, text=True, timeout=120
        )


@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory) -> Isolated:
    """A virtual environment with nothing but blake3 (copied from this environment: fast and offline)."""
    venv = tmp_path_factory.mktemp("venv") / "only-blake3"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONNOUSERSITE": "1", "LC_ALL": "C.UTF-8"}
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    package = Path(blake3.__file__).parent
    shutil.copytree(package, Path(purelib) / package.name)
    for info in package.parent.glob("blake3-*.dist-info"):
        shutil.copytree(info, Path(purelib) / info.name)
    return Isolated(python, env)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle of a task that paid once, one that died while the provider held the request, with the receipts."""
    base = tmp_path_factory.mktemp("bundle")
    receipts = base / "receipts.jsonl"
    provider = SyntheticProvider(receipts)
    with intentlog.open(base / "ledger") as ledger:
        task = ledger.task("review")
        task.effect("p1", {"model": "m", "q": 1}, provider.send)
        task.effect("p2", {"model": "m", "q": 2}, lambda r: b"x" * 5000)  # a blob in objects/

        def held_then_lost(request: Any) -> bytes:
            provider.send(request)  # the provider has it; the connection drops before the answer
            raise ConnectionResetError("connection reset by peer")

        with pytest.raises(intentlog.EffectUnknown):
            task.effect("p3", {"model": "m", "q": 3}, held_then_lost)
        task.compile("c", [{"id": "A", "required": True, "content": "a"}])
    out = base / "out"
    assert export_bundle(base / "ledger", out=out, receipts=[receipts]).ok
    return out


def test_the_verifier_imports_only_the_standard_library_and_blake3() -> None:
    """Every import in verify_bundle.py names a standard-library module or blake3; none names intentlog."""
    tree = ast.parse(VERIFIER.read_text(), str(VERIFIER))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import would reach into intentlog"
            names.add((node.module or "").split(".")[0])
    assert names, "the walker found no import at all"
    assert names <= ALLOWED, names - ALLOWED
    assert "intentlog" not in names


def test_the_venv_has_blake3_and_nothing_of_intentlog(isolated: Isolated, tmp_path: Path) -> None:
    """In the isolated environment blake3 imports; intentlog, orjson and click do not."""
    probe = (
        "import importlib.util as u; print([m for m in ('blake3', 'intentlog', 'orjson', 'click') if u.find_spec(m)])"
    )
    p = isolated.run(["-c", probe], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "['blake3']"


def _imported(stderr: str) -> set[str]:
    """Top-level module names from ``python -X importtime`` output."""
    out = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name and name != "imported package":
                out.add(name.split(".")[0])
    return out


def test_the_verifier_passes_a_bundle_in_the_isolated_venv(isolated: Isolated, bundle: Path) -> None:
    """python verify_bundle.py . exits 0 there, every claim PASS, having imported only stdlib modules and blake3."""
    p = isolated.run(["-X", "importtime", VERIFIER_FILE, "."], cwd=bundle)
    assert p.returncode == 0, p.stdout + p.stderr
    claims = [line for line in p.stdout.splitlines() if "[PASS]" in line or "[FAIL]" in line]
    assert len(claims) >= 10 and all("[PASS]" in c for c in claims)
    assert "receipts/receipts.jsonl: each of its 2 receipt(s)" in p.stdout
    imported = _imported(p.stderr)
    assert "blake3" in imported
    assert imported <= ALLOWED | {"sitecustomize", "usercustomize"}, imported - ALLOWED


def test_the_verifier_fails_a_corrupted_bundle_in_the_isolated_venv(
    isolated: Isolated, bundle: Path, tmp_path: Path
) -> None:
    """A receipt no recorded attempt covers, with hashes.json recomputed: exit 1, with and without the inventory."""
    bad = tmp_path / "bad"
    shutil.copytree(bundle, bad)
    receipt: dict[str, Any] = {"body_hash": "blake3:" + "ab" * 32, "key": None, "label": "forged", "pid": 1}
    with open(bad / "receipts" / "receipts.jsonl", "ab") as f:
        f.write(orjson.dumps(receipt) + b"\n")
    (bad / HASHES_FILE).write_bytes(encode_hashes(file_hashes(bad)))
    for extra in ([], ["--no-inventory"]):
        p = isolated.run([VERIFIER_FILE, ".", *extra], cwd=bad)
        assert p.returncode == 1, p.stdout
        failed = [line for line in p.stdout.splitlines() if "[FAIL]" in line]
        assert len(failed) == 1 and "receipts/receipts.jsonl" in failed[0], p.stdout
        assert "an effect no recorded attempt covers" in p.stdout
