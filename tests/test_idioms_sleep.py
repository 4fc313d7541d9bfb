"""Durable sleep: the wake time is recorded once; a re-run sleeps only what is left, never from the start.

In-process tests replace the idiom's clock and pause (no test waits for real time); the
crash test kills a real sleeping process and re-runs it asking for an hour: it wakes at
the recorded time, seconds away, which only the record can tell it.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import s3_server

import intentlog
from intentlog.errors import UsageError
from intentlog.idioms import Suspended
from intentlog.idioms import sleep as sleep_mod
from intentlog.projections.idioms import SLEEP_STARTED, WOKE


class FakeClock:
    """The idiom's clock and pause: a pause advances the clock by what it was asked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, start: float = 2_000_000_000.0) -> None:
        self.now = start
        self.pauses: list[float] = []
        monkeypatch.setattr(sleep_mod, "_now", lambda: self.now)
        monkeypatch.setattr(sleep_mod, "_pause", self.pause)

    def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def _kinds(task: intentlog.Task) -> list[str]:
    return [ev.kind for ev in task.events()]


def test_a_re_run_sleeps_only_what_is_left_of_the_recorded_sleep(
    ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Suspended 30 s into a 100 s sleep, the re-run (asking for an hour) pauses 70 s and wakes once."""
    clock = FakeClock(monkeypatch)
    with intentlog.open(ledger_root) as ledger, pytest.raises(Suspended) as got:
        ledger.task("t").sleep_for(100, name="nap", block=False)
    until = got.value.until
    assert until is not None and clock.pauses == []
    clock.now += 30
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        assert task.sleep_for(dt.timedelta(hours=1), name="nap") == until
        assert sum(clock.pauses) == pytest.approx(70)
        assert _kinds(task).count(SLEEP_STARTED) == 1 and _kinds(task).count(WOKE) == 1
        clock.pauses.clear()
        assert task.sleep_for(3600, name="nap") == until  # woken: at once, nothing more recorded
        assert clock.pauses == [] and _kinds(task).count(WOKE) == 1


def test_after_the_wake_time_a_re_run_continues_at_once(ledger_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sleep whose recorded wake time has passed (the process was down) pauses nothing and records waking."""
    clock = FakeClock(monkeypatch)
    when = dt.datetime.fromtimestamp(clock.now + 50, dt.timezone.utc)
    with intentlog.open(ledger_root) as ledger, pytest.raises(Suspended):
        ledger.task("t").sleep_until(when, name="until", block=False)
    clock.now += 500
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        task.sleep_until(when + dt.timedelta(days=3), name="until")
        assert clock.pauses == [] and _kinds(task).count(WOKE) == 1


def test_status_names_the_recorded_wake_time_not_the_clock(ledger_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sleeping task not running is interrupted, 'sleeping until' the recorded time, next: re-run the script."""
    FakeClock(monkeypatch)
    with intentlog.open(ledger_root) as ledger, pytest.raises(Suspended) as got:
        ledger.task("t").sleep_for(10, name="nap", block=False)
    with intentlog.open(ledger_root) as ledger:
        st = ledger.task("t").status()
    assert st.state == "interrupted" and st.waiting == f"sleeping until {got.value.until}"
    assert st.next_operation == "run the script" and "re-run the script" in st.next_step
    assert st.to_json()["waiting"] == st.waiting


def test_unnamed_sleeps_are_named_in_order(ledger_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unnamed sleeps of one process are sleep-1, sleep-2, ...: each its own record."""
    FakeClock(monkeypatch)
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        task.sleep_for(1)
        task.sleep_for(1)
        names = [ev.data["sleep"] for ev in task.events() if ev.kind == SLEEP_STARTED]
    assert names == ["sleep-1", "sleep-2"]


def test_bad_durations_and_times_are_refused_before_anything_is_written(ledger_root: Path) -> None:
    """Negative, infinite, text, a naive datetime, a bad name: UsageError; the folder's bytes are unchanged."""
    with intentlog.open(ledger_root) as ledger:
        ledger.task("t").value("v", lambda: 1)
    before = {p: p.read_bytes() for p in ledger_root.rglob("*") if p.is_file() and "lock" not in p.name}
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        for bad in (-1, float("inf"), "10", True):
            with pytest.raises(UsageError, match="nothing was written"):
                task.sleep_for(bad, name="n")  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="timezone-aware"):
            task.sleep_until(dt.datetime(2030, 1, 1), name="n")
        with pytest.raises(UsageError, match="invalid sleep name"):
            task.sleep_for(1, name="a b")
    assert {p: p.read_bytes() for p in ledger_root.rglob("*") if p.is_file() and "lock" not in p.name} == before


SLEEPER = textwrap.dedent(
    """
    import sys
    import intentlog
    root, seconds = sys.argv[1], float(sys.argv[2])
    with intentlog.open(root) as ledger:
        print(ledger.task("t").sleep_for(seconds, name="nap"), flush=True)
    """
)


def test_a_killed_sleeper_re_run_wakes_at_the_recorded_time(ledger_root: Path) -> None:
    """SIGKILL while sleeping 3 s; the re-run asks for an hour and still wakes at the first run's wake time."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, ledger_root, "3"])
    try:
        stream = ledger_root / "tasks" / "t.jsonl"
        while not (stream.exists() and SLEEP_STARTED.encode() in stream.read_bytes()):
            assert proc.poll() is None, "the sleeper ended before recording its sleep"
            time.sleep(0.02)  # waiting for the record to appear, not for a step to finish
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        until = next(ev.data["until"] for ev in task.events() if ev.kind == SLEEP_STARTED)
        assert WOKE not in _kinds(task)
    again = subprocess.run(
        [sys.executable, "-c", SLEEPER, ledger_root, "3600"], capture_output=True, text=True, timeout=60, check=True
    )
    assert again.stdout.strip() == until
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        assert _kinds(task).count(SLEEP_STARTED) == 1 and _kinds(task).count(WOKE) == 1
    from intentlog.checker import verify_path

    report = verify_path(ledger_root)
    assert report.ok, report.render()


def test_a_sleep_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an s3:// ledger (a real SeaweedFS): suspended, status names the wake time, the re-run pauses the rest."""
    clock = FakeClock(monkeypatch)
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger, pytest.raises(Suspended) as got:
        ledger.task("t").sleep_for(40, name="nap", block=False)
    with intentlog.open(url, create=False) as ledger:
        st = ledger.task("t").status()
        assert st.waiting == f"sleeping until {got.value.until}"
    clock.now += 15
    with intentlog.open(url, create=False) as ledger:
        task = ledger.task("t")
        assert task.sleep_for(3600, name="nap") == got.value.until
        assert sum(clock.pauses) == pytest.approx(25)
        assert _kinds(task).count(WOKE) == 1
