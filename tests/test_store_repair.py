"""``repair`` on a ledger on the store (a real SeaweedFS): the folder's judgement and refusals, a fenced cut.

A torn last segment is cut as a folder's torn tail is (without ``accept_damage``); a
damaged middle segment is refused as a folder refuses it, writing nothing, and cut with
``accept_damage`` (the cut recorded in ``stream.repaired`` in the same segment, the bytes
moved aside kept under the store's ``quarantine/``); a writer that takes the lease over
while the repair runs fences it (nothing cut), and a repair that dies before its cut
leaves the stream exactly as damaged as it was, never shorter.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import s3_server
from s3_server import client_of, snapshot

import intentlog
import intentlog.s3
from intentlog.bundle import export_bundle
from intentlog.checker import verify_ledger, verify_path
from intentlog.demo.provider import SyntheticProvider
from intentlog.errors import CorruptStream, LeaseLost
from intentlog.eventlog.remote import events_in
from intentlog.s3 import ObjectStorage, ObjectStreams, Segment
from intentlog.s3.objects import ObjectArtifacts
from intentlog.storerepair import repair_stored

TORN = b'{"data":{"n":9},"kind":"note","pr'  # what a torn append leaves: part of one line


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> str:
    """Task ``t``: six notes, each its own segment (the writer released its lease)."""
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        t = ledger.task("t")
        for i in range(6):
            t.append("note", {"n": i})
    return url


def kinds(url: str, task: str = "t") -> list[str]:
    """The kinds of the stream's events as a reader reads them now."""
    streams = intentlog.s3.connect(url, write=False).streams
    return [ev.kind for ev in events_in(streams.read(task), task)]


def notes(url: str, task: str = "t") -> list[int]:
    streams = intentlog.s3.connect(url, write=False).streams
    return [ev.data["n"] for ev in events_in(streams.read(task), task) if ev.kind == "note"]


def put_torn(url: str, task: str = "t") -> None:
    """A data segment whose last record is a torn line, put under a lease that is then released."""
    streams = intentlog.s3.connect(url).streams
    with streams.lease(task) as lease:
        lease.append([TORN], expected_seq=lease.next_seq)


def note_segments(url: str, task: str = "t") -> list[int]:
    streams = intentlog.s3.connect(url, write=False).streams
    return [n for n in range(streams.tail(task).seg + 1) if b'"note"' in streams.segment(task, n)[1]]


def edit_middle(url: str) -> None:
    """The third note's segment edited in place: the chain breaks at the fourth note (a crash cannot do that)."""
    client = client_of(url)
    key = f"tasks/t/s/{note_segments(url)[2]:012d}"
    body = client.get(key)
    assert body is not None
    client.delete(key)
    assert client.create(key, body.replace(b'"n":2', b'"n":7', 1))


def errors(report: intentlog.checker.VerifyReport) -> list[str]:
    return [f"{p.code}: {p.message}" for p in report.problems if p.severity == "error"]


def test_a_torn_last_segment_is_cut_as_a_folder_cuts_its_torn_tail(store: str, tmp_path: Path) -> None:
    put_torn(store)
    with intentlog.open(store) as ledger, pytest.raises(CorruptStream):
        ledger.task("t").append("note", {"n": 6})  # the writer refuses the torn record, as it always did
    with intentlog.open(store, create=False) as ledger:
        planned = ledger.repair("t", dry_run=True)
        report = ledger.repair("t")
    assert planned.action == report.action == "torn_tail"
    assert (planned.line, planned.quarantined, planned.size) == (report.line, report.quarantined, report.size)
    assert report.line == 8 and report.size == len(TORN) + 1
    assert report.event is not None and report.event.kind == "stream.repaired" and report.event.seq == 7
    kept = client_of(store).get(report.quarantined or "")
    assert kept == TORN + b"\n", "the torn bytes are kept under quarantine/ on the store"
    assert kinds(store) == ["task.created", *["note"] * 6, "stream.repaired"]
    with intentlog.open(store) as ledger:
        ledger.task("t").append("note", {"n": 6})
        assert errors(verify_ledger(ledger)) == []
    assert notes(store) == [0, 1, 2, 3, 4, 5, 6]
    export_bundle(store, out=tmp_path / "bundle")  # the bytes moved aside go with the stream that names them
    assert (tmp_path / "bundle" / (report.quarantined or "")).read_bytes() == TORN + b"\n"
    assert verify_path(tmp_path / "bundle").ok
    # a folder holding the same bytes, torn the same way, is repaired the same way
    with intentlog.open(tmp_path / "ledger") as folder:
        for i in range(6):
            folder.task("t").append("note", {"n": i})
    path = tmp_path / "ledger" / "tasks" / "t.jsonl"
    with open(path, "ab") as f:
        f.write(TORN + b"\n")
    with intentlog.open(tmp_path / "ledger") as folder:
        there = folder.repair("t")
    assert (there.action, there.line, there.size) == (report.action, report.line, report.size)
    assert verify_path(tmp_path / "ledger").ok


