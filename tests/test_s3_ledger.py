"""A ledger on a real S3-compatible store (SeaweedFS): ``intentlog.open("s3://bucket/prefix")``.

Every test writes through the public API, then reads the stream back from the store and
checks its hash chain; the outside world is the synthetic provider's own receipt log.
Two writers are real processes; the fenced one is stopped with SIGSTOP while its lease is
taken over.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
import s3_server
from effect_child import KEY, TASK, request, review

import intentlog
from intentlog.demo.provider import SyntheticProvider, read_receipts
from intentlog.errors import StoreRefused
from intentlog.eventlog.format import parse_line
from intentlog.s3 import ObjectStreams, S3Client, parse_s3_url

TESTS = Path(__file__).parent


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh ``s3://`` ledger URL on the run's server, the AWS variables pointing at it."""
    return s3_server.ledger_url(monkeypatch)


def stored_chain(url: str, task: str) -> list[dict[str, Any]]:
    """The task's events as the store holds them, each line checked against the one before."""
    streams = ObjectStreams(S3Client(parse_s3_url(url)))
    prev: str | None = None
    out = []
    for seq, line in enumerate(streams.read(task).splitlines(keepends=True)):
        ev = parse_line(line, seq, prev)
        prev = ev.digest
        out.append({"kind": ev.kind, "data": ev.data})
    return out


def test_appends_batches_and_reads_go_to_the_store(url: str, tmp_path: Path) -> None:
    before = set(os.listdir(tmp_path))
    os.chdir(tmp_path)  # a local folder named "s3:" would appear here if the URL were taken for a path
    with intentlog.open(url) as ledger:
        t = ledger.task("notes")
        t.append("note", {"n": 1})
        with t.batch():
            t.append("note", {"n": 2})
            t.append("note", {"n": 3})
        assert t.next_seq == 4
    assert set(os.listdir(tmp_path)) == before
    chain = stored_chain(url, "notes")
    assert [e["kind"] for e in chain] == ["task.created", "note", "note", "note"]
    assert [e["data"].get("n") for e in chain[1:]] == [1, 2, 3]
    reader = intentlog.open(url, create=False)
    assert reader.task_ids() == ["notes"]
    assert [e.data for e in reader.task("notes").events(since=1)] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert reader.task("notes").work_state().events == 4
    assert reader.task("notes").exists() and not reader.task("other").exists()


def test_effect_on_the_store_replays_without_a_new_receipt(url: str, tmp_path: Path) -> None:
    receipts = tmp_path / "receipts.jsonl"
    provider = SyntheticProvider(receipts)
    with intentlog.open(url) as ledger:
        first = ledger.task(TASK).effect(KEY, request("model-a"), provider.send, interpret=review)
    assert len(read_receipts(receipts)) == 1
    with intentlog.open(url) as again:  # a new handle: everything is read back from the store
        second = again.task(TASK).effect(KEY, request("model-a"), provider.send, interpret=review)
        ws = again.task(TASK).work_state()
    assert second == first
    assert len(read_receipts(receipts)) == 1  # the provider saw one request, ever
    assert ws.calls["call-1"].stage == "completed"
    kinds = [e["kind"] for e in stored_chain(url, TASK)]
    assert kinds.count("attempt.started") == 1 and kinds.count("attempt.observed") == 1
    # the request and the response are artifacts on the store, readable by digest
    req = ws.calls["call-1"].request
    assert req is not None and orjson.loads(intentlog.open(url, create=False).artifacts.get(str(req["digest"])))


def test_checkpoints_and_approvals_on_the_store(url: str) -> None:
    with intentlog.open(url) as ledger:
        t = ledger.task("review")
        t.checkpoint("drafted", note="first pass")
        t.request_approval("ship", "ship it?", binds="blake3:" + "0" * 64)
        t.decide("ship", "approve", by="alice")
    reader = intentlog.open(url, create=False).task("review")
    assert [c.phase for c in reader.checkpoints()] == ["drafted"]
    assert reader.approval("ship").decision == "approve"
    kinds = [e["kind"] for e in stored_chain(url, "review")]
    assert "task.checkpoint" in kinds and "approval.decided" in kinds


def _child(url: str, receipts: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, **s3_server.seaweed().env()}
    args = [sys.executable, str(TESTS / "effect_child.py"), url, str(receipts), *extra]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)


def _wait_for_receipt(receipts: Path, proc: subprocess.Popen[str]) -> None:
    import time

    deadline = time.monotonic() + 60
    while not read_receipts(receipts):
        assert proc.poll() is None, "the first writer ended before its provider saw the request"
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_two_processes_one_task_one_wins(url: str, tmp_path: Path) -> None:
    receipts = tmp_path / "receipts.jsonl"
    first = _child(url, receipts, "--hold", "10")
    _wait_for_receipt(receipts, first)  # it holds the lease and the provider holds its request
    second = _child(url, receipts)
    out2, _ = second.communicate(timeout=120)
    out1, _ = first.communicate(timeout=120)
    assert orjson.loads(out2.splitlines()[-1])["error"] == "TaskBusy"
    assert "result" in orjson.loads(out1.splitlines()[-1])
    assert len(read_receipts(receipts)) == 1
    kinds = [e["kind"] for e in stored_chain(url, TASK)]  # the chain verifies line by line
    assert kinds.count("attempt.started") == 1 and kinds[-1] in ("attempt.interpreted", "call.completed")


