"""The demo's conductor: four cases of the seed experiment, every claim checked, not assumed.

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

from .._text import format_table
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
    claims: list[tuple[str, bool]] = field(default_factory=list)

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
            "claims": [{"claim": t, "passed": ok} for t, ok in self.claims],
        }


@dataclass
class DemoResult:
    directory: Path
    cases: list[Case]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cases)

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
            "cases": [c.to_json() for c in self.cases],
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
    return c


def case_drift(root: Path) -> Case:
    c = Case("2-drift-refused", root / "2-drift-refused", "killed after call.manifest, resumed with another model")
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

    n = Case("3b-naive-restart-copy", root / "3b-naive-restart-copy", "a copy of case 3, restarted naively")
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
    return c, n


def case_observed(root: Path) -> Case:
    c = Case("4-killed-after-observation", root / "4-killed-after-observation", "killed after attempt.observed")
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
    return c


def run_demo(directory: Path) -> DemoResult:
    """Run every case in its own folder under ``directory`` and check every claim."""
    start = time.monotonic()
    directory = Path(directory)
    _prepare(directory)
    cases = [case_resumed(directory), case_drift(directory)]
    cases.extend(case_unknown(directory))
    cases.append(case_observed(directory))
    return DemoResult(directory, cases, time.monotonic() - start)


def render(result: DemoResult) -> str:
    """The table of cases, then every claim with its check."""
    header = ["case", "events before→after", "receipts before→after", "decision"]
    rows = [
        [c.name, f"{c.events_before} → {c.events_after}", f"{c.receipts_before} → {c.receipts_after}", c.decision]
        for c in result.cases
    ]
    lines = [*format_table(header, rows), ""]
    for c in result.cases:
        for text, ok in c.claims:
            lines.append(f"  [{'ok' if ok else 'FAILED'}] {c.name}: {text}")
    lines.append("")
    verdict = "every claim checked from the receipt logs and the record" if result.ok else "SOME CLAIMS FAILED"
    lines.append(f"{verdict} ({result.seconds:.1f} s). Inspect a case:")
    first = result.cases[2].folder if len(result.cases) > 2 else result.directory
    lines.append(f"  intentlog --root {first}/ledger status {TASK}")
    lines.append(f"  intentlog --root {first}/ledger log {TASK}")
    lines.append(f"  intentlog --root {first}/ledger verify")
    return "\n".join(lines)
