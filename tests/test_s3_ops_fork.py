"""``fork`` on a ledger on the store (a real SeaweedFS): the new task created through the seam, never a second payment.

The receipt log the synthetic provider writes (fsync'd, by itself) is the outside world:
a script re-run on a fork replays the copied calls from the record and sends only the
forked call and what follows it. The original's segments keep their bytes; a fork that
would re-send an unknown effect, a damaged original and a taken id are refused with
every key and byte of the store unchanged.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
import s3_server
from click.testing import CliRunner
from s3_server import snapshot

import intentlog
import intentlog.s3
from intentlog._internal.digest import digest_bytes
from intentlog.cli import main
from intentlog.demo.provider import SyntheticProvider, read_receipts
from intentlog.errors import CorruptStream, EffectUnknown, UsageError
from intentlog.fork import check_fork, fork_task
from intentlog.s3 import S3Client, parse_s3_url


def script(task: intentlog.Task, send: Any, topic: str) -> list[Any]:
    """Three steps; the second depends on ``topic`` (the input a fork changes)."""
    a = task.effect("outline", {"step": "outline", "idempotency_key": "outline"}, send, interpret=orjson.loads)
    b = task.effect("draft", {"step": "draft", "idempotency_key": f"draft-{topic}"}, send, interpret=orjson.loads)
    c = task.effect("review", {"step": "review", "idempotency_key": f"review-{topic}"}, send, interpret=orjson.loads)
    return [a, b, c]


def _boom(_: object) -> bytes:
    raise TimeoutError("read timed out")


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        script(ledger.task("essay"), SyntheticProvider(tmp_path / "receipts.jsonl").send, "tides")
        with pytest.raises(EffectUnknown):
            ledger.task("u").effect("k1", {"q": 1}, send=_boom)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return url


def events(url: str, task: str) -> list[dict[str, Any]]:
    data = intentlog.s3.connect(url, write=False).streams.read(task)
    return [orjson.loads(line) for line in data.splitlines()]


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def test_a_fork_on_the_store_reruns_from_the_call_and_sends_only_what_follows(store: str, tmp_path: Path) -> None:
    receipts = tmp_path / "receipts.jsonl"
    assert [r["key"] for r in read_receipts(receipts)] == ["outline", "draft-tides", "review-tides"]
    original = snapshot(store, "tasks/essay")
    with intentlog.open(store) as ledger:
        fork = ledger.fork("essay", "call-2", "essay.moons", note="another topic")
        assert fork.id == "essay.moons"
        result = script(fork, SyntheticProvider(receipts).send, "moons")
    assert result[0]["verdict"] == "accept"
    keys = [r["key"] for r in read_receipts(receipts)]
    assert keys == ["outline", "draft-tides", "review-tides", "draft-moons", "review-moons"], "outline replayed"
    assert snapshot(store, "tasks/essay/") == {k: v for k, v in original.items() if k.startswith("tasks/essay/")}
    mine, theirs = events(store, "essay.moons"), events(store, "essay")
    forked = next(e for e in mine if e["kind"] == "task.forked")
    upto = forked["data"]["upto_seq"]
    lines = intentlog.s3.connect(store, write=False).streams.read("essay").splitlines(keepends=True)
    assert forked["seq"] == upto + 1 and forked["data"]["from_head"] == digest_bytes(lines[upto])
    assert [(e["seq"], e["kind"], e["ts"], e["data"]) for e in mine[1 : upto + 1]] == [
        (e["seq"], e["kind"], e["ts"], e["data"]) for e in theirs[1 : upto + 1]
    ]
    with intentlog.open(store, create=False) as ledger:
        assert check_fork(ledger, "essay.moons") == []
        assert ledger.task("essay.moons").status().to_json()["forked_from"]["from_task"] == "essay"
    code, out = run("--root", store, "verify")
    assert code == 0, out


def test_the_command_dry_runs_then_forks_the_same_event(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    before = snapshot(store)
    with monkeypatch.context() as m:  # a dry run only reads: the fencing probe (a write) would fail it
        m.setattr(intentlog.s3, "require_fencing", lambda *_a: (_ for _ in ()).throw(AssertionError("probe")))
        code, out = run("--root", store, "fork", "essay", "--from", "call-3", "--dry-run", "--json")
    assert code == 0, out
    would = orjson.loads(out)
    assert would["dry_run"] is True and would["task"] == "essay.fork-1" and would["kind"] == "task.forked"
    assert snapshot(store) == before, "a dry run writes nothing to the store"
    code, out = run("--root", store, "fork", "essay", "--from", "call-3", "--json")
    assert code == 0, out
    done = orjson.loads(out)
    assert (done["task"], done["seq"], done["data"]) == (would["task"], would["seq"], would["data"])
    after = snapshot(store)
    assert {k: v for k, v in after.items() if k in before} == before, "nothing that existed changed"
    assert {k.split("/")[1] for k in after if k not in before and k.startswith("tasks/")} == {"essay.fork-1"}
    code, out = run("--root", store, "fork", "essay", "--from", "call-3", "--as", "essay.fork-1")
    assert code == 1 and "already exists" in out, out
    assert snapshot(store) == after


def test_a_fork_that_would_resend_an_unknown_effect_is_refused(store: str) -> None:
    before = snapshot(store)
    with intentlog.open(store) as ledger:
        with pytest.raises(EffectUnknown, match="send it again"):
            ledger.fork("u", "call-1", "u.again")
        assert snapshot(store) == before, "refused: nothing written"
        fork = ledger.fork("u", "call-1", "u.again", accept_risk=True)
        forked = next(e for e in fork.events() if e.kind == "task.forked")
        assert forked.data["accept_risk"] is True and forked.data["unknown"] == ["call-1"]
    code, out = run("--root", store, "fork", "u", "--from", "call-1", "--as", "u.other")
    assert code == 1 and "unknown" in out, out


def _damage(url: str, how: str) -> None:
    """A hole in essay's segments, or an edited event (its chain broken) in them."""
    client = S3Client(parse_s3_url(url))
    streams = intentlog.s3.connect(url, write=False).streams
    data = [n for n in range(streams.tail("essay").seg + 1) if streams.segment("essay", n)[1]]
    key = f"tasks/essay/s/{data[2]:012d}"
    body = client.get(key)
    assert body is not None
    client.delete(key)
    if how == "edit":
        edited = body.replace(b'"ts":"2', b'"ts":"3', 1)
        assert edited != body
        assert client.create(key, edited)


