"""The demo's conductor: the whole crash experiment, preregistered, run, recorded, inventoried, verified.

In order: the folder's preregistration (hypotheses, cases, predictions, what counts as a
pass, the pinned code's digests) is written before anything runs; a provider starts on
127.0.0.1 with its own fsync'd receipt log; a guarded process shows outbound network is
refused; the seven cases and the naive-restart copy run as separate processes with real
``SIGKILL``s, each inspection recorded by the process that projected it; each case is
exported as a bundle with the provider's log; five corruptions of case 1's bundle are
seeded; a fresh process re-projects three ledgers; the termination record and then a
BLAKE3 inventory of every file are written; last, the standalone verifier
(``code/verify_experiment.py``, no intentlog imported) checks the folder in its own
process. The conductor's claims and the verifier's are counted separately.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .. import __version__
from .._internal.text import format_table
from ..errors import IntentlogError
from . import plan
from .cases import run_cases
from .corrupt import seed_corruptions
from .harness import TASK, Case, Experiment, utc_now
from .provider import RECEIPTS
from .records import INVENTORY, VERIFICATION, file_digest, inventory, write_json

__all__ = ["DemoResult", "render", "run_demo"]

MARKER = ".intentlog-demo"
_CODE = ("producer.py", "provider.py", "netguard.py", "records.py", "plan.py", "verify_experiment.py")


@dataclass
class DemoResult:
    directory: Path
    cases: list[Case]
    seconds: float
    corruptions: list[Case] = field(default_factory=list)
    harness: list[tuple[str, bool]] = field(default_factory=list)  # the conductor's claims beyond the cases
    verification: dict[str, Any] = field(default_factory=dict)  # the standalone verifier's JSON
    verifier_exit: int = -1

    @property
    def harness_claims(self) -> list[tuple[str, bool]]:
        return [*self.harness, *(x for c in self.cases for x in c.claims)]

    @property
    def verifier_claims(self) -> list[dict[str, Any]]:
        claims = self.verification.get("claims", [])
        return claims if isinstance(claims, list) else []

    @property
    def verifier_failed(self) -> int:
        return sum(c.get("status") == "FAIL" for c in self.verifier_claims)

    @property
    def inventory_files(self) -> int:
        return int(self.verification.get("counts", {}).get("inventory_files", 0))

    @property
    def ok(self) -> bool:
        harness = all(ok for _, ok in self.harness_claims)
        return harness and self.verifier_exit == 0 and bool(self.verifier_claims) and not self.verifier_failed

    @property
    def claims_checked(self) -> int:
        return len(self.harness_claims) + len(self.verifier_claims)

    @property
    def claims_failed(self) -> int:
        return sum(not ok for _, ok in self.harness_claims) + self.verifier_failed

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
            "claims": {
                "harness": {
                    "checked": len(self.harness_claims),
                    "failed": sum(not ok for _, ok in self.harness_claims),
                },
                "verifier": {
                    "checked": len(self.verifier_claims),
                    "failed": self.verifier_failed,
                    "exit": self.verifier_exit,
                },
                "inventory": {"files": self.inventory_files},
            },
            "claims_checked": self.claims_checked,
            "claims_failed": self.claims_failed,
            "reference_verifier_claims": 73,
            "harness": [{"claim": t, "passed": ok} for t, ok in self.harness],
            "cases": [c.to_json() for c in self.cases],
            "corruptions": [c.to_json() for c in self.corruptions],
            "verifier": self.verification,
        }


def _prepare(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()) and not (directory / MARKER).exists():
        raise IntentlogError(f"{directory} is not empty and not a previous demo folder; name another folder")
    if directory.exists():
        for child in directory.iterdir():
            if child.name == MARKER:
                continue
            if child.is_dir():
                _rmtree(child)
            else:
                child.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("intentlog demo output; safe to delete\n")


def _rmtree(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            os.chmod(p, 0o644)
    shutil.rmtree(path)


def _pin_code(directory: Path) -> dict[str, str]:
    """Copy the experiment's own code into ``code/``; the digests go into the preregistration."""
    here = Path(__file__).resolve().parent
    (directory / "code").mkdir()
    pinned = {}
    for name in _CODE:
        shutil.copyfile(here / name, directory / "code" / name)
        pinned[name] = file_digest(directory / "code" / name)[0]
    return pinned


