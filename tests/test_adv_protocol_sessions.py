"""A Turn object names a turn of its own session: accepting or rejecting it through another
session is refused, never applied to that session's turn with the same number."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import intentlog


def _reply(_request: Any) -> bytes:
    return b'{"choices": [{"message": {"role": "assistant", "content": "ok"}}]}'


def test_a_turn_of_another_session_is_refused(ledger: intentlog.Ledger) -> None:
    a, b = ledger.session("a"), ledger.session("b")
    a.turn({"messages": [{"role": "user", "content": "hi a"}]}, _reply, accept=False)
    b.turn({"messages": [{"role": "user", "content": "hi b"}]}, _reply, accept=False)
    turn_a = a.turns()[0]
    stream_b = Path(ledger.root) / "tasks" / "b.jsonl"
    before = stream_b.read_bytes()
    for verdict in (b.accept, b.reject):
        with pytest.raises(intentlog.UsageError) as err:
            verdict(turn_a, note="looks fine")
        assert "'a'" in str(err.value)
    assert stream_b.read_bytes() == before
    a.accept(turn_a)  # in its own session it is accepted
    assert [t.turn_id for t in a.history()] == ["turn-1"]
    assert b.history() == []
