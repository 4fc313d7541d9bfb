"""Listings of the idioms: what a task waits for, the parent/child tree, an inbox, a returned child.

On a folder and on a ledger on the store (a real SeaweedFS): ``intentlog tasks`` names a
sleep's recorded wake time, an awaited event and the children a parent has not joined,
and each child's parent (table and ``--json``); ``status X.inbox`` says whose inbox it is,
lists its events and points at the task; a child whose record holds its ``task.returned``
is complete, never queued. Every hint these print is run as pasted, from another folder.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import s3_server

import intentlog
from intentlog import ChildrenPending, Suspended
from intentlog.eventlog.format import Event
from intentlog.projections.status import task_status

REPO = Path(intentlog.__file__).resolve().parent.parent
# a command a hint offers: from "intentlog " up to the next ", or ", ";" or ")" that ends it
_CMD_RE = re.compile(r"intentlog (?:[^,;)]|,(?! or ))+")


@pytest.fixture(params=["folder", "store"])
def where(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "folder":
        yield str(tmp_path / "led")
    else:
        yield s3_server.ledger_url(monkeypatch)


def _build(where: str) -> str:
    """A parent with two children (one returned), a sleeper, a waiter with a pending event, an unstarted inbox."""
    with intentlog.open(where) as led:
        parent = led.task("parent")
        parent.spawn("kid-a", {"doc": 1}, run=lambda child: {"summary": "a"})
        parent.spawn("kid-b", {"doc": 2})
        with pytest.raises(ChildrenPending):
            parent.join()
        with pytest.raises(Suspended):
            led.task("sleeper").sleep_for(3600, name="nap", block=False)
        with pytest.raises(Suspended):
            led.task("waiter").wait_for_event("review", block=False)
        led.signal("waiter", "note", {"n": 1})
        led.signal("nobody", "hello", {"n": 2})
        until = next(e for e in led.task("sleeper").events() if e.kind == "task.sleep_started").data["until"]
    return str(until)


def _cli(where: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "INTENTLOG_ROOT"} | {"PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", where, *argv],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _run_hint(cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``cmd`` as a shell splits it, its capitalised placeholder filled, run from a folder that is not the ledger's."""
    argv = shlex.split(cmd)
    assert argv[0] == "intentlog", cmd
    fill = {"JSON": '{"ok": true}'}
    env = {k: v for k, v in os.environ.items() if k != "INTENTLOG_ROOT"} | {"PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", *(fill.get(a, a) for a in argv[1:])],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_tasks_lists_what_each_task_waits_for_and_its_parent(where: str, tmp_path: Path) -> None:
    """The JSON rows and the table name the wake time, the event, the children to join and each child's parent."""
    until = _build(where)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    got = _cli(where, "tasks", "--json", cwd=elsewhere)
    assert got.returncode == 0, got.stderr
    rows = {r["task"]: r for r in orjson.loads(got.stdout)}
    assert "waiter.inbox" not in rows and "nobody.inbox" in rows  # an inbox is folded into its task's row
    assert rows["sleeper"]["waiting"] == f"sleeping until {until}" and rows["sleeper"]["state"] == "interrupted"
    assert rows["waiter"]["waiting"] == "waiting for event 'review'" and rows["waiter"]["pending_events"] == ["note"]
    assert rows["parent"]["waiting"] == "waiting for 2 child tasks to be joined: kid-a, kid-b"
    assert rows["parent"]["state"] == "interrupted" and rows["parent"]["parent"] is None
    assert (rows["kid-a"]["parent"], rows["kid-b"]["parent"]) == ("parent", "parent")
    assert rows["kid-a"]["state"] == "complete" and rows["kid-a"]["waiting"] is None  # returned: not queued
    assert rows["kid-b"]["state"] == "queued"
    table = _cli(where, "tasks", cwd=elsewhere)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    head = lines[0]
    assert re.split(r"\s{2,}", head.strip())[-2:] == ["waiting for", "parent"], head
    line = {ln.split()[0]: ln for ln in lines[1:]}
    assert line["kid-a"].rstrip().endswith("parent") and "complete" in line["kid-a"]
    assert f"sleeping until {until}" in line["sleeper"]
    assert "event 'review'" in line["waiter"] and "2 child tasks to be joined: kid-a, kid-b" in line["parent"]
    # every hint these rows print runs as pasted from another folder (signalling the waiter included)
    for r in rows.values():
        assert r["next_step"] and r["next_operation"] != "verify" and r["last_activity"], r
        for cmd in _CMD_RE.findall(r["next_step"]):
            assert cmd.startswith(f"intentlog --root {shlex.quote(where)} "), cmd
            done = _run_hint(cmd.strip(), elsewhere)
            assert done.returncode == 0, (cmd, done.stderr)


