"""The demo's conductor: every case of the crash experiment, every claim checked, not assumed.

Each step is a separate OS process (:mod:`intentlog.demo.producer`); kills are real
``SIGKILL``s; provider effects are counted from the synthetic provider's own fsync'd
receipt log, never from the ledger. The folders are left for ``status``, ``log`` and
``verify``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .._internal.text import format_table
from ..errors import IntentlogError
from ..eventlog.reader import StreamScan
from .provider import read_receipts

__all__ = ["Case", "DemoResult", "render", "run_demo"]

MARKER = ".intentlog-demo"
_PRODUCER = (sys.executable, "-m", "intentlog.demo.producer")
TASK = "chapter-16"


@dataclass
class Case:
    name: str
    folder: Path
    story: str
    events_before: int = 0
    events_after: int = 0
    receipts_before: int = 0
    receipts_after: int = 0
    decision: str = ""
    expected: str = ""  # what the reference experiment reports for this case
    claims: list[tuple[str, bool]] = field(default_factory=list)
    verifier: dict[str, Any] | None = None  # the standalone verifier's verdict on this case's bundle
    measured_text: str | None = None  # what was measured, when it is not events and receipts

    @property
    def ok(self) -> bool:
        return all(ok for _, ok in self.claims)

    def claim(self, text: str, ok: bool) -> None:
        self.claims.append((text, ok))

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.name,
            "folder": str(self.folder),
            "story": self.story,
            "events_before": self.events_before,
            "events_after": self.events_after,
            "receipts_before": self.receipts_before,
            "receipts_after": self.receipts_after,
            "decision": self.decision,
            "expected": self.expected,
            "measured": self.measured,
            "claims": [{"claim": t, "passed": ok} for t, ok in self.claims],
            "verifier": self.verifier,
        }

    @property
    def measured(self) -> str:
        if self.measured_text is not None:
            return self.measured_text
        return (
            f"events {self.events_before} -> {self.events_after}, receipts {self.receipts_before} -> "
            f"{self.receipts_after}; {self.decision}"
        )


@dataclass
class DemoResult:
    directory: Path
    cases: list[Case]
    seconds: float
    corruptions: list[Case] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cases) and all(c.ok for c in self.corruptions)

    @property
    def claims_checked(self) -> int:
        """Every claim checked: the demo's own, and each claim the standalone verifier passed or refused."""
        own = sum(len(c.claims) for c in (*self.cases, *self.corruptions))
        verifier = sum(int(c.verifier["claims"]) for c in self.cases if c.verifier is not None)
        return own + verifier

    @property
    def claims_failed(self) -> int:
        return sum(not ok for c in (*self.cases, *self.corruptions) for _, ok in c.claims)

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
            "claims_checked": self.claims_checked,
            "claims_failed": self.claims_failed,
            "reference_verifier_claims": 73,
            "cases": [c.to_json() for c in self.cases],
            "corruptions": [c.to_json() for c in self.corruptions],
        }


def _step(mode: str, folder: Path, *args: str, timeout: float = 20) -> dict[str, Any]:
    """Run one producer process to its end (or its own SIGKILL) and return what it printed."""
    proc = subprocess.run(
        [*_PRODUCER, mode, str(folder / "ledger"), str(folder / "receipts.jsonl"), *args],
        capture_output=True,
        timeout=timeout,
        env=_env(),
    )
    out: dict[str, Any] = {"returncode": proc.returncode}
    lines = proc.stdout.decode().strip().splitlines()
    if lines:
        out.update(orjson.loads(lines[-1]))
    if proc.returncode not in (0, 3, -signal.SIGKILL):
        raise IntentlogError(f"demo step {mode} in {folder} failed: {proc.stderr.decode().strip()[-500:]}")
    return out


