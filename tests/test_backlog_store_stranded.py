"""A backlog item on the object store whose task's lease a SIGKILLed holder left: never stranded.

A holder (a real process) starts an effect on an item's task and is killed in the middle of
the send: the attempt is unknown and the lease stays held on the store. While it runs the
view shows the item *running* with its process and host (a send in flight is never shown
blocked); once it is gone the view's next step is the exact command -- ``--root`` and
``--take-over-after 0`` included -- that takes the lease over and records the person's
decision. Pasted as printed it clears the item; the take-over is a lease segment of the
next epoch on the stream, the old holder's epoch never written again.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import s3_server
from conftest import child_code

import intentlog
from intentlog.s3 import ObjectStreams

TESTS = Path(__file__).parent

#: a holder of item i0's task, as a backlog worker: starts one effect and stays in the send until killed
HOLDER = """
import os, sys, intentlog
import intentlog.s3.holder as holder
import intentlog.s3.lease as lease_mod
if sys.argv[2] != "here":  # a holder on another machine: this one cannot tell whether it runs
    holder._ME = (os.getpid(), holder.Holder(os.getpid(), sys.argv[2]))
lease_mod.HEARTBEAT_EVERY = 0.05
ledger = intentlog.open(sys.argv[1])
t = ledger.task("f.item.i0")
me = holder.this_process()
t.append("lease.acquired", {"epoch": 1, "pid": me.pid, "host": me.host, "start_time": None, "boot_id": None,
                            "backlog": "f", "item": "i0"})  # what a backlog worker records first
def send(request):
    print("in-call", flush=True)
    sys.stdin.readline()  # in flight until killed
    return b'{"ok": true}'
t.effect("k", {"q": 1}, send)
"""


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(intentlog.__file__).parent.parent), str(TESTS)]))
    return s3_server.ledger_url(monkeypatch)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    made: list[subprocess.Popen[str]] = []
    yield made
    for p in made:
        if p.poll() is None:
            p.kill()
        p.wait()


def _holder(url: str, host: str, procs: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", child_code(HOLDER), url, host], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "in-call"
    return p


def _cli(*words: str) -> subprocess.CompletedProcess[str]:
    """A command as the view printed it (``intentlog ...``), run as this interpreter's CLI."""
    assert words[0] == "intentlog", words
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", *words[1:]], capture_output=True, text=True, timeout=120
    )


def _segments(url: str, name: str) -> list[tuple[str, int, int | None]]:
    streams = ObjectStreams(s3_server.client_of(url))
    tail = streams.tail(name)
    out = []
    for n in range(tail.seg + 1):
        seg = streams.segment(name, n)[0]
        out.append((seg.kind, seg.epoch, seg.who.pid if seg.who is not None else None))
    return out


def _row(url: str) -> dict[str, object]:
    shown = _cli("intentlog", "--root", url, "backlog", "f", "--json")
    assert shown.returncode == 0, shown.stderr
    rows = orjson.loads(shown.stdout)["items"]
    assert len(rows) == 1
    row: dict[str, object] = rows[0]
    return row


def _pasted(step: str, pattern: str) -> list[str]:
    found = re.search(pattern, step)
    assert found is not None, (pattern, step)
    return shlex.split(found.group(0))


def test_a_send_in_flight_shows_running_with_its_holder_and_a_dead_holder_is_taken_over_by_the_pasted_command(
    url: str, procs: list[subprocess.Popen[str]]
) -> None:
    ledger = intentlog.open(url)
    ledger.backlog("f").add("i0", {"item": "i0"})
    ledger.close()
    h = _holder(url, "here", procs)
    live = _row(url)
    assert live["state"] == "running", live  # a send in flight, never "blocked"
    holder = live["holder"]
    assert isinstance(holder, dict) and holder["pid"] == h.pid and holder["host"] == socket.gethostname()
    assert holder["alive"] is True and holder["beat"] is not None, holder
    h.send_signal(signal.SIGKILL)
    h.wait()
    before = _segments(url, "f.item.i0")
    assert before[-1][0] == "data" and before[-1][1] == 1  # the dead holder's lease stays held
    dead = _row(url)
    assert dead["state"] == "blocked", dead
    step = str(dead["next_step"])
    root = re.escape(f"intentlog --root {url} ")
    cmd = _pasted(step, root + r"reconcile --take-over-after 0 f\.item\.i0 \S+ --not-served")
    done = _cli(*cmd)
    assert done.returncode == 0, done.stdout + done.stderr
    after = _segments(url, "f.item.i0")
    assert after[: len(before)] == before
    taken = after[len(before)]
    assert taken[:2] == ("lease", 2) and taken[2] not in (None, h.pid)  # the take-over, recorded on the stream
    assert all(seg[1] == 2 for seg in after[len(before) :])  # the dead holder's epoch never written again
    kinds = [e.kind for e in intentlog.open(url).task("f.item.i0").events()]
    assert kinds[-1] == "effect.reconciled", kinds
    unblock = _pasted(step, root + r"unblock f i0")
    assert _cli(*unblock).returncode == 0
    assert _row(url)["state"] == "queued"


