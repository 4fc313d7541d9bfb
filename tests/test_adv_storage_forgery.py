"""Forgeries around large values and refs, re-chained and re-sealed: both verifiers must reject them.

Uses the tamper tool of test_verify_forgery (edit, re-chain, re-seal ledger and bundle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_verify_forgery import Events, at, reseal, verdicts

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.eventlog.canonical import dumps
from intentlog.projections.verify import verify_path

BIG = {"verdict": "accept", "notes": "n" * 6000}
OTHER = {"verdict": "reject", "notes": "n" * 6000}


def send(request: Any) -> bytes:
    return b'{"verdict": "accept"}'


@pytest.fixture
def big_dir(tmp_path: Path) -> Path:
    """One call whose interpreted value is stored in objects/ (result_ref, value_ref); sealed, clean."""
    root = tmp_path / "ev"
    with intentlog.open(root) as led:
        t = led.task("t")
        assert t.effect("judge", {"q": 1}, send, interpret=lambda raw: BIG) == BIG
        led.artifacts.put(dumps(OTHER))  # bytes a forger can point at: stored, and hashing right
    reseal(root)
    assert verify_path(root).ok
    return root


def _ref_of(value: Any) -> dict[str, Any]:
    data = dumps(value)
    return {"digest": digest_bytes(data), "media_type": "application/json", "size": len(data)}


def forge_value_ref(events: Events) -> Events:
    """The completion's value_ref names other stored bytes than the interpretation's result_ref."""
    events[at(events, "call.completed")]["data"]["result"] = {"value_ref": _ref_of(OTHER)}
    return events


def forge_inline_value_for_ref(events: Events) -> Events:
    """The completion carries an inline value although the interpretation stored another value by ref."""
    events[at(events, "call.completed")]["data"]["result"] = {"value": OTHER}
    return events


def forge_bad_inline_in_unknown_field(events: Events) -> Events:
    """A ref in an unknown field whose inline bytes do not hash to its digest."""
    good = dumps({"x": 1})
    events[at(events, "call.completed")]["data"]["audit"] = {
        "evidence": {"digest": digest_bytes(good), "size": len(good), "inline": '{"x":2}'}
    }
    return events


FORGERIES = {
    "value_ref differs from result_ref": forge_value_ref,
    "inline value where the interpretation stored a ref": forge_inline_value_for_ref,
    "inline bytes in an unknown field that do not hash": forge_bad_inline_in_unknown_field,
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forgery_around_large_values_is_rejected(name: str, big_dir: Path, tmp_path: Path) -> None:
    ledger_errors, library, independent, export_ok = verdicts(big_dir, tmp_path, FORGERIES[name])
    assert ledger_errors, name
    assert library, name
    assert independent, name
    assert not export_ok, name



def forge_request_hash_in_both(events: Events) -> Events:
    """call.requested and call.manifest agree on a request hash that the request bytes do not have."""
    fake = "blake3:" + "cd" * 32
    events[at(events, "call.requested")]["data"]["request_hash"] = fake
    events[at(events, "call.manifest")]["data"]["request_hash"] = fake
    return events


def test_a_request_hash_edited_in_requested_and_manifest_is_rejected(big_dir: Path, tmp_path: Path) -> None:
    ledger_errors, library, independent, export_ok = verdicts(big_dir, tmp_path, forge_request_hash_in_both)
    assert ledger_errors and library and independent and not export_ok
