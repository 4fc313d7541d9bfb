"""Evidence bundles (issue 8): export, the library's check, and the independent verifier agreeing with it.

A corpus of tasks recorded through the public API covers every stage of the work-state
table (DESIGN §6) and every compilation stage; it is exported once per module. Both
verifiers must pass it and agree on every state. Seeded corruptions -- re-chained, and
with heads.json, states.json and hashes.json recomputed by the forger wherever that hides
the change from the byte inventory -- must each be caught by both, with the inventory
bypassed so that only meaning can catch them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from effect_child import Killed, kill_before

import intentlog
from intentlog import NotSent, ProviderFailure, RetryPolicy
from intentlog._internal.digest import digest_bytes
from intentlog.bundle import (
    HASHES_FILE,
    STATES_FILE,
    TAR_ROOT,
    VERIFIER_FILE,
    check_bundle,
    encode_hashes,
    encode_states,
    export_bundle,
    file_hashes,
    verifier_source,
)
from intentlog.bundle.check import rendered
from intentlog.demo.provider import SyntheticProvider
from intentlog.errors import (
    ArtifactMissing,
    CorruptStream,
    DigestMismatch,
    InvalidTaskId,
    LedgerError,
    NotALedger,
    UsageError,
)
from intentlog.eventlog.canonical import dumps
from intentlog.eventlog.format import encode_line
from intentlog.eventlog.reader import StreamScan
from intentlog.heads import seal, stream_head
from intentlog.projections.verify import HEADS_FILE, decode_heads, encode_heads, verify_path
from intentlog.projections.workstate import work_state

# -- the corpus -------------------------------------------------------------------------------

REQ = {"model": "m", "prompt": "p"}
FAST = RetryPolicy(max_attempts=2, sleep=lambda _: None)
BIG = b"x" * 6000  # larger than the inline threshold: a blob in objects/


def ok(request: Any) -> bytes:
    return b'{"verdict": "accept"}'


def parse(raw: bytes) -> Any:
    return orjson.loads(raw)


def dies(request: Any) -> bytes:
    raise Killed("the process died while the provider held the request")


def raises(exc: BaseException) -> Callable[[Any], bytes]:
    def send(request: Any) -> bytes:
        raise exc

    return send


def _unknown(task: intentlog.Task) -> None:
    with pytest.raises(Killed):
        task.effect("k", REQ, dies)
    task.close()


def row(name: str) -> Callable[[Callable[[intentlog.Task, pytest.MonkeyPatch], None]], Any]:
    def register(fn: Callable[[intentlog.Task, pytest.MonkeyPatch], None]) -> Any:
        ROWS[name] = fn
        return fn

    return register


ROWS: dict[str, Callable[[intentlog.Task, pytest.MonkeyPatch], None]] = {}


@row("completed")
def _completed(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    t.effect("k", REQ, ok, interpret=parse)


@row("completed-raw-big")
def _completed_big(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    t.effect("k", {"q": "big"}, lambda r: BIG)  # no interpreter: the result names the blob


@row("preparation-failed")
def _preparation_failed(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    with pytest.raises(intentlog.PreparationFailed):
        t.effect("k", {"bad": float("inf")}, ok)


@row("requested")
def _requested(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "call.manifest")
    with pytest.raises(Killed):
        t.effect("k", REQ, ok)


@row("manifest-recorded")
def _manifest_recorded(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    t.prepare("k", {"q": "never sent"})


@row("effect-unknown")
def _effect_unknown(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(t)


@row("observed")
def _observed(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    def interpret_dies(raw: bytes) -> Any:
        raise Killed("died after the observation")

    with pytest.raises(Killed):
        t.effect("k", REQ, ok, interpret=interpret_dies)


@row("interpreted")
def _interpreted(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "call.completed")
    with pytest.raises(Killed):
        t.effect("k", REQ, ok, interpret=parse)


@row("interpreted-error")
def _interpreted_error(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    def bad(raw: bytes) -> Any:
        raise ValueError("no verdict")

    kill_before(mp, "attempt.retry_decided")
    with pytest.raises(Killed):
        t.effect("k", REQ, ok, interpret=bad)


@row("observed-failure")
def _observed_failure(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "attempt.retry_decided")
    with pytest.raises(Killed):
        t.effect("k", REQ, raises(ProviderFailure("503", retryable=True)), retry=FAST)


@row("retry-decided")
def _retry_decided(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "attempt.started", attempt=2)
    with pytest.raises(Killed):
        t.effect("k", REQ, raises(ProviderFailure("503", retryable=True)), retry=FAST)


@row("not-sent")
def _not_sent(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "attempt.retry_decided")
    with pytest.raises(Killed):
        t.effect("k", REQ, raises(NotSent("offline")), retry=FAST)


@row("reconciled-not-served")
def _reconciled_not_served(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(t)
    t.reconcile("call-1", "not_served", note="not in the provider's usage log")


@row("reconciled-served-bytes")
def _reconciled_served_bytes(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(t)
    t.reconcile("call-1", "served", evidence=b'{"verdict": "accept", "via": "console"}')  # evidence: always an object


@row("reconciled-served-no-bytes")
def _reconciled_served_no_bytes(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(t)
    t.reconcile("call-1", "served")


@row("risk-accepted")
def _risk_accepted(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(t)
    t.reconcile("call-1", "resend", by="ops")


@row("retries-exhausted")
def _retries_exhausted(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    with pytest.raises(intentlog.CallFailed):
        t.effect("k", REQ, raises(ProviderFailure("503", retryable=True)), retry=FAST)


@row("failed-by-operator")
def _failed_by_operator(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(t)
    t.fail("call-1", "provider support cannot say", by="ops")


@row("superseded")
def _superseded(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    t.prepare("k", REQ)
    t.close()
    t.effect("k", REQ, ok)


@row("compilations")
def _compilations(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    offered = [{"id": "A", "required": True, "content": "x"}, {"id": "D", "size": 3, "lineage": ["src"]}]

    def select_dies(items: list[dict[str, Any]]) -> list[str]:
        raise Killed("died while selecting")

    with pytest.raises(Killed):
        t.compile("interrupted", offered, select=select_dies)
    with pytest.raises(intentlog.RequiredContextMissing):
        t.compile("failed", offered, required=["A", "C"])
    package = t.compile("done", [*offered, {"id": "E", "content": "y" * 5000}])
    t.effect("uses-package", REQ, ok, inputs={"context": package.digest})


@row("mixed-accepted")
def _mixed(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    workspace = t.ledger.workspace
    (workspace / "report.md").write_bytes(b"# report\n" + BIG)
    t.append("note", {"phase": "review"})
    t.effect("a", {"q": "a"}, ok, interpret=parse)
    ref = t.record_artifact("report.md", producer="test")
    t.append("note", {"see": ref.to_json(), "bare": ref.digest})
    t.accept(by="alice")


@row("repaired")
def _repaired(t: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    t.append("note", {"before": "a crash"})
    t.close()
    with open(t.path, "ab") as f:  # a torn tail, as a crash mid-append leaves it
        f.write(b'{"data":{"x":')
    t.effect("k", REQ, ok)  # reopening quarantines the tail and records stream.repaired


STAGES = {
    "completed",
    "preparation_failed",
    "requested",
    "manifest_recorded",
    "effect_unknown",
    "observed",
    "interpreted",
    "retry_decided",
    "not_sent",
    "reconciled_not_served",
    "reconciled_served",
    "risk_accepted",
    "failed",
    "superseded",
}


@dataclass(frozen=True)
class Corpus:
    root: Path
    workspace: Path
    receipts: Path
    bundle: Path
    orphan: str


def _receipted(root: Path, receipts: Path) -> None:
    """Two tasks whose sends reach a provider that keeps its own receipt log."""
    provider = SyntheticProvider(receipts)
    with intentlog.open(root) as ledger:
        ledger.task("paid").effect("k", {"model": "m", "q": "paid"}, provider.send)

        def held_then_died(request: Any) -> bytes:
            provider.send(request)  # the receipt is written, then the process dies
            raise Killed("died while the provider held the request")

        with pytest.raises(Killed):
            ledger.task("paid-unknown").effect("k", {"model": "m", "q": "unknown"}, held_then_died)
        ledger.task("paid-unknown").close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    base = tmp_path_factory.mktemp("corpus")
    workspace = base / "ws"
    workspace.mkdir()
    root = workspace / "ledger"
    with intentlog.open(root) as ledger:
        for name, build in ROWS.items():
            with pytest.MonkeyPatch.context() as mp:
                build(ledger.task(name), mp)
            ledger.task(name).close()
        orphan = ledger.artifacts.put(b"referenced by nothing " * 300).digest
    receipts = base / "receipts.jsonl"
    _receipted(root, receipts)
    bundle = base / "out" / "bundle"
    result = export_bundle(root, out=bundle, receipts=[receipts])
    assert result.ok, result.render()
    return Corpus(root, workspace, receipts, bundle, orphan)


# -- the independent verifier, loaded from the bundle's own copy ----------------------------------


def load_verifier(bundle: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bundle_verifier_{abs(hash(bundle))}", bundle / VERIFIER_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Verdict:
    ok: bool
    failed: list[str]  # each failed claim with its details
    states: dict[str, Any]
    claims: int


def independent(bundle: Path, *, inventory: bool = True) -> Verdict:
    mod = load_verifier(bundle)
    v = mod.Verifier(str(bundle), inventory=inventory)
    v.run()
    failed = [f"{c.text} :: {' | '.join(c.details)}" for c in v.claims if c.status == "FAIL"]
    return Verdict(not failed, failed, v.states, len(v.claims))


def library_errors(bundle: Path, *, inventory: bool = True) -> list[str]:
    report = check_bundle(bundle, inventory=inventory)
    return [f"[{p.code}] {p.render()}" for p in report.problems if p.severity != "info"]


# -- forging helpers: what someone who edits a bundle and recomputes its derived files does ------------


def events_of(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def rechain(path: Path, events: list[dict[str, Any]]) -> None:
    """Write ``events`` as a valid chain: seqs 0, 1, 2... and each prev the digest of the line before."""
    out: list[bytes] = []
    prev: str | None = None
    for i, ev in enumerate(events):
        line = encode_line(ev["kind"], dumps(ev["data"]), prev, i, ev["ts"])
        out.append(line)
        prev = digest_bytes(line)
    path.write_bytes(b"".join(out))


def reseal(bundle: Path) -> None:
    tasks = sorted(p.stem for p in (bundle / "tasks").glob("*.jsonl"))
    (bundle / HEADS_FILE).write_bytes(encode_heads({t: stream_head(bundle / "tasks" / f"{t}.jsonl", t) for t in tasks}))


def restate(bundle: Path) -> None:
    tasks = sorted(p.stem for p in (bundle / "tasks").glob("*.jsonl"))
    states = {t: work_state(StreamScan(bundle / "tasks" / f"{t}.jsonl"), task_id=t) for t in tasks}
    (bundle / STATES_FILE).write_bytes(encode_states(states))
    for rel, data in rendered(bundle).items():  # README.md and report.html are renderings of the record too
        (bundle / rel).write_bytes(data)


def rehash(bundle: Path) -> None:
    (bundle / HASHES_FILE).write_bytes(encode_hashes(file_hashes(bundle)))


def index_of(events: list[dict[str, Any]], kind: str) -> int:
    return next(i for i, ev in enumerate(events) if ev["kind"] == kind)


@pytest.fixture
def copy(corpus: Corpus, tmp_path: Path) -> Path:
    dest = tmp_path / "bundle"
    shutil.copytree(corpus.bundle, dest)
    return dest


# -- the corpus passes both, and they agree ------------------------------------------------------


def test_the_corpus_covers_every_stage(corpus: Corpus) -> None:
    """The exported states hold every call stage of DESIGN §6 and every compilation stage (else the test is weak)."""
    states = orjson.loads((corpus.bundle / STATES_FILE).read_bytes())["tasks"]
    stages = {c["stage"] for ws in states.values() for c in ws["calls"].values()}
    assert stages >= STAGES, STAGES - stages
    comps = {c["stage"] for ws in states.values() for c in ws["compilations"].values()}
    assert comps == {"requested", "compiled", "failed"}
    nexts = {c["next_operation"] for ws in states.values() for c in ws["calls"].values()}
    assert {"reinterpret", "redecide", "finalize", "start next attempt", "reconcile effect", "fix inputs"} <= nexts
    assert {ws["next_operation"] for ws in states.values()} >= {"check and accept", "none", "recompile"}


def test_both_verifiers_pass_the_corpus_and_agree_on_every_state(corpus: Corpus) -> None:
    """Every claim of verify_bundle.py passes, check_bundle finds nothing wrong, and the states agree field by field."""
    verdict = independent(corpus.bundle)
    assert verdict.ok, verdict.failed
    assert verdict.claims > 100
    assert library_errors(corpus.bundle) == []
    tasks = sorted(p.stem for p in (corpus.bundle / "tasks").glob("*.jsonl"))
    assert sorted(verdict.states) == tasks
    compared = 0
    for task in tasks:
        ws = work_state(StreamScan(corpus.bundle / "tasks" / f"{task}.jsonl"), task_id=task)
        theirs = verdict.states[task]
        assert (theirs["next_operation"], theirs["unresolved"], theirs["accepted"], theirs["events"]) == (
            ws.next_operation,
            list(ws.unresolved),
            ws.accepted,
            ws.events,
        ), task
        assert list(theirs["calls"]) == list(ws.calls), task
        for cid, c in ws.calls.items():
            mine = theirs["calls"][cid]
            assert (
                mine["stage"],
                mine["next_operation"],
                mine["provider_effect"],
                mine["duplicate_effect_risk"],
                mine["attempts"],
                mine["request_hash"],
                mine["resumes"],
                mine["superseded_by"],
            ) == (
                c.stage,
                c.next_operation,
                c.provider_effect,
                c.duplicate_effect_risk,
                c.attempts,
                c.request_hash,
                c.resumes,
                c.superseded_by,
            ), (task, cid)
            compared += 1
        for cid, comp in ws.compilations.items():
            mine = theirs["compilations"][cid]
            assert (mine["stage"], mine["next_operation"], mine["missing"], mine["required"]) == (
                comp.stage,
                comp.next_operation,
                list(comp.missing),
                list(comp.required),
            )
            compared += 1
    assert compared >= len(ROWS) + 3


def test_the_bundle_is_a_ledger_folder(corpus: Corpus) -> None:
    """verify_path reads the bundle directly, and the projection from it is the one from the source ledger."""
    report = verify_path(corpus.bundle, workspace=corpus.workspace)
    assert report.ok, report.render()
    assert report.by_code("orphan_blob") == ()
    source = intentlog.open(corpus.root, create=False)
    bundled = intentlog.open(corpus.bundle, create=False)
    for task in source.task_ids():
        assert bundled.task(task).work_state().to_json() == source.task(task).work_state().to_json()
        assert (corpus.bundle / "tasks" / f"{task}.jsonl").read_bytes() == source.stream_path(task).read_bytes()


def test_the_bundle_holds_what_the_streams_reference_and_nothing_else(corpus: Corpus) -> None:
    """Referenced blobs and repair files travel; inline payloads stay inline; an unreferenced blob stays home."""
    objects = {p.relative_to(corpus.bundle).as_posix() for p in (corpus.bundle / "objects").rglob("*") if p.is_file()}
    hexd = corpus.orphan.split(":")[1]
    assert f"objects/{hexd[:2]}/{hexd[2:]}" not in objects
    big = digest_bytes(BIG).split(":")[1]
    assert f"objects/{big[:2]}/{big[2:]}" in objects
    report = digest_bytes(b"# report\n" + BIG).split(":")[1]
    assert f"objects/{report[:2]}/{report[2:]}" in objects  # a recorded workspace file, by its captured digest
    assert not (corpus.bundle / "report.md").exists()
    assert len(list((corpus.bundle / "quarantine").iterdir())) == 1
    small = digest_bytes(b'{"verdict": "accept"}').split(":")[1]
    assert f"objects/{small[:2]}/{small[2:]}" not in objects  # rides inline in the events
    assert (corpus.bundle / VERIFIER_FILE).read_bytes() == verifier_source()
    assert (corpus.bundle / "receipts" / "receipts.jsonl").read_bytes() == corpus.receipts.read_bytes()


def test_export_is_deterministic(corpus: Corpus, tmp_path: Path) -> None:
    """Exporting the same tasks again, elsewhere and later, gives byte-identical files and a byte-identical tar."""
    a = export_bundle(corpus.root, out=tmp_path / "a", tar=tmp_path / "a.tar", receipts=[corpus.receipts])
    b = export_bundle(corpus.root, tar=tmp_path / "elsewhere" / "b.tar", receipts=[corpus.receipts], check=False)
    assert a.ok and b.report is None
    assert file_hashes(tmp_path / "a") == file_hashes(corpus.bundle)
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "elsewhere" / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tf:
        members = tf.getmembers()
        assert [m.name for m in members] == sorted(m.name for m in members)
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
        assert {m.mode for m in members if m.isfile()} == {0o644}
        assert all(m.name == TAR_ROOT or m.name.startswith(TAR_ROOT + "/") for m in members)
        tf.extractall(tmp_path / "x", filter="data")
    assert file_hashes(tmp_path / "x" / TAR_ROOT) == file_hashes(corpus.bundle)
    assert independent(tmp_path / "x" / TAR_ROOT).ok
    leftovers = [p.name for p in tmp_path.rglob(".*") if p.name.endswith((".export", ".tmp"))]
    assert leftovers == []


def test_one_task_exports_alone_and_carries_blobs_inline_elsewhere(tmp_path: Path) -> None:
    """A blob that rides inline only in a task not exported becomes an object of the bundle; both verifiers pass."""
    root = tmp_path / "ledger"
    with intentlog.open(root) as ledger:
        ledger.task("b").effect("k", {"q": 1}, lambda r: b"small answer")
        observed = next(ev for ev in ledger.task("b").events() if ev.kind == "attempt.observed")
        ref = {k: observed.data["response"][k] for k in ("digest", "size")}
        ledger.task("a").append("note", {"quotes": ref})
    result = export_bundle(root, ["a"], out=tmp_path / "bundle")
    assert result.ok, result.render()
    assert result.tasks == ("a",)
    hexd = ref["digest"].split(":")[1]
    assert (tmp_path / "bundle" / "objects" / hexd[:2] / hexd[2:]).read_bytes() == b"small answer"
    assert not (tmp_path / "bundle" / "tasks" / "b.jsonl").exists()
    assert independent(tmp_path / "bundle").ok


def test_the_verifier_runs_as_a_program_and_exits_by_its_claims(corpus: Corpus, copy: Path) -> None:
    """python verify_bundle.py prints numbered PASS claims and exits 0; after a corruption, FAIL and exit 1."""
    run = [sys.executable, str(copy / VERIFIER_FILE)]
    p = subprocess.run([*run, "."], cwd=copy, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout
    lines = p.stdout.splitlines()
    assert lines[0].strip().startswith("1. [PASS]")
    assert "[FAIL]" not in p.stdout and "every claim holds" in lines[-1]
    j = subprocess.run([*run, str(copy), "--json"], capture_output=True, text=True, timeout=60)
    doc = orjson.loads(j.stdout)
    assert doc["ok"] is True and doc["states"]["effect-unknown"]["calls"]["call-1"]["stage"] == "effect_unknown"
    obj = next(p for p in (copy / "objects").rglob("*") if p.is_file())
    obj.write_bytes(obj.read_bytes() + b"!")
    bad = subprocess.run([*run, str(copy)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert "[FAIL]" in bad.stdout and "FAIL: the bundle does not prove what it claims" in bad.stdout
    usage = subprocess.run([*run, str(copy / "nope")], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2


# -- seeded corruptions: each caught by both, by meaning alone ---------------------------------------


def corrupt_edited_event(b: Path) -> None:
    """An edited event: the completed call's manifest names another request hash (chain, heads, states redone)."""
    path = b / "tasks" / "completed.jsonl"
    events = events_of(path)
    events[index_of(events, "call.manifest")]["data"]["request_hash"] = digest_bytes(b"another request")
    rechain(path, events)
    reseal(b)
    restate(b)