def test_a_holder_on_another_host_shows_running_and_the_refusal_names_the_exact_take_over_command(
    url: str, procs: list[subprocess.Popen[str]]
) -> None:
    ledger = intentlog.open(url)
    ledger.backlog("f").add("i0", {"item": "i0"})
    ledger.close()
    h = _holder(url, "elsewhere", procs)
    h.send_signal(signal.SIGKILL)
    h.wait()
    row = _row(url)
    assert row["state"] == "running", row  # whether it runs cannot be told from here: never shown blocked
    holder = row["holder"]
    assert isinstance(holder, dict) and (holder["pid"], holder["host"], holder["alive"]) == (h.pid, "elsewhere", None)
    step = str(row["next_step"])
    assert f"process {h.pid} on elsewhere" in step, step
    root = re.escape(f"intentlog --root {url} ")
    pasted = _pasted(step, root + r"reconcile --take-over-after 0 f\.item\.i0 \S+ --not-served")
    call = pasted[-2]
    before = _segments(url, "f.item.i0")
    refused = _cli(
        "intentlog", "--root", url, "reconcile", "f.item.i0", call, "--not-served", "--take-over-after", "inf"
    )
    assert refused.returncode == 1
    assert _segments(url, "f.item.i0") == before  # nothing written by the refused writer
    said = refused.stderr
    assert "--wait" not in said, said
    again = _pasted(said, root + r"reconcile f\.item\.i0 \S+ --not-served --take-over-after 0")
    assert again[-5:-3] == ["f.item.i0", call]
    done = _cli(*again)
    assert done.returncode == 0, done.stdout + done.stderr
    after = _segments(url, "f.item.i0")
    assert after[len(before)][:2] == ("lease", 2)
    assert "effect.reconciled" in [e.kind for e in intentlog.open(url).task("f.item.i0").events()]


def test_status_of_a_store_task_names_its_lease_holder_and_its_last_heartbeat(
    url: str, procs: list[subprocess.Popen[str]]
) -> None:
    ledger = intentlog.open(url)
    ledger.backlog("f").add("i0", {"item": "i0"})
    ledger.close()
    h = _holder(url, "here", procs)
    live = _cli("intentlog", "--root", url, "status", "f.item.i0", "--json")
    assert live.returncode == 0, live.stderr
    st = orjson.loads(live.stdout)
    assert st["state"] == "running" and st["running"] is True, st
    assert f"process {h.pid} on {socket.gethostname()}" in st["reason"] and "heartbeat" in st["reason"], st
    h.send_signal(signal.SIGKILL)
    h.wait()
    dead = orjson.loads(_cli("intentlog", "--root", url, "status", "f.item.i0", "--json").stdout)
    assert dead["state"] == "paused for review", dead
    assert f"still held by process {h.pid}" in dead["reason"] and "which has ended" in dead["reason"], dead
    cmd = _pasted(
        dead["next_step"], re.escape(f"intentlog --root {url} ") + r"reconcile --take-over-after 0 \S+ \S+ --not-served"
    )
    assert _cli(*cmd).returncode == 0
    after = orjson.loads(_cli("intentlog", "--root", url, "status", "f.item.i0", "--json").stdout)
    assert "still held" not in (after["reason"] or "") and after["state"] != "paused for review", after
