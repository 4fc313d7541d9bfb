#!/usr/bin/env python3
"""Check a whole ``intentlog demo`` experiment folder, independently of intentlog.

    python verify_experiment.py EXPERIMENT_FOLDER [--json]

It imports no intentlog (the standard library and ``blake3`` only; each case's bundle
brings its own ``verify_bundle.py``, which imports no intentlog either, and whose work
state rules it reuses). It re-derives every state from the exported events and compares
it with the states the inspecting processes recorded; checks that every inspection
appended nothing and saw a prefix of the exported record; holds each case to the
predictions of ``preregistration.json``; checks that every provider receipt is covered
by a recorded ``attempt.started``, that the fresh re-projections equal the last
inspections, that the pinned code and the preregistration are the ones the run used,
that outbound network was refused, that each seeded corruption is rejected by meaning
alone, and that every file matches the hash inventory. Exit 0 only when every claim
holds; it writes nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from types import ModuleType
from typing import Any

import blake3

VERIFIER = "intentlog-demo-verify/1"
PLAN_FORMAT = "intentlog-demo-preregistration/1"
INVENTORY_FORMAT = "intentlog-demo-inventory/1"
SKIP_IN_INVENTORY = ("inventory.json", "verification.json")
TASK = "chapter-16"
CALL_FIELDS = ("key", "stage", "next_operation", "provider_effect", "duplicate_effect_risk", "attempts",
               "request_hash", "resumes", "superseded_by")  # fmt: skip
COMP_FIELDS = ("stage", "next_operation", "required", "missing")
TASK_FIELDS = ("next_operation", "unresolved", "accepted", "events", "last_seq")


class Claim:
    def __init__(self, text: str, group: str, case: str | None = None) -> None:
        self.text = text
        self.group = group
        self.case = case
        self.details: list[str] = []

    def fail(self, detail: str) -> None:
        self.details.append(detail)

    def check(self, ok: bool, detail: str) -> None:
        if not ok:
            self.fail(detail)

    @property
    def status(self) -> str:
        return "FAIL" if self.details else "PASS"


def as_dict(v: Any) -> dict[str, Any]:
    return v if type(v) is dict else {}


def b3(data: bytes) -> str:
    return "blake3:" + blake3.blake3(data).hexdigest()


def read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def read_json(path: str) -> Any:
    data = read(path)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def load_module(path: str, name: str) -> ModuleType | None:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses and annotations look their module up by name
    try:
        spec.loader.exec_module(mod)
    except Exception:  # a broken verifier file is a failed claim, not a crash
        return None
    return mod


class Experiment:
    """Every claim about one experiment folder."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.claims: list[Claim] = []
        self.inventory_files = 0
        self.vb: ModuleType | None = None

    def claim(self, text: str, group: str, case: str | None = None) -> Claim:
        c = Claim(text, group, case)
        self.claims.append(c)
        return c

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    # -- the whole run ---------------------------------------------------------------------------

    def run(self) -> None:
        plan = read_json(self.path("preregistration.json"))
        term = read_json(self.path("termination.json"))
        if type(plan) is not dict or plan.get("format") != PLAN_FORMAT or type(term) is not dict:
            self.claim("preregistration.json and termination.json are readable records", "records").fail(
                "missing or not the experiment's format: nothing else can be checked"
            )
            self.check_inventory()
            return
        self.check_records(plan, term)
        cases = [c["case"] for c in plan.get("cases", [])]
        self.vb = self.load_bundle_verifier(cases)
        for case in plan["cases"]:
            self.check_case(case, term)
        self.check_reprojection(plan, cases)
        self.check_network()
        self.check_corruptions(plan)
        self.check_inventory()

    def check_records(self, plan: dict[str, Any], term: dict[str, Any]) -> None:
        c = self.claim(
            f"preregistration.json states {len(plan.get('hypotheses', {}))} hypotheses, {len(plan.get('cases', []))} "
            "cases with their predictions, and what counts as a pass, and was written before the first step started",
            "records",
        )
        c.check(bool(plan.get("hypotheses")) and bool(plan.get("cases")) and bool(plan.get("pass")), "a part is empty")
        starts = [s.get("started_at", "") for t in term.get("cases", {}).values() for s in t.get("steps", [])]
        written = str(plan.get("written_at", ""))
        c.check(
            bool(starts) and bool(written) and written < min(starts),
            f"written {written}, first step {min(starts or [''])}",
        )
        c = self.claim("termination.json names the preregistration by its BLAKE3, as the file hashes now", "records")
        data = read(self.path("preregistration.json")) or b""
        c.check(term.get("preregistration") == b3(data), f"termination names {term.get('preregistration')}")
        c = self.claim(
            "the cases that ran are exactly the preregistered ones, in order, and the run ended as completed", "records"
        )
        ran = list(term.get("cases", {}))
        planned = [x["case"] for x in plan["cases"]]
        c.check(ran == planned, f"ran {ran}, planned {planned}")
        c.check(term.get("ended") == "completed", f"termination says {term.get('ended')!r}")
        pinned = plan.get("code", {})
        c = self.claim(
            f"the {len(pinned)} pinned code files (this verifier among them) hash to the digests preregistered",
            "records",
        )
        c.check(bool(pinned) and "verify_experiment.py" in pinned, "no pinned code, or this verifier is not pinned")
        for name, digest in sorted(pinned.items()):
            got = read(self.path("code", name))
            c.check(got is not None and b3(got) == digest, f"code/{name} does not hash to {digest}")
        me = read(os.path.abspath(__file__))
        c.check(me is not None and b3(me) == pinned.get("verify_experiment.py"), "this verifier is not the pinned one")

    def load_bundle_verifier(self, cases: list[str]) -> ModuleType | None:
        c = self.claim(
            "every case's bundle carries the same standalone verify_bundle.py (loaded from the bundles)", "records"
        )
        texts = {name: read(self.path(name, "bundle", "verify_bundle.py")) for name in cases}
        if any(t is None for t in texts.values()) or len(set(texts.values())) != 1:
            c.fail("a bundle has none, or they differ")
            return None
        mod = load_module(self.path(cases[0], "bundle", "verify_bundle.py"), "_demo_verify_bundle")
        c.check(mod is not None, "it does not load")
        return mod

    # -- one case ------------------------------------------------------------------------------

    def check_case(self, plan: dict[str, Any], term: dict[str, Any]) -> None:
        name = plan["case"]
        vb = self.vb
        c = self.claim(f"{name}: its own preregistration.json is the case's part of the experiment's", "records", name)
        own = read_json(self.path(name, "preregistration.json"))
        c.check(own == {"format": PLAN_FORMAT, **plan}, "it differs, or is missing")
        bundle = self.path(name, "bundle")
        if vb is not None:
            v = vb.Verifier(bundle)
            v.run()
            for bc in v.claims:
                c = self.claim(f"{name} bundle: {bc.text}", "bundle", name)
                if bc.status == "FAIL":
                    c.details.extend(bc.details or ["failed"])
        c = self.claim(f"{name}: the bundle's receipt log is the provider's own log, byte for byte", "receipts", name)
        mine = read(self.path(name, "provider", "receipts.jsonl"))
        theirs = read(os.path.join(bundle, "receipts", "receipts.jsonl"))
        c.check(mine == theirs, "they differ (or one is missing)")
        events = self.exported_events(name)
        inspections = self.inspections(name)
        for rec in inspections:
            self.check_inspection(name, rec, events)
        self.check_predictions(plan, inspections, events)
        self.check_steps(plan, term.get("cases", {}).get(name, {}))

    def exported_events(self, name: str) -> list[tuple[str, dict[str, Any]]]:
        """(line digest, event) per whole line of the exported stream."""
        data = read(self.path(name, "bundle", "tasks", f"{TASK}.jsonl")) or b""
        out = []
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {}
            out.append((b3(line), ev if type(ev) is dict else {}))
        return out

    def inspections(self, name: str) -> list[dict[str, Any]]:
        folder = self.path(name, "inspections")
        names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        out = []
        for f in names:
            doc = read_json(os.path.join(folder, f))
            out.append(doc if type(doc) is dict else {"label": f, "broken": True})
        return out

    def derive(self, events: list[tuple[str, dict[str, Any]]], n: int) -> dict[str, Any] | None:
        """The work state of the first ``n`` exported events, by verify_bundle.py's own rules."""
        if self.vb is None:
            return None
        p = self.vb.Projection()
        for _, ev in events[:n]:
            if type(ev.get("data")) is dict and type(ev.get("seq")) is int and type(ev.get("kind")) is str:
                p.event(ev["seq"], ev["kind"], ev["data"])
        result: dict[str, Any] = p.result()
        return result

    def check_inspection(self, name: str, rec: dict[str, Any], events: list[tuple[str, dict[str, Any]]]) -> None:
        label = f"{name}: inspection {rec.get('n')} '{rec.get('label')}' (pid {rec.get('pid')})"
        before, after = as_dict(rec.get("before")), as_dict(rec.get("after"))
        n: int = before["events"] if type(before.get("events")) is int else -1
        c = self.claim(
            f"{label} appended nothing (the stream's bytes identical before and after it projected) and saw the "
            f"first {n} events of the exported record",
            "inspections",
            name,
        )
        c.check(bool(before) and before == after, f"before {before}, after {after}")
        c.check(
            0 < n <= len(events) and events[n - 1][0] == before.get("head"), "its head is not in the exported stream"
        )
        state = as_dict(rec.get("state"))
        mine = self.derive(events, n) if n > 0 else None
        calls = ", ".join(f"{k} {v.get('stage')}" for k, v in sorted((mine or {}).get("calls", {}).items()))
        comps = ", ".join(f"{k} {v.get('stage')}" for k, v in sorted((mine or {}).get("compilations", {}).items()))
        c = self.claim(
            f"{label} recorded the state re-derived from those events: {calls or comps or 'nothing'}; next "
            f"{(mine or {}).get('next_operation')!r}",
            "inspections",
            name,
        )
        if mine is None:
            c.fail("nothing to derive from (no bundle verifier, or no events)")
            return
        self.compare(c, mine, state)

    def compare(self, c: Claim, mine: dict[str, Any], theirs: dict[str, Any]) -> None:
        for field in TASK_FIELDS:
            if theirs.get(field) != mine.get(field):
                c.fail(f"recorded {field} {theirs.get(field)!r}; the events say {mine.get(field)!r}")
        for group, fields in (("calls", CALL_FIELDS), ("compilations", COMP_FIELDS)):
            got = as_dict(theirs.get(group))
            if sorted(got) != sorted(mine[group]):
                c.fail(f"recorded {group} {sorted(got)}; the events hold {sorted(mine[group])}")
            for cid, st in mine[group].items():
                rec = as_dict(got.get(cid))
                for field in fields:
                    if rec.get(field) != st.get(field):
                        c.fail(f"{cid}: recorded {field} {rec.get(field)!r}; the events say {st.get(field)!r}")

    def check_predictions(
        self, plan: dict[str, Any], inspections: list[dict[str, Any]], events: list[tuple[str, dict[str, Any]]]
    ) -> None:
        name = plan["case"]
        for which, rec in (
            ("first", inspections[0] if inspections else {}),
            ("last", inspections[-1] if inspections else {}),
        ):
            want = plan[which]
            state = as_dict(rec.get("state"))
            c = self.claim(
                f"{name}: the {which} inspection shows what was preregistered: {describe(want)}", "predictions", name
            )
            c.check(state.get("next_operation") == want["next_operation"], f"next {state.get('next_operation')!r}")
            for cid, (stage, nxt, *effect) in want.get("calls", {}).items():
                got = state.get("calls", {}).get(cid, {})
                seen = [got.get("stage"), got.get("next_operation"), got.get("provider_effect")][: 2 + len(effect)]
                c.check(seen == [stage, nxt, *effect], f"{cid} is {seen}")
            for cid, (stage, nxt) in want.get("compilations", {}).items():
                got = state.get("compilations", {}).get(cid, {})
                c.check([got.get("stage"), got.get("next_operation")] == [stage, nxt], f"{cid} is {got.get('stage')}")
                if "missing" in want:
                    c.check(got.get("missing") == want["missing"], f"{cid} misses {got.get('missing')}")
        receipts = self.receipts(name)
        served = sum(r.get("status") == 200 for r in receipts)  # answered: the generation was delivered
        c = self.claim(
            f"{name}: the provider's log holds {plan['receipts']} receipt(s), {plan['served']} answered 200, "
            "as preregistered",
            "predictions",
            name,
        )
        c.check(
            len(receipts) == plan["receipts"] and served == plan["served"], f"{len(receipts)} receipts, {served} served"
        )
        if plan.get("identical_receipts"):
            c = self.claim(
                f"{name}: its receipts are one byte-identical request under one idempotency key, "
                "from different processes",
                "predictions",
                name,
            )
            c.check(
                len({r.get("body_hash") for r in receipts}) == 1
                and len({r.get("idempotency_key") for r in receipts}) == 1
                and len({r.get("client") for r in receipts}) == len(receipts),
                f"{receipts}",
            )
        c = self.claim(
            f"{name}: every receipt's idempotency key and request hash are covered by as many attempt.started for "
            "calls of that key and manifest in the exported record",
            "receipts",
            name,
        )
        started: dict[tuple[Any, Any], int] = {}
        keys: dict[Any, Any] = {}
        hashes: dict[Any, Any] = {}
        for _, ev in events:
            d = as_dict(ev.get("data"))
            if ev.get("kind") == "call.manifest":
                keys[d.get("call")], hashes[d.get("call")] = d.get("key"), d.get("request_hash")
            elif ev.get("kind") == "attempt.started":
                k = (keys.get(d.get("call")), hashes.get(d.get("call")))
                started[k] = started.get(k, 0) + 1
        counted: dict[tuple[Any, Any], int] = {}
        for r in receipts:
            k = (r.get("idempotency_key"), r.get("body_hash"))
            counted[k] = counted.get(k, 0) + 1
            c.check(
                counted[k] <= started.get(k, 0), f"receipt {r.get('n')} ({k[0]}) has no recorded attempt to cover it"
            )
        if plan.get("copy_of"):
            src = str(plan["copy_of"])
            c = self.claim(
                f"{name}: it started as a byte-identical copy of {src} right after the kill: the same stream at "
                "their first inspections, and the same first receipt",
                "predictions",
                name,
            )
            theirs = self.inspections(src)
            c.check(
                bool(inspections) and bool(theirs) and inspections[0].get("before") == theirs[0].get("before"),
                "the streams differ",
            )
            firsts = [self.receipts(x)[:1] for x in (name, src)]
            c.check(bool(firsts[0]) and firsts[0] == firsts[1], "the first receipts differ")
        if plan.get("action_appends") is not None and len(inspections) >= 2:
            first, last = as_dict(inspections[0].get("after")), as_dict(inspections[-1].get("before"))
            grew = last.get("events", 0) > first.get("events", 0)
            what = "appended to the record" if plan["action_appends"] else "appended nothing (refused)"
            c = self.claim(f"{name}: the action between the inspections {what}, as preregistered", "predictions", name)
            c.check(grew == plan["action_appends"], f"grew: {grew}")

    def receipts(self, name: str) -> list[dict[str, Any]]:
        data = read(self.path(name, "provider", "receipts.jsonl")) or b""
        out = []
        for line in data.splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                r = None
            out.append(r if type(r) is dict else {})
        return out

    def check_steps(self, plan: dict[str, Any], term: dict[str, Any]) -> None:
        name = plan["case"]
        steps = term.get("steps", []) if type(term) is dict else []
        killed = plan["interrupt"].startswith("SIGKILL")
        c = self.claim(
            f"{name}: its {len(steps)} steps ran as separate processes"
            + (", the interrupted one ended by SIGKILL" if killed else ", none killed"),
            "termination",
            name,
        )
        pids = [s.get("pid") for s in steps]
        c.check(len(set(pids)) == len(pids) and len(steps) >= 2, f"pids {pids}")
        c.check(
            any(s.get("returncode") == -9 for s in steps) == killed,
            f"exit codes {[s.get('returncode') for s in steps]}",
        )

    # -- across cases --------------------------------------------------------------------------

    def check_reprojection(self, plan: dict[str, Any], cases: list[str]) -> None:
        doc = read_json(self.path("reprojection.json"))
        ledgers = doc.get("ledgers", {}) if type(doc) is dict else {}
        for name in plan.get("reprojected", []):
            got = as_dict(ledgers.get(name))
            last = (self.inspections(name) or [{}])[-1]
            c = self.claim(
                f"{name}: a fresh process (pid {doc.get('pid') if type(doc) is dict else None}) reopened the ledger, "
                "appended nothing, and projected exactly the state the last inspection recorded",
                "reprojection",
                name,
            )
            c.check(bool(got) and got.get("before") == got.get("after"), "it appended, or did not run")
            c.check(got.get("before") == last.get("after"), "it saw another stream than the last inspection")
            c.check(got.get("state") == last.get("state"), "its state differs from the last inspection's")
            c.check(type(doc) is dict and doc.get("pid") != last.get("pid"), "not a fresh process")

    def check_network(self) -> None:
        doc = read_json(self.path("netcheck.json"))
        results = doc.get("results", {}) if type(doc) is dict else {}
        c = self.claim(
            "outbound network was refused in the demo's processes: a guarded process's connect to a non-loopback "
            "address and its name lookup were both refused before leaving",
            "network",
        )
        c.check(len(results) >= 2 and all(str(v).startswith("refused") for v in results.values()), f"{results}")

    def check_corruptions(self, plan: dict[str, Any]) -> None:
        for i, what in enumerate(plan.get("corruptions", []), start=1):
            c = self.claim(
                f"corruption c{i} ({what}, in a copy of case 1's bundle) is rejected by meaning alone "
                "(no byte inventory)",
                "corruptions",
            )
            folder = self.path("corruptions", f"c{i}")
            if self.vb is None or not os.path.isdir(folder):
                c.fail("no bundle verifier, or no such copy")
                continue
            v = self.vb.Verifier(folder, inventory=False)
            v.run()
            failed = [x.text for x in v.claims if x.status == "FAIL"]
            c.check(bool(failed), "every claim of the bundle verifier passed: the corruption went unnoticed")

    def check_inventory(self) -> None:
        c = self.claim(
            "every file of the experiment folder matches its BLAKE3 and size in inventory.json; none unlisted",
            "inventory",
        )
        doc = read_json(self.path("inventory.json"))
        if type(doc) is not dict or doc.get("format") != INVENTORY_FORMAT or type(doc.get("files")) is not dict:
            c.fail("inventory.json is missing or not the experiment's inventory")
            return
        listed: dict[str, Any] = doc["files"]
        present = set()
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            for f in filenames:
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, self.root).replace(os.sep, "/")
                if rel in SKIP_IN_INVENTORY:
                    continue
                if os.path.islink(full) or not os.path.isfile(full):
                    c.fail(f"{rel} is a link or a special file")
                    continue
                present.add(rel)
        for rel in sorted(present - set(listed)):
            c.fail(f"{rel} is not listed")
        total = 0
        for rel, entry in sorted(listed.items()):
            data = read(self.path(*rel.split("/")))
            if data is None:
                c.fail(f"{rel} is listed but missing")
            elif type(entry) is not dict or (b3(data), len(data)) != (entry.get("digest"), entry.get("size")):
                c.fail(f"{rel} does not hash to what the inventory lists")
            else:
                total += len(data)
        self.inventory_files = len(listed)
        c.text = c.text.replace("every file", f"every one of the {len(listed)} files ({total} bytes)", 1)


