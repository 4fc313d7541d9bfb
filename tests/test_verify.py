"""The replay checker (DESIGN §7) and seal (§4 rule 7): every seeded corruption is caught, a clean ledger passes.

Ledgers are built through the public API, then damaged on disk the way a bad edit, a
bad copy or a crash would. Semantic corruptions are *re-chained* (every prev recomputed
over the exact new line bytes) so that only the meaning of the events can catch them.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.errors import (
    CallFailed,
    CorruptStream,
    EffectUnknown,
    InvalidTaskId,
    LedgerError,
    NotALedger,
    NotSent,
    PreparationFailed,
    ProviderFailure,
    RequiredContextMissing,
    UsageError,
)
from intentlog.eventlog.canonical import dumps
from intentlog.eventlog.format import encode_line
from intentlog.heads import read_heads, seal
from intentlog.projections import schema
from intentlog.projections.verify import (
    HEADS_FILE,
    Problem,
    VerifyReport,
    decode_heads,
    verify_ledger,
    verify_path,
)

BIG = b"y" * 6000  # larger than INLINE_MAX: stored in objects/
BIG_DIGEST = digest_bytes(BIG)


# -- helpers ---------------------------------------------------------------------------


@dataclass
class Built:
    ledger: intentlog.Ledger
    root: Path
    workspace: Path
    report_ref: intentlog.Ref

    def stream(self, task: str = "t") -> Path:
        return self.root / "tasks" / f"{task}.jsonl"

    def verify(self, tasks: list[str] | None = None) -> VerifyReport:
        return verify_ledger(self.ledger, tasks)


def build(tmp: Path) -> Built:
    """A ledger that exercises every kind effects.py writes, plus a repaired torn tail."""
    ledger = intentlog.open(tmp / "ev")
    t = ledger.task("t")
    t.append("note", {"hello": "world"})
    t.effect("k1", {"q": 1}, send=lambda r: b"small")
    tries = {"n": 0}

    def flaky(r: Any) -> bytes:
        tries["n"] += 1
        if tries["n"] == 1:
            raise ProviderFailure("busy", body=b"503 busy", retryable=True)
        return BIG

    t.effect("k2", {"q": 2}, send=flaky, interpret=len, retry=intentlog.RetryPolicy(backoff=0))
    tries["n"] = 0

    def offline(r: Any) -> bytes:
        tries["n"] += 1
        if tries["n"] == 1:
            raise NotSent("no route to host")
        return b"sent"

    t.effect("k8", {"q": 8}, send=offline, retry=intentlog.RetryPolicy(backoff=0))

    def boom(r: Any) -> bytes:
        raise RuntimeError("connection reset")

    with pytest.raises(EffectUnknown) as unknown3:
        t.effect("k3", {"q": 3}, send=boom)
    t.reconcile(unknown3.value.call_id, "served", evidence=b'{"ok": 1}')
    t.effect("k3", {"q": 3}, send=boom, interpret=json.loads)
    with pytest.raises(EffectUnknown) as unknown4:
        t.effect("k4", {"q": 4}, send=boom)
    t.reconcile(unknown4.value.call_id, "not_served")
    t.effect("k4", {"q": 4}, send=lambda r: b"fine")
    t.prepare("k5", {"q": 5})
    t.effect("k5", {"q": 5}, send=lambda r: b"resumed")  # a new call: call.resumed + resumes
    t.compile("c1", [{"id": "a", "content": "hi"}, {"id": "b", "content": "x" * 5000}])
    with pytest.raises(RequiredContextMissing):
        t.compile("c2", [{"id": "a"}], required=["z"])
    with pytest.raises(PreparationFailed):
        t.effect("k6", {"x": float("nan")}, send=lambda r: b"")

    def refuse(r: Any) -> bytes:
        raise ProviderFailure("bad request", body=b"400")

    with pytest.raises(CallFailed):
        t.effect("k7", {"q": 7}, send=refuse)
    (tmp / "report.md").write_text("# report\n")
    ref = t.record_artifact("report.md", producer="test")
    t.accept()
    t.close()
    t2 = ledger.task("t2")
    t2.append("note", {"before": "a crash"})
    t2.close()
    with open(t2.path, "ab") as f:  # a torn tail, as a crash mid-append leaves it
        f.write(b'{"data":{"x":')
    t2.append("note", {"report": ref.to_json(), "bare": ref.digest})  # reopening repairs: quarantine/ + stream.repaired
    ledger.close()
    return Built(ledger, tmp / "ev", tmp, ref)


@pytest.fixture
def built(tmp_path: Path) -> Built:
    return build(tmp_path)


def read_events(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def rechain(path: Path, events: list[dict[str, Any]], *, renumber: bool = True) -> None:
    """Write ``events`` as a valid chain: each prev is the digest of the previous line's exact bytes.

    With ``renumber`` seqs are 0, 1, 2…; without, each event keeps its seq (to seed a gap).
    """
    out: list[bytes] = []
    prev: str | None = None
    for i, ev in enumerate(events):
        line = encode_line(ev["kind"], dumps(ev["data"]), prev, i if renumber else ev["seq"], ev["ts"])
        out.append(line)
        prev = digest_bytes(line)
    path.write_bytes(b"".join(out))


def index_of(events: list[dict[str, Any]], kind: str, **data: Any) -> int:
    for i, ev in enumerate(events):
        if ev["kind"] == kind and all(ev["data"].get(k) == v for k, v in data.items()):
            return i
    raise LookupError(f"no {kind} with {data}")


def call_of(events: list[dict[str, Any]], key: str) -> str:
    """The id of the latest call of ``key``."""
    return str([ev["data"]["call"] for ev in events if ev["kind"] == "call.requested" and ev["data"]["key"] == key][-1])


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def object_path(root: Path, digest: str) -> Path:
    hexd = digest.split(":", 1)[1]
    return root / "objects" / hexd[:2] / hexd[2:]


def errors(report: VerifyReport) -> list[Problem]:
    return [p for p in report.problems if p.severity == "error"]


def only_codes(report: VerifyReport, severity: str = "error") -> set[str]:
    return {p.code for p in report.problems if p.severity == severity}


def snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            st = p.lstat()
            content = p.read_bytes() if stat.S_ISREG(st.st_mode) else b""
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, content)
    return out


# -- a clean ledger ---------------------------------------------------------------------


def _newer_kinds(ledger: intentlog.Ledger) -> list[str]:
    """Tasks written with the kinds of sessions, checkpoints, approvals, long effects and forks; their ids."""
    from intentlog.effects import heartbeat

    s = ledger.session("s")
    s.turn({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, lambda r: b"hello")
    s.turn({"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "x"}]},
           lambda r: b"again")
    t = ledger.task("t3")
    release = threading.Event()

    def stalls(r: Any) -> bytes:
        heartbeat({"step": 1})
        release.wait(10)  # past the inactivity timeout: the attempt is recorded timed out
        return b"a late answer, never recorded"

    with pytest.raises(EffectUnknown):
        t.effect("slow", {"q": 1}, send=stalls, inactivity_timeout=0.2, progress_interval=0)
    release.set()
    t.reconcile("call-1", "served", evidence=b"late answer")
    t.effect("slow", {"q": 1}, send=stalls)
    call = t.prepare("pay", {"amount": 5})
    t.request_approval("pay-ok", "pay 5?", binds=call)
    t.decide("pay-ok", "approve", by="alice")
    t.checkpoint("paid", evidence=[b"receipt"], revision="abc123", changed_files=["a.py"])
    t.fail_task("given up", by="ops")
    t.close()
    ledger.fork("s", "turn-2", "s2").close()
    idle = ledger.task("t4")  # the idioms: a value, a sleep, an event received and one timed out, a child joined
    idle.value("seed", lambda: 7)
    idle.sleep_for(0, name="nap")
    ledger.signal("t4", "go", {"ok": True})
    idle.wait_for_event("go")
    with pytest.raises(intentlog.EventTimedOut):
        idle.wait_for_event("late", timeout=0)
    idle.spawn("t4c", {"doc": 1}, run=lambda child: 1)
    idle.join()
    ledger.close()
    return ["s", "t3", "s2", "t4", "t4.inbox", "t4c"]


def test_clean_ledger_passes_with_zero_errors(built: Built) -> None:
    """Effects, retries, reconciliation, a resume, compilations, artifacts and a repaired tail verify clean;
    so do sessions, heartbeats, timeouts, checkpoints, approvals, task verdicts and forks."""
    newer = _newer_kinds(built.ledger)
    seal(built.ledger)
    report = built.verify()
    assert errors(report) == [], report.render()
    assert report.ok and report.exit_code == 0
    assert [p for p in report.problems if p.severity == "changed"] == []
    assert report.tasks == 2 + len(newer)
    assert report.events == sum(len(read_events(built.stream(t))) for t in ("t", "t2", *newer))
    assert report.artifacts >= 10 and report.bytes_hashed >= len(BIG)
    kinds = {ev["kind"] for t in ("t", "t2", *newer) for ev in read_events(built.stream(t))}
    assert set(schema.RULES) <= kinds, set(schema.RULES) - kinds


def test_verify_writes_nothing_and_takes_no_lock(built: Built) -> None:
    """verify changes no byte, mode or mtime, creates nothing, and runs while a writer holds the lock."""
    seal(built.ledger)
    (built.workspace / "report.md").write_text("changed\n")
    t = built.ledger.task("t")
    t.append("note", {"holding": "the lock"})  # this handle now holds the task's flock
    before = snapshot(built.workspace)
    report = built.verify()
    assert snapshot(built.workspace) == before
    assert report.by_code("changed_since_capture")
    t.close()


def test_verify_path_reads_a_copied_folder_with_its_workspace(built: Built, tmp_path: Path) -> None:
    """verify_path works on a bare folder (a bundle) and says when the workspace is not there."""
    report = verify_path(built.root, workspace=tmp_path / "nowhere")
    assert report.ok, report.render()
    assert report.by_code("workspace")[0].severity == "info"
    with pytest.raises(NotALedger):
        verify_path(tmp_path / "missing")


# -- seeded corruptions: each caught --------------------------------------------------


def test_a_byte_changed_inside_a_line_breaks_the_chain(built: Built) -> None:
    """An edit inside line 2 leaves valid JSON, so the next line's prev is what catches it."""
    path = built.stream()
    data = path.read_bytes()
    assert data.count(b'"world"') == 1
    path.write_bytes(data.replace(b'"world"', b'"worle"'))
    report = built.verify()
    [p] = errors(report)
    assert (p.code, p.task, p.line, p.seq) == ("chain", "t", 3, 2)
    assert "line 2 hashes to" in p.message
    assert p.render().startswith("error: tasks/t.jsonl line 3 (seq 2): prev is blake3:")


