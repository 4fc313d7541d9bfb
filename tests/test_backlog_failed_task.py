"""An item whose task a person gave up (``intentlog fail TASK --reason``) is failed, never run again.

Every step here runs through real ``intentlog`` CLI processes. A run that would take the
item again and retry its step never returns on its own (no ``max_attempts``): the bound on
each run (``timeout=``) is what makes such a defect fail, nothing here measures time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from backlog_steps import read_receipts

import intentlog

TESTS = Path(__file__).parent
RUN_BOUND = 120.0
REASON = "the customer withdrew the order"


def unknown_step(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """The send raises after it may have reached the provider: the effect is unknown, the item blocked."""

    def send(request: Any) -> bytes:
        raise ConnectionResetError("the connection dropped after the request was written")

    task.effect("e0", {"pkey": payload["item"] + ":0"}, send)
    return {"never": True}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("BACKLOG_ORDER", str(tmp_path / "order"))
    monkeypatch.setenv("BACKLOG_SLEEP", "0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return dict(os.environ)


@pytest.fixture(params=["folder", "store"])
def root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ledger: a folder, or a fresh prefix on the object store (a real SeaweedFS); the same commands on both."""
    if request.param == "folder":
        return str(tmp_path / "ledger")
    import s3_server

    for k, v in s3_server.seaweed().env().items():
        monkeypatch.setenv(k, v)
    loc = s3_server.fresh_location()
    return f"s3://{loc.bucket}/{loc.prefix}"


def _cli(root: str, env: dict[str, str], *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", root, *args],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _run(root: str, env: dict[str, str], step: str) -> subprocess.CompletedProcess[str]:
    return _cli(root, env, "run", "b", "--step", step, "--until-idle", timeout=RUN_BOUND)


def _backlog_records(root: str, kind: str) -> list[dict[str, Any]]:
    with intentlog.open(root) as led:
        return [dict(e.data) for e in led.task("b.backlog").events() if e.kind == kind]


def _leases(root: str) -> int:
    with intentlog.open(root) as led:
        return sum(1 for e in led.task("b.item.x").events() if e.kind == "lease.acquired")


def _row(root: str, env: dict[str, str]) -> dict[str, Any]:
    r = _cli(root, env, "backlog", "b", "--json")
    assert r.returncode == 0, r.stderr
    row: dict[str, Any] = json.loads(r.stdout)["items"][0]
    return row


def _blocked_item(root: str, env: dict[str, str], step: str) -> None:
    with intentlog.open(root) as led:
        led.backlog("b").add("x", {"item": "x"})
    r = _run(root, env, step)
    assert r.returncode == 3, r.stderr  # waits for a person
    assert len(_backlog_records(root, "backlog.item_blocked")) == 1


def _given_up_then_settled(root: str, env: dict[str, str], step: str) -> None:
    """Give the blocked item's task up, unblock, run: the item is failed with the reason, its step never run again."""
    r = _cli(root, env, "fail", "b.item.x", "--reason", REASON)
    assert r.returncode == 0, r.stderr
    leases = _leases(root)
    r = _cli(root, env, "unblock", "b", "x")
    assert r.returncode == 0, r.stderr
    assert "failed" in r.stdout and REASON in r.stdout
    failed = _backlog_records(root, "backlog.item_failed")
    assert len(failed) == 1 and REASON in failed[0]["reason"] and failed[0]["task"] == "b.item.x"
    assert _backlog_records(root, "backlog.item_unblocked") == []  # never queued again
    r = _run(root, env, step)  # returns at once: nothing can progress
    assert r.returncode == 0, r.stderr
    assert _leases(root) == leases  # the step never ran again
    assert _backlog_records(root, "backlog.item_failed") == failed
    assert _backlog_records(root, "backlog.item_scheduled") == []
    row = _row(root, env)
    assert row["state"] == "failed" and REASON in row["reason"]


def test_a_given_up_task_settles_its_blocked_item_as_failed(tmp_path: Path, root: str, env: dict[str, str]) -> None:
    _blocked_item(root, env, "backlog_steps:approval_step")
    _given_up_then_settled(root, env, "backlog_steps:approval_step")
    assert not (tmp_path / "receipts.jsonl").exists()


def test_a_failed_call_keeps_the_item_blocked_until_its_task_is_given_up(root: str, env: dict[str, str]) -> None:
    step = "test_backlog_failed_task:unknown_step"
    _blocked_item(root, env, step)
    r = _cli(root, env, "fail", "b.item.x", "call-1", "--reason", "the provider says it never arrived")
    assert r.returncode == 0, r.stderr
    r = _cli(root, env, "unblock", "b", "x")  # a failed call is for a person to review: still blocked
    assert r.returncode == 1 and "still" in r.stderr and "nothing was written" in r.stderr
    _given_up_then_settled(root, env, step)


def test_a_run_settles_a_queued_item_whose_task_was_given_up(tmp_path: Path, root: str, env: dict[str, str]) -> None:
    """Approved and unblocked (queued), then given up: the run that takes it records it failed, its step never run."""
    step = "backlog_steps:approval_step"
    _blocked_item(root, env, step)
    for args in (("approve", "b.item.x", "go", "--by", "ana"), ("unblock", "b", "x"),
                 ("fail", "b.item.x", "--reason", REASON)):  # fmt: skip
        r = _cli(root, env, *args)
        assert r.returncode == 0, r.stderr
    assert _row(root, env)["state"] == "failed"  # the view says it before any run
    r = _run(root, env, step)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "receipts.jsonl").exists()  # the step never sent what was approved
    failed = _backlog_records(root, "backlog.item_failed")
    assert len(failed) == 1 and REASON in failed[0]["reason"] and failed[0]["failures"] == 0
    assert _backlog_records(root, "backlog.item_scheduled") == []
    row = _row(root, env)
    assert row["state"] == "failed" and REASON in row["reason"]
    leases = _leases(root)
    r = _run(root, env, step)  # settled: a later run takes nothing
    assert r.returncode == 0, r.stderr
    assert _backlog_records(root, "backlog.item_failed") == failed and _leases(root) == leases


def test_an_accepted_task_is_run_from_its_record_and_done(root: str, env: dict[str, str]) -> None:
    """A task accepted by a person is not given up: its step runs again from the record (no second send), done."""
    from backlog_steps import serve

    with intentlog.open(root) as led:
        led.backlog("b").add("x", {"item": "x"})
        t = led.task("b.item.x")
        t.effect("e0", {"pkey": "x:0"}, serve)
        t.close()
    assert len(read_receipts(env["BACKLOG_RECEIPTS"])) == 1
    r = _cli(root, env, "accept", "b.item.x", "--by", "ana")
    assert r.returncode == 0, r.stderr
    r = _run(root, env, "backlog_steps:step")
    assert r.returncode == 0, r.stderr
    assert len(read_receipts(env["BACKLOG_RECEIPTS"])) == 1
    assert _row(root, env)["state"] == "done"