@pytest.mark.parametrize("how", ["hole", "edit"])
def test_a_damaged_original_is_refused_writing_nothing(store: str, how: str) -> None:
    _damage(store, how)
    before = snapshot(store)
    with intentlog.open(store) as ledger, pytest.raises(CorruptStream):
        ledger.fork("essay", "call-3", "essay.b")
    code, out = run("--root", store, "fork", "essay", "--from", "call-3", "--as", "essay.c")
    assert code == 1 and "essay" in out, out
    code, out = run("--root", store, "fork", "essay", "--from", "call-3", "--as", "essay.c", "--dry-run")
    assert code == 1, out
    assert snapshot(store) == before


def test_two_forks_racing_for_one_id_one_wins_the_other_is_refused(store: str) -> None:
    ledger = intentlog.open(store)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def fork(note: str) -> None:
        barrier.wait()
        try:
            fork_task(ledger, "essay", "call-2", "essay.race", note=note)
            outcomes.append("won " + note)
        except UsageError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=fork, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [o for o in outcomes if o.startswith("won ")]
    assert len(won) == 1, outcomes
    loser = next(o for o in outcomes if not o.startswith("won "))
    assert "essay.race" in loser and ("meanwhile" in loser or "already exists" in loser)
    forked = next(e for e in events(store, "essay.race") if e["kind"] == "task.forked")
    assert forked["data"]["note"] == won[0].split()[1], "the stream is the winner's, whole"
    ledger.close()