def test_a_deleted_line_is_caught(built: Built) -> None:
    """Removing line 5 leaves a seq gap and a prev that matches nothing."""
    path = built.stream()
    ls = lines(path)
    del ls[4]
    path.write_bytes(b"".join(ls))
    report = built.verify()
    seq_problems = report.by_code("seq")
    assert seq_problems and seq_problems[0].line == 5 and seq_problems[0].seq == 5
    assert "1 event(s) missing" in seq_problems[0].message
    assert not report.ok


def test_two_swapped_lines_are_caught(built: Built) -> None:
    """Reordering lines 3 and 4 breaks seq at line 3."""
    path = built.stream()
    ls = lines(path)
    ls[2], ls[3] = ls[3], ls[2]
    path.write_bytes(b"".join(ls))
    report = built.verify()
    first = errors(report)[0]
    assert (first.code, first.line) == ("seq", 3)
    assert "seq is 3 but 2 was expected" in first.message


def test_changed_artifact_bytes_are_caught(built: Built) -> None:
    """An object whose bytes no longer hash to its name is corrupt, named by digest and first reference."""
    obj = object_path(built.root, BIG_DIGEST)
    obj.chmod(0o644)
    data = bytearray(obj.read_bytes())
    data[100] ^= 1
    obj.write_bytes(bytes(data))
    report = built.verify()
    [p] = errors(report)
    assert (p.code, p.digest, p.task) == ("artifact_corrupt", BIG_DIGEST, "t")
    events = read_events(built.stream())
    assert p.seq == index_of(events, "attempt.observed", call="call-2", attempt=2)
    assert obj.read_bytes() == bytes(data), "verify never quarantines or repairs"


