"""The seven cases and the naive-restart copy, each run as separate processes, each with the conductor's claims.

The conductor's claims read the provider's receipt log, the inspection records the
inspecting processes wrote, and what each step printed; the standalone verifier checks
the same folder again, independently (:mod:`intentlog.demo.verify_experiment`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from .harness import Case, Experiment
from .plan import case_plan
from .provider import BEHAVIOUR
from .records import write_json

__all__ = ["run_cases"]


def _new(root: Path, name: str) -> Case:
    plan = case_plan(name)
    c = Case(name, root / name, plan["story"])
    (c.folder / "provider").mkdir(parents=True, exist_ok=True)
    write_json(c.folder / BEHAVIOUR, plan["behaviour"])
    return c


def _inspection(c: Case, n: int) -> dict[str, Any]:
    """The n-th inspection record (1-based; -1 the last) the inspecting process wrote."""
    files = sorted((c.folder / "inspections").glob("*.json"))
    doc = orjson.loads(files[n - 1 if n > 0 else n].read_bytes())
    return doc if isinstance(doc, dict) else {}


def _call(rec: dict[str, Any], cid: str) -> dict[str, Any]:
    calls = rec.get("state", {}).get("calls", {})
    return calls.get(cid, {}) if isinstance(calls, dict) else {}


def _comp(rec: dict[str, Any]) -> dict[str, Any]:
    comps = rec.get("state", {}).get("compilations", {})
    return comps.get("context-16", {}) if isinstance(comps, dict) else {}


def _appended_nothing(rec: dict[str, Any]) -> bool:
    return bool(rec.get("before")) and rec.get("before") == rec.get("after")


def _inspect(x: Experiment, c: Case, label: str) -> dict[str, Any]:
    x.step(c, "inspect", "--label", label)
    rec = _inspection(c, -1)
    c.claim(f"the '{label}' inspection (pid {rec.get('pid')}) appended nothing", _appended_nothing(rec))
    return rec


def _manifest_hashes(c: Case) -> list[str]:
    out = []
    for line in c.stream.read_bytes().splitlines():
        ev = orjson.loads(line)
        if ev["kind"] == "call.manifest":
            out.append(str(ev["data"]["request_hash"]))
    return out


def case_resumed(x: Experiment, root: Path) -> Case:
    c = _new(root, "1-killed-after-manifest")
    c.expected = (
        "killed right after call.manifest; a new process resumes: exactly one receipt, its body hash equal to the "
        "hash in both manifests; the old call superseded, the new one completed; next: check and accept"
    )
    x.step(c, "produce", "--kill", "after-manifest")
    c.events_before, c.receipts_before = c.events(), len(c.receipts())
    seen = _inspect(x, c, "before")
    out = x.step(c, "resume")
    c.events_after, receipts = c.events(), c.receipts()
    c.receipts_after = len(receipts)
    after = _inspect(x, c, "after")
    c.decision = "resumed as a new linked call, sent once" if out.get("outcome") == "completed" else str(out)
    hashes = _manifest_hashes(c)
    first = _call(seen, "call-1")
    c.claim("the killed process left its manifest on disk", c.events_before > 0 and seen["before"]["events"] > 0)
    c.claim(
        "before the resume the projection says start call, no provider effect",
        first.get("stage") == "manifest_recorded" and first.get("provider_effect") == "none",
    )
    c.claim("the provider saw nothing before the resume", c.receipts_before == 0)
    c.claim("exactly one receipt after the resume", c.receipts_after == 1)
    c.claim(
        "the receipt's body hash equals the request hash in both manifests",
        len(hashes) == 2 and len(set(hashes)) == 1 and bool(receipts) and receipts[0]["body_hash"] == hashes[0],
    )
    c.claim(
        "the task's next operation moved to check and accept", after["state"]["next_operation"] == "check and accept"
    )
    c.claim(
        "the old call is superseded by the new one, which is completed",
        {k: v["stage"] for k, v in after["state"]["calls"].items()} == {"call-1": "superseded", "call-2": "completed"},
    )
    return c


def case_drift(x: Experiment, root: Path) -> Case:
    c = _new(root, "2-drift-refused")
    c.expected = "the same interruption resumed with another model: refused before anything is sent; 0 receipts"
    x.step(c, "produce", "--kill", "after-manifest")
    c.events_before, c.receipts_before = c.events(), len(c.receipts())
    _inspect(x, c, "before")
    before = c.stream.read_bytes()
    out = x.step(c, "resume", "--model", "reviewer-2")
    after_bytes = c.stream.read_bytes()
    c.events_after, c.receipts_after = c.events(), len(c.receipts())
    _inspect(x, c, "after")
    c.decision = f"refused: {out.get('reason')}" if out.get("outcome") == "refused" else str(out)
    c.claim("resume was refused for drift", out.get("outcome") == "refused" and out.get("reason") == "DRIFT")
    c.claim("nothing was appended (the stream's bytes are unchanged)", before == after_bytes)
    c.claim("the provider saw nothing", c.receipts_after == 0)
    return c


def case_unknown(x: Experiment, root: Path) -> tuple[Case, Case]:
    c = _new(root, "3-effect-unknown")
    c.expected = "killed while the provider held the request: effect unknown, resume refused, receipts stay 1"
    x.kill_when(c, lambda: bool(c.receipts()), "the provider")
    n = Case("3b-naive-restart-copy", root / "3b-naive-restart-copy", case_plan("3b-naive-restart-copy")["story"])
    for part in ("ledger", "provider"):  # the dead process's files, and the provider's log of them
        shutil.copytree(c.folder / part, n.folder / part)
    write_json(n.folder / BEHAVIOUR, case_plan(n.name)["behaviour"])
    c.events_before, c.receipts_before = c.events(), len(c.receipts())
    seen = _inspect(x, c, "before")
    before = c.stream.read_bytes()
    out = x.step(c, "resume")
    c.events_after, c.receipts_after = c.events(), len(c.receipts())
    _inspect(x, c, "after")
    c.decision = f"refused: {out.get('next_operation')}" if out.get("outcome") == "refused" else str(out)
    first = _call(seen, "call-1")
    c.claim("the provider had received the request once before the kill", c.receipts_before == 1)
    c.claim(
        "the projection says effect unknown, reconcile effect, a duplicate risk",
        first.get("stage") == "effect_unknown"
        and first.get("next_operation") == "reconcile effect"
        and first.get("duplicate_effect_risk") is True,
    )
    c.claim("resume was refused as EffectUnknown", out.get("error") == "EffectUnknown")
    c.claim("nothing was appended and no second receipt", c.stream.read_bytes() == before and c.receipts_after == 1)

    n.expected = (
        "a naive restart of an identical copy re-runs the step through the library: 2 identical receipts under the "
        "same key from two processes; the ledger records both attempts"
    )
    n.events_before, n.receipts_before = n.events(), len(n.receipts())
    _inspect(x, n, "before")
    out = x.step(n, "naive")
    n.events_after, receipts = n.events(), n.receipts()
    n.receipts_after = len(receipts)
    after = _inspect(x, n, "after")
    n.decision = "resent after the refusal: paid twice" if out.get("outcome") == "resent" else str(out)
    n.claim(
        "the library refused the naive restart first (EffectUnknown)",
        out.get("refused_first", {}).get("error") == "EffectUnknown",
    )
    n.claim("the naive restart produced a second receipt", n.receipts_after == 2)
    n.claim(
        "both receipts carry the byte-identical request body and the same idempotency key, from two processes",
        len(receipts) == 2
        and receipts[0]["body_hash"] == receipts[1]["body_hash"]
        and receipts[0]["idempotency_key"] == receipts[1]["idempotency_key"]
        and receipts[0]["client"] != receipts[1]["client"],
    )
    n.claim(
        "the ledger records both attempts under the one key (the duplicate is visible afterwards)",
        _call(after, "call-1").get("attempts") == 2 and _call(after, "call-1").get("key") == "review-p7",
    )
    return c, n


def case_observed(x: Experiment, root: Path) -> Case:
    c = _new(root, "4-killed-after-observation")
    c.expected = (
        "killed after the observation: the projection says reinterpret; the stored bytes suffice, no new receipt"
    )
    x.step(c, "produce", "--kill", "after-observation")
    c.events_before, c.receipts_before = c.events(), len(c.receipts())
    seen = _inspect(x, c, "before")
    out = x.step(c, "resume")
    c.events_after, c.receipts_after = c.events(), len(c.receipts())
    after = _inspect(x, c, "after")
    c.decision = "reinterpreted the stored bytes, sent nothing" if out.get("outcome") == "completed" else str(out)
    c.claim("the projection said reinterpret", _call(seen, "call-1").get("next_operation") == "reinterpret")
    c.claim(
        "the provider's effect had happened before the kill", _call(seen, "call-1").get("provider_effect") == "happened"
    )
    c.claim("no new receipt: the stored response was reinterpreted", c.receipts_after == c.receipts_before == 1)
    c.claim("the call is completed", _call(after, "call-1").get("stage") == "completed")
    return c


def _inventory_ok(comp: dict[str, Any]) -> bool:
    """The inventory recovered from the record: A (required, estimated size), B (required, 0), D (optional, 0)."""
    offered = comp.get("offered") or []
    got = {o.get("id"): o for o in offered if isinstance(o, dict)}
    return (
        set(got) == {"A", "B", "D"}
        and got["A"].get("required") is True
        and got["A"].get("estimated") is True
        and (got["B"].get("required"), got["B"].get("size")) == (True, 0)
        and not got["D"].get("required")
        and got["D"].get("size") == 0
        and all(o.get("lineage") for o in got.values())
    )


def case_compile_killed(x: Experiment, root: Path) -> Case:
    c = _new(root, "5-compilation-killed")
    c.expected = (
        "killed after context.compilation_requested: the offered inventory is recovered; the projection says recompile"
    )
    x.step(c, "compile", "--kill", "mid-compilation")
    c.events_before, c.receipts_before = c.events(), len(c.receipts())
    comp = _comp(_inspect(x, c, "before"))
    c.claim("the compilation is recorded as requested, never finished", comp.get("stage") == "requested")
    c.claim("the projection says recompile", comp.get("next_operation") == "recompile")
    c.claim("the inventory (A, B, D with required flags, sizes, estimates, lineage) is recovered", _inventory_ok(comp))
    out = x.step(c, "compile")
    c.events_after, c.receipts_after = c.events(), len(c.receipts())
    after = _comp(_inspect(x, c, "after"))
    c.decision = "recompiled (no external effect)" if out.get("outcome") == "compiled" else str(out)
    c.claim("recompiling completed it", after.get("stage") == "compiled")
    c.claim("no provider was involved", c.receipts_after == 0)
    return c


def case_compile_missing(x: Experiment, root: Path) -> Case:
    c = _new(root, "6-compilation-missing-input")
    c.expected = (
        "a compilation failed on a missing required input is recorded, not just raised: RequiredContextMissing, "
        "the inventory, and the missing id derived from required minus offered; next: fix inputs"
    )
    out = x.step(c, "compile", "--kill", "missing-input")
    c.events_before = c.events_after = c.events()
    comp = _comp(_inspect(x, c, "inspect"))
    c.decision = f"refused: {out.get('error')}; fix inputs"
    c.claim("the failure names RequiredContextMissing", comp.get("error") == "RequiredContextMissing")
    c.claim("the missing required id is derived: C", comp.get("missing") == ["C"])
    c.claim("the projection says fix inputs", comp.get("next_operation") == "fix inputs")
    c.claim("the inventory is recorded with the failure", _inventory_ok(comp))
    return c


def case_backoff(x: Experiment, root: Path) -> Case:
    c = _new(root, "7-refused-then-killed-in-backoff")
    c.expected = (
        "the provider refused the first request (429): recorded as observed, retry decided; killed in the backoff; "
        "the projection says start next attempt with no duplicate risk; the resume is served once"
    )
    x.kill_when(
        c,
        lambda: c.stream.exists() and b'"attempt.retry_decided"' in c.stream.read_bytes(),
        "its backoff",
        "--kill",
        "in-backoff",
    )
    c.events_before, c.receipts_before = c.events(), len(c.receipts())
    seen = _call(_inspect(x, c, "before"), "call-1")
    out = x.step(c, "resume")
    c.events_after, receipts = c.events(), c.receipts()
    c.receipts_after = len(receipts)
    after = _call(_inspect(x, c, "after"), "call-1")
    c.decision = "started the next attempt, served once" if out.get("outcome") == "completed" else str(out)
    c.claim(
        "the one receipt before the kill is the provider's refusal (429)",
        [r["status"] for r in receipts[:1]] == [429] and c.receipts_before == 1,
    )
    c.claim(
        "the projection says start next attempt, no duplicate risk",
        seen.get("next_operation") == "start next attempt" and seen.get("duplicate_effect_risk") is False,
    )
    c.claim("the resume was served exactly once", [r["status"] for r in receipts] == [429, 200])
    c.claim(
        "the call completed on its second attempt", after.get("stage") == "completed" and after.get("attempts") == 2
    )
    return c


def run_cases(x: Experiment, root: Path, *, workers: int = 0) -> list[Case]:
    """Every case in its folder under ``root``; listed in the preregistered order.

    The cases share nothing but the provider (which numbers each case's receipts under a
    lock), so their chains of processes run side by side, ``workers`` at a time (default:
    the number of cores, at least 2); within a case every step waits for the one before.
    """
    from concurrent.futures import ThreadPoolExecutor

    runners: list[Callable[[Experiment, Path], Case | tuple[Case, Case]]] = [
        case_resumed,
        case_drift,
        case_unknown,
        case_observed,
        case_compile_killed,
        case_compile_missing,
        case_backoff,
    ]
    with ThreadPoolExecutor(max_workers=workers or max(2, os.cpu_count() or 2)) as pool:
        done = [pool.submit(run, x, root) for run in runners]
        out: list[Case] = []
        for f in done:
            got = f.result()
            out.extend(got if isinstance(got, tuple) else (got,))
    return out
