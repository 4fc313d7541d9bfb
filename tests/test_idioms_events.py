"""External events: a task waits for a named event; another process signals it into the task's inbox.

The waiter is a real process holding the task's writer while another process signals;
a killed waiter's re-run receives the event from the record. In-process tests replace
the idiom's clock (no test waits for a deadline in real time).
"""

from __future__ import annotations

import json
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
from intentlog.idioms import EventConflict, EventTimedOut, Suspended
from intentlog.idioms import events as events_mod
from intentlog.projections.idioms import EVENT_AWAITED, EVENT_RECEIVED, EVENT_TIMED_OUT, SIGNALLED


def _kinds(task: intentlog.Task) -> list[str]:
    return [ev.kind for ev in task.events()]


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and "lock" not in p.name}


def _cli(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), *argv], capture_output=True, text=True, timeout=60
    )


def _wait_for_record(stream: Path, kind: str, proc: subprocess.Popen[str]) -> None:
    while not (stream.exists() and kind.encode() in stream.read_bytes()):
        assert proc.poll() is None, "the waiter ended before recording its wait"
        time.sleep(0.02)  # waiting for the record to appear, not for a step to finish


WAITER = textwrap.dedent(
    """
    import json, sys
    import intentlog
    root = sys.argv[1]
    with intentlog.open(root) as ledger:
        task = ledger.task("t")
        task.value("before", lambda: 1)
        print(json.dumps(task.wait_for_event("review", poll=0.05)), flush=True)
    """
)


def test_a_signal_from_another_process_reaches_a_waiter_that_holds_the_writer(ledger_root: Path) -> None:
    """The waiter holds the task's writer the whole time; `intentlog signal` still records, and the wait returns it."""
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, ledger_root], stdout=subprocess.PIPE, text=True)
    try:
        _wait_for_record(ledger_root / "tasks" / "t.jsonl", EVENT_AWAITED, waiter)
        with intentlog.open(ledger_root) as ledger:
            assert ledger.task("t").writer_pid() == waiter.pid
        said = _cli(ledger_root, "signal", "t", "review", "--payload", '{"ok": true}', "--id", "r-1", "--json")
        assert said.returncode == 0, said.stderr
        assert json.loads(said.stdout)["recorded"] is True
        assert waiter.stdout is not None and json.loads(waiter.stdout.readline()) == {"ok": True}
        assert waiter.wait(timeout=60) == 0
    finally:
        if waiter.poll() is None:
            waiter.kill()
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        assert _kinds(task).count(EVENT_RECEIVED) == 1
        got = next(ev.data for ev in task.events() if ev.kind == EVENT_RECEIVED)
        assert got["id"] == "r-1" and got["payload"] == {"ok": True}
        assert task.wait_for_event("review") == {"ok": True}  # from the record, at once
    from intentlog.checker import verify_path

    assert verify_path(ledger_root).ok