def describe(want: dict[str, Any]) -> str:
    parts = [f"{cid} {v[0]}" for cid, v in want.get("calls", {}).items()]
    parts += [f"{cid} {v[0]}" for cid, v in want.get("compilations", {}).items()]
    return f"{', '.join(parts)}; next {want['next_operation']!r}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="verify_experiment.py", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("folder", help="the experiment folder intentlog demo wrote")
    p.add_argument("--json", action="store_true", help="print the claims as JSON")
    a = p.parse_args(argv)
    sys.dont_write_bytecode = True  # loading the bundles' verify_bundle.py must not add files to the folder
    if not os.path.isdir(a.folder):
        sys.stderr.write(f"verify_experiment.py: {a.folder} is not a folder\n")
        return 2
    x = Experiment(a.folder)
    x.run()
    failed = sum(c.status == "FAIL" for c in x.claims)
    if a.json:
        doc = {
            "verifier": VERIFIER,
            "ok": not failed,
            "claims": [
                {"n": i, "status": c.status, "claim": c.text, "group": c.group, "case": c.case, "details": c.details}
                for i, c in enumerate(x.claims, start=1)
            ],
            "counts": {"claims": len(x.claims), "failed": failed, "inventory_files": x.inventory_files},
        }
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    else:
        for i, c in enumerate(x.claims, start=1):
            sys.stdout.write(f"{i:>3}. [{c.status}] {c.text}\n")
            for d in c.details[:5]:
                sys.stdout.write(f"       - {d}\n")
        verdict = "PASS: every claim holds" if not failed else "FAIL: the experiment does not show what it claims"
        sys.stdout.write(f"{len(x.claims)} claims: {len(x.claims) - failed} passed, {failed} failed. {verdict}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
