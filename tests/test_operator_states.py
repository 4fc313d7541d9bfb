"""Operator states, derived from the recorded stream: every state, the order they win in, and 'running'.

Each stream is written through the public API, closed, and read back from disk by the
pure projection (and by ``Task.status``, which adds the lock probe).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog import stream as task_module
from intentlog.eventlog.reader import StreamScan
from intentlog.projections.status import OPERATOR_STATES, task_status
from intentlog.sessions import Session

REQ = {"q": 1}


def _unknown(t: intentlog.Task) -> None:
    def dies(r: Any) -> bytes:
        raise ConnectionResetError("reset mid-answer")

    with pytest.raises(intentlog.EffectUnknown):
        t.effect("k", REQ, dies)


def _timed_out(t: intentlog.Task) -> None:
    release = threading.Event()
    with pytest.raises(intentlog.EffectUnknown):
        t.effect("k", REQ, lambda r: b"late" if release.wait(10) else b"", max_duration=0.05)
    release.set()


def _retries_exhausted(t: intentlog.Task) -> None:
    def busy(r: Any) -> bytes:
        raise intentlog.ProviderFailure("503 busy", body=b"busy", retryable=True)

    with pytest.raises(intentlog.CallFailed):
        t.effect("k", REQ, busy, retry=intentlog.RetryPolicy(max_attempts=2, backoff=0))


def _failed_verification(t: intentlog.Task) -> None:
    t.effect("k", REQ, lambda r: b"answer")
    t.checkpoint("review", evidence=[b"the reviewer's report"], status="failed", note="3 claims unsupported")


def _approval(t: intentlog.Task) -> None:
    t.request_approval("ship", "Ship it?", binds=t.prepare("k", REQ))


def _failed(t: intentlog.Task) -> None:
    t.effect("k", REQ, lambda r: b"answer")
    t.fail_task("the source material was withdrawn", by="ops")


def _complete(t: intentlog.Task) -> None:
    t.effect("k", REQ, lambda r: b"answer")
    t.accept(by="alice")


STREAMS: dict[str, tuple[str, Callable[[intentlog.Task], None]]] = {
    "queued": ("queued", lambda t: t.append("note", {"hello": "world"})),
    "interrupted": ("interrupted", lambda t: t.prepare("k", REQ)),
    "awaiting acceptance": ("awaiting acceptance", lambda t: t.effect("k", REQ, lambda r: b"answer")),
    "complete": ("complete", _complete),
    "complete: a session's turns accepted": (
        "complete",
        lambda t: Session(t).turn({"messages": [{"role": "user", "content": "hi"}]}, lambda r: b"hello"),
    ),
    "failed": ("failed", _failed),
    "awaiting approval": ("awaiting approval", _approval),
    "paused: unknown effect": ("paused for review", _unknown),
    "paused: timed out": ("paused for review", _timed_out),
    "paused: retries exhausted": ("paused for review", _retries_exhausted),
    "paused: failed verification": ("paused for review", _failed_verification),
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_every_operator_state_is_derived_from_a_recorded_stream(ledger: intentlog.Ledger, name: str) -> None:
    """The stream written for each situation, read back from disk, projects the expected state and a next step."""
    expected, write = STREAMS[name]
    write(ledger.task("t"))
    ledger.close()
    path = ledger.root / "tasks" / "t.jsonl"
    st = task_status(StreamScan(path), task_id="t")
    assert st.state == expected, (st.state, st.reason, st.next_step)
    assert st.next_step and st.to_json()["state"] == expected
    assert intentlog.open(ledger.root).task("t").status().state == expected  # no live writer: not running


def test_every_state_has_a_stream_here() -> None:
    """The parametrised streams cover every operator state but 'running' (tested with a live process below)."""
    covered = {s for s, _ in STREAMS.values()} | {"running"}
    assert covered == set(OPERATOR_STATES)


def test_the_states_win_in_order(ledger: intentlog.Ledger) -> None:
    """An unknown effect while an approval waits is 'awaiting approval'; a failed task is 'failed' whatever waits."""
    t = ledger.task("t")
    _approval(t)

    def dies(r: Any) -> bytes:
        raise ConnectionResetError("reset mid-answer")

    with pytest.raises(intentlog.EffectUnknown):  # another key: the approval gates the send of "k" itself
        t.effect("k2", REQ, dies)
    ledger.close()
    assert task_status(StreamScan(t.path), task_id="t").state == "awaiting approval"
    t = intentlog.open(ledger.root).task("t")
    t.fail_task("abandoned")
    t.close()
    st = task_status(StreamScan(t.path), task_id="t")
    assert st.state == "failed" and st.reason == "abandoned"
    t = intentlog.open(ledger.root).task("t")
    t.accept(note="rescued after all")  # a later acceptance supersedes the verdict
    t.close()
    assert task_status(StreamScan(t.path), task_id="t").state == "awaiting approval"


HOLDER = """
import sys, time, intentlog
t = intentlog.open(sys.argv[1]).task("t")
t.append("note", {"working": True})
print("holding", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("probe", ["proc-locks", "flock"])
def test_a_task_whose_writer_lock_is_held_by_a_live_process_is_running(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch, probe: str
) -> None:
    """While another process holds the writer lock the task is 'running' (its pid named); once it is killed, the
    record speaks again. The probe never takes the lock (or, without /proc/locks, only a shared one, at once freed)."""
    if probe == "flock":
        monkeypatch.setattr(task_module, "PROC_LOCKS", "/nonexistent/proc/locks")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(ledger.root)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        t = ledger.task("t")
        assert t.writer_pid() == proc.pid
        st = t.status()
        assert (st.state, st.running) == ("running", True) and "wait" in st.next_step
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert t.writer_pid() is None
    assert t.status().state == "queued"
    t.append("note", {"mine": True})  # this process can write: the probe left no lock behind
    assert t.writer_pid() == os.getpid() and t.status().state == "running"
    ledger.close()
    assert Path(t.path).read_bytes().count(b"\n") == 3