def test_a_damaged_middle_segment_is_refused_as_on_a_folder_then_cut_when_accepted(store: str) -> None:
    edit_middle(store)
    before = snapshot(store)
    for flags in ({}, {"dry_run": True}, {"accept_resend": True}):
        with intentlog.open(store, create=False) as ledger, pytest.raises(CorruptStream) as refused:
            ledger.repair("t", **flags)
        assert "accept the damage with 'intentlog repair TASK --accept-damage'" in str(refused.value), flags
        assert "tasks/t/s/" in str(refused.value)
    assert snapshot(store) == before, "a refused repair writes nothing"
    with intentlog.open(store, create=False) as ledger:
        planned = ledger.repair("t", accept_damage=True, dry_run=True)
        assert snapshot(store) == before, "a dry run writes nothing"
        report = ledger.repair("t", accept_damage=True)
    assert planned.action == report.action == "damage" and planned.quarantined == report.quarantined
    assert report.line == 5, "the fourth note (line 5) no longer chains: cut from there, as on a folder"
    assert report.event is not None and report.event.data["accepted"] == "damage"
    assert notes(store) == [0, 1, 7], "the trusted lines before the bad one stay, the edited one with them"
    assert kinds(store)[-1] == "stream.repaired"
    kept = client_of(store).get(report.quarantined or "")
    assert kept is not None and b'"n":3' in kept and b'"n":5' in kept, "the cut lines are kept, not lost"
    assert all(before[k] == v for k, v in snapshot(store).items() if k in before), "nothing is replaced"
    with intentlog.open(store) as ledger:
        ledger.task("t").append("note", {"n": 8})
        found = errors(verify_ledger(ledger))
    assert [f.split(":")[0] for f in found] == ["suspect_repair"], found  # as on a folder: line 4 was edited
    assert notes(store) == [0, 1, 7, 8]


def test_an_unreadable_middle_segment_is_damage_cut_at_its_start(store: str) -> None:
    client = client_of(store)
    key = f"tasks/t/s/{note_segments(store)[3]:012d}"
    client.delete(key)
    assert client.create(key, b"not a segment at all\n")
    with intentlog.open(store, create=False) as ledger, pytest.raises(CorruptStream, match="header line"):
        ledger.repair("t")
    with intentlog.open(store, create=False) as ledger:
        report = ledger.repair("t", accept_damage=True)
    assert report.action == "damage" and report.line == 5
    assert notes(store) == [0, 1, 2]
    with intentlog.open(store) as ledger:
        assert errors(verify_ledger(ledger)) == []


def hooked(url: str, hook: Callable[[int], None]) -> ObjectStorage:
    """The store's seams with ``hook(n)`` called before the n-th put the repair makes (1: the quarantine copy)."""
    client = client_of(url)
    count = [0]

    def before() -> None:
        count[0] += 1
        hook(count[0])

    return ObjectStorage(client, ObjectStreams(client, before_write=before), ObjectArtifacts(client))


def test_a_writer_taking_the_lease_over_during_the_repair_fences_its_cut(store: str) -> None:
    edit_middle(store)
    before = ObjectStreams(client_of(store)).read("t")
    taken: list[int] = []

    def take_over(n: int) -> None:
        if n == 3:  # the quarantine copy and the repair's lease are stored; the cut is next
            lease = intentlog.s3.connect(store).streams.lease("t", take_over_after=0)
            taken.append(lease.epoch)

    with pytest.raises(LeaseLost):
        repair_stored(hooked(store, take_over), "t", accept_damage=True, accept_resend=False, dry_run=False)
    assert taken, "the second writer took the lease over"
    client = client_of(store)
    assert not any(b"stream.repaired" in v for k, v in snapshot(store).items() if k.startswith("tasks/"))
    streams = ObjectStreams(client)
    tail = streams.tail("t")
    assert (tail.kind, tail.epoch) == ("lease", taken[0]), "the taker's lease stands; no cut after it"
    with pytest.raises(CorruptStream):
        list(events_in(streams.read("t"), "t"))  # still the damaged stream: not a shorter one
    assert streams.read("t") == before, "every byte of the stream as it was"


