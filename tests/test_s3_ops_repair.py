"""``repair`` on a ledger on the store (a real SeaweedFS): nothing to repair, or the damage named and refused.

Without ``--accept-damage`` (with ``--dry-run`` too) a clean stream is "nothing to repair"
and every kind of damage a store can hold -- an edited event, a hole, a spliced segment,
records under a stale lease, a stray key under ``s/``, a stream cut before its seal, a
sealed stream removed -- is refused (exit 1) naming it, with every key and byte of the
store unchanged and no probe run. Damage recording a started send is never cut without
``--accept-resend``, so the task stays refused and the provider's own receipt log sees no
second send. What accepting damage cuts is tested in ``tests/test_store_repair.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import s3_server
from click.testing import CliRunner
from s3_server import client_of, snapshot

import intentlog
import intentlog.s3
from intentlog.cli import main
from intentlog.demo.provider import SyntheticProvider, read_receipts
from intentlog.errors import CorruptStream
from intentlog.s3 import Segment

FLAGS = (
    [], ["--accept-damage"], ["--accept-damage", "--accept-resend"], ["--dry-run"], ["--accept-damage", "--dry-run"],
)


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Task ``t``: a note, a completed effect (its attempt.started in the record), three more notes."""
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        t = ledger.task("t")
        t.append("note", {"n": 0})
        t.effect("k1", {"idempotency_key": "k1"}, SyntheticProvider(tmp_path / "receipts.jsonl").send)
        for i in range(1, 4):
            t.append("note", {"n": i})
        ledger.task("other").append("note", {"fine": True})
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return url


@pytest.fixture
def reading(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Any]:
    """A context in which the fencing probe (a write) fails the test: repair must only read."""
    return lambda: _patched(monkeypatch)


def _patched(monkeypatch: pytest.MonkeyPatch) -> Any:
    ctx = monkeypatch.context()
    m = ctx.__enter__()
    m.setattr(intentlog.s3, "require_fencing", _no_probe)
    return ctx


def _no_probe(*_a: object, **_k: object) -> None:
    raise AssertionError("repair ran the fencing probe: it must only read")


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def data_segments(url: str, task: str = "t") -> list[int]:
    streams = intentlog.s3.connect(url, write=False).streams
    return [n for n in range(streams.tail(task).seg + 1) if streams.segment(task, n)[1]]


def replace(url: str, seg: int, edit: Callable[[bytes], bytes], task: str = "t") -> None:
    client = client_of(url)
    key = f"tasks/{task}/s/{seg:012d}"
    body = client.get(key)
    assert body is not None
    new = edit(body)
    assert new != body
    client.delete(key)
    assert client.create(key, new)


def started_segment(url: str) -> int:
    streams = intentlog.s3.connect(url, write=False).streams
    return next(n for n in data_segments(url) if b'"attempt.started"' in streams.segment("t", n)[1])


def edit_event(url: str) -> None:
    """The attempt.started's segment edited: its chain breaks there (and what follows records the send)."""
    replace(url, started_segment(url), lambda b: b.replace(b'"ts":"2', b'"ts":"3', 1))


def hole(url: str) -> None:
    client_of(url).delete(f"tasks/t/s/{started_segment(url):012d}")


def splice(url: str) -> None:
    """Another stream's segment put in place of one of t's (its header says another seq)."""
    other = client_of(url).get(f"tasks/other/s/{data_segments(url, 'other')[0]:012d}")
    assert other is not None
    seg = data_segments(url)[-2]
    replace(url, seg, lambda _b: other.replace(b'"seg":', b'"seg":' + str(seg).encode() + b',"x":', 1))


def stale_lease(url: str) -> None:
    """The last data segment rewritten under another epoch: records under a lease that was not current."""
    seg = data_segments(url)[-1]
    streams = intentlog.s3.connect(url, write=False).streams
    head, payload = streams.segment("t", seg)
    forged = Segment("data", head.seg, head.seq, head.off, head.epoch + 7, "stale", head.n, head.size)
    replace(url, seg, lambda _b: forged.encode(payload.splitlines()))


def stray(url: str) -> None:
    assert client_of(url).create("tasks/t/s/not-a-number", b"left here by hand")


DAMAGE = {"edited event": edit_event, "hole": hole, "splice": splice, "stale lease": stale_lease, "stray": stray}


def test_a_clean_stream_on_the_store_has_nothing_to_repair(store: str, reading: Callable[[], Any]) -> None:
    reading()
    before = snapshot(store)
    for flags in FLAGS:
        code, out = run("--root", store, "repair", "t", *flags)
        assert code == 0 and out.strip() == "task 't': nothing to repair", (flags, out)
    code, out = run("--root", store, "repair", "t", "--json")
    assert code == 0 and orjson.loads(out)["action"] == "none"
    with intentlog.open(store, create=False) as ledger:
        assert ledger.repair("t", accept_damage=True).action == "none"
    assert snapshot(store) == before


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damage_on_the_store_is_named_and_refused_writing_nothing(
    store: str, damage: str, tmp_path: Path, reading: Callable[[], Any]
) -> None:
    DAMAGE[damage](store)
    before = snapshot(store)
    receipts = read_receipts(tmp_path / "receipts.jsonl")
    assert len(receipts) == 1
    only_reading = reading()
    for flags in ([], ["--dry-run"]):
        code, out = run("--root", store, "repair", "t", *flags)
        assert code == 1, (flags, out)
        assert "restore the task's segments (tasks/t/s/" in out and "nothing was written" in out, out
    with intentlog.open(store, create=False) as ledger, pytest.raises(CorruptStream, match="restore the task's"):
        ledger.repair("t")
    assert snapshot(store) == before, "a refused repair writes nothing"
    only_reading.__exit__(None, None, None)
    # never cut, so never a second payment: the task's writer still refuses, and nothing is sent
    with intentlog.open(store) as ledger, pytest.raises(CorruptStream):
        ledger.task("t").effect("k1", {"idempotency_key": "k1"}, SyntheticProvider(tmp_path / "receipts.jsonl").send)
    assert read_receipts(tmp_path / "receipts.jsonl") == receipts, "no second send"
    code, out = run("--root", store, "repair", "other")
    assert code == 0 and "nothing to repair" in out, "the other tasks are unaffected"


def test_a_stream_cut_before_its_seal_or_removed_is_refused(store: str) -> None:
    code, out = run("--root", store, "seal")
    assert code == 0, out
    client = client_of(store)
    last = data_segments(store)[-1]
    for n in range(last, intentlog.s3.connect(store, write=False).streams.tail("t").seg + 1):
        client.delete(f"tasks/t/s/{n:012d}")  # the last note and the release: a clean, shorter stream
    for key, _ in list(client.scan("tasks/t/c")):
        client.delete(key)
    before = snapshot(store)
    code, out = run("--root", store, "repair", "t")
    assert code == 1 and "events were cut from its end" in out, out
    for key, _ in list(client.scan("tasks/other")):
        client.delete(key)
    with intentlog.open(store, create=False) as ledger, pytest.raises(CorruptStream, match="absent but a seal"):
        ledger.repair("other")
    assert snapshot(store) == {k: v for k, v in before.items() if not k.startswith("tasks/other/")}