def corrupt_removed_event(b: Path) -> None:
    """A removed event: the observation of a completed call is gone (chain, heads, states redone)."""
    path = b / "tasks" / "completed.jsonl"
    events = events_of(path)
    del events[index_of(events, "attempt.observed")]
    rechain(path, events)
    reseal(b)
    restate(b)


def corrupt_changed_artifact(b: Path) -> None:
    """A changed artifact: a blob's bytes swapped for others of the same size (hashes.json redone to match)."""
    hexd = digest_bytes(BIG).split(":")[1]
    (b / "objects" / hexd[:2] / hexd[2:]).write_bytes(b"y" * len(BIG))


def corrupt_state_claim(b: Path) -> None:
    """A state claim its events do not support: the unknown effect is claimed completed, nothing at risk."""
    doc = orjson.loads((b / STATES_FILE).read_bytes())
    call = doc["tasks"]["effect-unknown"]["calls"]["call-1"]
    call.update(stage="completed", next_operation="none", provider_effect="happened", duplicate_effect_risk=False)
    doc["tasks"]["effect-unknown"]["next_operation"] = "check and accept"
    (b / STATES_FILE).write_bytes(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")


def corrupt_receipt_without_attempt(b: Path) -> None:
    """A receipt with no recorded attempt: the provider served the call that only has a manifest."""
    ws = work_state(StreamScan(b / "tasks" / "manifest-recorded.jsonl"))
    receipt = {"body_hash": ws.calls["call-1"].request_hash, "key": None, "label": "x", "pid": 1}
    with open(b / "receipts" / "receipts.jsonl", "ab") as f:
        f.write(orjson.dumps(receipt, option=orjson.OPT_SORT_KEYS) + b"\n")


def corrupt_truncated(b: Path) -> None:
    """A cut tail: the completed task loses its last event, chain still valid, heads.json left as sealed."""
    path = b / "tasks" / "completed.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))
    restate(b)


def corrupt_extended(b: Path) -> None:
    """An event appended after export and chained properly, heads.json left as exported."""
    path = b / "tasks" / "completed.jsonl"
    events = events_of(path)
    events.append({**events[-1], "kind": "task.accepted", "data": {"note": "forged", "by": "mallory"}})
    rechain(path, events)
    restate(b)


def corrupt_blind_resend(b: Path) -> None:
    """A second attempt started while the first one's effect was unknown (heads, states redone): a blind resend."""
    path = b / "tasks" / "effect-unknown.jsonl"
    events = events_of(path)
    events.append({**events[-1], "kind": "attempt.started", "data": {"call": "call-1", "attempt": 2}})
    rechain(path, events)
    reseal(b)
    restate(b)


def corrupt_missing_object(b: Path) -> None:
    """A referenced blob deleted from objects/."""
    hexd = digest_bytes(BIG).split(":")[1]
    (b / "objects" / hexd[:2] / hexd[2:]).unlink()


# name -> (forgery, a fragment of the independent verifier's failed claim, the library's problem code)
CORRUPTIONS: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "edited-event": (corrupt_edited_event, "request_hash is not the digest of the recorded request", "graph"),
    "removed-event": (corrupt_removed_event, "which was never observed", "graph"),
    "changed-artifact": (corrupt_changed_artifact, "its bytes changed", "artifact_corrupt"),
    "state-claim": (corrupt_state_claim, "states.json says stage 'completed'", "states"),
    "receipt-without-attempt": (corrupt_receipt_without_attempt, "an effect no recorded attempt covers", "receipts"),
    "truncated": (corrupt_truncated, "truncated or extended", "truncated"),
    "extended": (corrupt_extended, "truncated or extended", "bundle"),
    "blind-resend": (corrupt_blind_resend, "a blind resend", "graph"),
    "missing-object": (corrupt_missing_object, "neither in objects/ nor inline", "artifact_missing"),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_seeded_corruption_is_caught_by_both_verifiers_by_meaning_alone(name: str, copy: Path) -> None:
    """Each corruption, with its derived files recomputed so the inventory agrees, fails both verifiers on meaning."""
    forge, fragment, code = CORRUPTIONS[name]
    forge(copy)
    rehash(copy)  # the forger makes hashes.json match: only meaning can catch it now
    for inventory in (False, True):
        verdict = independent(copy, inventory=inventory)
        assert not verdict.ok, name
        assert any(fragment in f for f in verdict.failed), verdict.failed
        assert all("hashes.json" not in f for f in verdict.failed), verdict.failed
        errors = library_errors(copy, inventory=inventory)
        assert any(e.startswith(f"[{code}]") for e in errors), errors
        assert all(not e.startswith("[inventory]") for e in errors), errors


def test_the_byte_inventory_catches_an_edit_the_forger_did_not_rehash(copy: Path) -> None:
    """Without a recomputed hashes.json, any changed byte is caught by the inventory claim of both verifiers."""
    readme = copy / "README.md"
    readme.write_bytes(readme.read_bytes() + b"\nall good, trust me\n")
    (copy / "extra.txt").write_bytes(b"unlisted")
    verdict = independent(copy)
    assert [f for f in verdict.failed if "hashes.json" in f], verdict.failed
    assert independent(copy, inventory=False).ok
    errors = library_errors(copy)
    assert {e.split("]")[0] for e in errors} == {"[inventory"}, errors
    assert len(errors) == 2
    assert library_errors(copy, inventory=False) == []


def test_the_naive_restart_of_the_seed_is_caught_by_both(tmp_path: Path) -> None:
    """The demo's naive restart paid twice through the library: both verifiers see two attempts cover two receipts."""
    from intentlog.demo.run import run_demo

    result = run_demo(tmp_path / "demo")
    assert result.ok
    bundles = {}
    for case in result.cases:
        receipts = case.folder / "provider" / "receipts.jsonl"
        out = tmp_path / "bundles" / case.name
        export_bundle(case.folder / "ledger", out=out, receipts=[receipts] if receipts.exists() else [])
        bundles[case.name] = out
    for name, out in bundles.items():
        assert independent(out).ok, name
        assert library_errors(out) == [], name
    naive_out = bundles["3b-naive-restart-copy"]
    lines = (naive_out / "receipts" / "receipts.jsonl").read_bytes().splitlines()
    assert len(lines) == 2  # two receipts of one request, both covered: the duplicate is on the record
    assert (naive_out / "tasks" / "chapter-16.jsonl").read_bytes().count(b'"attempt.started"') == 2


# -- refusals: export never writes partial evidence ------------------------------------------------


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "ledger"
    with intentlog.open(root) as ledger:
        ledger.task("t").effect("k", {"q": 1}, lambda r: BIG)
        ledger.task("u").append("note", {"x": 1})
    yield root


def _nothing_left(parent: Path, name: str) -> None:
    assert not (parent / name).exists()
    assert [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.")] == []


def test_a_torn_tail_is_refused_and_nothing_is_written(small: Path, tmp_path: Path) -> None:
    """A stream ending in an incomplete line is not exported (CorruptStream naming it); no bundle, no staging left."""
    with open(small / "tasks" / "t.jsonl", "ab") as f:
        f.write(b'{"data":{"half')
    with pytest.raises(CorruptStream, match=r"t\.jsonl line \d+: .*torn tail"):
        export_bundle(small, out=tmp_path / "b", tar=tmp_path / "b.tar")
    _nothing_left(tmp_path, "b")
    _nothing_left(tmp_path, "b.tar")
    assert export_bundle(small, ["u"], out=tmp_path / "u").ok  # another task still exports
    with intentlog.open(small) as ledger:  # the documented way out: a writer quarantines the tail
        ledger.task("t").append("note", {"after": "repair"})
    assert export_bundle(small, out=tmp_path / "b").ok


def test_damage_in_the_middle_is_refused(small: Path, tmp_path: Path) -> None:
    """A bad line followed by good ones is refused with CorruptStream."""
    path = small / "tasks" / "t.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"seq":2', b'"seq":9')
    path.write_bytes(b"".join(lines))
    with pytest.raises(CorruptStream, match="line 3"):
        export_bundle(small, out=tmp_path / "b")
    _nothing_left(tmp_path, "b")


def test_missing_and_corrupt_blobs_are_refused(small: Path, tmp_path: Path) -> None:
    """A referenced blob missing from the store is ArtifactMissing; one with changed bytes is DigestMismatch."""
    hexd = digest_bytes(BIG).split(":")[1]
    obj = small / "objects" / hexd[:2] / hexd[2:]
    saved = obj.read_bytes()
    os.chmod(obj, 0o644)
    obj.write_bytes(b"z" * len(BIG))
    with pytest.raises(DigestMismatch):
        export_bundle(small, out=tmp_path / "b")
    _nothing_left(tmp_path, "b")
    obj.unlink()
    with pytest.raises(ArtifactMissing):
        export_bundle(small, out=tmp_path / "b")
    _nothing_left(tmp_path, "b")
    obj.write_bytes(saved)
    assert export_bundle(small, out=tmp_path / "b").ok


def test_a_stream_that_contradicts_the_ledger_seal_is_refused(small: Path, tmp_path: Path) -> None:
    """After 'intentlog seal', a stream cut below its sealed head is refused: export must not re-anchor it."""
    with intentlog.open(small) as ledger:
        seal(ledger)
        sealed = decode_heads((small / HEADS_FILE).read_bytes())["t"]
        ledger.task("t").append("note", {"after": "the seal"})
    assert export_bundle(small, out=tmp_path / "grown").ok  # growing past the seal is fine
    path = small / "tasks" / "t.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[: sealed.events - 1]))
    with pytest.raises(LedgerError, match="sealed"):
        export_bundle(small, out=tmp_path / "b")
    _nothing_left(tmp_path, "b")


def test_bad_arguments_are_refused_before_anything_is_written(small: Path, tmp_path: Path) -> None:
    """No target, an existing target, a bad or unknown task, a bad receipt log, no ledger: refused, nothing written."""
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    (tmp_path / "exists.tar").write_bytes(b"mine")
    cases: list[tuple[dict[str, Any], type[Exception]]] = [
        ({}, UsageError),
        ({"out": tmp_path / "full"}, UsageError),
        ({"tar": tmp_path / "exists.tar"}, UsageError),
        ({"out": tmp_path / "b", "tasks": ["../t"]}, InvalidTaskId),
        ({"out": tmp_path / "b", "tasks": ["nope"]}, UsageError),
        ({"out": tmp_path / "b", "receipts": [tmp_path / "missing.jsonl"]}, UsageError),
        (
            {"out": tmp_path / "b", "receipts": [tmp_path / "exists.tar", tmp_path / "full" / ".." / "exists.tar"]},
            UsageError,
        ),
    ]
    for kwargs, exc in cases:
        tasks = kwargs.pop("tasks", None)
        with pytest.raises(exc):
            export_bundle(small, tasks, **kwargs)
    with pytest.raises(NotALedger):
        export_bundle(tmp_path / "full", out=tmp_path / "b")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    assert (tmp_path / "exists.tar").read_bytes() == b"mine"
    _nothing_left(tmp_path, "b")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_bundle(small, out=empty).ok  # an empty folder is a fine target


def test_check_bundle_refuses_a_folder_that_is_not_there(tmp_path: Path) -> None:
    """check_bundle raises NotALedger for a missing folder, like verify_path."""
    with pytest.raises(NotALedger):
        check_bundle(tmp_path / "nope")


# -- the command line (applied by the lead: skipped until cli.py has it) --------------------------------


def test_the_cli_exports_and_verifies_a_bundle(corpus: Corpus, tmp_path: Path) -> None:
    """'intentlog export' writes a bundle both verifiers pass; 'intentlog verify --bundle' agrees (exit 0, then 1)."""
    from click.testing import CliRunner

    from intentlog.cli import main

    if "export" not in main.commands or not any(p.name == "bundle" for p in main.commands["verify"].params):
        pytest.skip("the export command and verify --bundle are not in cli.py yet (see the issue 8 report)")
    runner = CliRunner()
    out = tmp_path / "b"
    r = runner.invoke(
        main, ["--root", str(corpus.root), "export", "--out", str(out), "--receipts", str(corpus.receipts)]
    )
    assert r.exit_code == 0, r.output
    assert file_hashes(out) == file_hashes(corpus.bundle)
    v = runner.invoke(main, ["verify", "--bundle", str(out)])
    assert v.exit_code == 0, v.output
    corrupt_state_claim(out)
    rehash(out)
    v = runner.invoke(main, ["verify", "--bundle", str(out), "--json"])
    assert v.exit_code == 1
    assert any(p["code"] == "states" for p in orjson.loads(v.output)["problems"])


# -- agreement under many forgeries -------------------------------------------------------------------

SWEEP_TASKS = ("superseded", "reconciled-served-bytes", "retry-decided", "compilations", "repaired")
SWEEP_VALUES: tuple[Any, ...] = (None, "call-2", 2, 0, "retry", "fail", "not_served", "reconciliation", {}, True)


def _forgeries(events: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Every event deleted, swapped with the next, duplicated; every data field set to each of a few values."""
    for i in range(1, len(events)):
        yield events[:i] + events[i + 1 :]
        yield [*events[:i], events[i], *events[i:]]
        if i + 1 < len(events):
            yield [*events[:i], events[i + 1], events[i], *events[i + 2 :]]
        for field in events[i]["data"]:
            for value in SWEEP_VALUES:
                if events[i]["data"][field] != value:
                    yield [*events[:i], {**events[i], "data": {**events[i]["data"], field: value}}, *events[i + 1 :]]


def test_both_verifiers_agree_on_every_forgery_of_a_sweep(corpus: Corpus, tmp_path: Path) -> None:
    """For each re-chained forgery (heads, states and hashes recomputed) both verifiers pass, or both fail."""
    import random

    verdicts = {True: 0, False: 0}
    rnd = random.Random(8)
    for task in SWEEP_TASKS:
        one = tmp_path / f"one-{task}"
        export_bundle(corpus.root, [task], out=one, check=False)
        events = events_of(one / "tasks" / f"{task}.jsonl")
        forgeries = list(_forgeries(events))
        for n, forged in enumerate(rnd.sample(forgeries, min(60, len(forgeries)))):
            b = tmp_path / f"f-{task}-{n}"
            shutil.copytree(one, b)
            rechain(b / "tasks" / f"{task}.jsonl", forged)
            reseal(b)
            restate(b)
            rehash(b)
            theirs = independent(b)
            ours = library_errors(b)
            assert theirs.ok == (ours == []), (task, n, theirs.failed[:3], ours[:3])
            verdicts[theirs.ok] += 1
            shutil.rmtree(b)
    assert verdicts[False] > 100 and verdicts[True] > 10, verdicts


def test_the_docs_example_runs(tmp_path: Path) -> None:
    """The Python example of docs/bundles.md runs and leaves a bundle both verifiers pass, and its tar."""
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "bundles.md").read_text()
    code = re.findall(r"```python\n(.*?)```", doc, re.S)[0]
    (tmp_path / "example.py").write_text(code)
    p = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "exported 1 task(s) (chapter-16)" in p.stdout
    assert independent(tmp_path / "bundle").ok
    assert (tmp_path / "bundle.tar").is_file()


def test_both_verifiers_compare_the_same_fields_of_states_json(corpus: Corpus) -> None:
    """The independent verifier re-derives exactly the fields check_bundle compares; the rest is explanation only."""
    from intentlog.bundle import CHECKED_CALL_FIELDS, CHECKED_COMPILATION_FIELDS, CHECKED_TASK_FIELDS

    states = independent(corpus.bundle).states
    call_fields = {k for ws in states.values() for c in ws["calls"].values() for k in c}
    comp_fields = {k for ws in states.values() for c in ws["compilations"].values() for k in c}
    task_fields = {k for ws in states.values() for k in ws} - {"calls", "compilations"}
    assert call_fields == set(CHECKED_CALL_FIELDS)
    assert comp_fields == set(CHECKED_COMPILATION_FIELDS)
    assert task_fields | {"version"} == set(CHECKED_TASK_FIELDS)


def test_an_explanatory_field_changed_in_states_json_is_info_for_the_library_and_passes_both(copy: Path) -> None:
    """A reason rewritten in states.json changes no state: both pass, the library notes it as info."""
    doc = orjson.loads((copy / STATES_FILE).read_bytes())
    doc["tasks"]["failed-by-operator"]["calls"]["call-1"]["reason"] = "all fine, nothing to see"
    (copy / STATES_FILE).write_bytes(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")
    rehash(copy)
    assert independent(copy).ok
    report = check_bundle(copy)
    assert report.ok and [p.task for p in report.by_code("states_detail")] == ["failed-by-operator"]


def test_the_verifier_knows_every_kind_the_library_registers() -> None:
    """verify_bundle.py's kinds table names the same kinds, required and optional fields as the library's registry.

    The verifier is independent code, so a kind added to intentlog must be added to it too: this fails until it is.
    """
    from intentlog.projections.schema import RULES

    kinds = load_verifier(Path(intentlog.__file__).parent).KINDS
    assert sorted(kinds) == sorted(RULES)
    for kind, rule in RULES.items():
        required, optional = kinds[kind]
        assert (sorted(required), sorted(optional)) == (sorted(rule.required), sorted(rule.optional)), kind


def _crafted(root: Path) -> None:
    """Two streams written event by event with the newer kinds (heartbeats, timeouts, checkpoints, approvals, forks)."""
    request = b'{"model":"m","q":"long"}'
    answer = b'{"verdict":"late but fine"}'
    req = {"digest": digest_bytes(request), "size": len(request), "media_type": "application/json"}
    resp = {"digest": digest_bytes(answer), "size": len(answer)}
    ts = "2026-11-30T02:04:05.123456Z"
    created = {"format": "intentlog/1", "stream": "0" * 32}
    call = {"call": "call-1", "key": "k"}
    manifest = {
        **call,
        "request_hash": req["digest"],
        "request": {**req, "inline": request.decode()},
        "inputs": {},
        "canon": "intentlog-canon/1",
        "dropped": [],
        "redacted": [],
    }
    crafted = [
        ("task.created", {**created, "task": "crafted"}),
        ("call.requested", {**call, "name": "review"}),
        ("call.manifest", manifest),
        ("attempt.started", {"call": "call-1", "attempt": 1}),
        ("attempt.progress", {"call": "call-1", "attempt": 1, "beats": 1, "elapsed": 1.5, "info": None}),
        ("attempt.timed_out", {"call": "call-1", "attempt": 1, "after": 30.0, "limit": "inactivity", "timeout": 30}),
        (
            "effect.reconciled",
            {"call": "call-1", "attempt": 1, "outcome": "served", "evidence": resp, "by": "ops", "source": "operator"},
        ),
        (
            "attempt.observed",
            {
                "call": "call-1",
                "attempt": 1,
                "response": {**resp, "inline": answer.decode()},
                "source": "reconciliation",
            },
        ),
        ("call.completed", {"call": "call-1", "attempt": 1, "result": {"raw": True, "response": resp}}),
        (
            "task.checkpoint",
            {"phase": "review", "evidence": [resp], "status": "accepted", "call": "call-1", "turn": "k"},
        ),
        (
            "approval.requested",
            {"approval": "a1", "question": "ship?", "binds": {**call, "request_hash": req["digest"]}},
        ),
        ("approval.decided", {"approval": "a1", "decision": "approve", "request_hash": req["digest"], "by": "alice"}),
        ("task.failed", {"reason": "abandoned after review", "by": "ops"}),
    ]
    tasks = root / "tasks"
    rechain(tasks / "crafted.jsonl", [{"kind": k, "data": d, "ts": ts} for k, d in crafted])
    head = digest_bytes((tasks / "crafted.jsonl").read_bytes().splitlines(keepends=True)[2])
    forked = [
        ("task.created", {**created, "task": "forked"}),
        *crafted[1:3],
        (
            "task.forked",
            {"from_task": "crafted", "from_call": "call-1", "upto_seq": 2, "from_head": head, "from_stream": "0" * 32},
        ),
    ]
    rechain(tasks / "forked.jsonl", [{"kind": k, "data": d, "ts": ts} for k, d in forked])


def test_both_verifiers_agree_on_forgeries_of_the_newer_kinds(tmp_path: Path) -> None:
    """Streams with heartbeats, timeouts, checkpoints, approvals and a fork pass both; every forgery of a sample
    is judged alike by both."""
    import random

    from intentlog.projections.schema import RULES

    if not {"attempt.timed_out", "task.checkpoint", "approval.decided", "task.forked"} <= set(RULES):
        pytest.skip("this intentlog does not register the newer kinds yet")
    root = tmp_path / "ledger"
    intentlog.open(root).close()
    _crafted(root)
    verdicts = {True: 0, False: 0}
    rnd = random.Random(8)
    for task in ("crafted", "forked"):
        one = tmp_path / f"one-{task}"
        result = export_bundle(root, [task], out=one)
        assert result.ok, result.render()
        assert independent(one).ok
        events = events_of(one / "tasks" / f"{task}.jsonl")
        forgeries = list(_forgeries(events))
        for n, forged in enumerate(rnd.sample(forgeries, min(80, len(forgeries)))):
            b = tmp_path / f"f-{task}-{n}"
            shutil.copytree(one, b)
            rechain(b / "tasks" / f"{task}.jsonl", forged)
            reseal(b)
            restate(b)
            rehash(b)
            theirs = independent(b)
            ours = library_errors(b)
            assert theirs.ok == (ours == []), (task, n, theirs.failed[:3], ours[:3])
            verdicts[theirs.ok] += 1
            shutil.rmtree(b)
    assert verdicts[False] > 50 and verdicts[True] > 5, verdicts