def test_a_deleted_artifact_is_caught(built: Built) -> None:
    """A referenced blob that is gone from objects/ (and rides inline nowhere) is missing."""
    object_path(built.root, BIG_DIGEST).unlink()
    report = built.verify()
    [p] = errors(report)
    assert (p.code, p.digest) == ("artifact_missing", BIG_DIGEST)
    assert "restore objects/" in p.message


def test_a_forged_line_appended_is_a_suspect_tail(built: Built) -> None:
    """A well-formed last line whose prev is wrong is reported, loudly, as a suspect tail."""
    path = built.stream()
    n = len(lines(path))
    forged = encode_line("note", dumps({"forged": True}), "blake3:" + "0" * 64, n, "2026-01-01T00:00:00.000000Z")
    with open(path, "ab") as f:
        f.write(forged)
    report = built.verify()
    [p] = errors(report)
    assert (p.code, p.line, p.seq) == ("chain", n + 1, n)
    assert "suspect tail" in p.message


def test_a_truncated_tail_is_caught_only_against_heads(built: Built) -> None:
    """Cutting whole lines off the end leaves a valid chain: only heads.json from seal can see it."""
    path = built.stream()
    ls = lines(path)
    path.write_bytes(b"".join(ls[:-2]))
    assert built.verify().ok, "without a seal the chain alone cannot see a truncation"
    path.write_bytes(b"".join(ls))
    seal(built.ledger)
    path.write_bytes(b"".join(ls[:-2]))
    report = built.verify()
    [p] = errors(report)
    assert (p.code, p.task, p.seq) == ("truncated", "t", len(ls) - 1)
    assert "2 event(s) were cut" in p.message


