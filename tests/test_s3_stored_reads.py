"""What a store holds, read from a real SeaweedFS: never a writer's buffer, a forged hint or a stray object.

verify says what the store holds, so in a writer's own process it reads stored bytes only
(a buffered group is not yet on the store). A checkpoint object is a hint (its name is its
content): one that does not describe its segment is ignored, never trusted into a torn
read. An object under a stream's ``s/`` folder whose name is not a 12-digit segment
number, a lease or release segment carrying records, and a ``create`` segment anywhere but
at number 0 are :class:`~intentlog.errors.CorruptStream` (a ``segments`` finding in
verify), never a traceback and never records in the stream.
"""

from __future__ import annotations

import pytest
import s3_server

import intentlog
from intentlog.checker import verify_ledger, verify_storage
from intentlog.errors import CorruptStream
from intentlog.s3 import ObjectArtifacts, ObjectStreams, S3Client, Segment, connect


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


@pytest.fixture
def client() -> S3Client:
    return s3_server.fresh_client()


def stream_of(client: S3Client, records: int = 5) -> tuple[ObjectStreams, bytes]:
    """Stream ``t``: a create with one record, a lease, ``records`` appends, a release."""
    s = ObjectStreams(client)
    s.create("t", [b"r0"])
    with s.lease("t") as lease:
        for i in range(1, records + 1):
            lease.append([b"rec-%d" % i], expected_seq=i)
    return s, s.read("t")


def codes(s: ObjectStreams, client: S3Client) -> list[tuple[str, str, str | None]]:
    report = verify_storage(s, ObjectArtifacts(client), where=client.describe())
    return [(p.severity, p.code, p.task) for p in report.problems if p.severity == "error"]


def test_verify_in_a_writers_process_counts_only_what_the_store_holds(url: str) -> None:
    with intentlog.open(url) as ledger:
        t = ledger.task("b")
        t.append("note", {"n": 0})
        with t.batch():
            t.append("note", {"n": 1})
            t.append("note", {"n": 2})
            assert ledger.storage is not None
            seen_by_writer = ledger.storage.streams.read("b").count(b"\n")
            stored = ObjectStreams(connect(url, write=False).client).read("b").count(b"\n")
            assert (seen_by_writer, stored) == (4, 2), "the batch is buffered, not stored"
            mine = verify_ledger(ledger)
            fresh = connect(url, write=False)
            theirs = verify_storage(fresh.streams, fresh.objects, where=url)
            assert mine.events == theirs.events == stored
        after = verify_ledger(ledger)
        assert after.events == 4 and after.ok


def test_a_checkpoint_that_does_not_describe_its_segment_is_ignored(client: S3Client) -> None:
    s, true = stream_of(client)
    real = [k for k, _ in client.scan("tasks/t/c")]
    assert client.create("tasks/t/c/000000000003.0.0", b"")  # "segment 3 ends at seq 0, byte 0": a lie
    assert client.create("tasks/t/c/000000000099.99.99999", b"")  # past the tail
    assert client.create("tasks/t/c/000000000098.0.0", b"")  # past the tail, and below every offset
    assert client.create("tasks/t/c/00000000000\u00b2.1.1", b"")  # not ASCII digits: not a checkpoint
    for offset in range(len(true) + 1):
        assert s.read("t", offset) == true[offset:], offset
    assert ObjectStreams(client).read("t") == true
    assert s.tail("t").kind == "release" and s.tail("t").end_seq == 6
    with s.lease("t") as lease:
        lease.append([b"after"], expected_seq=6)
    assert s.read("t") == true + b"after\n"
    assert real == [], "five appends make no real checkpoint: every one above is forged"


def test_a_stray_key_among_the_segments_is_corrupt_not_a_traceback(client: S3Client) -> None:
    s, true = stream_of(client, 2)
    assert client.create("tasks/t/s/README", b"hello")
    with pytest.raises(CorruptStream, match="README"):
        s.read("t")
    with pytest.raises(CorruptStream, match="README"):
        s.tail("t")
    assert codes(s, client) == [("error", "segments", "t")]
    client.delete("tasks/t/s/README")
    assert client.create("tasks/t/s/00000000000\u0661", b"x")  # an Arabic-Indic digit: not a segment number
    with pytest.raises(CorruptStream, match="not a segment"):
        s.read("t")
    assert codes(s, client) == [("error", "segments", "t")]
    client.delete("tasks/t/s/00000000000\u0661")
    assert s.read("t") == true, "the stream itself was never touched"


@pytest.mark.parametrize(
    "forged",
    [
        Segment("lease", 5, 3, 15, 2, "intruder"),  # a lease that carries a record
        Segment("release", 5, 3, 15, 1, "x"),  # a release that carries a record
        Segment("create", 5, 3, 15, 0, ""),  # a second creation, past number 0
    ],
    ids=["lease", "release", "create"],
)
def test_records_only_in_create_and_data_segments_and_create_only_at_zero(client: S3Client, forged: Segment) -> None:
    s, true = stream_of(client, 2)
    tail = s.tail("t")
    assert (tail.kind, tail.seg, tail.end_seq, tail.end_off) == ("release", 4, 3, 15)
    assert client.create(f"tasks/t/s/{forged.seg:012d}", forged.encode([b'{"forged":1}']))
    with pytest.raises(CorruptStream, match="segment 5"):
        s.read("t")
    assert codes(s, client) == [("error", "segments", "t")]
    client.delete(f"tasks/t/s/{forged.seg:012d}")
    assert s.read("t") == true
