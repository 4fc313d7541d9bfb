"""Reinterpreting stored bytes as a careless user meets it: an interpreter fixed in place.

A re-run whose interpreter still fails, or has the same identity (fixed in place, its
``version`` not changed), stays refused with ``CallFailed`` -- and the refusal says how
to get a result from the stored bytes without a send, and that way works as printed.
Calls with nothing stored are refused by ``task.reinterpret`` with nothing appended.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import intentlog


class Provider:
    def __init__(self) -> None:
        self.receipts = 0

    def __call__(self, _request: Any) -> bytes:
        self.receipts += 1
        return b'{"n": 41}'


def parse(data: bytes) -> int:
    raise ValueError("bad parse")


def _stream(ledger: intentlog.Ledger) -> bytes:
    return (Path(ledger.root) / "tasks" / "t.jsonl").read_bytes()


def test_an_interpreter_fixed_in_place_is_told_how_to_reinterpret(ledger: intentlog.Ledger) -> None:
    provider = Provider()
    with ledger.task("t") as task, pytest.raises(intentlog.CallFailed):
        task.effect("k", {"q": 1}, provider, interpret=parse)

    def fixed(data: bytes) -> int:  # the same function, fixed in place: same name, no new version
        return int(json.loads(data)["n"]) + 1

    fixed.__qualname__ = parse.__qualname__
    before = _stream(ledger)
    with ledger.task("t") as task, pytest.raises(intentlog.CallFailed) as err:
        task.effect("k", {"q": 1}, provider, interpret=fixed)
    assert _stream(ledger) == before  # refused: nothing appended
    text = str(err.value)
    assert "without a send" in text and "version" in text and "task.reinterpret('call-1', interpret)" in text
    # the way out the message names works, and costs no receipt
    fixed.version = "2"  # type: ignore[attr-defined]
    with ledger.task("t") as task:
        assert task.effect("k", {"q": 1}, provider, interpret=fixed) == 42
    with ledger.task("t") as task:
        assert task.reinterpret("call-1", fixed) == 42
    assert provider.receipts == 1


def test_a_provider_failure_is_not_offered_reinterpretation(ledger: intentlog.Ledger) -> None:
    def refuse(_request: Any) -> bytes:
        raise intentlog.ProviderFailure("400 bad request", retryable=False)

    with ledger.task("t") as task, pytest.raises(intentlog.CallFailed) as err:
        task.effect("k", {"q": 1}, refuse, interpret=parse)
    assert "reinterpret" not in str(err.value)
    before = _stream(ledger)
    with ledger.task("t") as task, pytest.raises(intentlog.ResumeRefused):
        task.reinterpret("k", parse)
    assert _stream(ledger) == before