# -- semantic corruptions, re-chained so only meaning can catch them -------------------


def test_an_attempt_whose_call_has_no_manifest_is_caught(built: Built) -> None:
    path = built.stream()
    events = read_events(path)
    i = index_of(events, "call.manifest", call="call-1")
    del events[i]
    rechain(path, events)
    report = built.verify()
    assert only_codes(report) == {"graph"}, report.render()
    p = report.by_code("graph")[0]
    assert p.seq == i and "has no call.manifest" in p.message  # the attempt.started moved up to seq i


def test_a_completion_with_no_observation_is_caught(built: Built) -> None:
    path = built.stream()
    events = read_events(path)
    i = index_of(events, "attempt.observed", call="call-1")
    del events[i]
    rechain(path, events)
    report = built.verify()
    [p] = report.by_code("graph")
    assert p.seq == i and "no attempt.observed" in p.message  # call.completed now sits where the observation was
    # the raw result's ref to the response bytes lost its inline copy too
    assert only_codes(report) == {"graph", "artifact_missing"}


def test_a_seq_gap_is_caught(built: Built) -> None:
    path = built.stream()
    events = read_events(path)
    del events[1]  # the note; the rest keep their seq
    rechain(path, events, renumber=False)
    report = built.verify()
    [p] = errors(report)
    assert (p.code, p.line, p.seq) == ("seq", 2, 2)