def test_a_killed_waiter_re_run_receives_what_was_signalled_meanwhile(ledger_root: Path) -> None:
    """SIGKILL the waiter; signal while no process runs; the re-run returns the payload, recorded once."""
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, ledger_root], stdout=subprocess.PIPE, text=True)
    try:
        _wait_for_record(ledger_root / "tasks" / "t.jsonl", EVENT_AWAITED, waiter)
    finally:
        os.kill(waiter.pid, signal.SIGKILL)
        waiter.wait(timeout=60)
    st = _cli(ledger_root, "status", "t", "--json")
    assert json.loads(st.stdout)["waiting"] == "waiting for event 'review'", st.stdout
    assert f"intentlog --root {ledger_root} signal t review" in json.loads(st.stdout)["next_step"]  # runs as pasted
    data = ledger_root.parent / "answer.json"
    data.write_text('{"verdict": "ship it"}')
    assert _cli(ledger_root, "signal", "t", "review", "--data", str(data)).returncode == 0
    again = subprocess.run([sys.executable, "-c", WAITER, ledger_root], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and json.loads(again.stdout) == {"verdict": "ship it"}
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        assert _kinds(task).count(EVENT_AWAITED) == 1 and _kinds(task).count(EVENT_RECEIVED) == 1
        assert ledger.task("t").status().waiting is None


def test_signals_are_idempotent_by_id_and_a_contradiction_writes_nothing(ledger: intentlog.Ledger) -> None:
    """The same delivery again: no write; another payload under the id, or another id: EventConflict, bytes kept."""
    ledger.task("t").value("v", lambda: 1)
    first = ledger.signal("t", "review", {"ok": True}, event_id="e1")
    before = _files(ledger.root)
    assert ledger.signal("t", "review", {"ok": True}, event_id="e1") == first
    with pytest.raises(EventConflict, match="another payload"):
        ledger.signal("t", "review", {"ok": False}, event_id="e1")
    with pytest.raises(EventConflict, match="already signalled with id 'e1'"):
        ledger.signal("t", "review", {"ok": True}, event_id="e2")
    with pytest.raises(intentlog.errors.NotSerializable, match="payload is not exact JSON"):
        ledger.signal("t", "other", {1, 2})
    with pytest.raises(intentlog.errors.UsageError, match="invalid event name"):
        ledger.signal("t", "no spaces", 1)
    assert _files(ledger.root) == before
    # without an id, the payload's digest is the id: the same payload twice is one delivery
    a = ledger.signal("t", "other", [1, 2])
    assert ledger.signal("t", "other", [1, 2]) == a and a.event_id.startswith("payload-")


def test_an_event_signalled_before_the_wait_is_returned_at_once(ledger: intentlog.Ledger) -> None:
    """The inbox keeps an early signal; the wait records it as received without pausing."""
    ledger.task("t").value("v", lambda: 1)
    ledger.signal("t", "go", "now")
    task = ledger.task("t")
    assert task.wait_for_event("go", poll=3600) == "now"
    assert _kinds(task)[-2:] == [EVENT_AWAITED, EVENT_RECEIVED]


def test_a_timeout_is_recorded_then_raised_and_every_re_run_raises_it_from_the_record(
    ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deadline recorded once; at it, task.event_timed_out then EventTimedOut; a late signal is refused."""
    now = [2_000_000_000.0]
    monkeypatch.setattr(events_mod, "_now", lambda: now[0])
    monkeypatch.setattr(events_mod, "_pause", lambda s: now.__setitem__(0, now[0] + s))
    with intentlog.open(ledger_root) as ledger, pytest.raises(Suspended):
        ledger.task("t").wait_for_event("review", timeout=60, block=False)
    now[0] += 30
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        with pytest.raises(EventTimedOut, match="review"):
            task.wait_for_event("review", timeout=3600, poll=5)
        assert now[0] == pytest.approx(2_000_000_060.0)  # the first run's deadline, not a new hour
        with pytest.raises(EventTimedOut):
            task.wait_for_event("review")
        assert _kinds(task).count(EVENT_TIMED_OUT) == 1
        with pytest.raises(EventConflict, match="stopped waiting"):
            ledger.signal("t", "review", 1)
        assert SIGNALLED not in [ev.kind for ev in ledger.task("t.inbox").events()]


def test_events_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an s3:// ledger (a real SeaweedFS): suspended, signalled while the task's lease is held, received once."""
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        task = ledger.task("t")
        with pytest.raises(Suspended):
            task.wait_for_event("review", block=False)
        assert task.stream.writing  # this process holds the task's lease; the signal goes to the inbox
        ledger.signal("t", "review", {"n": 1}, event_id="x")
        assert task.wait_for_event("review") == {"n": 1}
    with intentlog.open(url, create=False) as ledger:
        task = ledger.task("t")
        assert task.wait_for_event("review") == {"n": 1}
        assert _kinds(task).count(EVENT_RECEIVED) == 1
        with pytest.raises(EventConflict):
            ledger.signal("t", "review", {"n": 2}, event_id="x")
