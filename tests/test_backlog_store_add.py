"""``Backlog.add`` / ``add_many`` on a store take back a backlog stream a SIGKILLed holder left leased.

A folder's lock dies with its process; a store's lease segment does not. A supervisor
SIGKILLed while it held the backlog stream leaves it recorded as held, and the next add
takes it back: at once when the holder ran on this machine (its process is known ended
from ``/proc``), else once the stream stood still ``BACKLOG_STALE`` s on this process's
clock: a new lease at the next segment number, the dead holder fenced (a real process, a
real SeaweedFS). A live holder, whose stream keeps moving, is waited for and never taken.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import pytest
import s3_server

import intentlog
from intentlog.backlog import leases
from intentlog.backlog.leases import BACKLOG_STALE
from intentlog.s3 import ObjectStreams, S3Client, Segment, parse_s3_url

TESTS = Path(__file__).parent

#: holds the backlog stream's lease (its writer open), then sleeps (SIGKILLed) or keeps appending (live)
HOLDER = """
import sys, time, intentlog
ledger = intentlog.open(sys.argv[1])
bl = ledger.backlog("b")
bl.add("first", {"n": 0})
t = bl.task
t.stream.open_writer()
print("ready", flush=True)
if sys.argv[2] == "sleep":
    time.sleep(600)
end = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < end:
    t.append("note", {"alive": n})
    n += 1
    time.sleep(0.3)
ledger.close()
print("kept", n, flush=True)
"""


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


def holder(url: str, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, url, mode], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def headers(url: str, name: str) -> list[Segment]:
    streams = ObjectStreams(S3Client(parse_s3_url(url)))
    return [streams.segment(name, n)[0] for n in range(streams.tail(name).seg + 1)]


#: the stall window while the test below runs: far beyond any slowness, so finishing before it means "at once"
STILL_FOR: Final = 120.0


@pytest.mark.parametrize("many", [False, True])
def test_an_add_takes_back_at_once_the_lease_a_sigkilled_holder_on_this_machine_left(
    url: str, many: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leases.claim_stale, "__defaults__", (STILL_FOR,))
    proc = holder(url, "sleep")
    with intentlog.open(url) as ledger:
        name = ledger.backlog("b").stream_id
    dead = headers(url, name)[-1]
    assert dead.kind == "lease"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    t0 = time.monotonic()
    with intentlog.open(url) as ledger:
        bl = ledger.backlog("b")
        if many:
            got = bl.add_many([{"item": "second", "payload": {"n": 1}}, {"item": "third", "payload": {"n": 2}}])
        else:
            got = [bl.add("second", {"n": 1})]
        took = time.monotonic() - t0
        assert took < STILL_FOR, "its process is known ended: no waiting for its stream to stand still"
        assert [r.item for r in got] == (["second", "third"] if many else ["second"])
        assert sorted(bl.fold().items) == sorted(["first", "second", *(["third"] if many else [])])
    after = headers(url, name)[dead.seg + 1 :]
    assert after[0].kind == "lease" and after[0].epoch == dead.epoch + 1 and after[0].holder != dead.holder
    assert all(h.holder != dead.holder for h in after), "the dead holder wrote nothing more: no release of its own"
    added = [h for h in after if h.kind == "data"]
    assert added and all(h.epoch > dead.epoch for h in added)


def test_a_live_holder_of_the_backlog_stream_is_waited_for_never_taken(url: str) -> None:
    proc = holder(url, str(BACKLOG_STALE + 2.0))  # holds, moving, for longer than the stall window
    with intentlog.open(url) as ledger:
        bl = ledger.backlog("b")
        name = bl.stream_id
        live = [h for h in headers(url, name) if h.kind == "lease"][-1]  # its data may follow already
        rec = bl.add("second", {"n": 1})
        assert rec.item == "second"
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.split()[0] == "kept", out
    kept = int(out.split()[1])
    segs = headers(url, name)[live.seg :]
    mine = [h for h in segs if h.holder == live.holder]
    assert [h.kind for h in mine] == ["lease"] + ["data"] * kept + ["release"], "the live holder was never fenced"
    assert all(h.epoch == live.epoch for h in mine)
    taken = [h for h in segs if h.kind == "lease" and h.holder != live.holder]
    assert taken and taken[0].seg > mine[-1].seg, "the add leased only after the live holder released"
