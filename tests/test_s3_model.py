"""A stateful model of one object-store stream (STYLE 17), on an in-process fencing store.

Rules: append and batch through the holder's lease, a second handle (another machine)
reading, a second lease refused while one is held, a take-over that fences the holder
(its next append refused), release and re-lease, a stale ``expected_seq``, a put cut off
by the network (the lease then refuses appends until leased again). The model is the
list of record bytes acknowledged.

Invariant after every step: *the stream read back, from a fresh handle and from a random
offset, equals the acknowledged records, and every segment continues the one before.*
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from s3_server import MemoryClient

from intentlog.errors import Conflict, IntentlogError, LeaseLost, LedgerError, TaskBusy
from intentlog.s3 import ObjectLease, ObjectStreams

records = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" ")), min_size=1, max_size=5)


class ObjectStreamModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.client = MemoryClient()
        self.streams = ObjectStreams(self.client)
        self.streams.create("t")
        self.model: list[bytes] = []
        self.lease: ObjectLease | None = self.streams.lease("t")
        self.fenced: ObjectLease | None = None
        self.unknown = False  # a cut-off put: did it land? the next lease finds out

    @precondition(lambda self: self.lease is not None and not self.unknown)
    @rule(batch=records)
    def append(self, batch: list[bytes]) -> None:
        assert self.lease is not None
        assert self.lease.append(batch, expected_seq=len(self.model)) == len(self.model) + len(batch)
        self.model += batch

    @precondition(lambda self: self.lease is not None and not self.unknown)
    @rule(batch=records, delta=st.sampled_from([-1, 1, 5]))
    def stale_seq(self, batch: list[bytes], delta: int) -> None:
        assert self.lease is not None
        with pytest.raises(Conflict):
            self.lease.append(batch, expected_seq=len(self.model) + delta)

    @precondition(lambda self: self.lease is not None)
    @rule()
    def second_lease_refused(self) -> None:
        if self.unknown:
            return
        with pytest.raises(TaskBusy):
            ObjectStreams(self.client).lease("t")

    @precondition(lambda self: self.lease is not None and not self.unknown)
    @rule(batch=records)
    def cut_off_put(self, batch: list[bytes]) -> None:
        assert self.lease is not None
        self.client.fail_creates = True
        try:
            with pytest.raises(LedgerError):
                self.lease.append(batch, expected_seq=len(self.model))
        finally:
            self.client.fail_creates = False
        with pytest.raises(IntentlogError):
            self.lease.append(batch, expected_seq=len(self.model))
        self.unknown = True

    @precondition(lambda self: self.lease is not None)
    @rule()
    def take_over(self) -> None:
        self.fenced = self.lease
        self.lease = ObjectStreams(self.client).lease("t", take_over_after=0)
        self.unknown = False
        assert self.lease.next_seq == len(self.model)

    @precondition(lambda self: self.fenced is not None)
    @rule(batch=records)
    def fenced_append_refused(self, batch: list[bytes]) -> None:
        assert self.fenced is not None
        with pytest.raises((LeaseLost, LedgerError, Conflict)):  # its own seq, or its put, refuses it
            self.fenced.append(batch, expected_seq=len(self.model))
        with pytest.raises((LeaseLost, LedgerError)):  # at the seq it believes in, the store refuses it
            self.fenced.append(batch, expected_seq=self.fenced.next_seq)

    @precondition(lambda self: self.lease is not None)
    @rule()
    def release(self) -> None:
        assert self.lease is not None
        self.lease.release()
        self.lease = None
        if self.unknown:  # a poisoned lease releases only if the tail is still its own
            self.unknown = False

    @precondition(lambda self: self.lease is None)
    @rule()
    def lease_again(self) -> None:
        self.lease = ObjectStreams(self.client).lease("t")
        assert self.lease.next_seq == len(self.model)

    @invariant()
    def reads_back(self) -> None:
        data = b"".join(r + b"\n" for r in self.model)
        other = ObjectStreams(self.client)
        assert other.read("t") == data
        for offset in {0, len(data) // 2, max(0, len(data) - 3), len(data)}:
            assert other.read("t", offset) == data[offset:]


ObjectStreamModel.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
test_object_stream_model = ObjectStreamModel.TestCase
