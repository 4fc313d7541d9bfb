"""The operator's ``--dry-run`` on a ledger on the store (a real SeaweedFS): the real library call on a private copy.

The copy is made from the store through the seams; the decision runs on it exactly as it
would for real, so the event it prints is the one the real command then appends (same
kind, seq and data), and a refusal is the real command's refusal, word for word. Every
key of the store and its bytes are unchanged by a dry run, and no fencing probe runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import s3_server
from click.testing import CliRunner
from effect_child import KEY, TASK, request, review
from s3_server import snapshot

import intentlog
import intentlog.s3
from intentlog.cli import main
from intentlog.demo.provider import SyntheticProvider
from intentlog.s3 import S3Client, parse_s3_url


def _boom(_: object) -> bytes:
    raise TimeoutError("read timed out")


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Task ``u`` with an unknown effect; TASK awaiting acceptance; the cwd an empty folder."""
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        with pytest.raises(intentlog.EffectUnknown):
            ledger.task("u").effect("k1", {"q": 1}, send=_boom)
        t = ledger.task(TASK)
        t.effect(KEY, request("model-a"), SyntheticProvider(tmp_path / "receipts.jsonl").send, interpret=review)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return url


@pytest.fixture
def dry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Run a command that must only read the store: the fencing probe (a write) fails it."""

    def run(*args: str) -> tuple[int, str]:
        with monkeypatch.context() as m:
            m.setattr(intentlog.s3, "require_fencing", _no_probe)
            r = CliRunner().invoke(main, list(args))
        return r.exit_code, r.output

    yield run


def _no_probe(*_a: object, **_k: object) -> None:
    raise AssertionError("a dry run ran the fencing probe")


def real(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def _call(url: str) -> str:
    with intentlog.open(url, create=False) as ledger:
        call: str = ledger.task("u").work_state().keys["k1"]
        return call


def _event(out: str) -> tuple[str, int, dict[str, Any]]:
    ev = orjson.loads(out)
    return ev["kind"], ev["seq"], ev["data"]


def test_a_dry_run_prints_the_event_the_real_command_appends(store: str, dry: Any) -> None:
    call = _call(store)
    before = snapshot(store)
    code, out = dry("--root", store, "reconcile", "u", call, "--not-served", "--note", "checked", "--dry-run", "--json")
    assert code == 0, out
    assert orjson.loads(out)["dry_run"] is True
    would = _event(out)
    assert would[0] == "effect.reconciled"
    assert snapshot(store) == before, "a dry run writes nothing to the store"
    code, text = dry("--root", store, "reconcile", "u", call, "--not-served", "--note", "checked", "--dry-run")
    assert code == 0 and text.startswith("dry run: would append effect.reconciled to u at seq") and "nothing" in text
    assert snapshot(store) == before
    code, out = real("--root", store, "reconcile", "u", call, "--not-served", "--note", "checked", "--json")
    assert code == 0, out
    assert _event(out) == would, "the real command appended the event the dry run printed"
    assert orjson.loads(out)["dry_run"] is False


def test_a_refusal_is_the_real_commands_word_for_word(store: str, dry: Any) -> None:
    before = snapshot(store)
    refusals = []
    for args in (["accept", "u"], ["fail", "u", "nope", "--reason", "x"]):
        code, out = dry("--root", store, *args, "--dry-run")
        refusals.append((code, out))
        assert code == 1, out
    assert snapshot(store) == before
    for args, (code, out) in zip((["accept", "u"], ["fail", "u", "nope", "--reason", "x"]), refusals, strict=True):
        assert real("--root", store, *args) == (code, out), "the same refusal, word for word"
    assert snapshot(store) == before, "the refused real commands wrote nothing either"


def test_accept_and_fail_dry_runs_on_the_store(store: str, dry: Any) -> None:
    s3_seal = real("--root", store, "seal")
    assert s3_seal[0] == 0, s3_seal[1]  # a sealed store: the copy carries the seal, and the stream agrees with it
    before = snapshot(store)
    code, out = dry("--root", store, "accept", TASK, "--by", "alice", "--dry-run", "--json")
    assert code == 0, out
    kind, seq, data = _event(out)
    assert kind == "task.accepted" and data["by"] == "alice"
    code, out = dry("--root", store, "fail", TASK, "--reason", "given up", "--dry-run", "--json")
    assert code == 0 and _event(out)[:2] == ("task.failed", seq), out
    assert snapshot(store) == before
    code, out = real("--root", store, "accept", TASK, "--by", "alice", "--json")
    assert code == 0 and _event(out) == (kind, seq, data), out


def test_segments_that_do_not_make_one_stream_refuse_the_dry_run_as_the_real_command(store: str, dry: Any) -> None:
    client = S3Client(parse_s3_url(store))
    streams = intentlog.s3.connect(store, write=False).streams
    data = [n for n in range(streams.tail("u").seg + 1) if streams.segment("u", n)[1]]
    assert len(data) >= 2
    client.delete(f"tasks/u/s/{data[-1]:012d}")  # a hole before the release: not one stream
    call = "call-1"
    before = snapshot(store)
    code, out = dry("--root", store, "reconcile", "u", call, "--not-served", "--dry-run")
    assert code == 1 and "missing" in out, out
    assert snapshot(store) == before
    code, real_out = real("--root", store, "reconcile", "u", call, "--not-served")
    assert code == 1 and "missing" in real_out, real_out
    assert snapshot(store) == before


def test_a_real_decision_on_the_store_runs_the_fencing_probe_first(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dry run only reads; the real decision writes, so the store must show it fences writers first."""
    from intentlog.errors import StoreRefused

    def refused(client: object) -> None:
        raise StoreRefused(str(client), ["a second conditional create of one key succeeded"])

    monkeypatch.setattr(intentlog.s3, "require_fencing", refused)
    before = snapshot(store)
    code, out = real("--root", store, "reconcile", "u", _call(store), "--not-served")
    assert code == 1 and "second conditional create" in out, out
    assert snapshot(store) == before, "a store that cannot fence gets nothing written"
    code, out = real("--root", store, "accept", TASK)
    assert code == 1 and snapshot(store) == before, out


def test_approve_and_reject_dry_runs_and_a_changed_request_refused(store: str, dry: Any) -> None:
    with intentlog.open(store) as ledger:
        ledger.task("a").request_approval("ship", "ship it?", binds="blake3:" + "0" * 64)
    before = snapshot(store)
    code, out = dry("--root", store, "approve", "a", "ship", "--by", "alice", "--dry-run", "--json")
    assert code == 0, out
    approved = _event(out)
    assert approved[0] == "approval.decided" and approved[2]["decision"] == "approve"
    code, out = dry("--root", store, "reject", "a", "ship", "--by", "bob", "--dry-run", "--json")
    assert code == 0 and _event(out)[2]["decision"] == "reject", out
    wrong = ["approve", "a", "ship", "--hash", "blake3:" + "1" * 64]
    refused = dry("--root", store, *wrong, "--dry-run")
    assert refused[0] == 1, refused
    assert snapshot(store) == before
    assert real("--root", store, *wrong) == refused, "the same refusal, word for word"
    code, out = real("--root", store, "approve", "a", "ship", "--by", "alice", "--json")
    assert code == 0 and _event(out) == approved, out
