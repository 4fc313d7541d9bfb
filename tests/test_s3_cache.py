"""The segments a stream handle read are kept, and every use of them is checked against the stream's tail.

Reads through a handle with a warm cache must give exactly the bytes a fresh handle reads
-- under appends by another writer, across a lease take-over, after a segment is deleted
or replaced (even by other bytes of the same size: the listing's ETag tells) -- and the
cache must never hide damage ``verify`` finds (it reads through a handle of its own; the
next lease reads afresh too). A writer holding the lease knows its tail: its reads make no
request at all. A client without ETags: only the holder reads from the cache. Real SeaweedFS for the concrete cases; the
in-process store for the property (hypothesis), where hundreds of histories are cheap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s3_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from s3_server import MemoryClient
from s3_server import TaggedMemoryClient as Tagged

import intentlog
from intentlog.checker import verify_ledger
from intentlog.errors import CorruptStream, LeaseLost, TaskBusy
from intentlog.eventlog.remote import events_in
from intentlog.ledger import Ledger
from intentlog.s3 import ObjectLease, ObjectStreams, S3Client, on_client, parse_s3_url


class Counting:
    """An ObjectClient that counts its requests by kind (ETags passed through)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, Counter[str]()

    def describe(self, key: str = "") -> str:
        return str(self.inner.describe(key))

    def create(self, key: str, data: bytes) -> bool:
        self.calls["PUT"] += 1
        return bool(self.inner.create(key, data))

    def get(self, key: str) -> bytes | None:
        self.calls["GET"] += 1
        got: bytes | None = self.inner.get(key)
        return got

    def create_tagged(self, key: str, data: bytes) -> tuple[bool, str | None]:
        self.calls["PUT"] += 1
        return self.inner.create_tagged(key, data)  # type: ignore[no-any-return]

    def get_tagged(self, key: str) -> tuple[bytes, str | None] | None:
        self.calls["GET"] += 1
        return self.inner.get_tagged(key)  # type: ignore[no-any-return]

    def scan_tagged(self, folder: str, start_after: str | None = None) -> Iterator[tuple[str, int, str | None]]:
        self.calls["LIST"] += 1
        return iter(list(self.inner.scan_tagged(folder, start_after)))

    def head(self, key: str) -> int | None:
        self.calls["HEAD"] += 1
        got: int | None = self.inner.head(key)
        return got

    def scan(self, folder: str, start_after: str | None = None) -> Iterator[tuple[str, int]]:
        self.calls["LIST"] += 1
        return iter(list(self.inner.scan(folder, start_after)))

    def folders(self, folder: str) -> list[str]:
        self.calls["LIST"] += 1
        return list(self.inner.folders(folder))

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def outcome(streams: ObjectStreams, name: str, offset: int = 0) -> tuple[str, Any]:
    """What a read gives: its bytes, or the kind of error it raises."""
    try:
        return "bytes", streams.read(name, offset)
    except (CorruptStream, FileNotFoundError) as exc:
        return "error", type(exc).__name__


def tail_of(streams: ObjectStreams, name: str) -> tuple[str, Any]:
    try:
        return "tail", streams.tail(name)
    except (CorruptStream, FileNotFoundError) as exc:
        return "error", type(exc).__name__


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


def client_of(url: str) -> S3Client:
    return S3Client(parse_s3_url(url))


def segments(client: Any, name: str) -> list[str]:
    return sorted(k for k, _ in client.scan(f"tasks/{name}/s"))


