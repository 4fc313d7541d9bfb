"""A session turn approved in advance: ``Session.request_hash`` is the hash the turn records.

Every assertion reads the record (the stream's events) and a provider's own receipts.
"""

from __future__ import annotations

from typing import Any

import pytest

import intentlog

SECRET = "sk-live-0123456789abcdefghij"


def _request() -> dict[str, Any]:
    return {
        "model": "m",
        "api_key": SECRET,
        "created_at": "2026-01-01T00:00:00Z",
        "messages": [
            {"role": "system", "content": "you pay invoices"},
            {"role": "user", "content": "wire 120 EUR to ACME", "timestamp": "2026-01-01T00:00:01Z"},
        ],
    }


class Provider:
    def __init__(self) -> None:
        self.receipts: list[Any] = []

    def __call__(self, request: Any) -> bytes:
        self.receipts.append(request)
        return b'{"ok": true}'


def _kinds(task: intentlog.Task) -> list[str]:
    return [ev.kind for ev in task.stream.events()]


def test_the_hash_is_the_one_the_turn_records(ledger: intentlog.Ledger) -> None:
    session = ledger.session("chat")
    expected = session.request_hash(_request())
    assert b"wire 120" not in b"".join(p.read_bytes() for p in ledger.root.rglob("*") if p.is_file())  # nothing stored
    turn = session.turn(_request(), Provider())
    assert turn.request_hash == expected
    cs = ledger.task("chat").work_state().call_for_key("turn-1")
    assert cs is not None and cs.request_hash == expected
    # the hash of the same request built by a callable, in a later turn, is the same
    assert session.request_hash(_request) == expected
    assert expected != intentlog.request_hash(_request())  # messages are hashed one by one


def test_an_approval_bound_in_advance_gates_the_turn(ledger: intentlog.Ledger) -> None:
    provider = Provider()
    session = ledger.session("chat")
    task = ledger.task("chat")
    task.request_approval("wire", "Send this turn?", binds=session.request_hash(_request()))
    with pytest.raises(intentlog.ApprovalPending):
        session.turn(_request(), provider)
    assert provider.receipts == [] and "attempt.started" not in _kinds(task)
    task.decide("wire", "reject", by="alice", note="not this month")
    with pytest.raises(intentlog.ApprovalRejected):
        session.turn(_request(), provider, turn=1)
    assert provider.receipts == [] and "attempt.started" not in _kinds(task)


def test_an_approved_turn_is_sent_once(ledger: intentlog.Ledger) -> None:
    provider = Provider()
    session = ledger.session("chat")
    task = ledger.task("chat")
    digest = session.request_hash(_request())
    task.request_approval("wire", "Send this turn?", binds=digest)
    task.decide("wire", "approve", by="alice", request_hash=digest)
    turn = session.turn(_request(), provider)
    assert turn.completed and len(provider.receipts) == 1
    assert _kinds(task).count("attempt.started") == 1


def test_a_request_that_cannot_be_built_is_refused(ledger: intentlog.Ledger) -> None:
    def broken() -> Any:
        raise ValueError("no invoice")

    with pytest.raises(ValueError, match="no invoice"):
        ledger.session("chat").request_hash(broken)
    assert not ledger.task("chat").stream.exists()
