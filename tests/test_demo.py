"""`intentlog demo`: the whole crash experiment, its claims asserted, and its verifier shown able to fail.

One run (module fixture) is checked from every side: the conductor's claims, the
standalone verifier's claims (at least the reference experiment's 73), the receipt logs
and ledgers themselves, and copies of the folder tampered with in ways the verifier must
catch — by meaning, not only by the hash inventory (each tampered copy is re-inventoried
as a forger would).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

import intentlog
from intentlog.cli import main
from intentlog.demo.provider import read_receipts
from intentlog.demo.records import INVENTORY, inventory, write_json

CASES = [
    "1-killed-after-manifest",
    "2-drift-refused",
    "3-effect-unknown",
    "3b-naive-restart-copy",
    "4-killed-after-observation",
    "5-compilation-killed",
    "6-compilation-missing-input",
    "7-refused-then-killed-in-backoff",
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("demo") / "d"
    r = CliRunner().invoke(main, ["demo", str(folder), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output[-4000:]
    return folder, json.loads(r.output)


def _verify(folder: Path) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-I", str(folder / "code" / "verify_experiment.py"), str(folder), "--json"],
        capture_output=True,
        timeout=300,
    )
    return proc.returncode, json.loads(proc.stdout)


def _failed(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["group"], c["claim"]) for c in doc["claims"] if c["status"] == "FAIL"]


def test_every_claim_holds_counted_apart(demo: tuple[Path, dict[str, Any]]) -> None:
    """The conductor's claims and the verifier's are counted apart; the verifier checks at least 73, every group."""
    _, out = demo
    assert out["ok"] is True and out["claims_failed"] == 0
    assert [c["case"] for c in out["cases"]] == CASES
    claims = out["claims"]
    assert claims["harness"]["failed"] == 0 and claims["harness"]["checked"] >= 40
    assert claims["verifier"] == {"checked": claims["verifier"]["checked"], "failed": 0, "exit": 0}
    assert claims["verifier"]["checked"] >= 73
    assert claims["inventory"]["files"] > 100
    assert out["claims_checked"] == claims["harness"]["checked"] + claims["verifier"]["checked"]
    groups = {c["group"] for c in out["verifier"]["claims"]}
    assert groups == {
        "records", "bundle", "receipts", "inspections", "predictions", "termination",
        "reprojection", "network", "corruptions", "inventory",
    }  # fmt: skip
    assert all(c["status"] == "PASS" for c in out["verifier"]["claims"])
    assert sum(c["group"] == "reprojection" for c in out["verifier"]["claims"]) == 3
    assert sum(c["group"] == "corruptions" for c in out["verifier"]["claims"]) == 5
    for c in out["cases"]:
        assert c["claims"] and all(x["passed"] for x in c["claims"]), c
        assert c["verifier"]["claims"] > 10 and c["verifier"]["failed"] == []
    assert len(out["corruptions"]) == 5 and all(c["claims"][0]["passed"] for c in out["corruptions"])


def test_the_record_itself_says_what_the_claims_say(demo: tuple[Path, dict[str, Any]]) -> None:
    """Re-read here from the provider's logs, the ledgers and the records, not from the demo's report."""
    d, _ = demo
    receipts = {name: read_receipts(d / name / "provider" / "receipts.jsonl") for name in CASES}
    assert {k: len(v) for k, v in receipts.items()} == {
        "1-killed-after-manifest": 1,
        "2-drift-refused": 0,
        "3-effect-unknown": 1,
        "3b-naive-restart-copy": 2,
        "4-killed-after-observation": 1,
        "5-compilation-killed": 0,
        "6-compilation-missing-input": 0,
        "7-refused-then-killed-in-backoff": 2,
    }
    naive = receipts["3b-naive-restart-copy"]
    assert naive[0]["body_hash"] == naive[1]["body_hash"] and naive[0]["idempotency_key"] == naive[1]["idempotency_key"]
    assert naive[0]["client"] != naive[1]["client"] and [r["status"] for r in naive] == ["held", 200]
    assert [r["status"] for r in receipts["7-refused-then-killed-in-backoff"]] == [429, 200]

    def state(name: str) -> intentlog.WorkState:
        return intentlog.open(d / name / "ledger", create=False).task("chapter-16").work_state()

    assert state("3-effect-unknown").calls["call-1"].stage == "effect_unknown"
    twice = state("3b-naive-restart-copy").calls["call-1"]
    assert (twice.stage, twice.attempts, twice.key) == ("completed", 2, "review-p7")
    assert twice.request_hash == naive[0]["body_hash"]  # the provider hashed exactly the recorded request
    assert state("6-compilation-missing-input").compilations["context-16"].missing == ("C",)
    prereg = orjson.loads((d / "preregistration.json").read_bytes())
    term = orjson.loads((d / "termination.json").read_bytes())
    first = min(s["started_at"] for c in term["cases"].values() for s in c["steps"])
    assert prereg["written_at"] < first and len(prereg["cases"]) == 8 and prereg["hypotheses"]
    assert json.loads((d / "netcheck.json").read_text())["results"]
    assert all(v.startswith("refused") for v in json.loads((d / "netcheck.json").read_text())["results"].values())
    for name in CASES:
        assert (d / name / "termination.json").exists()
        v = CliRunner().invoke(main, ["--root", str(d / name / "ledger"), "verify"], catch_exceptions=False)
        assert v.exit_code == 0, (name, v.output)


def test_the_verifier_run_alone_passes_and_writes_nothing(demo: tuple[Path, dict[str, Any]]) -> None:
    d, out = demo
    before = inventory(d)
    rc, doc = _verify(d)
    assert rc == 0 and _failed(doc) == []
    assert doc["counts"]["claims"] == out["claims"]["verifier"]["checked"]
    assert inventory(d) == before


def _tamper_inspection(d: Path) -> None:
    p = next((d / "3-effect-unknown" / "inspections").glob("01-*.json"))
    doc = orjson.loads(p.read_bytes())
    doc["state"]["calls"]["call-1"]["stage"] = "manifest_recorded"  # "nothing was sent": what a restart wants
    doc["state"]["calls"]["call-1"]["next_operation"] = "start call"
    write_json(p, doc)


def _tamper_receipt(d: Path) -> None:
    p = d / "1-killed-after-manifest" / "provider" / "receipts.jsonl"
    with open(p, "ab") as f:
        f.write(p.read_bytes().splitlines(keepends=True)[0].replace(b'"n":1', b'"n":2'))


def _tamper_prediction(d: Path) -> None:
    p = d / "preregistration.json"
    doc = orjson.loads(p.read_bytes())
    doc["cases"][3]["receipts"] = 1  # "the naive restart pays once"
    write_json(p, doc)


def _tamper_appended(d: Path) -> None:
    p = next((d / "2-drift-refused" / "inspections").glob("01-*.json"))
    doc = orjson.loads(p.read_bytes())
    doc["after"]["events"] += 1
    write_json(p, doc)


def _tamper_reprojection(d: Path) -> None:
    p = d / "reprojection.json"
    doc = orjson.loads(p.read_bytes())
    doc["ledgers"]["3-effect-unknown"]["state"]["next_operation"] = "start call"
    write_json(p, doc)


def _tamper_network(d: Path) -> None:
    write_json(d / "netcheck.json", {"pid": 1, "results": {"connect 192.0.2.1:9": "allowed"}})


def _tamper_corruption(d: Path) -> None:
    shutil.rmtree(d / "corruptions" / "c2")
    shutil.copytree(d / "1-killed-after-manifest" / "bundle", d / "corruptions" / "c2")  # "corrupted", but not


TAMPERINGS = {
    "an inspection's recorded state": (_tamper_inspection, "inspections"),
    "a receipt added to a provider's log": (_tamper_receipt, "predictions"),
    "a prediction changed after the run": (_tamper_prediction, "records"),
    "an inspection that appended": (_tamper_appended, "inspections"),
    "a re-projection that disagrees": (_tamper_reprojection, "reprojection"),
    "a network check that was allowed": (_tamper_network, "network"),
    "a corruption never applied": (_tamper_corruption, "corruptions"),
}


@pytest.mark.parametrize("what", list(TAMPERINGS))
def test_a_tampered_folder_fails_the_verifier(demo: tuple[Path, dict[str, Any]], tmp_path: Path, what: str) -> None:
    """Each tampering is caught by the inventory, and, re-inventoried as a forger would, by its meaning."""
    src, _ = demo
    d = tmp_path / "copy"
    shutil.copytree(src, d)
    tamper, group = TAMPERINGS[what]
    tamper(d)
    rc, doc = _verify(d)
    assert rc == 1 and "inventory" in {g for g, _ in _failed(doc)}
    write_json(d / INVENTORY, inventory(d))  # the forger re-hashes every file
    rc, doc = _verify(d)
    assert rc == 1
    failed = _failed(doc)
    assert group in {g for g, _ in failed}, failed
    assert "inventory" not in {g for g, _ in failed}


def test_a_deleted_file_fails_the_inventory(demo: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    src, _ = demo
    d = tmp_path / "copy"
    shutil.copytree(src, d)
    (d / "5-compilation-killed" / "termination.json").unlink()
    rc, doc = _verify(d)
    assert rc == 1 and [g for g, _ in _failed(doc)] == ["inventory"]


def test_the_ledgers_work_with_every_reading_command(demo: tuple[Path, dict[str, Any]]) -> None:
    """The case folders are real ledgers: .gitignore, .gitattributes, and tasks/status/log/verify work on them."""
    d, _ = demo
    led = d / "1-killed-after-manifest" / "ledger"
    assert (led / ".gitignore").exists() and (led / ".gitattributes").exists()
    for argv in (["tasks"], ["status", "chapter-16"], ["log", "chapter-16"], ["verify"]):
        v = CliRunner().invoke(main, ["--root", str(led), *argv], catch_exceptions=False)
        assert v.exit_code == 0, (argv, v.output)


def test_demo_refuses_a_foreign_folder(tmp_path: Path) -> None:
    """The demo never writes into a non-empty folder that is not a previous demo."""
    (tmp_path / "mine.txt").write_text("keep me")
    r = CliRunner().invoke(main, ["demo", str(tmp_path)])
    assert r.exit_code == 1
    assert (tmp_path / "mine.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_demo_as_the_readme_runs_it_over_a_previous_run(tmp_path: Path) -> None:
    """`intentlog demo` with no folder (the README's main job), as a real process, over a previous run's folder."""
    old = tmp_path / "intentlog-demo"
    (old / "1-killed-after-manifest").mkdir(parents=True)
    (old / ".intentlog-demo").write_text("intentlog demo output; safe to delete\n")
    (old / "1-killed-after-manifest" / "stale.txt").write_text("from an earlier run")
    (old / "verification.json").write_text("{}")
    proc = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "FAILED" not in proc.stdout and "every claim holds" in proc.stdout
    assert not (old / "1-killed-after-manifest" / "stale.txt").exists()
    assert _verify(old)[0] == 0
