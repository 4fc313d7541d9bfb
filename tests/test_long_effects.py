"""Long effects: heartbeats are recorded, an inactivity timeout or a hard maximum leaves the effect unknown.

A timed-out attempt is never resent blind: its late answer is not recorded, the work
state says *reconcile effect*, and running the call again refuses until a reconciliation
is recorded. Every test ends by reading the record back from disk.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from effect_child import disk_events

import intentlog
from intentlog import EffectUnknown, NotSent, RetryPolicy
from intentlog.effects import current_heartbeat, heartbeat
from intentlog.errors import RetryHandedBack, UsageError
from intentlog.projections.verify import verify_ledger

REQ = {"model": "m", "prompt": "a long job"}


def kinds(task: intentlog.Task) -> list[str]:
    return [e["kind"] for e in disk_events(task.path)]


def of_kind(task: intentlog.Task, kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in disk_events(task.path) if e["kind"] == kind]


class Stalling:
    """A send that beats ``beats`` times, then hangs until released; its late answer must never be recorded."""

    def __init__(self, beats: int = 1, every: float = 0.0) -> None:
        self.beats = beats
        self.every = every
        self.release = threading.Event()
        self.finished = threading.Event()
        self.late_beats: list[bool] = []

    def __call__(self, request: Any) -> bytes:
        for i in range(self.beats):
            heartbeat({"step": i})
            time.sleep(self.every)
        self.release.wait(10)
        self.late_beats.append(heartbeat({"step": "late"}))
        self.finished.set()
        return b"a late answer"


def test_heartbeats_are_recorded_rate_limited_and_passed_to_the_progress_callback(ledger: intentlog.Ledger) -> None:
    """100 heartbeats within one interval make one attempt.progress (the first); the callback sees all 100."""
    task = ledger.task("t")
    seen: list[Any] = []

    def send(request: Any) -> bytes:
        for i in range(100):
            assert heartbeat({"tokens": i})
        return b"done"

    assert task.effect("k", REQ, send, progress=seen.append, progress_interval=60) == b"done"
    assert seen == [{"tokens": i} for i in range(100)]
    ledger.close()
    [p] = of_kind(task, "attempt.progress")
    assert (p["call"], p["attempt"], p["beats"], p["info"]) == ("call-1", 1, 1, {"tokens": 0})
    assert kinds(task)[-3:] == ["attempt.progress", "attempt.observed", "call.completed"]
    assert heartbeat() is False and current_heartbeat() is None  # outside a send: nothing to report to


def test_heartbeats_keep_a_slow_send_alive_past_the_inactivity_timeout(ledger: intentlog.Ledger) -> None:
    """A send that lasts 2.5x the inactivity timeout but beats every 50 ms completes normally.

    The timeout (1 s) is 20 beats wide: a loaded machine that delays one beat by a tenth of a
    second (which a 0.15 s timeout did not survive) still keeps it alive."""
    task = ledger.task("t")

    def send(request: Any) -> bytes:
        started = time.monotonic()
        while time.monotonic() - started < 2.5:  # past the timeout by its own clock, however slow the beats
            time.sleep(0.05)
            heartbeat()
        return b"slow but alive"

    assert task.effect("k", REQ, send, inactivity_timeout=1.0, progress_interval=0.1) == b"slow but alive"
    ledger.close()
    assert "attempt.timed_out" not in kinds(task) and "attempt.progress" in kinds(task)
    assert intentlog.open(ledger.root).task("t").work_state().calls["call-1"].stage == "completed"


def test_a_timeout_is_recorded_as_an_unknown_effect_and_never_resent(ledger: intentlog.Ledger) -> None:
    """Silence past the inactivity timeout records attempt.timed_out and raises EffectUnknown; the late answer and
    late heartbeats are not recorded; running again refuses without sending; reconciling with the bytes completes."""
    task = ledger.task("t")
    send = Stalling(beats=1)
    with pytest.raises(EffectUnknown) as err:
        task.effect("k", REQ, send, inactivity_timeout=0.2, progress_interval=0)
    assert err.value.next_operation == "reconcile effect" and "timed out" in str(err.value)
    send.release.set()
    assert send.finished.wait(5) and send.late_beats == [False]
    ledger.close()
    task = intentlog.open(ledger.root).task("t")
    assert kinds(task)[-3:] == ["attempt.started", "attempt.progress", "attempt.timed_out"]
    [out] = of_kind(task, "attempt.timed_out")
    assert out["limit"] == "inactivity" and out["timeout"] == 0.2 and out["after"] >= 0.2
    st = task.work_state().calls["call-1"]
    assert (st.stage, st.next_operation, st.provider_effect) == ("effect_unknown", "reconcile effect", "unknown")
    assert st.duplicate_effect_risk and "timed out" in (st.reason or "")

    def must_not_send(request: Any) -> bytes:
        raise AssertionError("a timed-out attempt was resent")

    with pytest.raises(EffectUnknown):
        task.effect("k", REQ, must_not_send, inactivity_timeout=0.2)
    task.reconcile("call-1", "served", evidence=b"a late answer", note="found in the provider's log")
    assert task.effect("k", REQ, must_not_send) == b"a late answer"
    ledger.close()
    assert "attempt.observed" in kinds(task) and verify_ledger(intentlog.open(ledger.root)).ok


def test_the_hard_maximum_stops_a_send_that_keeps_beating(ledger: intentlog.Ledger) -> None:
    """Heartbeats reset the inactivity timer but not max_duration: the attempt times out with limit max_duration."""
    task = ledger.task("t")
    send = Stalling(beats=40, every=0.02)
    with pytest.raises(EffectUnknown):
        task.effect("k", REQ, send, inactivity_timeout=5, max_duration=0.25, progress_interval=0.05)
    send.release.set()
    ledger.close()
    [out] = of_kind(intentlog.open(ledger.root).task("t"), "attempt.timed_out")
    assert out["limit"] == "max_duration" and 0.25 <= out["after"] < 2


def test_a_timeout_is_unknown_in_a_fresh_interpreter(ledger: intentlog.Ledger, run_child: Any) -> None:
    """Another process reads the timed-out call as effect unknown and refuses to send it."""
    task = ledger.task("t")
    send = Stalling()
    with pytest.raises(EffectUnknown):
        task.effect("k", REQ, send, max_duration=0.1)
    send.release.set()
    ledger.close()
    out = run_child(
        """
        import sys, intentlog
        t = intentlog.open(sys.argv[1]).task("t")
        print(t.work_state().calls["call-1"].stage)
        try:
            t.effect("k", {"model": "m", "prompt": "a long job"}, send=lambda r: b"resent")
        except intentlog.EffectUnknown as exc:
            print(exc.next_operation)
        """,
        ledger.root,
    ).stdout.split("\n")
    assert out[:2] == ["effect_unknown", "reconcile effect"]


def test_failures_raised_in_the_worker_thread_are_handled_as_in_the_caller(ledger: intentlog.Ledger) -> None:
    """With a timeout set, NotSent from the worker is retried and the second attempt completes."""
    task = ledger.task("t")
    tries: list[int] = []

    def send(request: Any) -> bytes:
        tries.append(1)
        if len(tries) == 1:
            raise NotSent("connection refused")
        return b"second try"

    assert task.effect("k", REQ, send, retry=RetryPolicy(backoff=0), inactivity_timeout=5) == b"second try"
    ledger.close()
    assert kinds(task).count("attempt.started") == 2 and "attempt.timed_out" not in kinds(task)


def test_bad_limits_are_refused_before_anything_is_written(ledger: intentlog.Ledger) -> None:
    """A zero, negative or non-numeric limit is a UsageError; no stream is created."""
    task = ledger.task("t")
    for kwargs in ({"inactivity_timeout": 0}, {"max_duration": -1}, {"max_duration": "5"}, {"progress_interval": -1}):
        with pytest.raises(UsageError):
            task.effect("k", REQ, lambda r: b"", **kwargs)
    assert not task.exists()


def test_a_hand_back_policy_records_the_retry_then_raises(ledger: intentlog.Ledger) -> None:
    """RetryPolicy(hand_back=True): the retry decision is durable with delay null, RetryHandedBack is raised, and the
    next run makes attempt 2."""
    task = ledger.task("t")
    policy = RetryPolicy(max_attempts=5, hand_back=True)

    def busy(request: Any) -> bytes:
        raise intentlog.ProviderFailure("503", body=b"busy", retryable=True)

    with pytest.raises(RetryHandedBack) as err:
        task.effect("k", REQ, busy, retry=policy)
    assert (err.value.call_id, err.value.attempt) == ("call-1", 1)
    [decided] = of_kind(task, "attempt.retry_decided")
    assert decided["decision"] == "retry" and decided["delay"] is None
    assert task.effect("k", REQ, lambda r: b"ok", retry=policy) == b"ok"
    ledger.close()
    assert kinds(task).count("attempt.started") == 2


def test_verify_catches_heartbeats_and_late_answers_out_of_place(ledger: intentlog.Ledger) -> None:
    """A heartbeat for an attempt never started, and a plain observation after a timeout, are graph errors."""
    task = ledger.task("t")
    send = Stalling()
    with pytest.raises(EffectUnknown):
        task.effect("k", REQ, send, inactivity_timeout=0.1)
    send.release.set()
    task._append("attempt.progress", {"call": "call-1", "attempt": 2, "beats": 1})
    task._append("attempt.observed", {"call": "call-1", "attempt": 1, "response": {"digest": "blake3:" + "0" * 64,
                                                                                      "size": 0, "inline": ""}})
    ledger.close()
    report = verify_ledger(intentlog.open(ledger.root))
    messages = [p.message for p in report.problems if p.severity == "error"]
    assert any("attempt.progress" in m and "attempt 2" in m for m in messages), messages
    assert any("after it timed out" in m for m in messages), messages