FENCED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import orjson, intentlog
    from effect_child import KEY, request, review
    from intentlog.demo.provider import SyntheticProvider
    provider = SyntheticProvider({receipts!r})
    t = intentlog.open({url!r}).task("fenced")
    t.append("note", {{"before": "the stop"}})
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        t.effect(KEY, request("model-a"), provider.send, interpret=review)
        print(orjson.dumps({{"sent": True}}).decode(), flush=True)
    except intentlog.IntentlogError as exc:
        print(orjson.dumps({{"error": type(exc).__name__, "message": str(exc)}}).decode(), flush=True)
    try:
        t.append("note", {{"after": "the fence"}})
        print(orjson.dumps({{"appended": True}}).decode(), flush=True)
    except intentlog.IntentlogError as exc:
        print(orjson.dumps({{"error": type(exc).__name__}}).decode(), flush=True)
    """
)


def test_a_fenced_writer_appends_nothing_and_sends_nothing(url: str, tmp_path: Path) -> None:
    receipts = tmp_path / "receipts.jsonl"
    code = FENCED.format(tests=str(TESTS), receipts=str(receipts), url=url)
    env = {**os.environ, **s3_server.seaweed().env()}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        streams = ObjectStreams(S3Client(parse_s3_url(url)))
        taken = streams.lease("fenced", take_over_after=0)  # its holder is stopped: the stream does not move
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    out, _ = proc.communicate(timeout=120)
    lines = [orjson.loads(x) for x in out.splitlines()]
    assert lines[0]["error"] == "LeaseLost", lines
    assert lines[1]["error"] in ("LeaseLost", "StreamPoisoned")
    assert read_receipts(receipts) == []  # the provider never saw a request
    chain = stored_chain(url, "fenced")
    assert [e["kind"] for e in chain] == ["task.created", "note"]  # nothing of the fenced writer after the stop
    taken.release()
    with intentlog.open(url) as ledger:  # the stream verifies and takes the next writer
        ledger.task("fenced").append("note", {"after": "the take-over"})
    assert [e["kind"] for e in stored_chain(url, "fenced")][-1] == "note"


def test_repair_and_fork_on_the_store_write_nothing_for_nothing(url: str, tmp_path: Path) -> None:
    os.chdir(tmp_path)
    with intentlog.open(url) as ledger:
        ledger.task("t").append("note", {})
        before = stored_chain(url, "t")
        assert ledger.repair("t").action == "none"  # damage is named and refused: tests/test_s3_ops_repair.py
        with pytest.raises(intentlog.UnknownCall):  # fork runs on the store (tests/test_s3_ops_fork.py)
            ledger.fork("t", "call-1")
    assert stored_chain(url, "t") == before and os.listdir(tmp_path) == []


def test_a_damaged_stream_on_the_store_is_refused_by_the_writer(url: str) -> None:
    with intentlog.open(url) as ledger:
        ledger.task("d").append("note", {"v": 1})
        ledger.task("d").append("note", {"v": 9})  # the edit below is not the last line: the chain sees it
    client = S3Client(parse_s3_url(url))
    seg = sorted(k for k, _ in client.scan("tasks/d/s"))[-3]  # the first note's segment (then v=9, the release)
    body = client.get(seg)
    assert body is not None and b'"data":{"v":1}' in body
    client.delete(seg)
    client.create(seg, body.replace(b'"data":{"v":1}', b'"data":{"v":2}'))
    keys_before = sorted(k for k, _ in client.scan("tasks"))
    with intentlog.open(url) as again, pytest.raises(intentlog.CorruptStream):
        again.task("d").append("note", {"v": 3})
    # the writer leased and gave the lease back; it appended no event
    after = [k for k, _ in client.scan("tasks/d/s")]
    assert len(after) == len([k for k in keys_before if "/s/" in k]) + 2
    assert b'"v":3' not in b"".join(client.get(k) or b"" for k in after)


def test_a_store_that_cannot_fence_is_refused_before_the_first_write(monkeypatch: pytest.MonkeyPatch) -> None:
    import intentlog.s3 as s3

    store = s3_server.MemoryClient(fencing=False, name="no-fence")
    monkeypatch.setattr(s3, "S3Client", lambda location, env=None: store)
    with pytest.raises(StoreRefused):
        intentlog.open("s3://bucket/no-fence")
    assert not [k for k in store.objects if not k.startswith("_probe/")]  # no stream, no object written
    reader = intentlog.open("s3://bucket/no-fence", create=False)  # a reader runs no probe and writes nothing
    assert reader.task_ids() == [] and not [k for k in store.objects if not k.startswith("_probe/")]
