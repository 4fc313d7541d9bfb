"""A holder whose stream does not exist yet can be fenced, on a real SeaweedFS.

A writer's first put creates its stream (segment 0); a holder stalled before that put (a
store stall, a paused process) has no stream a fence could take, and with no pid the
supervisor could only watch it for ever. Fencing such a holder creates the stream itself
(its creation record, then a lease taken and given back): the holder's creation put then
finds the number taken and it leases the stream like any other writer -- refused while
the item's next holder holds it. The holder is a real process held at its creation put.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s3_server

import intentlog
from intentlog.backlog import leases

HOLDER = """
import sys, intentlog
from intentlog.s3 import ObjectStreams

original = ObjectStreams._create

def held_create(self, name, records):
    print("creating", flush=True)  # the holder stands right before its creation put
    if sys.stdin.readline().strip() != "go":
        raise SystemExit(3)
    return original(self, name, records)

ObjectStreams._create = held_create
ledger = intentlog.open(sys.argv[1])
try:
    ledger.task("t").append("note", {"by": "holder"})
    print("appended", flush=True)
except Exception as exc:
    print("refused", type(exc).__name__, flush=True)
"""


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


@pytest.fixture
def holder(url: str) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": str(Path(intentlog.__file__).parent.parent)}
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _kinds(ledger: Any, task: str) -> list[tuple[str, Any]]:
    return [(e.kind, e.data.get("by")) for e in ledger.task(task).events()]


def test_a_holder_stalled_before_its_stream_exists_is_fenced_and_cannot_write_while_another_holds_it(
    url: str, holder: subprocess.Popen[str]
) -> None:
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "creating"
    with intentlog.open(url) as led:
        t = led.task("t")
        assert not t.exists()  # the holder's stream is not born yet
        epoch = leases.fence(t)
        assert epoch is not None  # fenced, though no stream existed
        assert t.exists() and [e.kind for e in t.events()] == ["task.created"]
        t.append("note", {"by": "next holder"})  # the item's next holder takes the lease
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().split() == ["refused", "TaskBusy"]
        assert holder.wait(timeout=60) == 0
        t.close()
        assert _kinds(led, "t") == [("task.created", None), ("note", "next holder")]


def test_ending_or_fencing_a_holder_with_no_pid_and_no_stream_succeeds(url: str) -> None:
    """What the watchdog asks of a stalled holder it knows no process of (a Dask task not yet seen)."""
    with intentlog.open(url) as led:
        t = led.task("g.item.a")
        assert leases.end_or_fence(t, None, None)
        assert [e.kind for e in t.events()] == ["task.created"]
        t.append("note", {"by": "next holder"})  # a stream a fence created is leased like any other
        t.close()
        assert _kinds(led, "g.item.a") == [("task.created", None), ("note", "next holder")]