def test_a_reference_to_a_missing_blob_is_caught(built: Built) -> None:
    path = built.stream()
    events = read_events(path)
    i = index_of(events, "attempt.observed", call="call-2", attempt=2)
    ghost = digest_bytes(b"never stored")
    events[i]["data"]["response"] = {"digest": ghost, "size": 12}
    rechain(path, events)
    report = built.verify()
    missing = [p for p in errors(report) if p.code == "artifact_missing"]
    assert [(p.digest, p.seq) for p in missing] == [(ghost, i)]
    # the interpretation still names the response it read: the edit contradicts it, and the
    # real blob stays referenced (by the interpretation), so it is no orphan
    assert only_codes(report) == {"artifact_missing", "graph"}
    graph = [p for p in errors(report) if p.code == "graph"]
    assert graph and all("response" in p.message for p in graph)
    assert not any(p.digest == BIG_DIGEST for p in report.by_code("orphan_blob"))


def test_a_request_hash_that_is_not_the_requests_digest_is_caught(built: Built) -> None:
    path = built.stream()
    events = read_events(path)
    i = index_of(events, "call.manifest", call="call-1")
    events[i]["data"]["request_hash"] = digest_bytes(b"something else")
    rechain(path, events)
    found = errors(built.verify())
    # the manifest's hash is not its request's digest, and it no longer equals call.requested's either
    assert any(p.code == "graph" and p.seq == i and "request_hash" in p.message for p in found)
    assert {p.code for p in found} == {"graph", "forgery"}


def test_a_blind_resend_after_an_unknown_effect_is_caught(built: Built) -> None:
    """Attempt 2 started while attempt 1's effect was unknown: the record shows a possible duplicate."""
    path = built.stream()
    events = read_events(path)
    i = index_of(events, "effect.reconciled", call=call_of(events, "k4"))
    del events[i]
    rechain(path, events)
    [p] = errors(built.verify())
    assert p.code == "graph" and "blind resend" in p.message


def test_a_resume_to_a_call_that_never_follows_is_caught(built: Built) -> None:
    path = built.stream()
    events = read_events(path)
    i = index_of(events, "call.requested", call=call_of(events, "k5"))
    events[i]["data"].pop("resumes")
    rechain(path, events)
    report = built.verify()
    assert only_codes(report) == {"graph"}
    assert any("does not say resumes" in p.message for p in errors(report))


def test_reconciliation_evidence_without_its_observation_is_caught(built: Built) -> None:
    path = built.stream()
    events = read_events(path)
    i = index_of(events, "attempt.observed", source="reconciliation")
    del events[i]
    rechain(path, events)
    report = built.verify()
    assert any(p.seq == i and "goes on without the attempt.observed" in p.message for p in report.by_code("graph")), (
        report.render()
    )
    assert not report.by_code("artifact_missing")  # the evidence is in objects/ before effect.reconciled names it


def test_an_edited_inline_payload_is_corrupt(built: Built) -> None:
    path = built.stream()
    events = read_events(path)
    i = index_of(events, "attempt.observed", call="call-1")
    events[i]["data"]["response"]["inline"] = "smalL"
    rechain(path, events)
    report = built.verify()
    assert only_codes(report) == {"artifact_corrupt"}
    first, completion = errors(report)  # the raw completion's ref had only that inline copy
    assert first.seq == i and "the event was edited" in first.message
    assert completion.seq == i + 1 and "only copy" in completion.message


def test_a_wrong_shape_is_named(built: Built) -> None:
    path = built.stream()
    events = read_events(path)
    i = index_of(events, "attempt.started", call="call-1")
    events[i]["data"]["attempt"] = "one"
    rechain(path, events)
    report = built.verify()
    shape = report.by_code("shape")
    assert shape and shape[0].seq == i and "'attempt' must be an integer >= 1" in shape[0].message


def test_a_repair_record_out_of_place_is_caught(built: Built) -> None:
    """stream.repaired sits right after the lines the writer kept; an event removed before it shows."""
    path = built.stream("t2")
    events = read_events(path)
    i = index_of(events, "stream.repaired")
    del events[1]
    rechain(path, events)
    [p] = errors(built.verify())
    assert (p.code, p.seq) == ("graph", i - 1) and f"belongs at seq {i}" in p.message


