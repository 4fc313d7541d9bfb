"""export from a ledger on the store (a real SeaweedFS): a local bundle, the store read through the seams.

The bundle is checked by its own independent verifier (``python verify_bundle.py``, a
separate process) and compared file by file with the bundle exported from a folder copy
of the same ledger; damage on the store refuses the export, leaving nothing behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import s3_server
from click.testing import CliRunner
from effect_child import request, review

import intentlog
from intentlog.bundle import export_bundle
from intentlog.cli import main
from intentlog.demo.provider import SyntheticProvider
from intentlog.errors import ArtifactMissing, CorruptStream, DigestMismatch
from intentlog.merge import merge
from intentlog.s3 import ObjectArtifacts, S3Client, parse_s3_url


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A store ledger written through the library (one segment per sync), two tasks, inline and object responses."""
    url = s3_server.ledger_url(monkeypatch)
    provider = SyntheticProvider(tmp_path / "receipts.jsonl")
    with intentlog.open(url) as ledger:
        for name in ("alpha", "beta"):
            t = ledger.task(name)
            t.append("note", {"about": name})
            t.effect(f"{name}-small", request("model-a"), provider.send, interpret=review)
            t.effect(f"{name}-big", request("model-a") | {"pad": name * 20_000}, provider.send, interpret=review)
    monkeypatch.chdir(tmp_path)
    return url


def keys(url: str) -> list[str]:
    return sorted(k for k, _ in S3Client(parse_s3_url(url)).scan(""))


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def independent_verify(bundle: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(bundle / "verify_bundle.py"), str(bundle)], capture_output=True, text=True, timeout=120
    )


def test_export_from_the_store_is_the_bundle_a_folder_copy_exports(store: str, tmp_path: Path) -> None:
    before = keys(store)
    r = CliRunner().invoke(main, ["--root", store, "export", "--out", "bundle", "--json"])
    assert r.exit_code == 0, r.output
    out = orjson.loads(r.output)
    assert out["ok"] and out["tasks"] == ["alpha", "beta"]
    bundle = tmp_path / "bundle"
    checked = independent_verify(bundle)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert keys(store) == before, "export wrote nothing to the store"
    storage = intentlog.s3.connect(store, write=False)
    assert (bundle / "tasks" / "alpha.jsonl").read_bytes() == storage.streams.read("alpha")
    assert list((bundle / "objects").rglob("*")), "the object responses were copied"
    merge(store, tmp_path / "copy")
    export_bundle(tmp_path / "copy", out=tmp_path / "from-folder")
    assert files(bundle) == files(tmp_path / "from-folder"), "byte for byte the bundle of a folder copy"


def test_export_of_one_task_and_a_tar(store: str, tmp_path: Path) -> None:
    result = export_bundle(store, ["beta"], out=tmp_path / "b", tar=tmp_path / "b.tar")
    assert result.ok and result.tasks == ("beta",)
    assert sorted(p.name for p in (tmp_path / "b" / "tasks").iterdir()) == ["beta.jsonl"]
    assert independent_verify(tmp_path / "b").returncode == 0
    r = CliRunner().invoke(main, ["verify", "--bundle", str(tmp_path / "b.tar")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["--root", store, "export", "nope", "--out", "x"])
    assert r.exit_code == 1 and "no task 'nope'" in r.output and not (tmp_path / "x").exists()


def _damage_object(url: str, replace: bytes | None) -> None:
    """Remove (or replace) the first object one of beta's events refers to."""
    client = S3Client(parse_s3_url(url))
    for line in intentlog.s3.connect(url, write=False).streams.read("beta").splitlines():
        stack: list[object] = [orjson.loads(line)["data"]]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                d = v.get("digest")
                if isinstance(d, str) and "size" in v and client.get(ObjectArtifacts.key_for(d)) is not None:
                    client.delete(ObjectArtifacts.key_for(d))
                    if replace is not None:
                        client.create(ObjectArtifacts.key_for(d), replace)
                    return
                stack.extend(v.values())
            elif isinstance(v, list):
                stack.extend(v)
    raise AssertionError("no object referenced by beta")


@pytest.mark.parametrize(
    ("damage", "error"),
    [("missing object", ArtifactMissing), ("wrong object", DigestMismatch), ("hole", CorruptStream)],
)
def test_damage_on_the_store_refuses_the_export_leaving_nothing(
    store: str, tmp_path: Path, damage: str, error: type[Exception]
) -> None:
    if damage == "hole":
        client = S3Client(parse_s3_url(store))
        client.delete(sorted(k for k, _ in client.scan("tasks/alpha/s"))[2])
    else:
        _damage_object(store, None if damage == "missing object" else b"not the response")
    with pytest.raises(error):
        export_bundle(store, out=tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()
    assert [n for n in os.listdir(tmp_path) if "bundle" in n] == [], "no staging left behind"