def _env() -> dict[str, str]:
    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _kill_while_provider_holds(folder: Path) -> int:
    """Start a producer whose provider holds the request, SIGKILL it once the receipt exists."""
    receipts = folder / "receipts.jsonl"
    proc = subprocess.Popen(
        [*_PRODUCER, "produce", str(folder / "ledger"), str(receipts), "--hold", "30"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    deadline = time.monotonic() + 15
    try:
        while not read_receipts(receipts):
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise IntentlogError(f"the producer never reached the provider: {err[-500:]}")
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    return proc.returncode


def _events(folder: Path) -> int:
    path = folder / "ledger" / "tasks" / f"{TASK}.jsonl"
    if not path.exists():
        return 0
    scan = StreamScan(path)
    return sum(1 for _ in scan)


def _receipts(folder: Path) -> list[dict[str, Any]]:
    return read_receipts(folder / "receipts.jsonl")


def _manifest_hashes(folder: Path) -> list[str]:
    path = folder / "ledger" / "tasks" / f"{TASK}.jsonl"
    return [str(ev.data["request_hash"]) for ev in StreamScan(path) if ev.kind == "call.manifest"]


def _prepare(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()) and not (directory / MARKER).exists():
        raise IntentlogError(f"{directory} is not empty and not a previous demo folder; name another folder")
    if directory.exists():
        for child in directory.iterdir():
            if child.is_dir():
                _rmtree(child)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("intentlog demo output; safe to delete\n")


def _rmtree(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            os.chmod(p, 0o644)
    shutil.rmtree(path)


def case_resumed(root: Path) -> Case:
    c = Case("1-killed-after-manifest", root / "1-killed-after-manifest", "killed after call.manifest, then resumed")
    c.expected = (
        "killed right after call.manifest; a new process resumes: exactly one receipt, its body hash equal to the "
        "hash in both manifests; the old call superseded, the new one completed; next: check and accept"
    )
    c.folder.mkdir()
    _step("produce", c.folder, "--kill", "after-manifest")
    c.events_before, c.receipts_before = _events(c.folder), len(_receipts(c.folder))
    seen = _step("inspect", c.folder)
    c.claim(
        "before resume the projection says start call, no provider effect",
        seen.get("stage") == "manifest_recorded" and seen.get("provider_effect") == "none",
    )
    out = _step("resume", c.folder)
    c.events_after, receipts = _events(c.folder), _receipts(c.folder)
    c.receipts_after = len(receipts)
    after = _step("inspect", c.folder)
    c.decision = "resumed as a new linked call, sent once" if out.get("outcome") == "completed" else str(out)
    hashes = _manifest_hashes(c.folder)
    c.claim("the provider saw nothing before the resume", c.receipts_before == 0)
    c.claim("exactly one receipt after the resume", c.receipts_after == 1)
    c.claim(
        "the receipt's body hash equals the hash in both manifests",
        len(hashes) == 2 and len(set(hashes)) == 1 and bool(receipts) and receipts[0]["body_hash"] == hashes[0],
    )
    c.claim(
        "the task's next operation moved to check and accept",
        after.get("task_next_operation") == "check and accept",
    )
    c.claim(
        "the old call is superseded by the new one, which is completed",
        after.get("calls") == {"call-1": "superseded", "call-2": "completed"} and after.get("superseded_by") is None,
    )
    c.claim(
        "the killed process left the manifest on disk", c.events_before > 0 and seen.get("events") == c.events_before
    )
    return c


def case_drift(root: Path) -> Case:
    c = Case("2-drift-refused", root / "2-drift-refused", "killed after call.manifest, resumed with another model")
    c.expected = "the same interruption resumed with another model: refused before anything is sent; 0 receipts"
    c.folder.mkdir()
    _step("produce", c.folder, "--kill", "after-manifest")
    c.events_before, c.receipts_before = _events(c.folder), len(_receipts(c.folder))
    before = (c.folder / "ledger" / "tasks" / f"{TASK}.jsonl").read_bytes()
    out = _step("resume", c.folder, "--model", "reviewer-2")
    c.events_after, c.receipts_after = _events(c.folder), len(_receipts(c.folder))
    after = (c.folder / "ledger" / "tasks" / f"{TASK}.jsonl").read_bytes()
    c.decision = f"refused: {out.get('reason')}" if out.get("outcome") == "refused" else str(out)
    c.claim("resume was refused for drift", out.get("outcome") == "refused" and out.get("reason") == "DRIFT")
    c.claim("nothing was appended (the stream's bytes are unchanged)", before == after)
    c.claim("the provider saw nothing", c.receipts_after == 0)
    return c


def case_unknown(root: Path) -> tuple[Case, Case]:
    c = Case("3-effect-unknown", root / "3-effect-unknown", "killed while the provider held the request")
    c.expected = "killed while the provider held the request: effect unknown, resume refused, receipts stay 1"
    c.folder.mkdir()
    _kill_while_provider_holds(c.folder)
    c.events_before, c.receipts_before = _events(c.folder), len(_receipts(c.folder))
    seen = _step("inspect", c.folder)
    out = _step("resume", c.folder)
    c.events_after, c.receipts_after = _events(c.folder), len(_receipts(c.folder))
    c.decision = f"refused: {out.get('next_operation')}" if out.get("outcome") == "refused" else str(out)
    c.claim("the provider had already received the request once", c.receipts_before == 1)
    c.claim(
        "the projection says effect unknown, reconcile effect",
        seen.get("stage") == "effect_unknown" and seen.get("next_operation") == "reconcile effect",
    )
    c.claim("resume was refused as EffectUnknown", out.get("error") == "EffectUnknown")
    c.claim("nothing was appended and no second receipt", c.events_after == c.events_before and c.receipts_after == 1)

    c.claim("the provider's effect is unknown, a duplicate risk", seen.get("provider_effect") == "unknown")
    n = Case("3b-naive-restart-copy", root / "3b-naive-restart-copy", "a copy of case 3, restarted naively")
    n.expected = "a naive restart of an identical copy re-sends the recorded request: 2 identical receipts, same key"
    shutil.copytree(c.folder, n.folder)
    n.events_before, n.receipts_before = _events(n.folder), len(_receipts(n.folder))
    _step("naive", n.folder)
    n.events_after = _events(n.folder)
    receipts = _receipts(n.folder)
    n.receipts_after = len(receipts)
    n.decision = "resent the recorded request blind: paid twice"
    n.claim("the naive restart produced a second receipt", n.receipts_after == 2)
    n.claim(
        "both receipts carry the identical request body",
        len(receipts) == 2 and receipts[0]["body_hash"] == receipts[1]["body_hash"],
    )
    n.claim(
        "both receipts carry the same idempotency key, from two processes",
        len(receipts) == 2 and receipts[0]["key"] == receipts[1]["key"] and receipts[0]["pid"] != receipts[1]["pid"],
    )
    return c, n


def case_observed(root: Path) -> Case:
    c = Case("4-killed-after-observation", root / "4-killed-after-observation", "killed after attempt.observed")
    c.expected = (
        "killed after the observation: the projection says reinterpret; the stored bytes suffice, no new receipt"
    )
    c.folder.mkdir()
    _step("produce", c.folder, "--kill", "after-observation")
    c.events_before, c.receipts_before = _events(c.folder), len(_receipts(c.folder))
    seen = _step("inspect", c.folder)
    out = _step("resume", c.folder)
    c.events_after, c.receipts_after = _events(c.folder), len(_receipts(c.folder))
    after = _step("inspect", c.folder)
    c.decision = "reinterpreted the stored bytes, sent nothing" if out.get("outcome") == "completed" else str(out)
    c.claim("the projection said reinterpret", seen.get("next_operation") == "reinterpret")
    c.claim("no new receipt: the stored response was reinterpreted", c.receipts_after == c.receipts_before == 1)
    c.claim("the call is completed", after.get("stage") == "completed")
    c.claim("the provider's effect had happened before the kill", seen.get("provider_effect") == "happened")
    return c


def _inventory_ok(comp: dict[str, Any] | None) -> bool:
    """The inventory recovered from the record: A (required, estimated size), B (required, 0), D (optional, 0)."""
    if comp is None:
        return False
    got = {o["id"]: (o.get("required"), o.get("size"), o.get("estimated"), o.get("lineage")) for o in comp["offered"]}
    return (
        set(got) == {"A", "B", "D"}
        and got["A"][0] is True
        and got["A"][2] is True
        and got["B"][:2] == (True, 0)
        and got["D"][:2] in ((False, 0), (None, 0))
        and all(v[3] for v in got.values())
    )


def case_compile_killed(root: Path) -> Case:
    c = Case("5-compilation-killed", root / "5-compilation-killed", "killed inside a context compilation")
    c.expected = (
        "killed after context.compilation_requested: the offered inventory is recovered; the projection says recompile"
    )
    c.folder.mkdir()
    _step("compile", c.folder, "--kill", "mid-compilation")
    c.events_before, c.receipts_before = _events(c.folder), len(_receipts(c.folder))
    seen = _step("inspect", c.folder)
    comp = seen.get("compilation")
    c.claim(
        "the compilation is recorded as requested, never finished", comp is not None and comp["stage"] == "requested"
    )
    c.claim("the projection says recompile", comp is not None and comp["next_operation"] == "recompile")
    c.claim("the inventory (A, B, D with required flags, sizes, estimates, lineage) is recovered", _inventory_ok(comp))
    out = _step("compile", c.folder)
    c.events_after, c.receipts_after = _events(c.folder), len(_receipts(c.folder))
    after = _step("inspect", c.folder).get("compilation")
    c.decision = "recompiled (no external effect)" if out.get("outcome") == "compiled" else str(out)
    c.claim("recompiling completed it", after is not None and after["stage"] == "compiled")
    c.claim("no provider was involved", c.receipts_after == 0)
    return c


def case_compile_missing(root: Path) -> Case:
    c = Case("6-compilation-missing-input", root / "6-compilation-missing-input", "compilation missing a required id")
    c.expected = (
        "a compilation failed on a missing required input is recorded, not just raised: RequiredContextMissing, "
        "the inventory, and the missing id derived from required minus offered; next: fix inputs"
    )
    c.folder.mkdir()
    out = _step("compile", c.folder, "--kill", "missing-input")
    c.events_before = c.events_after = _events(c.folder)
    comp = _step("inspect", c.folder).get("compilation")
    c.decision = f"refused: {out.get('error')}; fix inputs"
    c.claim("the failure names RequiredContextMissing", comp is not None and comp["error"] == "RequiredContextMissing")
    c.claim("the missing required id is derived: C", comp is not None and comp["missing"] == ["C"])
    c.claim("the projection says fix inputs", comp is not None and comp["next_operation"] == "fix inputs")
    c.claim("the inventory is recorded with the failure", _inventory_ok(comp))
    return c


# -- bundles, the standalone verifier, seeded corruptions --------------------------------------


def _verifier(bundle: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """Run the bundle's own verify_bundle.py as a separate process (it imports no intentlog).

    It runs inside the bundle (as an auditor would), so its paths are made absolute first:
    a relative demo folder (the default ``./intentlog-demo``) would otherwise name nothing.
    """
    bundle = bundle.resolve()
    proc = subprocess.run(
        [sys.executable, "-I", str(bundle / "verify_bundle.py"), str(bundle), "--json", *args],
        capture_output=True,
        timeout=60,
        cwd=bundle,
    )
    try:
        doc = orjson.loads(proc.stdout)
    except orjson.JSONDecodeError:
        doc = {"claims": [], "error": proc.stderr.decode()[-300:]}
    return proc.returncode, doc


def _bundle(c: Case) -> None:
    """Export the case as a bundle (with its receipt log) and check it with the standalone verifier."""
    from ..bundle import export_bundle

    receipts = [c.folder / "receipts.jsonl"] if (c.folder / "receipts.jsonl").exists() else []
    bundle = c.folder / "bundle"
    export_bundle(c.folder / "ledger", out=bundle, receipts=receipts, check=False)
    rc, doc = _verifier(bundle)
    claims = doc.get("claims", [])
    failed = [x["claim"] for x in claims if x.get("status") == "FAIL"]
    c.verifier = {"exit": rc, "claims": len(claims), "failed": failed}
    if c.name.startswith("3b"):
        c.claim(
            "the standalone verifier rejects the naive copy: a receipt with no recorded attempt",
            rc == 1 and any("receipt" in f for f in failed),
        )
    else:
        c.claim(
            f"the standalone verifier passes all {len(claims)} of its claims on the exported bundle",
            rc == 0 and bool(claims),
        )


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _corrupt_edit(b: Path) -> None:
    p = b / "tasks" / f"{TASK}.jsonl"
    lines = _lines(p)
    lines[2] = lines[2].replace(b"review-p7", b"review-p8")
    p.write_bytes(b"".join(lines))


def _corrupt_remove(b: Path) -> None:
    p = b / "tasks" / f"{TASK}.jsonl"
    lines = _lines(p)
    del lines[3]
    p.write_bytes(b"".join(lines))


def _corrupt_artifact(b: Path) -> None:
    objs = sorted(q for q in (b / "objects").rglob("*") if q.is_file()) if (b / "objects").exists() else []
    if objs:
        objs[0].write_bytes(objs[0].read_bytes() + b" ")
        return
    # every payload rides inline: change the inline bytes of the response, keeping the line's digest claims
    p = b / "tasks" / f"{TASK}.jsonl"
    lines = _lines(p)
    for i, line in enumerate(lines):
        if b'"attempt.observed"' in line and b"accept" in line:
            lines[i] = line.replace(b"accept", b"reject", 1)
            break
    p.write_bytes(b"".join(lines))


def _corrupt_state(b: Path) -> None:
    p = b / "states.json"
    doc = orjson.loads(p.read_bytes())
    calls = doc["tasks"][TASK]["calls"]
    for call in calls.values():
        call["stage"] = "effect_unknown" if call.get("stage") == "completed" else "completed"
        break
    p.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))


def _corrupt_receipt(b: Path) -> None:
    p = next((b / "receipts").glob("*.jsonl"))
    forged = {"body_hash": "blake3:" + "ab" * 32, "key": "review-p7", "label": "forged", "pid": 1}
    with open(p, "ab") as f:
        f.write(orjson.dumps(forged, option=orjson.OPT_SORT_KEYS) + b"\n")


_CORRUPTIONS = (
    ("an edited event", _corrupt_edit),
    ("a removed event", _corrupt_remove),
    ("a changed artifact", _corrupt_artifact),
    ("a state claim that contradicts its events", _corrupt_state),
    ("a receipt with no recorded attempt", _corrupt_receipt),
)


def corruptions(root: Path, source: Case) -> list[Case]:
    """Five seeded corruptions of ``source``'s bundle, each checked with the byte inventory bypassed."""
    out: list[Case] = []
    for i, (what, corrupt) in enumerate(_CORRUPTIONS, start=1):
        c = Case(f"c{i}-{what.split()[1]}", root / "corruptions" / f"c{i}", f"{what}, in a copy of case 1's bundle")
        c.expected = f"{what}, with the byte inventory (hashes.json) bypassed: rejected"
        shutil.copytree(source.folder / "bundle", c.folder)
        corrupt(c.folder)
        rc, doc = _verifier(c.folder, "--no-inventory")
        failed = [x["claim"] for x in doc.get("claims", []) if x.get("status") == "FAIL"]
        c.decision = f"rejected ({len(failed)} claim(s) failed)" if rc == 1 else f"NOT rejected (exit {rc})"
        c.measured_text = f"verify_bundle.py --no-inventory exit {rc}; failed: " + ("; ".join(failed[:2]) or "none")
        c.claim(f"{what} is rejected by meaning alone (--no-inventory)", rc == 1 and bool(failed))
        out.append(c)
    return out


def run_demo(directory: Path) -> DemoResult:
    """Run every case in its own folder under ``directory`` and check every claim."""
    start = time.monotonic()
    directory = Path(directory)
    _prepare(directory)
    cases = [case_resumed(directory), case_drift(directory)]
    cases.extend(case_unknown(directory))
    cases.extend([case_observed(directory), case_compile_killed(directory), case_compile_missing(directory)])
    for c in cases:
        _bundle(c)
    corrupted = corruptions(directory, cases[0])
    return DemoResult(directory, cases, time.monotonic() - start, corrupted)


def render(result: DemoResult) -> str:
    """Per case what the reference experiment reports and what was measured, each claim with its check, the total."""
    header = ["case", "events before→after", "receipts before→after", "decision"]
    rows = [
        [c.name, f"{c.events_before} → {c.events_after}", f"{c.receipts_before} → {c.receipts_after}", c.decision]
        for c in result.cases
    ]
    rows += [[c.name, "-", "-", c.decision] for c in result.corruptions]
    lines = [*format_table(header, rows), ""]
    for c in (*result.cases, *result.corruptions):
        lines.append(f"{c.name}: {c.story}")
        lines.append(f"  expected: {c.expected}")
        lines.append(f"  measured:    {c.measured}")
        for text, ok in c.claims:
            lines.append(f"  [{'ok' if ok else 'FAILED'}] {text}")
        if c.verifier is not None:
            v = c.verifier
            lines.append(f"  standalone verifier: exit {v['exit']}, {v['claims']} claims, {len(v['failed'])} failed")
    lines.append("")
    verdict = "every claim holds" if result.ok else f"SOME CLAIMS FAILED ({result.claims_failed})"
    lines.append(
        f"{result.claims_checked} claims checked (the reference experiment's verifier checked 73): {verdict}; "
        f"{result.seconds:.1f} s. Inspect a case:"
    )
    first = result.cases[2].folder if len(result.cases) > 2 else result.directory
    lines.append(f"  intentlog --root {first}/ledger status {TASK}")
    lines.append(f"  intentlog --root {first}/ledger log {TASK}")
    lines.append(f"  intentlog --root {first}/ledger verify")
    lines.append(f"  python {first}/bundle/verify_bundle.py {first}/bundle")
    return "\n".join(lines)
