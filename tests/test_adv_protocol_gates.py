"""An approval gates the send it is about, however the script names what it is about.

``binds`` may be a digest; when that digest is the request hash of a call (the bytes the
call records as its request), the approval is about that request exactly as if the Call
had been bound: pending, rejected or void refuses the send with nothing appended, and
only an approval of that hash lets it go. This holds whether the approval was asked
before the call was prepared (the hash computed with ``intentlog.request_hash``) or after
(``call.state().request_hash``), and for a session turn, which can only be bound that way
before it is sent. Sends are counted in the provider; the stream is read back from disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import intentlog


class Provider:
    def __init__(self) -> None:
        self.receipts: list[Any] = []

    def __call__(self, request: Any) -> bytes:
        self.receipts.append(request)
        return b'{"paid": true}'


REQ = {"pay": "ACME", "amount": 120}


def _stream(ledger: intentlog.Ledger, task: str) -> bytes:
    return (Path(ledger.root) / "tasks" / f"{task}.jsonl").read_bytes()


def _bind_before(task: intentlog.Task) -> None:
    task.request_approval("pay", "Pay ACME 120?", binds=intentlog.request_hash(REQ))


def _bind_after(task: intentlog.Task) -> None:
    call = task.prepare("k", REQ)
    task.request_approval("pay", "Pay ACME 120?", binds=call.state().request_hash)


@pytest.mark.parametrize("bind", [_bind_before, _bind_after], ids=["before-prepare", "after-prepare"])
@pytest.mark.parametrize("decision", ["reject", None])
def test_a_digest_bound_approval_that_is_not_approved_stops_the_send(
    ledger: intentlog.Ledger, bind: Any, decision: str | None
) -> None:
    provider = Provider()
    with ledger.task("t") as task:
        bind(task)
        if decision is not None:
            task.decide("pay", decision, by="alice", note="not this month")
        before = _stream(ledger, "t")
        expected = intentlog.ApprovalRejected if decision == "reject" else intentlog.ApprovalPending
        with pytest.raises(expected):
            task.effect("k", REQ, provider)
        with pytest.raises(expected):
            task.prepare("k", REQ).run(provider)
    assert provider.receipts == []
    after = _stream(ledger, "t")
    assert b"attempt.started" not in after
    if bind is _bind_after:
        assert after == before  # the refusal appended nothing
    else:  # the refused call's intent is recorded (call.requested, call.manifest), never an attempt
        assert after.startswith(before)


@pytest.mark.parametrize("bind", [_bind_before, _bind_after], ids=["before-prepare", "after-prepare"])
def test_a_digest_bound_approval_that_is_approved_lets_exactly_that_request_go(
    ledger: intentlog.Ledger, bind: Any
) -> None:
    provider = Provider()
    with ledger.task("t") as task:
        bind(task)
        task.decide("pay", "approve", by="alice")
        assert task.effect("k", REQ, provider) == b'{"paid": true}'
        assert task.effect("k", REQ, provider) == b'{"paid": true}'  # resumed from the record
    assert len(provider.receipts) == 1


def test_a_digest_approval_of_another_request_does_not_gate_this_one(ledger: intentlog.Ledger) -> None:
    provider = Provider()
    with ledger.task("t") as task:
        task.request_approval("plan", "Is the plan right?", binds=intentlog.request_hash({"plan": 1}))
        task.decide("plan", "reject", by="alice")
        task.effect("k", REQ, provider)
    assert len(provider.receipts) == 1


def test_a_rejected_request_hash_stops_a_session_turn(ledger: intentlog.Ledger) -> None:
    provider = Provider()
    turn_request = {"messages": [{"role": "user", "content": "wire 120 EUR to ACME"}]}
    ledger.session("probe").turn(turn_request, provider)  # what such a turn records as its request hash
    digest = _turn_hash(ledger, "probe")
    with ledger.task("chat") as task:
        task.request_approval("wire", "Send this turn?", binds=digest)
        task.decide("wire", "reject", by="alice")
    with pytest.raises(intentlog.ApprovalRejected):
        ledger.session("chat").turn(turn_request, provider)
    assert len(provider.receipts) == 1  # only the probe's
    assert b"attempt.started" not in _stream(ledger, "chat")


def _turn_hash(ledger: intentlog.Ledger, session_id: str) -> str:
    cs = ledger.task(session_id).work_state().call_for_key("turn-1")
    assert cs is not None and cs.request_hash is not None
    return cs.request_hash


def test_status_shows_a_call_refused_by_a_digest_approval_as_paused(ledger: intentlog.Ledger) -> None:
    from click.testing import CliRunner

    from intentlog.cli import main

    with ledger.task("t") as task:
        _bind_before(task)
        task.decide("pay", "reject", by="alice", note="not this month")
        with pytest.raises(intentlog.ApprovalRejected):
            task.effect("k", REQ, Provider())
    import json

    r = CliRunner().invoke(main, ["--root", str(ledger.root), "status", "t", "--json"], catch_exceptions=False)
    doc = json.loads(r.stdout)
    assert doc["state"] == "paused for review", doc
    assert "will start call" not in r.stdout
    hint = CliRunner().invoke(main, ["--root", str(ledger.root), "status", "t"], catch_exceptions=False).stdout
    assert "intentlog fail t call-1 --reason WHY" in hint.replace(f"--root {ledger.root} ", "")


def test_an_approval_cannot_bind_another_tasks_call(ledger: intentlog.Ledger) -> None:
    """Binding a Call (or Turn) of task A in task B used to bind B's call with the same id: the
    person approving "pay alice 1" let B's "pay mallory 1000" go. Refused, nothing written."""
    provider = Provider()
    with ledger.task("a") as ta, ledger.task("b") as tb:
        alice = ta.prepare("pay", {"to": "alice", "amount": 1})
        tb.prepare("pay", {"to": "mallory", "amount": 1000})
        before = _stream(ledger, "b")
        with pytest.raises(intentlog.UsageError) as err:
            tb.request_approval("ap", "Pay alice 1?", binds=alice)
        assert "'a'" in str(err.value)
        assert _stream(ledger, "b") == before
        with pytest.raises(intentlog.ApprovalPending):  # asked in the right task, it gates alice's call
            ta.request_approval("ap", "Pay alice 1?", binds=alice)
            ta.prepare("pay", {"to": "alice", "amount": 1}).run(provider)
    ledger.session("chat").turn({"messages": [{"role": "user", "content": "hi"}]}, provider)
    turn = ledger.session("chat").turns()[0]
    with ledger.task("b") as tb, pytest.raises(intentlog.UsageError):
        tb.request_approval("t1", "that turn?", binds=turn)
    assert len(provider.receipts) == 1  # the session's turn only


def test_the_same_ledger_spelled_another_way_is_the_same_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner check compares folders, not spellings: a relative and an absolute path name one ledger."""
    monkeypatch.chdir(tmp_path)
    rel, absolute = intentlog.open("led"), intentlog.open(tmp_path / "led")
    with absolute.task("t") as t:
        call = t.prepare("k", REQ)
    with rel.task("t") as t:
        st = t.request_approval("pay", "Pay ACME 120?", binds=call)
    assert st.binds["call"] == "call-1"
