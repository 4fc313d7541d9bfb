"""One verify, one export, one report for every storage: the same ledger gives the same claims wherever it is kept.

The same ledger is built through the public API on a folder, on an in-memory object
store and on a real SeaweedFS: two tasks, payloads kept as objects and carried inline,
an orphan object, a seal, then events after the seal. Then the same damage is done to
each (an object the record names is deleted). verify's report -- every claim, message and
count, and the exit code -- and the exported bundle's check must be the same on all three,
but for where the ledger is (its folder, its URL).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import s3_server

import intentlog
from intentlog.bundle import check_bundle, export_bundle
from intentlog.checker import VerifyReport, verify_ledger
from intentlog.heads import seal as seal_folder
from intentlog.ledger import Ledger
from intentlog.report import render_report
from intentlog.s3 import on_client
from intentlog.s3.client import ObjectClient
from intentlog.s3.seals import create_seal

SMALL = b"carried inline"
BIG = bytes(range(256)) * 200  # kept as an object
ORPHAN = b"referenced by nothing"
GONE = b"an object the record names, deleted" * 100


@dataclass
class Kept:
    """A ledger on one storage, and the few storage-level acts the contract needs (seal, delete an object)."""

    name: str
    ledger: Ledger
    where: str
    seal: Callable[[], None]
    delete_object: Callable[[str], None]


def _on_store(name: str, client: ObjectClient, where: str) -> Kept:
    ledger = Ledger(Path(where), storage=on_client(client), location=where)

    def delete(digest: str) -> None:
        hexd = digest.split(":", 1)[1]
        client.delete(f"objects/{hexd[:2]}/{hexd[2:]}")

    def seal() -> None:
        create_seal(client)  # the next numbered seal on the store

    return Kept(name, ledger, where, seal, delete)


def _folder(root: Path) -> Kept:
    ledger = intentlog.open(root)

    def delete(digest: str) -> None:
        hexd = digest.split(":", 1)[1]
        os.unlink(root / "objects" / hexd[:2] / hexd[2:])

    def seal() -> None:
        seal_folder(ledger)  # heads.json

    return Kept("folder", ledger, str(root), seal, delete)


def _kept(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Kept:
    if name == "folder":
        return _folder(tmp_path / "ledger")
    if name == "memory":
        return _on_store("memory", s3_server.MemoryClient(name="contract"), "mem://contract")
    url = s3_server.ledger_url(monkeypatch)
    return _on_store("seaweedfs", s3_server.client_of(url), url)


def build(k: Kept) -> str:
    """The contract's ledger, through the public API; returns the digest of the object deleted later."""
    ledger = k.ledger
    small, big, gone = (ledger.artifacts.put(b) for b in (SMALL, BIG, GONE))
    ledger.artifacts.put(ORPHAN)
    a = ledger.task("alpha")
    a.append("note", {"small": small.to_json(), "big": big.to_json()})
    a.append("note", {"bare": big.digest, "n": 1})
    b = ledger.task("beta")
    b.append("note", {"gone": gone.to_json()})
    a.close()
    b.close()
    k.seal()
    a = ledger.task("alpha")
    a.append("note", {"after": "the seal"})
    a.close()
    g = ledger.task("gamma")  # written after the seal: not anchored
    g.append("note", {"late": True})
    g.close()
    return gone.digest


def claims(report: VerifyReport, where: str) -> dict[str, Any]:
    """The report as a user reads it, with the ledger's location taken out."""
    doc = report.to_json()
    assert doc.pop("root") in (where, where.rstrip("/"))
    text = repr(doc).replace(where, "<ledger>")
    return {"doc": text, "exit": report.exit_code, "render": report.render().replace(where, "<ledger>")}


def run_contract(k: Kept, out: Path) -> dict[str, Any]:
    """Build, verify, report, export, damage and verify again on one storage; what a user is told, by step."""
    gone = build(k)
    told: dict[str, Any] = {}
    clean = verify_ledger(k.ledger)
    assert clean.ok and clean.tasks == 3 and clean.events == 8, clean.render()
    assert [p.code for p in clean.problems] == ["unsealed", "orphan_blob"], clean.render()
    assert clean.problems[0].task == "gamma" and clean.problems[1].digest is not None
    told["clean"] = claims(clean, k.where)

    page = render_report(k.ledger)
    assert page.verify_ok and page.tasks == ("alpha", "beta", "gamma")
    told["page"] = {"counts": dict(page.counts), "detailed": page.detailed}

    result = export_bundle(k.ledger, out=out)
    assert result.ok and result.tasks == ("alpha", "beta", "gamma"), result.render()
    bundle = check_bundle(out)
    assert bundle.ok and bundle.tasks == 3, bundle.render()
    told["bundle"] = claims(bundle, str(out))
    told["bundle_files"] = sorted(str(p.relative_to(out)) for p in out.rglob("*") if "objects" in p.parts)

    k.delete_object(gone)
    damaged = verify_ledger(k.ledger)
    assert not damaged.ok and damaged.exit_code == 1
    missing = damaged.by_code("artifact_missing")
    assert [(p.task, p.digest) for p in missing] == [("beta", gone)], damaged.render()
    told["damaged"] = claims(damaged, k.where)
    return told


@pytest.mark.parametrize("other", ["memory", "seaweedfs"])
def test_verify_export_and_report_tell_the_same_on_a_store_as_on_a_folder(
    other: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder's run is the reference: the store's every claim, message, count and exit code equal it."""
    monkeypatch.chdir(tmp_path)  # a store's ledger names the working folder its workspace: the folder's parent here
    on_folder = _kept("folder", tmp_path, monkeypatch)
    on_store = _kept(other, tmp_path, monkeypatch)
    try:
        expected = run_contract(on_folder, tmp_path / "from-folder")
        got = run_contract(on_store, tmp_path / "from-store")
    finally:
        on_folder.ledger.close()
        on_store.ledger.close()
    for step in expected:
        assert got[step] == expected[step], f"{other}: {step} differs from the folder's"


def test_verify_report_and_export_never_ask_which_storage_they_read() -> None:
    """No module of the checker, the report or export imports store code or asks whether it has a store."""
    from test_layers import PKG, imports_of

    files = [f for sub in ("checker", "report", "bundle") for f in sorted((PKG / sub).rglob("*.py"))]
    files.append(PKG / "verify_bundle.py")
    imports = [
        f"{f.relative_to(PKG.parent)} imports {m}"
        for f in files
        for m in sorted(imports_of(f))
        if m == "intentlog.s3" or m.startswith("intentlog.s3.")
    ]
    assert imports == []
    questions = ("storage is not None", "storage is None", "remote is not None", "remote_streams", "seams is not None")
    asked = [f"{f.relative_to(PKG.parent)}: {q}" for f in files for q in questions if q in f.read_text()]
    assert asked == []
