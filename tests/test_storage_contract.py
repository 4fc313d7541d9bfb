"""The storage contract: one suite every stream and object storage must pass.

Each test takes a ``streams`` or ``objects`` fixture: a *backend*, which opens handles on one
backing store (``backend.open()``; two handles are two machines sharing it) and knows how to
make that store's writes fail midway (``backend.failing_writes()``). Today the one
implementation is the local folder; a new one (an S3-compatible object store) adds itself to
``STREAM_BACKENDS`` / ``OBJECT_BACKENDS`` and must pass every test here unchanged.

The last section checks what only the folder promises on top (fsync counts, link refusals).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
import s3_server
from blake3 import blake3

import intentlog._internal.fsops
import intentlog._internal.fsutil
import intentlog.eventlog.storage
import intentlog.eventlog.writer
from intentlog.artifacts.objects import FolderObjects, ObjectStore
from intentlog.artifacts.store import ArtifactStore
from intentlog.errors import (
    ArtifactMissing,
    Conflict,
    CorruptStream,
    DigestMismatch,
    IntentlogError,
    LedgerError,
    LinkRefused,
    TaskBusy,
    UsageError,
)
from intentlog.eventlog.storage import NO_STREAM, FolderStreams, StreamStorage
from intentlog.s3 import ObjectArtifacts, ObjectStreams


class StreamBackend:
    def __init__(
        self,
        open_: Callable[[], StreamStorage],
        failing: Callable[[], AbstractContextManager[None]],
        *,
        stamps: bool = True,
    ) -> None:
        self.open = open_
        self.failing_writes = failing
        #: whether the storage can stamp its streams (a store whose client gives no ETags cannot)
        self.stamps = stamps


class ObjectBackend:
    def __init__(self, open_: Callable[[], ObjectStore], failing: Callable[[], AbstractContextManager[None]]) -> None:
        self.open = open_
        self.failing_writes = failing


def _folder_failing(monkeypatch: pytest.MonkeyPatch) -> Callable[[], AbstractContextManager[None]]:
    """Every write in the folder implementation stores half its bytes, then the disk is full."""

    @contextmanager
    def failing() -> Iterator[None]:
        def half(fd: int, data: bytes | memoryview) -> None:
            os.write(fd, bytes(data)[: max(1, len(data) // 2)])
            raise OSError(errno.ENOSPC, "No space left on device")

        with monkeypatch.context() as m:
            m.setattr(intentlog._internal.fsutil, "write_all", half)
            m.setattr(intentlog.eventlog.storage, "write_all", half)
            yield

    return failing


def _folder_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StreamBackend:
    return StreamBackend(lambda: FolderStreams(tmp_path / "tasks"), _folder_failing(monkeypatch))


def _folder_objects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ObjectBackend:
    return ObjectBackend(lambda: FolderObjects(tmp_path), _folder_failing(monkeypatch))


def _s3_failing(
    monkeypatch: pytest.MonkeyPatch, memory: s3_server.MemoryClient | None
) -> Callable[[], AbstractContextManager[None]]:
    """Every put to the store is cut off by the network (an object store keeps no half object)."""

    @contextmanager
    def failing() -> Iterator[None]:
        def reset(*args: object, **kwargs: object) -> None:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

        with monkeypatch.context() as m:
            if memory is not None:
                m.setattr(memory, "fail_creates", True)
            else:
                import obstore

                m.setattr(obstore, "put", reset)
            yield

    return failing


def _s3_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StreamBackend:
    location = s3_server.fresh_location()
    return StreamBackend(lambda: ObjectStreams(s3_server.fresh_client(location)), _s3_failing(monkeypatch, None))


def _s3_objects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ObjectBackend:
    location = s3_server.fresh_location()
    return ObjectBackend(lambda: ObjectArtifacts(s3_server.fresh_client(location)), _s3_failing(monkeypatch, None))


def _memory_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StreamBackend:
    memory = s3_server.TaggedMemoryClient()
    return StreamBackend(lambda: ObjectStreams(memory), _s3_failing(monkeypatch, memory))


def _untagged_streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StreamBackend:
    memory = s3_server.MemoryClient()
    return StreamBackend(lambda: ObjectStreams(memory), _s3_failing(monkeypatch, memory), stamps=False)


def _memory_objects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ObjectBackend:
    memory = s3_server.MemoryClient()
    return ObjectBackend(lambda: ObjectArtifacts(memory), _s3_failing(monkeypatch, memory))


# "s3": a real SeaweedFS (tests/s3_server.py); "memory": the same code over an in-process fencing store
# (naming objects by ETag, as S3 does; "memory-untagged": a store that gives none)
STREAM_BACKENDS = {
    "folder": _folder_streams, "s3": _s3_streams, "memory": _memory_streams, "memory-untagged": _untagged_streams,
}  # fmt: skip
OBJECT_BACKENDS = {"folder": _folder_objects, "s3": _s3_objects, "memory": _memory_objects}


@pytest.fixture(params=sorted(STREAM_BACKENDS))
def streams(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StreamBackend:
    return STREAM_BACKENDS[request.param](tmp_path, monkeypatch)


@pytest.fixture(params=sorted(OBJECT_BACKENDS))
def objects(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ObjectBackend:
    return OBJECT_BACKENDS[request.param](tmp_path, monkeypatch)


RECORDS = [b'{"seq":0,"kind":"task.created"}', b'{"seq":1,"kind":"note","data":"\xc3\xa9"}', b"{}"]
STORED = b"".join(r + b"\n" for r in RECORDS)


def _filled(backend: StreamBackend, name: str = "t") -> StreamStorage:
    s = backend.open()
    s.create(name)
    with s.lease(name) as lease:
        assert lease.append(RECORDS[:1], expected_seq=0) == 1
        assert lease.append(RECORDS[1:], expected_seq=1) == 3
    return s


# -- streams ------------------------------------------------------------------------------


def test_a_stamp_names_the_stored_bytes_and_changes_with_them(streams: StreamBackend) -> None:
    s, other = streams.open(), streams.open()
    if not streams.stamps:  # it cannot tell: never a stamp, never one left
        _filled(streams)
        assert s.stamps(["t", "u"]) == {"t": None, "u": None}
        return
    assert s.stamps(["t"]) == {"t": NO_STREAM}
    _filled(streams)
    got = s.stamps(["t", "u"])
    assert got["u"] == NO_STREAM and got["t"] not in (None, NO_STREAM)
    assert other.stamps(["t"]) == {"t": got["t"]} and other.read("t") == STORED
    assert s.stamps(["t"]) == {"t": got["t"]}, "a read changes nothing"
    with other.lease("t") as lease:
        lease.append([b"{}"], expected_seq=3)
    after = s.stamps(["t"])["t"]
    assert after not in (None, got["t"]), "an append through another handle changes it"
    with s.lease("t") as lease:
        assert s.read("t").endswith(b"{}\n{}\n")  # what a writer does: it reads the stream it leased
        lease.append([b"{}"], expected_seq=4)
    left = lease.left_stamp
    if isinstance(s, FolderStreams):
        assert left is None  # a folder's writer makes its own, from what it checked and appended
    else:
        assert left == other.stamps(["t"])["t"] != after, "the stamp a store's lease leaves is what a LIST gives"




def test_a_created_stream_is_empty_listed_and_not_created_twice(streams: StreamBackend) -> None:
    s = streams.open()
    assert s.names() == []
    s.create("b")
    s.create("a")
    assert s.names() == ["a", "b"]
    assert s.read("a") == b""
    with s.lease("a") as lease:
        assert lease.next_seq == 0
    with pytest.raises(LedgerError):
        s.create("a")
    assert streams.open().names() == ["a", "b"], "another handle sees the same streams"


def test_appends_read_back_exactly_from_every_offset(streams: StreamBackend) -> None:
    _filled(streams)
    other = streams.open()
    assert other.read("t") == STORED
    for offset in range(len(STORED) + 1):
        assert other.read("t", offset) == STORED[offset:], offset
    assert other.read("t", len(STORED) + 10) == b""
    with pytest.raises(UsageError):
        other.read("t", -1)


def test_conditional_append_refuses_a_stale_seq_and_writes_nothing(streams: StreamBackend) -> None:
    s = _filled(streams)
    with s.lease("t") as lease:
        assert lease.next_seq == 3
        for stale in (0, 2, 4):
            with pytest.raises(Conflict) as info:
                lease.append([b'{"late":true}'], expected_seq=stale)
            assert (info.value.expected_seq, info.value.actual_seq) == (stale, 3)
        assert s.read("t") == STORED
        assert lease.append([b'{"on":"time"}'], expected_seq=3) == 4
    assert streams.open().read("t") == STORED + b'{"on":"time"}\n'


def test_a_second_writer_is_refused_while_the_first_holds_the_lease(streams: StreamBackend) -> None:
    s = _filled(streams)
    other = streams.open()
    with s.lease("t") as lease:
        with pytest.raises(TaskBusy):
            other.lease("t")
        with pytest.raises(TaskBusy):
            s.lease("t")
        lease.append([b"{}"], expected_seq=3)
    with other.lease("t") as second:  # released: the next writer gets it, and sees what was appended
        assert second.next_seq == 4
    assert other.read("t") == STORED + b"{}\n"


def test_a_released_lease_appends_nothing(streams: StreamBackend) -> None:
    s = _filled(streams)
    lease = s.lease("t")
    lease.release()
    lease.release()  # idempotent
    with pytest.raises(IntentlogError):
        lease.append([b"{}"], expected_seq=3)
    assert s.read("t") == STORED


@pytest.mark.parametrize("bad", [b"two\nlines", "text", b"end\n"])
def test_a_record_must_be_one_line_of_bytes(streams: StreamBackend, bad: object) -> None:
    s = _filled(streams)
    with s.lease("t") as lease:
        with pytest.raises(UsageError):
            lease.append([b"{}", bad], expected_seq=3)  # type: ignore[list-item]
        assert lease.next_seq == 3
    assert s.read("t") == STORED


def test_a_failed_append_is_reported_and_the_stream_refuses_further_appends_through_it(streams: StreamBackend) -> None:
    s = _filled(streams)
    with s.lease("t") as lease:
        with streams.failing_writes(), pytest.raises(LedgerError):
            lease.append([b'{"big":"' + b"x" * 100 + b'"}'], expected_seq=3)
        with pytest.raises(IntentlogError):
            lease.append([b"{}"], expected_seq=3)
    assert s.read("t").startswith(STORED)


def test_a_missing_stream_cannot_be_read_or_leased(streams: StreamBackend) -> None:
    s = streams.open()
    with pytest.raises(FileNotFoundError):
        s.read("nope")
    with pytest.raises(FileNotFoundError):
        s.lease("nope")


def test_group_commit_counts_and_reads_at_once_and_one_sync_makes_the_group_durable(streams: StreamBackend) -> None:
    """``sync=False`` appends are counted and readable through the lease's storage at once; the
    conditional rule holds for them too; after the sync every handle reads them."""
    s = _filled(streams)
    group = b'{"g":1}\n{"g":2}\n{"g":3}\n'
    with s.lease("t") as lease:
        assert lease.append([b'{"g":1}'], expected_seq=3, sync=False) == 4
        assert lease.append([b'{"g":2}', b'{"g":3}'], expected_seq=4, sync=False) == 6
        with pytest.raises(Conflict):
            lease.append([b'{"late":true}'], expected_seq=4, sync=False)
        assert lease.next_seq == 6
        assert s.read("t") == STORED + group, "the writer's own storage reads what it appended"
        for offset in (0, len(STORED) - 1, len(STORED), len(STORED) + 3, len(STORED) + len(group)):
            assert s.read("t", offset) == (STORED + group)[offset:], offset
        assert streams.open().read("t") in (STORED, STORED + group), "another handle: before or after, nothing between"
        lease.sync()
        assert streams.open().read("t") == STORED + group, "synced: every handle reads the group"
        lease.sync()  # nothing pending: a no-op
        assert lease.append([b'{"s":1}'], expected_seq=6, sync=False) == 7
        assert lease.append([b'{"s":2}'], expected_seq=7) == 8, "a synced append puts the deferred ones before it"
        assert streams.open().read("t") == STORED + group + b'{"s":1}\n{"s":2}\n'
    with streams.open().lease("t") as again:
        assert again.next_seq == 8


def test_records_buffered_at_release_are_kept_as_a_folder_keeps_them(streams: StreamBackend) -> None:
    s = _filled(streams)
    with s.lease("t") as lease:
        lease.append([b'{"late":1}'], expected_seq=3, sync=False)
    assert streams.open().read("t") == STORED + b'{"late":1}\n'
    with streams.open().lease("t") as again:
        assert again.next_seq == 4


def test_a_failed_deferred_append_or_sync_refuses_the_lease(streams: StreamBackend) -> None:
    s = _filled(streams)
    with s.lease("t") as lease:
        with streams.failing_writes(), pytest.raises(LedgerError):
            lease.append([b'{"big":"' + b"x" * 100 + b'"}'], expected_seq=3, sync=False)
            lease.sync()  # a store that buffers the group fails here, a folder at the write
        with pytest.raises(IntentlogError):
            lease.append([b"{}"], expected_seq=3, sync=False)
        with pytest.raises(IntentlogError):
            lease.append([b"{}"], expected_seq=4, sync=False)
    assert s.read("t").startswith(STORED)


def test_lease_with_create_makes_the_stream_holding_its_first_record(streams: StreamBackend) -> None:
    s = streams.open()
    s.create("other")  # the folder exists
    with s.lease("n", create=lambda: b'{"first":true}') as lease:
        assert lease.next_seq == 1
        assert s.read("n") == b'{"first":true}\n', "never seen empty"
        lease.append([b"{}"], expected_seq=1)
    with s.lease("n", create=lambda: b'{"again":true}') as lease:  # exists: create is not called
        assert lease.next_seq == 2
    assert s.read("n") == b'{"first":true}\n{}\n'

    def refuse() -> bytes:
        raise LedgerError("not this one")

    with pytest.raises(LedgerError, match="not this one"):
        s.lease("m", create=refuse)
    assert "m" not in s.names(), "a refused creation creates nothing"
    with s.lease("m", create=lambda: b"{}") as lease:  # and the lease was released
        assert lease.next_seq == 1


def test_create_with_records_is_atomic(streams: StreamBackend) -> None:
    s = streams.open()
    s.create("r", RECORDS)
    assert s.read("r") == STORED
    with pytest.raises(LedgerError):
        s.create("r", RECORDS[:1])
    assert s.read("r") == STORED
    with pytest.raises(UsageError):
        s.create("bad", [b"two\nlines"])
    assert "bad" not in s.names()


# -- objects ------------------------------------------------------------------------------


def _digest(data: bytes) -> str:
    return "blake3:" + blake3(data).hexdigest()


def test_put_names_bytes_by_their_digest_and_is_idempotent(objects: ObjectBackend) -> None:
    o = objects.open()
    data = b"the request body \x00\xff" * 100
    d = o.put(data)
    assert d == _digest(data)
    assert o.put(data) == d, "the same bytes, the same name"
    assert list(o.list()) == [d], "stored once"
    other = objects.open()
    assert other.get(d) == data
    assert other.stat(d).size == len(data)
    assert other.put(b"") == _digest(b"") and other.get(_digest(b"")) == b""


def test_get_and_stat_of_a_missing_object_raise_the_library_error(objects: ObjectBackend) -> None:
    o = objects.open()
    missing = _digest(b"never stored")
    with pytest.raises(ArtifactMissing) as info:
        o.get(missing)
    assert isinstance(info.value, IntentlogError) and missing in str(info.value)
    with pytest.raises(ArtifactMissing):
        o.stat(missing)
    assert o.delete(missing) is False


def test_put_is_atomic_a_failed_put_leaves_no_object(objects: ObjectBackend) -> None:
    o = objects.open()
    data = os.urandom(1 << 16)
    with objects.failing_writes(), pytest.raises((OSError, IntentlogError)):
        o.put(data)
    assert list(o.list()) == []
    with pytest.raises(ArtifactMissing):
        o.get(_digest(data))
    assert o.put(data) == _digest(data) and o.get(_digest(data)) == data, "a retry stores it whole"


def test_list_and_delete(objects: ObjectBackend) -> None:
    o = objects.open()
    blobs = [b"a", b"bb", b"ccc"]
    digests = [o.put(b) for b in blobs]
    assert sorted(o.list()) == sorted(digests)
    assert o.delete(digests[1]) is True
    assert o.delete(digests[1]) is False
    assert sorted(objects.open().list()) == sorted([digests[0], digests[2]])
    with pytest.raises(ArtifactMissing):
        o.get(digests[1])
    assert o.put(blobs[1]) == digests[1] and o.get(digests[1]) == b"bb", "a deleted object can be put again"


def test_an_artifact_store_writes_and_reads_through_any_object_store(objects: ObjectBackend, tmp_path: Path) -> None:
    """``ArtifactStore(root, objects=backend)``: every put and read goes through the backend, checked."""
    backend = objects.open()
    store = ArtifactStore(tmp_path / "ledger", objects=backend)
    data = b"through the seam " * 400
    ref = store.put(data, media_type="text/plain")
    assert ref.digest == _digest(data) and ref.size == len(data) and ref.media_type == "text/plain"
    assert backend.get(ref.digest) == data, "the bytes are in the backend"
    assert not (tmp_path / "ledger" / "objects").exists(), "and not in the ledger's own folder"
    src = tmp_path / "file.bin"
    src.write_bytes(os.urandom(5000))
    fref = store.put_file(src)
    assert store.get(fref.digest) == src.read_bytes()
    with store.open(ref.digest) as f:
        assert f.read() == data
    assert store.exists(ref.digest) and store.size_of(ref.digest) == len(data) and store.verify(ref.digest)
    assert sorted(store.iter_digests()) == sorted([ref.digest, fref.digest])
    missing = _digest(b"never")
    assert not store.exists(missing)
    with pytest.raises(ArtifactMissing):
        store.get(missing)


def test_an_artifact_store_refuses_a_backend_that_misnames_bytes(tmp_path: Path) -> None:
    class Lying(FolderObjects):
        def put(self, data: bytes) -> str:
            super().put(data)
            return _digest(b"other bytes")

    store = ArtifactStore(tmp_path / "ledger", objects=Lying(tmp_path / "elsewhere"))
    with pytest.raises(IntentlogError, match="hash to"):
        store.put(b"these bytes")


# -- what the folder promises on top -------------------------------------------------------


def test_folder_appends_fdatasync_before_returning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = FolderStreams(tmp_path / "tasks")
    s.create("t")
    synced: list[int] = []
    real = intentlog._internal.fsops.fdatasync  # every sync of the folder goes through the fs-operations module
    monkeypatch.setattr(intentlog._internal.fsops, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    with s.lease("t") as lease:
        lease.append([b"{}", b"{}"], expected_seq=0)
        assert len(synced) == 1, "one fdatasync per append, before it returns"
        lease.append([], expected_seq=2)
        assert len(synced) == 1, "an empty append writes and syncs nothing"


def test_folder_group_commit_syncs_once_for_the_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = FolderStreams(tmp_path / "tasks")
    s.create("t")
    synced: list[int] = []
    fsops = intentlog._internal.fsops
    real = fsops.fdatasync
    monkeypatch.setattr(fsops, "fdatasync", lambda fd: (synced.append(os.fstat(fd).st_size), real(fd))[1])
    with s.lease("t") as lease:
        for i in range(5):
            lease.append([b"{}"], expected_seq=i, sync=False)
        assert synced == [], "deferred appends do not sync"
        lease.sync()
        assert synced == [15], "one sync, covering the whole group"
        lease.sync()
        assert synced == [15], "nothing pending, nothing synced"
        lease.append([b"{}"], expected_seq=5, sync=False)
        lease.append([b"{}"], expected_seq=6)
        assert synced == [15, 21], "a synced append covers the deferred ones before it"


def test_folder_create_fsyncs_the_stream_and_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dirs: list[str] = []
    real = intentlog.eventlog.storage.fsync_dir
    monkeypatch.setattr(intentlog.eventlog.storage, "fsync_dir", lambda p: (dirs.append(str(p)), real(p))[1])
    FolderStreams(tmp_path / "tasks").create("t")
    assert dirs == [str(tmp_path / "tasks")]


def test_folder_refuses_links_at_a_stream_name(tmp_path: Path) -> None:
    s = FolderStreams(tmp_path / "tasks")
    s.create("real")
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(b"{}\n")
    os.symlink(outside, tmp_path / "tasks" / "soft.jsonl")
    os.link(outside, tmp_path / "tasks" / "hard.jsonl")
    with pytest.raises(LinkRefused):
        s.read("soft")
    with pytest.raises(LinkRefused):
        s.lease("soft")
    with pytest.raises(LedgerError, match="name"):
        s.lease("hard")
    with pytest.raises((LinkRefused, LedgerError)):
        s.create("soft")
    assert outside.read_bytes() == b"{}\n", "nothing written through a link"


def test_folder_refuses_to_lease_a_stream_with_a_torn_tail(tmp_path: Path) -> None:
    """A torn last line (a crash's leftovers) is the writer's to repair: the lease refuses it, writing nothing."""
    s = FolderStreams(tmp_path / "tasks")
    s.create("t")
    (tmp_path / "tasks" / "t.jsonl").write_bytes(b'{"seq":0}\n{"seq":1,"ki')
    with pytest.raises(CorruptStream) as info:
        s.lease("t")
    assert info.value.line == 2
    assert s.read("t") == b'{"seq":0}\n{"seq":1,"ki'
    (tmp_path / "tasks" / "t.jsonl").write_bytes(b'{"seq":0}\n')
    with s.lease("t") as lease:  # the refused lease let its lock go
        assert lease.next_seq == 1


def test_folder_objects_refuse_a_linked_shard_and_corrupt_bytes(tmp_path: Path) -> None:
    o = FolderObjects(tmp_path)
    d = o.put(b"payload")
    path = o.store.path_for(d)
    os.chmod(path, 0o644)
    path.write_bytes(b"tampered")
    with pytest.raises(DigestMismatch):
        o.get(d)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    d2 = _digest(b"other")
    shard = o.store.path_for(d2).parent
    os.symlink(elsewhere, shard)
    with pytest.raises(LinkRefused):
        o.put(b"other")
    with pytest.raises(LinkRefused):
        o.delete(d2)
    assert list(elsewhere.iterdir()) == []
