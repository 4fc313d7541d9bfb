"""The store's gc log is anchored by its seals, as its streams are (a real SeaweedFS).

Each seal records the gc log's head; a log that does not hold that event at that seq --
cut, rewritten, or replaced by a well-chained forgery -- is untrusted like a damaged one:
``verify`` reports a ``gc_log`` ERROR and no deletion it records is excused. A log that
grew after the seal is fine (every seal is a lower bound).
"""

from __future__ import annotations

import orjson
import pytest
import s3_server
from s3_server import client_of

import intentlog
from intentlog.checker import verify_ledger
from intentlog.retention import keep
from intentlog.s3.seals import create_seal, latest_seal


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        ledger.task("a").append("note", {"n": 1})
        ledger.task("b").append("note", {"n": 2})
        keep(ledger, "a", note="evidence")
    return url


def gc_errors(url: str) -> list[str]:
    with intentlog.open(url, create=False) as ledger:
        report = verify_ledger(ledger)
    return [p.message for p in report.problems if p.severity == "error" and p.code == "gc_log"]


def test_a_seal_records_the_gc_log_head_and_a_log_grown_since_verifies(url: str) -> None:
    create_seal(client_of(url))
    found = latest_seal(client_of(url))
    assert found is not None
    gc = orjson.loads(found[1])["gc"]
    assert gc["seq"] >= 1 and gc["events"] == gc["seq"] + 1 and gc["head"].startswith("blake3:")
    with intentlog.open(url) as ledger:
        keep(ledger, "b")  # the log grows past the sealed head: still the log the seal anchored
    assert gc_errors(url) == []


def test_a_gc_log_replaced_after_the_seal_is_caught_by_verify(url: str) -> None:
    create_seal(client_of(url))
    assert gc_errors(url) == []
    client = client_of(url)
    for key, _ in list(client.scan("gc/tasks/log")):
        client.delete(key)  # the log removed by hand ...
    with intentlog.open(url) as ledger:
        keep(ledger, "b")  # ... and a new, well-chained one written in its place
    found = gc_errors(url)
    assert len(found) == 1 and "does not continue what the seals anchored" in found[0], found


def test_a_gc_log_removed_after_the_seal_is_caught_by_verify(url: str) -> None:
    create_seal(client_of(url))
    client = client_of(url)
    for key, _ in list(client.scan("gc/tasks/log")):
        client.delete(key)
    found = gc_errors(url)
    assert len(found) == 1 and "is gone but" in found[0], found
