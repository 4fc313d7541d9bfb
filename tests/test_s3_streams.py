"""What the segment layout promises beyond the seam's contract, on an in-process fencing store."""

from __future__ import annotations

import pytest
from s3_server import MemoryClient

from intentlog.errors import CorruptStream, LeaseLost, TaskBusy
from intentlog.s3 import CHECKPOINT_EVERY, ObjectStreams


class LostAnswer(MemoryClient):
    """Stores the first create of ``key`` but answers as a retried request would: refused."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def create(self, key: str, data: bytes) -> bool:
        stored = super().create(key, data)
        return False if key == self.key else stored


def test_a_put_whose_answer_was_lost_is_recognised_as_the_writers_own() -> None:
    """The retried create of segment 2 is refused, but the stored bytes are ours: the append succeeded."""
    client = LostAnswer("tasks/t/s/000000000002")
    s = ObjectStreams(client)
    s.create("t")
    with s.lease("t") as lease:
        assert lease.append([b"one"], expected_seq=0) == 1
        assert lease.append([b"two"], expected_seq=1) == 2
    assert s.read("t") == b"one\ntwo\n"


def test_a_fenced_holder_writes_nothing_and_stays_fenced() -> None:
    client = MemoryClient()
    s = ObjectStreams(client)
    s.create("t")
    old = s.lease("t")
    old.append([b"a"], expected_seq=0)
    with pytest.raises(TaskBusy):
        s.lease("t")
    new = s.lease("t", take_over_after=0)
    assert new.epoch == old.epoch + 1
    with pytest.raises(LeaseLost) as info:
        old.append([b"late"], expected_seq=1)
    assert info.value.epoch == 1 and "000000000003" in info.value.where
    with pytest.raises(LeaseLost):
        old.append([b"later"], expected_seq=1)
    old.release()  # writes nothing: the lease is another's
    new.append([b"b"], expected_seq=1)
    new.release()
    assert s.read("t") == b"a\nb\n"
    assert [s.segment("t", n)[0].kind for n in range(6)] == ["create", "lease", "data", "lease", "data", "release"]


def test_a_hole_or_a_segment_under_a_stale_lease_is_corrupt_not_skipped() -> None:
    client = MemoryClient()
    s = ObjectStreams(client)
    s.create("t")
    with s.lease("t") as lease:
        for i in range(3):
            lease.append([b"r%d" % i], expected_seq=i)
    saved = client.objects.pop("tasks/t/s/000000000003")
    with pytest.raises(CorruptStream, match="hole"):
        s.read("t")
    forged = saved.replace(b'"epoch":1', b'"epoch":7')
    client.objects["tasks/t/s/000000000003"] = forged
    with pytest.raises(CorruptStream, match="lease"):
        s.read("t")
    client.objects["tasks/t/s/000000000003"] = b"not a segment"
    with pytest.raises(CorruptStream):
        s.read("t")


def test_the_tail_is_found_from_the_last_checkpoint_with_a_bounded_listing() -> None:
    """After 3 x 64 segments the tail and a read near the end touch only the segments after the last checkpoint."""
    client = MemoryClient()
    s = ObjectStreams(client)
    s.create("t")
    with s.lease("t") as lease:
        for i in range(3 * CHECKPOINT_EVERY):
            lease.append([b"%d" % i], expected_seq=i)
    checkpoints = [k for k in client.objects if k.startswith("tasks/t/c/")]
    assert len(checkpoints) == 3
    gets: list[str] = []
    real = client.get
    client.get = lambda key: (gets.append(key), real(key))[1]  # type: ignore[method-assign]
    tail = s.tail("t")
    assert tail.kind == "release" and tail.end_seq == 3 * CHECKPOINT_EVERY and len(gets) == 1
    data = s.read("t")
    gets.clear()
    assert s.read("t", len(data) - 4) == data[-4:]
    assert len(gets) <= CHECKPOINT_EVERY + 1, len(gets)