def test_an_empty_stream_is_an_error(built: Built) -> None:
    (built.root / "tasks" / "t3.jsonl").write_bytes(b"")
    [p] = errors(built.verify())
    assert (p.task, p.code) == ("t3", "graph") and "empty" in p.message


def test_task_created_must_name_its_own_task(built: Built) -> None:
    """A stream copied under another name is caught by task.created's graph rule."""
    os.link(built.stream("t2"), built.root / "tasks" / "t3.jsonl")
    report = built.verify()
    [p] = errors(report)
    assert (p.task, p.seq, p.code) == ("t3", 0, "graph") and "names task 't2'" in p.message


# -- torn tails and damage in the middle ------------------------------------------------


def test_an_unrepaired_torn_tail_is_reported(built: Built) -> None:
    path = built.stream("t2")
    n = len(lines(path))
    with open(path, "ab") as f:
        f.write(b'{"data":{"half')
    [p] = errors(built.verify())
    assert (p.code, p.line) == ("torn_tail", n + 1)


def test_garbage_followed_by_events_is_damage_not_a_tail(built: Built) -> None:
    path = built.stream()
    ls = lines(path)
    ls[3] = b"\x00\x00garbage\n"
    path.write_bytes(b"".join(ls))
    report = built.verify()
    first = errors(report)[0]
    assert (first.code, first.line) == ("parse", 4)
    assert "event lines follow it" in first.message


def test_a_tampered_quarantine_file_is_caught(built: Built) -> None:
    [q] = list((built.root / "quarantine").iterdir())
    q.chmod(0o644)
    q.write_bytes(b"something else")
    [p] = errors(built.verify())
    assert p.code == "artifact_corrupt" and p.locator == f"quarantine/{q.name}"
    q.unlink()
    [p] = errors(built.verify())
    assert p.code == "artifact_missing"


# -- changed, info ----------------------------------------------------------------------


def test_a_changed_workspace_file_is_changed_not_corruption(built: Built) -> None:
    (built.workspace / "report.md").write_text("# report, edited\n")
    report = built.verify()
    assert errors(report) == []
    [p] = [p for p in report.problems if p.severity == "changed"]
    assert (p.code, p.locator, p.digest) == ("changed_since_capture", "report.md", built.report_ref.digest)
    assert not report.ok and report.exit_code == 1
    assert p.render().startswith("changed: workspace file report.md:")
    (built.workspace / "report.md").unlink()
    [p] = [p for p in built.verify().problems if p.severity == "changed"]
    assert "is gone" in p.message


def test_recording_a_locator_again_compares_the_latest_capture(built: Built) -> None:
    (built.workspace / "report.md").write_text("# v2\n")
    t = built.ledger.task("t")
    t.record_artifact("report.md")
    t.close()
    assert built.verify().ok


def test_an_orphan_blob_is_info(built: Built) -> None:
    ref = built.ledger.artifacts.put(b"nobody refers to me")
    report = built.verify()
    assert report.ok
    [p] = report.by_code("orphan_blob")
    assert (p.severity, p.digest) == ("info", ref.digest)


def test_user_data_refs_are_checked_and_bare_digests_are_info(built: Built) -> None:
    t = built.ledger.task("t2")
    ghost = digest_bytes(b"ghost")
    t.append("note", {"nested": [{"file": {"digest": ghost, "size": 5}}]})
    t.append("note", {"mention": digest_bytes(b"mentioned only")})
    t.close()
    report = built.verify()
    [p] = errors(report)
    assert (p.code, p.digest, p.task) == ("artifact_missing", ghost, "t2")
    [b] = report.by_code("bare_digest")
    assert b.severity == "info"