def _preregister(directory: Path, pinned: dict[str, str]) -> None:
    """The plan, before anything runs: the whole of it at the top, each case's own part in its folder."""
    for case in plan.CASES:
        write_json(directory / case["case"] / "preregistration.json", {"format": plan.PLAN_FORMAT, **case})
    write_json(
        directory / "preregistration.json",
        {
            "format": plan.PLAN_FORMAT,
            "written_at": utc_now(),
            "intentlog": __version__,
            "python": sys.version.split()[0],
            "hypotheses": plan.HYPOTHESES,
            "cases": plan.CASES,
            "reprojected": plan.REPROJECTED,
            "corruptions": plan.CORRUPTIONS,
            "pass": plan.PASS,
            "code": pinned,
            "network": "outbound refused in every producer process (an audit hook); the provider listens on "
            "127.0.0.1 only",
        },
    )


def _netcheck(x: Experiment, directory: Path) -> tuple[str, bool]:
    probe = Case("netcheck", directory, "")
    out = x.step(probe, "netcheck")
    write_json(directory / "netcheck.json", {"pid": probe.steps[0].pid, "results": out.get("results", {})})
    results = out.get("results", {})
    ok = len(results) == 2 and all(str(v).startswith("refused") for v in results.values())
    return "outbound network is refused in the demo's processes (a connect to 192.0.2.1 and a lookup refused)", ok


def _export(c: Case) -> None:
    from ..bundle import export_bundle

    receipts = c.folder / RECEIPTS
    if not receipts.exists():  # the provider saw nothing: its log is empty, and exported as such
        receipts.touch()
    export_bundle(c.folder / "ledger", out=c.folder / "bundle", receipts=[receipts], check=False)


def _reproject(x: Experiment, directory: Path) -> tuple[str, bool]:
    probe = Case("reprojection", directory, "")
    out = x.step(probe, "reproject", "--cases", *plan.REPROJECTED)
    return f"a fresh process re-projected {len(plan.REPROJECTED)} ledgers", out.get("ledgers") == len(plan.REPROJECTED)


def _terminate(
    directory: Path, cases: list[Case], harness: list[tuple[str, bool]], started: str, provider: int | None
) -> None:
    for c in cases:
        write_json(
            c.folder / "termination.json",
            {
                "case": c.name,
                "steps": [s.to_json() for s in c.steps],
                "events": c.events(),
                "receipts": len(c.receipts()),
                "claims": [{"claim": t, "passed": ok} for t, ok in c.claims],
            },
        )
    claims = [*harness, *(x for c in cases for x in c.claims)]
    write_json(
        directory / "termination.json",
        {
            "ended": "completed",
            "started_at": started,
            "ended_at": utc_now(),
            "preregistration": file_digest(directory / "preregistration.json")[0],
            "provider_exit": provider,
            "cases": {c.name: {"steps": [s.to_json() for s in c.steps]} for c in cases},
            "harness_claims": {"checked": len(claims), "failed": sum(not ok for _, ok in claims)},
        },
    )


def verify(directory: Path) -> tuple[int, dict[str, Any]]:
    """Run the pinned standalone verifier over ``directory`` in its own process (``python -I``)."""
    directory = directory.resolve()
    proc = subprocess.run(
        [sys.executable, "-I", "-B", str(directory / "code" / "verify_experiment.py"), str(directory), "--json"],
        capture_output=True,
        timeout=300,
        cwd=directory,
    )
    try:
        doc = orjson.loads(proc.stdout)
    except orjson.JSONDecodeError:
        doc = {"claims": [], "error": proc.stderr.decode()[-800:]}
    return proc.returncode, doc if isinstance(doc, dict) else {}