def test_status_of_an_inbox_names_its_task_and_its_events(where: str, tmp_path: Path) -> None:
    """``status X.inbox``: the inbox of X, each event pending or received, a next step that points at X."""
    _build(where)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    got = _cli(where, "status", "waiter.inbox", "--json", cwd=elsewhere)
    assert got.returncode == 0, got.stderr
    st = orjson.loads(got.stdout)
    assert st["inbox"]["task"] == "waiter" and st["inbox"]["task_exists"] is True
    assert [(e["event"], e["pending"]) for e in st["inbox"]["events"]] == [("note", True)]
    assert st["next_operation"] == "none" and "inbox of task 'waiter'" in st["reason"]
    cmds = _CMD_RE.findall(st["next_step"])
    assert [c.strip() for c in cmds] == [f"intentlog --root {shlex.quote(where)} status waiter"], st["next_step"]
    assert _run_hint(cmds[0].strip(), elsewhere).returncode == 0
    text = _cli(where, "status", "waiter.inbox", cwd=elsewhere).stdout
    assert "inbox of        waiter" in text and "'note'" in text and "pending: not received yet" in text, text
    none = orjson.loads(_cli(where, "status", "nobody.inbox", "--json", cwd=elsewhere).stdout)
    assert none["inbox"]["task_exists"] is False and "has not started" in none["next_step"]
    cmds = _CMD_RE.findall(none["next_step"])
    assert [c.strip() for c in cmds] == [f"intentlog --root {shlex.quote(where)} status nobody.inbox"]
    assert _run_hint(cmds[0].strip(), elsewhere).returncode == 0
    parent = orjson.loads(_cli(where, "status", "parent", "--json", cwd=elsewhere).stdout)
    assert [(c["task"], c["state"]) for c in parent["children"]] == [("kid-a", "complete"), ("kid-b", "queued")]
    cmds = [c.strip() for c in _CMD_RE.findall(parent["next_step"])]
    assert cmds == [f"intentlog --root {shlex.quote(where)} status kid-b"], parent["next_step"]
    assert _run_hint(cmds[0], elsewhere).returncode == 0


def _ev(seq: int, kind: str, data: dict[str, Any]) -> Event:
    return Event(seq, kind, f"2026-12-01T00:00:0{seq}.000000Z", None, data, "blake3:" + "0" * 64)


def test_the_projection_a_returned_child_is_complete_a_spawning_parent_waits() -> None:
    """Pure: a child whose only records are its link and task.returned is complete; a bare child queued;
    a parent that spawned and joined none is interrupted, waiting for them; once joined, not waiting."""
    created = _ev(0, "task.created", {"format": "intentlog/1", "stream": "s", "task": "c"})
    linked = _ev(1, "task.spawned", {"parent": "p", "payload": None})
    returned = _ev(2, "task.returned", {"result": {"ok": 1}})
    st = task_status([created, linked, returned], task_id="c")
    assert (st.state, st.next_operation) == ("complete", "none") and "returned" in st.next_step
    assert task_status([created, linked], task_id="c").state == "queued"
    assert task_status([created, returned], task_id="c").state == "complete"
    spawned = [_ev(1, "task.child_spawned", {"child": "a", "payload": 1}),
               _ev(2, "task.child_spawned", {"child": "b", "payload": 2})]  # fmt: skip
    p = task_status([created, *spawned], task_id="p")
    assert p.state == "interrupted" and p.waiting == "waiting for 2 child tasks to be joined: a, b"
    assert "intentlog status p" in p.next_step
    joined = task_status([created, *spawned, _ev(3, "task.joined", {"children": ["a", "b"]})], task_id="p")
    assert joined.waiting is None and joined.state != "interrupted"


def test_every_command_is_one_a_hint_completes_with_its_root() -> None:
    """A hint naming any command of the CLI gets the --root it was given (signal and revisions included)."""
    from intentlog._internal.commands import COMMANDS, complete
    from intentlog.cli import main

    assert set(main.commands) <= set(COMMANDS)
    for name in main.commands:
        assert complete(f"see: intentlog {name} x", "/r") == f"see: intentlog --root /r {name} x"
