"""Group commit on the object store: a batch is ONE segment, put by its sync, and never sooner.

On a real SeaweedFS. What each test reads back is the store itself (a fresh handle, every
line checked against the one before) and, for effects, the synthetic provider's own
receipt log: the outside world.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import s3_server
from effect_child import KEY, request, review
from test_s3_ledger import stored_chain

import intentlog
from intentlog.demo.provider import SyntheticProvider, read_receipts
from intentlog.errors import LeaseLost
from intentlog.s3 import ObjectStreams, S3Client, parse_s3_url

TESTS = Path(__file__).parent


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


def segments(url: str, task: str) -> list[str]:
    """The kinds of the task's segments, in order, as the store lists them."""
    streams = ObjectStreams(S3Client(parse_s3_url(url)))
    tail = streams.tail(task)
    return [streams.segment(task, n)[0].kind for n in range(tail.seg + 1)]


def test_a_batch_is_one_segment_put_at_its_end_and_the_writer_reads_it_before(url: str) -> None:
    with intentlog.open(url) as ledger:
        t = ledger.task("notes")
        t.append("note", {"n": 0})
        before = segments(url, "notes")
        with t.batch():
            for n in range(1, 6):
                t.append("note", {"n": n})
            # the writer's own reads see the group, as on a folder ...
            assert [e.data["n"] for e in t.events(since=1)] == [0, 1, 2, 3, 4, 5]
            assert t.work_state().events == 7
            # ... and nothing of it is on the store yet
            assert segments(url, "notes") == before
            assert [e["data"].get("n") for e in stored_chain(url, "notes")] == [None, 0]
        after = segments(url, "notes")
        assert after == [*before, "data"], "the five events are one segment"
        assert [e["data"].get("n") for e in stored_chain(url, "notes")] == [None, 0, 1, 2, 3, 4, 5]
    assert segments(url, "notes")[-1] == "release"


def test_an_effect_costs_one_segment_per_durability_point(url: str, tmp_path: Path) -> None:
    receipts = tmp_path / "receipts.jsonl"
    provider = SyntheticProvider(receipts)
    with intentlog.open(url) as ledger:
        t = ledger.task("review")
        t.append("note", {})
        before = len(segments(url, "review"))
        t.effect(KEY, request("model-a"), provider.send, interpret=review)
        added = segments(url, "review")[before:]
        kinds = [e["kind"] for e in stored_chain(url, "review")]
    # the intent with attempt.started (before the send), the observation, the interpretation
    assert added == ["data"] * 3, added
    assert kinds.count("attempt.started") == 1 and kinds.count("attempt.observed") == 1
    assert len(read_receipts(receipts)) == 1


def test_a_lease_taken_over_before_the_sync_of_attempt_started_sends_nothing(url: str, tmp_path: Path) -> None:
    """The point of no return is the sync: the intent is buffered, the lease taken, attempt.started's
    sync is refused whole, and the provider never sees a request."""
    receipts = tmp_path / "receipts.jsonl"
    provider = SyntheticProvider(receipts)
    taker = ObjectStreams(S3Client(parse_s3_url(url)))
    taken: list[object] = []
    ledger = intentlog.open(url)
    t = ledger.task("fenced")
    t.append("note", {"before": "the take-over"})

    def take_over(kind: str, data: Mapping[str, Any]) -> None:
        if kind == "attempt.started" and not taken:  # the intent is appended, not synced
            taken.append(taker.lease("fenced", take_over_after=0))

    t.stream.before_append = take_over
    with pytest.raises(LeaseLost):
        t.effect(KEY, request("model-a"), provider.send, interpret=review)
    assert taken, "the lease was taken between the unsynced appends and their sync"
    assert read_receipts(receipts) == [], "the provider never saw a request"
    kinds = [e["kind"] for e in stored_chain(url, "fenced")]
    assert kinds == ["task.created", "note"], "neither the intent nor attempt.started was stored"
    with pytest.raises(LeaseLost):
        t.append("note", {"after": "the fence"})
    assert [e["kind"] for e in stored_chain(url, "fenced")] == ["task.created", "note"]
    t.stream.before_append = None
    ledger.close()
    assert segments(url, "fenced")[-1] == "lease", "the fenced holder wrote nothing, not even a release"
    taken[0].release()  # type: ignore[attr-defined]
    with intentlog.open(url) as again:  # the next writer finds a whole chain and runs the effect once
        again.task("fenced").effect(KEY, request("model-a"), provider.send, interpret=review)
    assert len(read_receipts(receipts)) == 1
    assert [e["kind"] for e in stored_chain(url, "fenced")].count("attempt.started") == 1