def test_a_kind_rule_is_one_register_call(built: Built, monkeypatch: pytest.MonkeyPatch) -> None:
    """A later kind adds its shape, refs and graph rule in one place and the checker uses them."""

    def rule(g: schema.TaskGraph, seq: int, d: Any) -> Iterator[schema.Finding]:
        if d["n"] > 1:
            yield schema.Finding("graph", f"step {d['n']} before step 1")

    monkeypatch.setattr(schema, "_RULES", dict(schema._RULES))  # register() below is undone after the test
    schema.register(schema.KindRule("myapp.step", {"n": schema.INT}, {"out": schema.REF}, refs=("out",), graph=rule))
    with pytest.raises(ValueError):
        schema.register(schema.KindRule("myapp.step"))
    t = built.ledger.task("t2")
    n = len(read_events(built.stream("t2")))
    t.append("myapp.step", {"n": "one"})
    t.append("myapp.step", {"n": 2, "out": {"digest": digest_bytes(b"o"), "size": 1}})
    t.close()
    report = built.verify()
    assert {(p.code, p.seq) for p in errors(report)} == {("shape", n), ("graph", n + 1), ("artifact_missing", n + 1)}


def test_a_reserved_kind_without_a_rule_is_info(built: Built) -> None:
    path = built.stream("t2")
    events = read_events(path)
    events.append({"kind": "session.opened", "data": {"session": "s1"}, "ts": events[-1]["ts"]})
    rechain(path, events)
    report = built.verify()
    assert report.ok
    assert report.by_code("unknown_kind")[0].severity == "info"


# -- heads.json and seal ----------------------------------------------------------------


def test_seal_is_deterministic_and_read_back(built: Built) -> None:
    path = seal(built.ledger)
    first = path.read_bytes()
    assert seal(built.ledger).read_bytes() == first and first.endswith(b"\n")
    assert path == built.root / HEADS_FILE
    heads = read_heads(built.ledger)
    assert heads is not None and set(heads) == {"t", "t2"}
    events = read_events(built.stream())
    assert heads["t"].seq == len(events) - 1 and heads["t"].events == len(events)
    assert heads["t"].stream == events[0]["data"]["stream"]
    assert heads["t"].head == digest_bytes(lines(built.stream())[-1])
    assert built.verify().by_code("heads") == ()


def test_a_stream_that_grew_past_its_seal_is_fine(built: Built) -> None:
    seal(built.ledger)
    t = built.ledger.task("t")
    t.append("note", {"later": True})
    t.close()
    report = built.verify()
    assert report.ok and errors(report) == []


def test_a_stream_rewritten_after_the_seal_is_caught(built: Built) -> None:
    """Truncate and append again: the chain is valid and long enough, but the sealed event is gone."""
    seal(built.ledger)
    path = built.stream("t2")
    events = read_events(path)
    events[-1]["data"] = {"rewritten": True}
    events.append({"kind": "note", "data": {}, "ts": events[-1]["ts"]})
    rechain(path, events)
    [p] = errors(built.verify())
    assert (p.code, p.task, p.seq) == ("heads", "t2", len(events) - 2) and "rewritten after the seal" in p.message


def test_a_replaced_stream_and_a_gone_task_are_caught(built: Built) -> None:
    seal(built.ledger)
    path = built.stream("t2")
    events = read_events(path)
    events[0]["data"]["stream"] = "0" * 32
    rechain(path, events)
    [p] = errors(built.verify())
    assert p.code == "heads" and "replaced" in p.message
    path.unlink()
    [p] = errors(built.verify())
    assert (p.code, p.task) == ("heads", "t2") and "gone" in p.message
    [p] = errors(built.verify(["t2"]))
    assert p.code == "heads"


def test_a_malformed_heads_file_is_an_error(built: Built) -> None:
    (built.root / HEADS_FILE).write_text('{"format": "intentlog-heads/1", "tasks": {"t": {"seq": 1}}}\n')
    [p] = errors(built.verify())
    assert p.code == "heads"
    with pytest.raises(LedgerError):
        read_heads(built.ledger)
    with pytest.raises(LedgerError):
        decode_heads(b"[]")


