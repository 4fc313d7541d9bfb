"""``intentlog --root s3://BUCKET/PREFIX`` on a real S3-compatible store (SeaweedFS).

The read views and verify read the store through the seams; the commands not wired for a
store yet are refused (exit 2) with nothing written to the store or to a local folder named 's3:'.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
import s3_server
from click.testing import CliRunner
from effect_child import KEY, TASK, request, review

import intentlog
from intentlog.cli import main
from intentlog.demo.provider import SyntheticProvider
from intentlog.s3 import S3Client, parse_s3_url


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """An ``s3://`` ledger holding one completed effect and a note; the cwd an empty folder."""
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        t = ledger.task(TASK)
        t.append("note", {"n": 1})
        t.effect(KEY, request("model-a"), SyntheticProvider(tmp_path / "receipts.jsonl").send, interpret=review)
        big = ledger.artifacts.put(b"x" * 100_000)  # too big to ride inline: an object on the store
        t.append("note", {"big": big.digest})
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return url


def keys(url: str) -> list[str]:
    client = S3Client(parse_s3_url(url))
    return sorted(k for k, _ in client.scan("tasks")) + sorted(k for k, _ in client.scan("objects"))


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def test_read_views_on_the_store(store: str) -> None:
    code, out = run("--root", store, "init", "--json")
    assert code == 0 and orjson.loads(out)["root"] == store  # the store passed its probe
    code, out = run("--root", store, "tasks", "--json")
    assert code == 0
    rows = orjson.loads(out)
    assert [(r["task"], r["stream"], r["events"]) for r in rows] == [(TASK, "ok", 9)]
    code, out = run("--root", store, "status", TASK, "--json")
    st = orjson.loads(out)
    assert code == 0 and st["state"] == "awaiting acceptance"
    assert f"--root {store} accept" in st["next_step"]  # the hint runs as printed
    code, out = run("--root", store, "log", TASK, "--json")
    kinds = [orjson.loads(x)["kind"] for x in out.splitlines()]
    assert code == 0 and kinds[0] == "task.created" and kinds.count("attempt.started") == 1
    big = orjson.loads(out.splitlines()[-1])["data"]["big"]
    code, out = run("--root", store, "show", big[:20], "--json")
    assert code == 0 and orjson.loads(out)["size"] == 100_000
    code, _ = run("--root", store, "status", "no-such-task")
    assert code == 1
    assert os.listdir(".") == []


def test_verify_reads_the_store_through_the_seams(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import intentlog.merge

    def no_copy(*args: object) -> None:
        raise AssertionError("verify made a local copy")

    monkeypatch.setattr(intentlog.merge, "merge", no_copy)
    before = keys(store)
    code, out = run("--root", store, "verify", "--json")
    report = orjson.loads(out)
    assert code == 0 and report["ok"] and report["root"] == store, report
    counts = report["counts"]
    assert counts["tasks"] == 1 and counts["events"] == 9 and counts["artifacts"] >= 2 and counts["error"] == 0
    assert "note" not in report
    code, out = run("--root", store, "verify")
    assert code == 0 and "OK:" in out and "local copy" not in out
    code, out = run("--root", store, "verify", "no-such-task")
    assert code == 2 and "no task 'no-such-task'" in out
    assert keys(store) == before and os.listdir(".") == []


def test_a_damaged_segment_fails_verify(store: str) -> None:
    client = S3Client(parse_s3_url(store))
    seg = sorted(k for k, _ in client.scan(f"tasks/{TASK}/s"))[2]
    body = client.get(seg)
    assert body is not None and b'"data":{"n":1}' in body
    client.delete(seg)
    client.create(seg, body.replace(b'"data":{"n":1}', b'"data":{"n":7}'))  # an edited event: its chain breaks
    code, out = run("--root", store, "verify")
    assert code == 1, out
    code, out = run("--root", store, "tasks", "--json")
    assert orjson.loads(out)[0]["stream"] == "unreadable", out


def test_no_command_is_refused_on_the_store_by_its_name(store: str) -> None:
    """The command line keeps no list of the commands a store runs: ``keep`` opens the store and marks there."""
    import intentlog.cli.storeroot as storeroot

    assert not hasattr(storeroot, "ON_STORE") and not hasattr(storeroot, "check_on_store")
    client = S3Client(parse_s3_url(store))
    assert not list(client.scan("gc"))
    code, out = run("--root", store, "keep", TASK)
    assert code == 0, out
    assert list(client.scan("gc")) and os.listdir(".") == [], "the keep mark is in the store's gc log"


def test_the_operators_decisions_run_on_the_store(store: str) -> None:
    """reconcile and accept on an s3:// root: appended through the stream's lease, read back by a fresh process."""

    def boom(_: object) -> bytes:
        raise TimeoutError("read timed out")

    with intentlog.open(store) as ledger, pytest.raises(intentlog.EffectUnknown):
        ledger.task("u").effect("k1", {"q": 1}, send=boom)
    with intentlog.open(store, create=False) as ledger:
        ws = ledger.task("u").work_state()
        call = ws.keys["k1"]
        assert ws.calls[call].stage == "effect_unknown"
    before = keys(store)
    code, out = run("--root", store, "reconcile", "u", call, "--not-served", "--dry-run")
    assert code == 0 and out.startswith("dry run: would append effect.reconciled"), out
    assert keys(store) == before and os.listdir(".") == []  # a dry run: nothing written (tests/test_s3_ops_dryrun.py)
    code, out = run("--root", store, "reconcile", "u", call, "--not-served", "--json")
    assert code == 0, out
    with intentlog.open(store, create=False) as ledger:
        ws = ledger.task("u").work_state()
        assert ws.calls[call].stage == "reconciled_not_served"
    code, out = run("--root", store, "accept", TASK, "--json")
    assert code == 0, out
    with intentlog.open(store, create=False) as ledger:
        assert [e.kind for e in ledger.task(TASK).events()][-1] == "task.accepted"
    code, out = run("--root", store, "verify")
    assert code == 0, out