CRASH = textwrap.dedent(
    """
    import os, signal, sys
    import intentlog
    t = intentlog.open(sys.argv[1]).task("crash")
    t.append("note", {"n": "synced"})
    with t.batch():
        t.append("note", {"n": "buffered-1"})
        t.append("note", {"n": "buffered-2"})
        assert [e.data["n"] for e in t.events(since=1)] == ["synced", "buffered-1", "buffered-2"]
        print("buffered", flush=True)
        sys.stdin.readline()
    print("unreachable", flush=True)
    """
)


def test_a_crash_before_the_sync_loses_only_the_unsynced_records(url: str) -> None:
    env = {**os.environ, **s3_server.seaweed().env()}
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH, url], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "buffered"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)  # reaps it and closes its pipes
    assert [e["data"].get("n") for e in stored_chain(url, "crash")] == [None, "synced"]
    with ObjectStreams(S3Client(parse_s3_url(url))).lease("crash", take_over_after=0) as taken:
        assert taken.next_seq == 2
    with intentlog.open(url) as ledger:  # the chain is whole: the next writer appends after "synced"
        ledger.task("crash").append("note", {"n": "next"})
    assert [e["data"].get("n") for e in stored_chain(url, "crash")] == [None, "synced", "next"]


def test_a_fenced_holders_buffered_records_are_never_stored(url: str) -> None:
    mine = ObjectStreams(S3Client(parse_s3_url(url)))
    other = ObjectStreams(S3Client(parse_s3_url(url)))
    mine.create("s", [b'{"r":0}'])
    lease = mine.lease("s")
    assert lease.append([b'{"mine":1}', b'{"mine":2}'], expected_seq=1, sync=False) == 3
    assert mine.read("s") == b'{"r":0}\n{"mine":1}\n{"mine":2}\n'
    assert other.read("s") == b'{"r":0}\n'
    with other.lease("s", take_over_after=0) as theirs:
        theirs.append([b'{"theirs":1}'], expected_seq=1)
    with pytest.raises(LeaseLost):
        lease.sync()
    with pytest.raises(LeaseLost):
        lease.append([b"{}"], expected_seq=3)
    lease.release()
    assert other.read("s") == b'{"r":0}\n{"theirs":1}\n'
    assert mine.read("s") == b'{"r":0}\n{"theirs":1}\n', "once fenced, its own reads are the store's again"


def test_a_close_that_cannot_put_the_buffered_group_says_so(url: str) -> None:
    ledger = intentlog.open(url)
    t = ledger.task("closing")
    t.append("note", {"n": "synced"})
    batch = t.batch()
    batch.__enter__()
    t.append("note", {"n": "buffered"})
    taken = ObjectStreams(S3Client(parse_s3_url(url))).lease("closing", take_over_after=0)
    with pytest.raises(LeaseLost):
        t.stream.close()  # on a folder a failed final sync raises too: never a silent loss
    assert t.stream.close_failures == 1
    with pytest.raises(LeaseLost):  # the batch's own end says it again
        batch.__exit__(None, None, None)
    taken.release()
    assert [e["data"].get("n") for e in stored_chain(url, "closing")] == [None, "synced"]


def test_a_release_that_cannot_put_the_buffer_raises_and_stores_nothing(url: str) -> None:
    mine = ObjectStreams(S3Client(parse_s3_url(url)))
    mine.create("r", [b'{"r":0}'])
    lease = mine.lease("r")
    lease.append([b'{"mine":1}'], expected_seq=1, sync=False)
    ObjectStreams(S3Client(parse_s3_url(url))).lease("r", take_over_after=0).release()
    with pytest.raises(LeaseLost):
        lease.release()
    lease.release()  # once lost, idempotent
    assert mine.read("r") == b'{"r":0}\n'