def test_seal_refuses_a_stream_corrupt_in_the_middle(built: Built) -> None:
    path = built.stream()
    ls = lines(path)
    ls[3] = b"garbage\n"
    path.write_bytes(b"".join(ls))
    with pytest.raises(CorruptStream):
        seal(built.ledger)
    assert not (built.root / HEADS_FILE).exists()


# -- the report and the API ------------------------------------------------------------


def test_report_json_and_render(built: Built) -> None:
    object_path(built.root, BIG_DIGEST).unlink()
    report = built.verify()
    doc = report.to_json()
    assert orjson.loads(orjson.dumps(doc)) == doc
    assert doc["ok"] is False and doc["counts"]["error"] == 1 and doc["counts"]["tasks"] == 2
    p = doc["problems"][0]
    assert set(p) == {"severity", "code", "task", "seq", "line", "digest", "locator", "message"}
    text = report.render()
    assert text.endswith("\n") and "PROBLEMS" in text.splitlines()[-1]
    assert "[artifact_missing]" in text.splitlines()[0]


def test_a_task_filter_checks_only_those_tasks(built: Built) -> None:
    """With a filter, a ref's bytes riding inline in an unchecked stream still count as present."""
    events = read_events(built.stream())
    manifest = events[index_of(events, "call.manifest", call="call-1")]["data"]["request"]
    bare_ref = {"digest": manifest["digest"], "size": manifest["size"]}  # inline only in task t
    t = built.ledger.task("t2")
    t.append("note", {"request": bare_ref})
    t.close()
    report = built.verify(["t2"])
    assert report.ok and report.tasks == 1, report.render()
    assert report.by_code("orphan_blob") == ()  # not looked for with a filter
    with pytest.raises(UsageError):
        built.verify(["nope"])
    with pytest.raises(InvalidTaskId):
        built.verify(["../x"])


def test_progress_is_reported(built: Built) -> None:
    seen: list[tuple[str, int, int]] = []
    verify_ledger(built.ledger, progress=lambda phase, done, total: seen.append((phase, done, total)))
    assert ("streams", 2, 2) in seen
    assert any(phase == "artifacts" for phase, _, _ in seen)
    assert ("workspace", 1, 1) in seen


def test_the_examples_in_docs_verify_md_run(tmp_path: Path) -> None:
    """docs/verify.md's Python examples run as written and print what the text says."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "verify.md"
    api, kind = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    (tmp_path / "api.py").write_text(api)
    p = subprocess.run([sys.executable, "api.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1].startswith("OK: 1 task(s), 2 event(s)")
    assert read_heads(intentlog.open(tmp_path / "copy" / "evidence", create=False)) is not None
    (tmp_path / "kind.py").write_text(kind)
    p = subprocess.run([sys.executable, "kind.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    expected = kind.strip().splitlines()[-1].removeprefix("# ")
    assert p.stdout.strip() == expected


def _imports(module: str, path: Path) -> Iterator[str]:
    """Modules a module imports at run time (relative imports; TYPE_CHECKING blocks left out)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level and node.module:
            yield ".".join([*module.split(".")[: -node.level], *node.module.split(".")])


def test_the_checker_imports_no_writer() -> None:
    """Projections never write: verify and schema reach neither the stream writer nor the atomic-write helper."""
    pkg = Path(intentlog.__file__).parent
    seen: set[str] = set()
    todo = ["intentlog.projections.verify", "intentlog.projections.schema"]
    while todo:
        module = todo.pop()
        path = pkg.joinpath(*module.split(".")[1:]).with_suffix(".py")
        if module in seen or not path.exists():  # packages' __init__ are not followed
            continue
        seen.add(module)
        todo.extend(_imports(module, path))
    assert "intentlog.eventlog.reader" in seen
    assert not {m for m in seen if m.endswith((".writer", "._fsutil", ".heads", ".store"))}, sorted(seen)