def test_a_cached_reader_reads_what_a_fresh_one_does_under_another_writers_appends(url: str) -> None:
    counting = Counting(client_of(url))
    reader = ObjectStreams(counting)
    writer = ObjectStreams(client_of(url))
    writer.create("t", [b"r0"])
    with writer.lease("t") as lease:
        for i in range(1, 6):
            lease.append([b"r%d" % i], expected_seq=i)
    first = reader.read("t")
    assert first == ObjectStreams(client_of(url)).read("t")
    with writer.lease("t") as lease:  # another writer appends three segments
        for i in range(6, 9):
            lease.append([b"r%d" % i], expected_seq=i)
    counting.calls.clear()
    again = reader.read("t")
    assert again == ObjectStreams(client_of(url)).read("t") == first + b"r6\nr7\nr8\n"
    assert counting.calls == {"LIST": 1, "GET": 5}, "one LIST, and only the segments after the cached ones"
    counting.calls.clear()
    assert reader.read("t", len(first)) == b"r6\nr7\nr8\n" and reader.tail("t").kind == "release"
    assert counting.calls == {"LIST": 2}, "nothing new: a LIST each, no GET"


def test_across_a_lease_take_over_the_cache_follows_the_new_holder_and_the_old_one_is_fenced(url: str) -> None:
    reader = ObjectStreams(client_of(url))
    a, b = ObjectStreams(client_of(url)), ObjectStreams(client_of(url))
    a.create("t", [b"r0"])
    old = a.lease("t")
    old.append([b"a1"], expected_seq=1)
    seen = reader.read("t")
    assert seen.endswith(b"a1\n") and a.read("t") == seen
    new = b.lease("t", take_over_after=0.0)
    new.append([b"b2"], expected_seq=2)
    assert reader.read("t") == ObjectStreams(client_of(url)).read("t") == seen + b"b2\n"
    assert reader.tail("t").epoch == new.epoch == old.epoch + 1
    with pytest.raises(LeaseLost):
        old.append([b"a2"], expected_seq=2)
    assert a.read("t") == reader.read("t"), "the fenced handle reads the stream as the store holds it"
    new.release()
    assert reader.read("t") == ObjectStreams(client_of(url)).read("t")


def test_the_cache_never_hides_damage_verify_finds(url: str) -> None:
    with intentlog.open(url) as ledger:
        for v in range(4):
            ledger.task("d").append("note", {"v": v})
        ledger.task("d").close()
        cached = [e.data for e in ledger.task("d").events()]  # read through the ledger's handle: now cached
        assert cached[-1] == {"v": 3}
        client = client_of(url)
        seg = next(k for k in segments(client, "d") if b'"data":{"v":1}' in (client.get(k) or b""))
        body = client.get(seg) or b""
        client.delete(seg)  # the same size, other bytes: only the ETag tells
        assert client.create(seg, body.replace(b'"data":{"v":1}', b'"data":{"v":7}'))
        with pytest.raises(CorruptStream):
            list(ledger.task("d").events())  # the cached handle too: the listing names the object by another ETag
        found = verify_ledger(ledger)
        assert "error" in {p.severity for p in found.problems}, "verify reads afresh: the edit is found"
        with pytest.raises(CorruptStream):
            list(events_in(ObjectStreams(client_of(url)).read("d"), "d"))  # any fresh handle: the chain breaks
        before = segments(client, "d")
        with pytest.raises(CorruptStream):
            ledger.task("d").append("note", {"v": 4})  # the next lease reads afresh: refused, nothing written
        plain = ObjectStreams(client_of(url))
        added = [plain.segment("d", int(k.rsplit("/", 1)[1]))[0].kind for k in segments(client, "d")[len(before) :]]
        assert added == ["lease", "release"], "no event: the lease taken and given back"
        other = segments(client, "d")[0]  # a segment of another size: even the cached reader sees it
        client.delete(other)
        assert client.create(other, b"not a segment\n")
        with pytest.raises(CorruptStream):
            list(ledger.task("d").events())