def run_demo(directory: Path) -> DemoResult:
    """Run the whole experiment in ``directory`` and verify it; see the module's docstring for the order."""
    start = time.monotonic()
    started = utc_now()
    directory = Path(directory)
    _prepare(directory)
    _preregister(directory, _pin_code(directory))
    x = Experiment(directory, directory / "code")
    try:
        harness = [_netcheck(x, directory)]
        cases = run_cases(x, directory)
    finally:
        provider = x.close()
    for c in cases:
        _export(c)
    seeded = seed_corruptions(directory, cases[0].folder / "bundle")
    harness.append(_reproject(x, directory))
    _terminate(directory, cases, harness, started, provider)
    write_json(directory / INVENTORY, inventory(directory))
    rc, doc = verify(directory)
    write_json(directory / VERIFICATION, doc)
    result = DemoResult(directory, cases, 0.0, harness=harness, verification=doc, verifier_exit=rc)
    result.corruptions = _corruption_cases(directory, seeded, result.verifier_claims)
    for c in cases:
        mine = [v for v in result.verifier_claims if v.get("case") == c.name]
        failed = [v["claim"] for v in mine if v.get("status") == "FAIL"]
        c.verifier = {"exit": rc, "claims": len(mine), "failed": failed}
    result.seconds = time.monotonic() - start
    return result


def _corruption_cases(directory: Path, seeded: list[tuple[str, Path]], claims: list[dict[str, Any]]) -> list[Case]:
    """Each seeded corruption as a row, with the verifier's verdict on it."""
    out = []
    verdicts = [v for v in claims if v.get("group") == "corruptions"]
    for i, (what, folder) in enumerate(seeded):
        c = Case(folder.name, folder, f"{what}, in a copy of case 1's bundle")
        c.expected = f"{what}, with the bundle's byte inventory bypassed: rejected"
        v = verdicts[i] if i < len(verdicts) else {}
        rejected = v.get("status") == "PASS"
        c.decision = "rejected by meaning alone" if rejected else "NOT rejected"
        c.measured_text = c.decision
        c.claims.append((f"{what} is rejected by meaning alone (the verifier's claim)", rejected))
        out.append(c)
    return out


def render(result: DemoResult) -> str:
    """Per case what was expected and measured, each claim with its check; the verifier's verdict; the counts."""
    header = ["case", "events before→after", "receipts before→after", "decision"]
    rows = [
        [c.name, f"{c.events_before} → {c.events_after}", f"{c.receipts_before} → {c.receipts_after}", c.decision]
        for c in result.cases
    ]
    rows += [[c.name, "-", "-", c.decision] for c in result.corruptions]
    lines = [*format_table(header, rows), ""]
    for text, ok in result.harness:
        lines.append(f"[{'ok' if ok else 'FAILED'}] {text}")
    lines.append("")
    for c in result.cases:
        lines.append(f"{c.name}: {c.story}")
        lines.append(f"  expected: {c.expected}")
        lines.append(f"  measured: {c.measured}")
        for text, ok in c.claims:
            lines.append(f"  [{'ok' if ok else 'FAILED'}] {text}")
        if c.verifier is not None:
            v = c.verifier
            lines.append(f"  standalone verifier: {v['claims']} claims about this case, {len(v['failed'])} failed")
            lines.extend(f"    FAILED: {f}" for f in v["failed"][:5])
    failed_elsewhere = [v for v in result.verifier_claims if v.get("status") == "FAIL" and not v.get("case")]
    lines.extend(f"verifier FAILED: {v['claim']}" for v in failed_elsewhere[:10])
    if not result.verifier_claims:
        lines.append(f"the standalone verifier gave no claims: {str(result.verification.get('error', ''))[-300:]}")
    lines.append("")
    h = result.harness_claims
    d = result.directory
    verdict = "every claim holds" if result.ok else f"SOME CLAIMS FAILED ({result.claims_failed})"
    lines.append(
        f"claims: {len(h)} by the conductor ({sum(not ok for _, ok in h)} failed); {len(result.verifier_claims)} by "
        f"the standalone verifier ({result.verifier_failed} failed; the reference experiment's verifier checked 73), "
        f"its inventory covering {result.inventory_files} files. {verdict}; {result.seconds:.1f} s."
    )
    lines.append(f"Check it again:   python {d}/code/verify_experiment.py {d}")
    first = d / "3-effect-unknown"
    lines.append(f"Inspect a case:   intentlog --root {first}/ledger status {TASK}")
    lines.append(f"                  intentlog --root {first}/ledger log {TASK}")
    lines.append(f"                  python {first}/bundle/verify_bundle.py {first}/bundle")
    return "\n".join(lines)
