"""A re-run never returns a value its own record does not derive (a forged completion is refused).

A forger with write access edits a completion, re-chains the stream and re-seals it (the
tamper tools of test_verify_forgery). ``verify`` catches it; a re-run of the call must too:
the live fold sees that the completion does not match the interpretation (or observation)
it completes, and the call is refused with ``CorruptStream`` naming the line, nothing
appended and nothing sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from test_adv_storage_forgery import BIG
from test_adv_storage_forgery import FORGERIES as BIG_FORGERIES
from test_verify_forgery import REQ, delete_interpretation, reseal, tamper
from test_verify_forgery import forge_interpretation_error as interpretation_error
from test_verify_forgery import forge_raw_response as raw_response
from test_verify_forgery import forge_result as contradicting_value

import intentlog
from intentlog.eventlog.canonical import dumps


def parse(raw: bytes) -> Any:
    return orjson.loads(raw)


def answer(request: Any) -> bytes:
    return b'{"verdict": "accept", "score": 7}'


def never(request: Any) -> bytes:
    raise AssertionError("a forged record must not lead to a send")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def line_of(root: Path, kind: str, n: int = 0) -> int:
    lines = (root / "tasks" / "t.jsonl").read_bytes().splitlines()
    return [i for i, raw in enumerate(lines, start=1) if orjson.loads(raw)["kind"] == kind][n]


@pytest.fixture
def small_dir(tmp_path: Path) -> Path:
    root = tmp_path / "ev"
    with intentlog.open(root) as led:
        t = led.task("t")
        assert t.effect("judge", REQ, answer, interpret=parse) == {"verdict": "accept", "score": 7}
        assert t.effect("raw", {"q": "raw"}, lambda r: b"raw bytes") == b"raw bytes"
    reseal(root)
    return root


@pytest.fixture
def big_dir(tmp_path: Path) -> Path:
    root = tmp_path / "big"
    with intentlog.open(root) as led:
        t = led.task("t")
        assert t.effect("judge", {"q": 1}, answer, interpret=lambda raw: BIG) == BIG
        led.artifacts.put(dumps({"verdict": "reject", "notes": "n" * 6000}))
    reseal(root)
    return root


def rerun_refused(root: Path, key: str, request: Any, completion: int) -> None:
    line = line_of(root, "call.completed", completion)
    before = snapshot(root)
    with intentlog.open(root) as led, pytest.raises(intentlog.CorruptStream) as caught:
        led.task("t").effect(key, request, never, interpret=None if key == "raw" else parse)
    assert caught.value.line == line
    assert f"line {line}" in str(caught.value)
    assert "restore" in str(caught.value) and ("copy" in str(caught.value) or "git" in str(caught.value))
    assert snapshot(root) == before  # nothing appended


SMALL = {
    "completed value contradicts the interpretation": ("judge", REQ, 0, contradicting_value),
    "interpretation recorded an error, completion a value": ("judge", REQ, 0, interpretation_error),
    "completion with no interpretation before it": ("judge", REQ, 0, delete_interpretation),
    "raw completion names another response": ("raw", {"q": "raw"}, 1, raw_response),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_rerun_refuses_a_forged_completion(name: str, small_dir: Path) -> None:
    key, request, completion, edit = SMALL[name]
    tamper(small_dir, "t", edit)
    rerun_refused(small_dir, key, request, completion)


LARGE = ["inline value where the interpretation stored a ref", "value_ref differs from result_ref"]


@pytest.mark.parametrize("name", LARGE)
def test_a_rerun_refuses_a_forged_large_value(name: str, big_dir: Path) -> None:
    tamper(big_dir, "t", BIG_FORGERIES[name])
    rerun_refused(big_dir, "judge", {"q": 1}, 0)


def test_a_forged_completion_refuses_reinterpretation(small_dir: Path) -> None:
    tamper(small_dir, "t", contradicting_value)
    before = snapshot(small_dir)
    with intentlog.open(small_dir) as led, pytest.raises(intentlog.CorruptStream):
        led.task("t").reinterpret("judge", parse)
    assert snapshot(small_dir) == before


def test_an_untouched_record_and_a_reinterpretation_still_return_their_values(small_dir: Path) -> None:
    with intentlog.open(small_dir) as led:
        t = led.task("t")
        assert t.effect("judge", REQ, never, interpret=parse) == {"verdict": "accept", "score": 7}
        assert t.effect("raw", {"q": "raw"}, never) == b"raw bytes"
        assert t.reinterpret("judge", lambda raw: {"again": True}) == {"again": True}
        assert t.effect("judge", REQ, never, interpret=parse) == {"again": True}


def test_an_untouched_large_value_returns(big_dir: Path) -> None:
    with intentlog.open(big_dir) as led:
        assert led.task("t").effect("judge", {"q": 1}, never, interpret=parse) == BIG