def test_a_writer_holding_the_lease_reads_with_no_request(url: str) -> None:
    counting = Counting(client_of(url))
    ledger = Ledger(Path(url), storage=on_client(counting), location=url)
    task = ledger.task("w")
    task.append("note", {"v": 0})
    for v in range(1, 4):
        task.append("note", {"v": v})
        counting.calls.clear()
        assert [e.data["v"] for e in task.events() if e.kind == "note"] == list(range(v + 1))
        assert sum(counting.calls.values()) == 0, counting.calls
    ledger.close()
    assert [e.data["v"] for e in intentlog.open(url).task("w").events() if e.kind == "note"] == [0, 1, 2, 3]


# -- the property: a warm cache reads exactly what a fresh handle reads ------------------------------------------

OPS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "a_sync", "b_sync", "a_release", "b_release", "read", "hole", "junk"]),
        st.integers(0, 7)),
    max_size=30,
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_cached_reads_are_byte_identical_to_fresh_ones(ops: list[tuple[str, int]]) -> None:
    client = Tagged()
    writers = {"a": ObjectStreams(client), "b": ObjectStreams(client)}
    leases: dict[str, ObjectLease | None] = {"a": None, "b": None}
    reader = ObjectStreams(client)
    writers["a"].create("t", [b"r0"])
    damaged = False
    for op, n in ops:
        who = op[0]
        if op in ("a", "b"):
            lease = leases[who]
            if lease is None:
                try:
                    lease = leases[who] = writers[who].lease("t", take_over_after=0.0)
                except (CorruptStream, TaskBusy, FileNotFoundError):
                    continue
            try:
                lease.append([b"%s%d" % (who.encode(), i) for i in range(n % 3 + 1)], expected_seq=lease.next_seq,
                             sync=n % 2 == 0)  # fmt: skip
            except LeaseLost:
                leases[who] = None
        elif op.endswith("_sync") and leases[who] is not None:
            try:
                leases[who].sync()  # type: ignore[union-attr]
            except LeaseLost:
                leases[who] = None
        elif op.endswith("_release") and leases[who] is not None:
            try:
                leases[who].release()  # type: ignore[union-attr]
            except LeaseLost:
                pass
            leases[who] = None
        elif op in ("hole", "junk"):
            keys = segments(client, "t")
            if not keys:
                continue
            key = keys[n % len(keys)]
            if op == "hole":
                client.delete(key)
            elif n % 2:
                client.objects[key] = b"junk %d\n" % n
            else:  # other bytes of the same size: only the ETag tells
                body = client.objects[key]
                client.objects[key] = body[:-2] + (b"x\n" if body[-2:] != b"x\n" else b"y\n")
            damaged = True
        fresh = ObjectStreams(client)
        size = len(fresh.read("t")) if outcome(fresh, "t")[0] == "bytes" else 0
        offset = (n * 3) % (size + 1)
        assert outcome(reader, "t", offset) == outcome(ObjectStreams(client), "t", offset), (op, n)
        assert tail_of(reader, "t") == tail_of(ObjectStreams(client), "t")
        stored = len(fresh.read("t").splitlines()) if size else -1
        for w, lease in leases.items():
            if lease is not None and not lease.dirty and not damaged and lease.next_seq == stored:
                assert writers[w].read("t") == fresh.read("t"), "a holder's own reads, from its cache"


def test_without_etags_only_the_holder_of_the_lease_reads_from_the_cache() -> None:
    """A client that names no ETags cannot tell a replaced segment of one size: readers then read afresh."""
    client = MemoryClient()
    writer, reader = ObjectStreams(client), ObjectStreams(client)
    writer.create("t", [b"r0"])
    with writer.lease("t") as lease:
        lease.append([b"r1"], expected_seq=1)
        assert writer.read("t") == b"r0\nr1\n"
    assert reader.read("t") == b"r0\nr1\n"
    key = next(k for k, body in client.objects.items() if body.endswith(b"r1\n"))
    client.objects[key] = client.objects[key].replace(b"r1", b"r9")  # the same size
    assert reader.read("t") == b"r0\nr9\n", "read afresh: the replaced bytes are what the store holds"
