"""``add`` one item at a time folds only what it appends: the backlog's fold is kept, not re-read per call.

The fold kept by a :class:`~intentlog.backlog.Backlog` handle is used only while the
stream's count and head (the hash chain's last digest, which names every record before
it) are the ones it folded; anything another handle or process appended makes it read
the stream again. Counted with :meth:`BacklogFold.apply` calls, never timed.
"""

from __future__ import annotations

import pytest

import intentlog
from intentlog.backlog import PayloadChanged
from intentlog.backlog.model import BacklogFold


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = BacklogFold.apply

    def apply(self: BacklogFold, ev: intentlog.Event) -> None:
        calls[0] += 1
        real(self, ev)

    monkeypatch.setattr(BacklogFold, "apply", apply)
    return calls


def test_adds_one_by_one_fold_each_record_once(ledger: intentlog.Ledger, applied: list[int]) -> None:
    b = ledger.backlog("loop")
    for i in range(100):
        b.add(f"i{i}", {"n": i})
    applied[0] = 0
    for i in range(100, 200):
        b.add(f"i{i}", {"n": i})
    assert applied[0] == 100, f"{applied[0]} records folded for 100 adds"
    assert [r.item for r in b.view().items] == [f"i{i}" for i in range(200)]


def test_another_writer_makes_the_kept_fold_read_again(ledger: intentlog.Ledger, applied: list[int]) -> None:
    b, other = ledger.backlog("loop"), ledger.backlog("loop")
    b.add("a", {"n": 1})
    other.add("k", {"n": 1})  # another handle: b's fold no longer ends at the stream's head
    with pytest.raises(PayloadChanged):
        b.add("k", {"n": 2})
    assert b.add("k", {"n": 1}).payload_hash == other.add("k", {"n": 1}).payload_hash
    kinds = [e.data.get("item") for e in b.task.events() if e.kind == "backlog.item_added"]
    assert kinds == ["a", "k"]


def test_a_returned_record_is_a_copy(ledger: intentlog.Ledger) -> None:
    b = ledger.backlog("loop")
    rec = b.add("a", {"n": 1})
    rec.done = True  # the caller's copy: the kept fold is not touched
    assert b.add("a", {"n": 1}).done is False