def test_a_repair_that_dies_before_its_cut_leaves_the_stream_as_damaged_as_it_was(store: str) -> None:
    edit_middle(store)
    before = ObjectStreams(client_of(store)).read("t")

    def die(n: int) -> None:
        if n == 3:
            raise KeyboardInterrupt  # killed between its lease and its cut

    with pytest.raises(KeyboardInterrupt):
        repair_stored(hooked(store, die), "t", accept_damage=True, accept_resend=False, dry_run=False)
    assert ObjectStreams(client_of(store)).read("t") == before, "every byte of the stream as it was"
    with pytest.raises(CorruptStream):
        list(events_in(ObjectStreams(client_of(store)).read("t"), "t"))
    tail = ObjectStreams(client_of(store)).tail("t")
    assert tail.kind == "lease" and tail.holder.startswith("repair-")
    with intentlog.open(store, create=False) as ledger:  # the dead repair's lease is taken over by the next repair
        report = ledger.repair("t", accept_damage=True)
    assert report.action == "damage" and notes(store) == [0, 1, 7]


def test_damage_before_a_started_send_is_cut_only_with_accept_resend(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        t = ledger.task("t")
        t.append("note", {"n": 0})
        t.effect("k1", {"idempotency_key": "k1"}, SyntheticProvider(tmp_path / "receipts.jsonl").send)
        t.append("note", {"n": 1})
    streams = intentlog.s3.connect(url, write=False).streams
    first = next(n for n in range(streams.tail("t").seg) if b'"note"' in streams.segment("t", n)[1])
    client = client_of(url)
    key = f"tasks/t/s/{first:012d}"
    body = client.get(key)
    assert body is not None
    client.delete(key)
    assert client.create(key, body.replace(b'"n":0', b'"n":5', 1))  # the chain breaks at the line after it
    before = snapshot(url)
    with (
        intentlog.open(url, create=False) as ledger,
        pytest.raises(CorruptStream, match=r"attempt\.started") as refused,
    ):
        ledger.repair("t", accept_damage=True)
    assert "--accept-resend" in str(refused.value) and "tasks/t/s/" in str(refused.value)
    assert snapshot(url) == before
    with intentlog.open(url, create=False) as ledger:
        report = ledger.repair("t", accept_damage=True, accept_resend=True)
    assert report.event is not None and report.event.data["accepted"] == "damage+resend"
    assert [s["attempt"] for s in report.event.data["started"]] == [1]
    assert kinds(url) == ["task.created", "note", "stream.repaired"]


def test_a_cut_voiding_a_checkpointed_segment_is_read_from_the_start() -> None:
    """A reader starting at a checkpoint the cut voided reads again from 0: it never sees a voided segment."""
    client = s3_server.MemoryClient()
    streams = ObjectStreams(client)
    streams.create("t", [b"r0"])
    with streams.lease("t") as lease:
        for i in range(1, 80):
            lease.append([b"r%d" % i], expected_seq=i)
    assert any(k.startswith("tasks/t/c/") for k in client.objects), "a checkpoint was made"
    tail = streams.tail("t")
    # a cut after the tail voiding from segment 10 (which holds r9): r0..r8 stay, then the cut's record
    at = tail.seg + 1
    cut = Segment("cut", at, 9, sum(len(b"r%d" % i) + 1 for i in range(9)), tail.epoch + 1, "repair-x", 1, 4, 10)
    assert streams.client.create(f"tasks/t/s/{at:012d}", cut.encode([b"cut"]))
    fresh = ObjectStreams(client)
    assert fresh.read("t") == b"".join(b"r%d\n" % i for i in range(9)) + b"cut\n"
    assert fresh.read("t", 20) == fresh.read("t")[20:]
    assert fresh.read("t", 300) == b"", "a read from an offset past a checkpoint the cut voided: nothing there now"
    assert streams.read("t") == fresh.read("t"), "a handle that cached the voided segments reads afresh"


@pytest.mark.parametrize("damage", ["edited event", "hole", "splice", "stale lease"])
def test_every_kind_of_segment_damage_accepted_is_cut_and_then_verifies(
    damage: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from test_s3_ops_repair import DAMAGE

    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        t = ledger.task("t")
        t.append("note", {"n": 0})
        t.effect("k1", {"idempotency_key": "k1"}, SyntheticProvider(tmp_path / "receipts.jsonl").send)
        for i in range(1, 4):
            t.append("note", {"n": i})
        ledger.task("other").append("note", {"fine": True})
    DAMAGE[damage](url)
    with intentlog.open(url, create=False) as ledger, pytest.raises(CorruptStream):
        ledger.repair("t")
    with intentlog.open(url, create=False) as ledger:
        report = ledger.repair("t", accept_damage=True, accept_resend=True)
    assert report.action == "damage" and report.event is not None
    assert kinds(url)[-1] == "stream.repaired" and kinds(url)[:2] == ["task.created", "note"]
    with intentlog.open(url) as ledger:
        ledger.task("t").append("note", {"n": 9})
        found = [f.split(":")[0] for f in errors(verify_ledger(ledger))]
    assert set(found) <= {"suspect_repair"}, found
    assert notes(url)[-1] == 9
