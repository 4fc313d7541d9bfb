"""One supervisor per backlog on the object store, across hosts (a real SeaweedFS, real processes).

Two processes act as two hosts: the second reports another host name and boot id, so it
cannot tell from a pid whether the first is alive and must judge by the record alone. A
live first run is refused; a SIGKILLed one is taken over once the backlog stood still on
the second's own clock, and the take-over recorded. The provider's receipt log counts
what was sent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import s3_server
from backlog_steps import read_receipts

import intentlog

TESTS = Path(__file__).parent

#: a supervisor that says it runs on another host (its own name and boot id): it judges the first by the record
OTHER_HOST = """
import sys, intentlog
from intentlog.backlog import runlease
runlease.host_name = lambda: "host-b"
runlease.boot_id = lambda: "boot-b"
from backlog_steps import step
try:
    view = intentlog.open(sys.argv[1]).backlog("g").run(
        step, workers=1, until_idle=True, quota="calls=2/1s", inactivity=2.0
    )
except runlease.BacklogBusy as exc:
    print("refused", exc, flush=True)
    sys.exit(3)
print("settled", view.counts["done"] + view.counts["blocked"], flush=True)
"""


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    server = s3_server.seaweed()
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("BACKLOG_SLEEP", "0.3")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    loc = s3_server.fresh_location()
    return f"s3://{loc.bucket}/{loc.prefix}"


def _first(url: str, gate: Path) -> subprocess.Popen[str]:
    """The first run, its first send held at the gate (``$BACKLOG_GATE``): it runs until the test kills it."""
    args = [
        sys.executable, "-m", "intentlog.cli", "--root", url, "run", "g", "--step", "backlog_steps:step",
        "--workers", "1", "--until-idle", "--quota", "calls=2/1s",
    ]  # fmt: skip
    env = {**os.environ, "BACKLOG_GATE": str(gate), "BACKLOG_GATE_KEYS": "*", "BACKLOG_GATE_AT": "before"}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_at_gate(gate: Path, first: subprocess.Popen[str]) -> None:
    """Until a send of the first run stands at the gate: that run is alive and holds an item."""
    deadline = time.monotonic() + 120
    while not any(p.suffix == ".waiting" for p in gate.iterdir()):
        assert first.poll() is None, "the first run ended before any send reached the gate"
        assert time.monotonic() < deadline, "no send of the first run reached the gate"
        time.sleep(0.01)


def _runs(url: str) -> list[dict[str, Any]]:
    with intentlog.open(url) as led:
        return [e.data for e in led.backlog("g").task.events() if e.kind == "backlog.run_started"]


def _wait_for_run(url: str) -> None:
    deadline = time.monotonic() + 120
    while not _runs(url):
        assert time.monotonic() < deadline, "the first run never started"
        time.sleep(0.05)


def _add(url: str, n: int) -> None:
    with intentlog.open(url) as led:
        led.backlog("g").add_many([{"item": f"i{k}", "payload": {"item": f"i{k}", "effects": 1}} for k in range(n)])


def test_a_second_host_is_refused_while_the_first_runs_and_takes_over_once_it_is_killed(
    url: str, tmp_path: Path
) -> None:
    _add(url, 6)
    gate = tmp_path / "gate"
    gate.mkdir()
    first = _first(url, gate)
    try:
        _wait_for_run(url)
        # held there, the first run cannot end before the second host has asked (a 3 s run outran a slow start)
        _wait_at_gate(gate, first)
        second = subprocess.run([sys.executable, "-c", OTHER_HOST, url], capture_output=True, text=True, timeout=120)
        assert second.returncode == 3, second.stdout + second.stderr
        assert f"process {first.pid} on host" in second.stdout
        assert [r["pid"] for r in _runs(url)] == [first.pid]  # the refused run wrote nothing
    finally:
        first.send_signal(signal.SIGKILL)  # its workers die with it; its leases stay recorded as held
        first.wait()
        (gate / "open").touch()  # nothing later waits (the third run's sends are not held)
    third = subprocess.run([sys.executable, "-c", OTHER_HOST, url], capture_output=True, text=True, timeout=300)
    # every item done, or blocked for a person where the killed run's attempt was in flight (never resent)
    assert third.returncode == 0 and third.stdout.split() == ["settled", "6"], third.stdout + third.stderr
    runs = _runs(url)
    assert len(runs) == 2 and runs[1]["pid"] != first.pid
    assert runs[1]["took_over"]["pid"] == first.pid and runs[1]["took_over"]["run"] == runs[0]["run"]
    receipts = read_receipts(str(tmp_path / "receipts.jsonl"))
    keys = [r["key"] for r in receipts]
    assert len(keys) == len(set(keys))  # nothing sent twice
    times = sorted(r["ts"] for r in receipts)
    assert all(b - a >= 1.0 for a, b in zip(times, times[2:], strict=False))  # never 3 in one second
