"""The effect protocol of DESIGN §5: what is appended, in which order, durable before what.

Every test ends by reading the record back from disk (the stream file parsed without
intentlog, or a reopened handle), never from the objects the call returned.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from effect_child import Killed, SyncCounter, disk_events, files_containing, kill_before, snapshot

import intentlog
from intentlog import (
    CallFailed,
    EffectUnknown,
    NotSent,
    PreparationFailed,
    ProviderFailure,
    ResumeRefused,
    RetryPolicy,
)
from intentlog.artifacts.inline import INLINE_MAX

try:  # the independent checker, when it exists
    from intentlog.projections.verify import verify_ledger
except ImportError:  # pragma: no cover - written by someone else
    verify_ledger = None  # type: ignore[assignment]

SECRET = "sk-live-7f3a9c0d1e2b4a6f"


def no_sleep(_: float) -> None:
    return None


FAST = RetryPolicy(max_attempts=3, backoff=0.25, sleep=no_sleep)


def stream(ledger: intentlog.Ledger, task_id: str = "t") -> Path:
    return ledger.root / "tasks" / f"{task_id}.jsonl"


def kinds(ledger: intentlog.Ledger, task_id: str = "t") -> list[str]:
    return [e["kind"] for e in disk_events(stream(ledger, task_id))]


def of_kind(ledger: intentlog.Ledger, kind: str, task_id: str = "t") -> list[dict[str, Any]]:
    return [e["data"] for e in disk_events(stream(ledger, task_id)) if e["kind"] == kind]


class Provider:
    """A send function that answers from a script of outcomes and counts what it was sent."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes) or [b'{"ok": true}']
        self.sent: list[Any] = []

    def __call__(self, request: Any) -> Any:
        self.sent.append(request)
        out = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(out, BaseException):
            raise out
        return out


def never(request: Any) -> bytes:
    raise AssertionError("send must not be called")


def parse(raw: bytes) -> Any:
    return orjson.loads(raw)


parse.version = "2.1"  # type: ignore[attr-defined]


def reopen(ledger: intentlog.Ledger, task_id: str = "t") -> intentlog.Task:
    """Close the handle (releasing the lock, dropping its state) and open it again: a new process's view."""
    ledger.task(task_id).close()
    return intentlog.open(ledger.root).task(task_id)


# -- order and shape -----------------------------------------------------------------


def test_a_new_key_appends_the_protocol_events_in_order(ledger: intentlog.Ledger) -> None:
    """effect() for a new key appends requested, manifest, started, observed, interpreted, completed — in that order."""
    task = ledger.task("t")
    req = {"model": "m", "prompt": "p"}
    result = task.effect("k", req, Provider(b'{"verdict": "accept"}'), interpret=parse, name="review")
    assert result == {"verdict": "accept"}
    ledger.close()
    events = disk_events(stream(ledger))
    assert [e["kind"] for e in events] == [
        "task.created",
        "call.requested",
        "call.manifest",
        "attempt.started",
        "attempt.observed",
        "attempt.interpreted",
        "call.completed",
    ]
    d = [e["data"] for e in events]
    assert d[1] == {
        "call": "call-1",
        "key": "k",
        "name": "review",
        "request_hash": intentlog.request_hash(req),
        "inputs": {},
    }
    assert d[2]["request_hash"] == intentlog.request_hash(req)
    assert d[2]["request"]["digest"] == d[2]["request_hash"]
    assert d[2]["inputs"] == {} and d[2]["canon"] == intentlog.CANON_VERSION
    assert d[3] == {"call": "call-1", "attempt": 1}
    assert d[4]["response"]["inline"] == '{"verdict": "accept"}'
    assert d[5]["interpreter"] == {"name": f"{__name__}.parse", "version": "2.1"}
    assert d[5]["result"] == {"verdict": "accept"}
    assert d[6] == {"call": "call-1", "attempt": 1, "result": {"value": {"verdict": "accept"}}}
    assert reopen(ledger).work_state().calls["call-1"].stage == "completed"


def test_prepare_then_run_appends_the_same_protocol(ledger: intentlog.Ledger) -> None:
    """task.prepare records the intent durably and sends nothing; Call.run carries it out under the same call."""
    task = ledger.task("t")
    call = task.prepare("k", {"q": 1})
    assert kinds(ledger)[-2:] == ["call.requested", "call.manifest"]
    assert task.work_state().calls["call-1"].stage == "manifest_recorded"
    provider = Provider(b"raw answer")
    assert call.run(provider) == b"raw answer"
    assert provider.sent == [{"q": 1}]
    assert kinds(ledger)[-3:] == ["attempt.started", "attempt.observed", "call.completed"]
    assert [c.stage for c in reopen(ledger).work_state().calls.values()] == ["completed"]


# -- durability ------------------------------------------------------------------------


def test_attempt_started_is_synced_before_send_and_the_response_before_interpretation(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When send runs, attempt.started is the last line and fdatasynced; when interpret runs, so is attempt.observed."""
    task = ledger.task("t")
    task.append("note", {"opened": True})  # open the stream first: creation is not part of the count
    syncs = SyncCounter(monkeypatch)
    path = stream(ledger)
    seen: dict[str, Any] = {}

    def send(request: Any) -> bytes:
        seen["send"] = (syncs.count, syncs.durable(path), disk_events(path)[-1]["kind"])
        return b'{"a": 1}'

    def interpret(raw: bytes) -> Any:
        seen["interpret"] = (syncs.count, syncs.durable(path), disk_events(path)[-1]["kind"])
        return orjson.loads(raw)

    task.effect("k", {"x": 1}, send, interpret=interpret)
    assert seen["send"] == (1, True, "attempt.started")  # one sync covers the intent and the start
    assert seen["interpret"] == (2, True, "attempt.observed")
    assert syncs.count == 3  # intent+started, observed, interpreted+completed
    assert syncs.durable(path)
    assert kinds(ledger)[-1] == "call.completed"


def test_a_small_effect_costs_three_syncs_and_a_replay_none(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small effect is three stream syncs (two when raw); replaying a completed key syncs nothing."""
    task = ledger.task("t")
    task.append("note", {})
    syncs = SyncCounter(monkeypatch)
    task.effect("raw", {"x": 1}, Provider(b"r"))
    assert syncs.count == 2  # nothing interprets raw bytes: observation and completion share a sync
    task.effect("interpreted", {"x": 2}, Provider(b"{}"), interpret=parse)
    assert syncs.count == 2 + 3
    task.effect("interpreted", {"x": 2}, never, interpret=parse)
    assert syncs.count == 5


def test_large_requests_and_responses_are_blobs_durable_before_their_events(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Payloads over 4 KiB go to objects/, and each blob exists with its exact bytes before a line names it."""
    import intentlog.eventlog.writer as writer

    objects = ledger.root / "objects"
    real_write_all = writer.write_all
    checked: list[str] = []

    def write_all(fd: int, data: Any) -> None:
        line = orjson.loads(bytes(data))
        for key in ("request", "response"):
            ref = line["data"].get(key)
            if isinstance(ref, dict) and "inline" not in ref and "inline_b64" not in ref:
                hexd = ref["digest"].split(":", 1)[1]
                blob = objects / hexd[:2] / hexd[2:]
                assert blob.is_file() and blob.stat().st_size == ref["size"], f"{line['kind']} before its blob"
                checked.append(line["kind"])
        real_write_all(fd, data)

    monkeypatch.setattr(writer, "write_all", write_all)
    task = ledger.task("t")
    big_request = {"prompt": "x" * (INLINE_MAX + 100)}
    big_response = bytes(range(256)) * 20  # not UTF-8, over the threshold
    assert task.effect("big", big_request, Provider(big_response)) == big_response
    assert checked == ["call.manifest", "attempt.observed"]
    ledger.close()
    manifest = of_kind(ledger, "call.manifest")[0]
    assert "inline" not in manifest["request"]
    canonical = intentlog.canonicalize(big_request).data
    assert ledger.artifacts.get(manifest["request_hash"]) == canonical
    observed = of_kind(ledger, "attempt.observed")[0]
    assert ledger.artifacts.get(observed["response"]["digest"]) == big_response
    assert reopen(ledger).effect("big", big_request, never) == big_response


# -- redaction and canonical hashing -------------------------------------------------------


def test_credentials_never_reach_any_file_of_the_ledger(ledger: intentlog.Ledger) -> None:
    """Redacted fields are replaced before hashing and storing; send still gets them; error texts are scrubbed."""
    task = ledger.task("t")
    req = {"model": "m", "api_key": SECRET, "headers": {"Authorization": f"Bearer {SECRET}x"}}
    provider = Provider(b"{}")
    task.effect("k", req, provider, interpret=parse)
    assert provider.sent[0]["api_key"] == SECRET  # the provider still authenticates
    manifest = of_kind(ledger, "call.manifest")[0]
    assert sorted(manifest["redacted"]) == ["$.api_key", "$.headers.Authorization"]

    def leaky(request: Any) -> bytes:
        raise ConnectionError(f"401 for key {request['api_key']}")

    with pytest.raises(EffectUnknown):
        task.effect("k2", req, leaky)

    def leaky_interpret(raw: bytes) -> Any:
        raise ValueError(f"cannot parse with {SECRET}")

    with pytest.raises(CallFailed):
        task.effect("k3", req, Provider(b"{}"), interpret=leaky_interpret, retry=intentlog.NO_RETRY)
    with pytest.raises(CallFailed):
        task.effect("k4", req, Provider(NotSent(f"refused {SECRET}")), retry=intentlog.NO_RETRY)
    hooked = {"model": "m", "token": SECRET}
    task.effect("k5", hooked, Provider(b"{}"), redact=lambda path, key, value: key == "token")
    ledger.close()
    assert files_containing(ledger.root, SECRET.encode()) == []
    errored = of_kind(ledger, "attempt.errored")[0]["error"]
    assert "[REDACTED]" in errored and "ConnectionError" in errored


def test_equal_requests_hash_equal_whatever_key_order_and_timestamps(ledger: intentlog.Ledger) -> None:
    """A rebuilt request with other key order and fresh timestamps is the same intent: it replays, sends nothing."""
    task = ledger.task("t")
    first = {"model": "m", "ts": "2026-01-01T00:00:00Z", "messages": [{"role": "user", "created_at": 1, "text": "a"}]}
    task.effect("k", first, Provider(b"done"))
    again = {"messages": [{"text": "a", "created_at": 99, "role": "user"}], "ts": "2027-05-05T00:00:00Z", "model": "m"}
    assert reopen(ledger).effect("k", again, never) == b"done"
    manifest = of_kind(ledger, "call.manifest")[0]
    assert sorted(manifest["dropped"]) == ["$.messages[0].created_at", "$.ts"]


def test_named_input_digests_are_in_the_manifest_and_drift_checked(ledger: intentlog.Ledger) -> None:
    """Input digests are recorded; a changed one is DRIFT, and the refusal appends nothing."""
    task = ledger.task("t")
    pkg = intentlog.request_hash({"context": "v1"})
    other = intentlog.request_hash({"context": "v2"})
    task.prepare("k", {"q": 1}, inputs={"context": pkg})
    assert of_kind(ledger, "call.manifest")[0]["inputs"] == {"context": pkg}
    task = reopen(ledger)
    before = snapshot(ledger.root)
    with pytest.raises(ResumeRefused) as info:
        task.effect("k", {"q": 1}, never, inputs={"context": other})
    assert info.value.reason == "DRIFT" and "context" in str(info.value)
    assert snapshot(ledger.root) == before
    assert task.effect("k", {"q": 1}, Provider(b"ok"), inputs={"context": pkg}) == b"ok"


def test_a_completed_key_with_a_changed_request_is_refused_as_drift(ledger: intentlog.Ledger) -> None:
    """A changed request under a completed key is refused (a new request needs a new key); nothing is appended."""
    task = ledger.task("t")
    task.effect("k", {"q": 1}, Provider(b"ok"))
    before = snapshot(ledger.root)
    with pytest.raises(ResumeRefused) as info:
        task.effect("k", {"q": 2}, never)
    exc = info.value
    assert (exc.call_id, exc.key, exc.reason, exc.next_operation) == ("call-1", "k", "DRIFT", "use a new key")
    assert "call-1" in str(exc) and "'k'" in str(exc) and "DRIFT" in str(exc) and "use a new key" in str(exc)
    assert not isinstance(exc, EffectUnknown)
    assert snapshot(ledger.root) == before


# -- replay ----------------------------------------------------------------------------


def test_the_completed_key_replays_the_recorded_result_without_sending(ledger: intentlog.Ledger) -> None:
    """Running a completed key again returns the recorded result, in this process and in a reopened one."""
    task = ledger.task("t")
    first = task.effect("k", {"q": 1}, Provider(b'{"n": 1}'), interpret=parse)
    n = len(kinds(ledger))
    assert task.effect("k", {"q": 1}, never, interpret=parse) == first
    assert reopen(ledger).effect("k", {"q": 1}, never, interpret=parse) == first
    assert len(kinds(ledger)) == n


def test_without_interpret_the_result_is_the_raw_bytes_and_completion_names_them(ledger: intentlog.Ledger) -> None:
    """Without an interpreter the result is the response bytes; call.completed refers to them by digest."""
    task = ledger.task("t")
    raw = b"\x00\xffnot text"
    assert task.effect("k", {"q": 1}, Provider(raw)) == raw
    completed = of_kind(ledger, "call.completed")[0]
    observed = of_kind(ledger, "attempt.observed")[0]
    assert completed["result"]["raw"] is True
    assert completed["result"]["response"]["digest"] == observed["response"]["digest"]
    assert "attempt.interpreted" not in kinds(ledger)
    assert reopen(ledger).effect("k", {"q": 1}, never) == raw


def test_a_request_builder_is_called_to_build_the_request(ledger: intentlog.Ledger) -> None:
    """A callable request is built once per run; its value is what is hashed and sent."""
    task = ledger.task("t")
    provider = Provider(b"ok")
    assert task.effect("k", lambda: {"q": "built"}, provider) == b"ok"
    assert provider.sent == [{"q": "built"}]
    assert of_kind(ledger, "call.manifest")[0]["request_hash"] == intentlog.request_hash({"q": "built"})


# -- retries ---------------------------------------------------------------------------


def test_not_sent_is_retried_and_each_try_is_an_attempt(ledger: intentlog.Ledger) -> None:
    """NotSent leaves attempt.not_sent and a retry decision with its delay; the next attempt succeeds."""
    slept: list[float] = []
    policy = RetryPolicy(max_attempts=3, backoff=0.25, factor=2.0, sleep=slept.append)
    task = ledger.task("t")
    provider = Provider(NotSent("connection refused"), NotSent("dns"), b"ok")
    assert task.effect("k", {"q": 1}, provider, retry=policy) == b"ok"
    assert len(provider.sent) == 3
    assert slept == [0.25, 0.5]
    assert kinds(ledger)[3:] == [
        "attempt.started",
        "attempt.not_sent",
        "attempt.retry_decided",
        "attempt.started",
        "attempt.not_sent",
        "attempt.retry_decided",
        "attempt.started",
        "attempt.observed",
        "call.completed",
    ]
    decisions = of_kind(ledger, "attempt.retry_decided")
    assert [(d["attempt"], d["decision"], d["delay"]) for d in decisions] == [(1, "retry", 0.25), (2, "retry", 0.5)]
    assert decisions[0]["reason"] == "not sent: connection refused"
    st = reopen(ledger).work_state().calls["call-1"]
    assert (st.stage, st.attempts, st.provider_effect) == ("completed", 3, "happened")


def test_a_retryable_provider_failure_is_observed_then_retried(ledger: intentlog.Ledger) -> None:
    """A retryable ProviderFailure is an observation with its error; the policy retries it."""
    task = ledger.task("t")
    provider = Provider(ProviderFailure("429 slow down", body=b"busy", retryable=True), b"ok")
    assert task.effect("k", {"q": 1}, provider, retry=FAST) == b"ok"
    observed = of_kind(ledger, "attempt.observed")
    assert observed[0]["error"] == "429 slow down" and observed[0]["retryable"] is True
    assert observed[0]["response"]["inline"] == "busy"
    assert "error" not in observed[1]
    assert of_kind(ledger, "attempt.retry_decided")[0]["reason"] == "provider failure: 429 slow down"


def test_a_non_retryable_provider_failure_fails_the_call(ledger: intentlog.Ledger) -> None:
    """A non-retryable failure is decided 'fail' at once: CallFailed, call.failed in the record, nothing resent."""
    task = ledger.task("t")
    provider = Provider(ProviderFailure("400 bad request", retryable=False))
    with pytest.raises(CallFailed) as info:
        task.effect("k", {"q": 1}, provider, retry=FAST)
    assert info.value.reason == "provider failure: 400 bad request"
    assert len(provider.sent) == 1
    failed = of_kind(ledger, "call.failed")
    assert failed == [{"call": "call-1", "reason": "provider failure: 400 bad request", "by": None}]
    assert of_kind(ledger, "attempt.retry_decided")[0]["decision"] == "fail"
    st = reopen(ledger).work_state().calls["call-1"]
    assert (st.stage, st.next_operation, st.provider_effect) == ("failed", "operator decides", "happened")
    with pytest.raises(CallFailed):
        ledger.task("t").effect("k", {"q": 1}, never, retry=FAST)


def test_retries_exhausted_leave_the_call_failed_with_the_reason(ledger: intentlog.Ledger) -> None:
    """max_attempts tries, each recorded; then CallFailed and call.failed naming the last failure."""
    task = ledger.task("t")
    provider = Provider(ProviderFailure("503", retryable=True))
    with pytest.raises(CallFailed) as info:
        task.effect("k", {"q": 1}, provider, retry=FAST)
    assert "503" in str(info.value) and info.value.call_id == "call-1"
    assert len(provider.sent) == 3
    assert kinds(ledger).count("attempt.started") == 3
    assert [d["decision"] for d in of_kind(ledger, "attempt.retry_decided")] == ["retry", "retry", "fail"]
    assert of_kind(ledger, "call.failed")[0]["reason"] == "provider failure: 503"


def test_retry_on_decides_which_failures_are_retried(ledger: intentlog.Ledger) -> None:
    """A retry_on hook overrides the failure's own retryable flag; retry_not_sent=False gives up on NotSent."""
    task = ledger.task("t")
    policy = RetryPolicy(max_attempts=2, sleep=no_sleep, retry_on=lambda f: f.reason.startswith("5"))
    assert task.effect("a", {"q": 1}, Provider(ProviderFailure("500", retryable=False), b"ok"), retry=policy) == b"ok"
    with pytest.raises(CallFailed):
        task.effect("b", {"q": 2}, Provider(ProviderFailure("429", retryable=True)), retry=policy)
    no_not_sent = RetryPolicy(max_attempts=5, retry_not_sent=False, sleep=no_sleep)
    with pytest.raises(CallFailed) as info:
        task.effect("c", {"q": 3}, Provider(NotSent("offline")), retry=no_not_sent)
    assert info.value.reason == "not sent: offline"
    st = reopen(ledger).work_state()
    assert [st.calls[c].stage for c in ("call-1", "call-2", "call-3")] == ["completed", "failed", "failed"]
    assert st.calls["call-3"].provider_effect == "none"


def test_retry_policy_refuses_nonsense() -> None:
    """A policy with no attempts or a negative backoff is a UsageError."""
    with pytest.raises(intentlog.UsageError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(intentlog.UsageError):
        RetryPolicy(backoff=-1)
    assert RetryPolicy(backoff=1, factor=10, max_backoff=5).delay(3) == 5


def test_a_provider_failure_whose_decision_was_lost_is_redecided_from_the_record(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between a failure answer and its decision: the next run decides from the record, never interprets it."""
    kill_before(monkeypatch, "attempt.retry_decided")
    with pytest.raises(Killed):
        ledger.task("t").effect("k", {"q": 1}, Provider(ProviderFailure("503", retryable=True)), retry=FAST)
    monkeypatch.undo()
    task = reopen(ledger)
    st = task.work_state().calls["call-1"]
    assert (st.stage, st.next_operation, st.reason) == ("observed", "redecide", "503")

    interpreted: list[bytes] = []

    def interpret(raw: bytes) -> Any:
        interpreted.append(raw)
        return parse(raw)

    assert task.effect("k", {"q": 1}, Provider(b'{"ok": 1}'), interpret=interpret, retry=FAST) == {"ok": 1}
    assert interpreted == [b'{"ok": 1}']  # the failure answer was decided on, never interpreted
    decided = of_kind(ledger, "attempt.retry_decided")
    assert [(d["attempt"], d["decision"]) for d in decided] == [(1, "retry")]
    assert kinds(ledger).count("attempt.started") == 2


# -- interpretation --------------------------------------------------------------------


def test_an_interpretation_failure_is_recorded_and_fails_the_call(ledger: intentlog.Ledger) -> None:
    """An interpreter that raises (or returns non-JSON) leaves attempt.interpreted with the error, then call.failed."""
    task = ledger.task("t")
    provider = Provider(b"not json")
    with pytest.raises(CallFailed) as info:
        task.effect("k", {"q": 1}, provider, interpret=parse, retry=FAST)
    assert "interpretation failed" in info.value.reason
    assert len(provider.sent) == 1
    interp = of_kind(ledger, "attempt.interpreted")[0]
    assert interp["error"].startswith("JSONDecodeError") and "result" not in interp
    assert of_kind(ledger, "attempt.retry_decided")[0]["decision"] == "fail"
    with pytest.raises(CallFailed):
        task.effect("k2", {"q": 2}, Provider(b"x"), interpret=lambda raw: {1, 2}, retry=FAST)
    assert "not JSON" in of_kind(ledger, "attempt.interpreted")[1]["error"]


def test_retry_on_interpret_error_tries_again(ledger: intentlog.Ledger) -> None:
    """With retry_on_interpret_error the call gets another attempt after a bad answer."""
    policy = RetryPolicy(max_attempts=2, sleep=no_sleep, retry_on_interpret_error=True)
    task = ledger.task("t")
    assert task.effect("k", {"q": 1}, Provider(b"garbage", b'{"v": 2}'), interpret=parse, retry=policy) == {"v": 2}
    assert [d["decision"] for d in of_kind(ledger, "attempt.retry_decided")] == ["retry"]
    assert reopen(ledger).work_state().calls["call-1"].attempts == 2


def test_an_interpretation_whose_completion_was_lost_is_finalized_from_the_record(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after attempt.interpreted: the next run finalizes the recorded result; no send, no interpretation."""
    kill_before(monkeypatch, "call.completed")
    with pytest.raises(Killed):
        ledger.task("t").effect("k", {"q": 1}, Provider(b'{"v": 1}'), interpret=parse)
    monkeypatch.undo()
    task = reopen(ledger)
    assert task.work_state().calls["call-1"].next_operation == "finalize"
    assert task.effect("k", {"q": 1}, never, interpret=lambda raw: pytest.fail("reinterpreted")) == {"v": 1}
    assert of_kind(ledger, "call.completed")[0]["result"] == {"value": {"v": 1}}


# -- unknown effects -------------------------------------------------------------------


def test_send_raising_anything_else_leaves_the_effect_unknown(ledger: intentlog.Ledger) -> None:
    """A send that raises an ordinary exception may have reached the provider: EffectUnknown, never resent."""
    task = ledger.task("t")

    def timeout(request: Any) -> bytes:
        raise TimeoutError("read timed out")

    with pytest.raises(EffectUnknown) as info:
        task.effect("k", {"q": 1}, timeout)
    assert isinstance(info.value.__cause__, TimeoutError)
    assert of_kind(ledger, "attempt.errored")[0]["error"] == "send raised TimeoutError: read timed out"
    st = task.work_state().calls["call-1"]
    assert (st.stage, st.next_operation, st.provider_effect, st.duplicate_effect_risk) == (
        "effect_unknown",
        "reconcile effect",
        "unknown",
        True,
    )
    before = snapshot(ledger.root)
    with pytest.raises(EffectUnknown) as again:
        reopen(ledger).effect("k", {"q": 1}, never)
    exc = again.value
    assert (exc.call_id, exc.key, exc.next_operation) == ("call-1", "k", "reconcile effect")
    assert "call-1" in str(exc) and "reconcile effect" in str(exc) and "'k'" in str(exc)
    with pytest.raises(EffectUnknown) as drifted:  # a changed request is refused too, as drift
        ledger.task("t").effect("k", {"q": 2}, never)
    assert (drifted.value.reason, drifted.value.next_operation) == ("DRIFT", "reconcile effect")
    assert snapshot(ledger.root) == before


def test_send_returning_something_other_than_bytes_is_an_unknown_effect(ledger: intentlog.Ledger) -> None:
    """A send that returns a non-bytes value cannot be recorded faithfully: the effect is unknown, not invented."""
    task = ledger.task("t")
    with pytest.raises(EffectUnknown) as info:
        task.effect("k", {"q": 1}, lambda request: 42)
    assert "not int" in info.value.reason
    assert task.work_state().calls["call-1"].stage == "effect_unknown"
    assert task.effect("s", {"q": 2}, lambda request: "text ✓") == "text ✓".encode()


def test_a_crash_inside_send_leaves_only_attempt_started(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process dying inside send leaves attempt.started as the last word; the next run refuses to resend."""

    def dies(request: Any) -> bytes:
        raise Killed("power cut")

    with pytest.raises(Killed):
        ledger.task("t").effect("k", {"q": 1}, dies)
    assert kinds(ledger)[-1] == "attempt.started"
    with pytest.raises(EffectUnknown):
        reopen(ledger).effect("k", {"q": 1}, never)


# -- preparation ------------------------------------------------------------------------


def test_an_unserialisable_request_is_a_recorded_preparation_failure(ledger: intentlog.Ledger) -> None:
    """A request that is not exact JSON appends call.preparation_failed with the message, never the value."""
    task = ledger.task("t")
    with pytest.raises(PreparationFailed) as info:
        task.effect("k", {"tags": {"needle-value-81723"}}, never)
    assert info.value.call_id == "call-1"
    failed = of_kind(ledger, "call.preparation_failed")[0]
    assert failed["call"] == "call-1" and failed["key"] == "k"
    assert "$.tags" in failed["error"] and "set" in failed["error"]
    with pytest.raises(PreparationFailed):
        task.effect("nan", {"temperature": float("nan")}, never)
    ledger.close()
    assert files_containing(ledger.root, b"needle-value-81723") == []
    st = reopen(ledger).work_state().calls["call-1"]
    assert (st.stage, st.next_operation, st.provider_effect) == ("preparation_failed", "fix inputs", "none")


def test_a_builder_that_raises_and_a_bad_digest_are_preparation_failures(ledger: intentlog.Ledger) -> None:
    """A raising request builder and a malformed input digest are recorded and raised; the bad digest is not echoed."""
    task = ledger.task("t")

    def builder() -> Any:
        raise KeyError("paragraph 7")

    with pytest.raises(PreparationFailed) as info:
        task.effect("k", builder, never)
    assert "KeyError" in info.value.error
    with pytest.raises(PreparationFailed) as bad:
        task.effect("d", {"q": 1}, never, inputs={"context": "md5:needle-digest-5512"})
    assert "context" in bad.value.error
    errors = [d["error"] for d in of_kind(ledger, "call.preparation_failed")]
    assert errors[0] == "KeyError: 'paragraph 7'"
    assert files_containing(ledger.root, b"needle-digest-5512") == []
    # fixing the inputs starts a fresh call under the same key; the failed one stays in the record
    assert task.effect("k", {"q": "fixed"}, Provider(b"ok")) == b"ok"
    ws = reopen(ledger).work_state()
    assert ws.calls["call-1"].stage == "preparation_failed"
    assert ws.call_for_key("k") is not None and ws.call_for_key("k").stage == "completed"  # type: ignore[union-attr]
    assert ws.calls["call-3"].key == "k"


def test_an_invalid_task_id_or_key_writes_nothing(tmp_path: Path) -> None:
    """An invalid task id is refused before the disk is touched; an invalid key before anything is appended."""
    root = tmp_path / "ledger"
    with intentlog.open(root) as ledger:
        before = snapshot(root)
        for bad in ("", "../escape", "a/b", "x\x00y", ".hidden"):
            with pytest.raises(intentlog.InvalidTaskId):
                ledger.task(bad).effect("k", {"q": 1}, never)
        assert snapshot(root) == before
        task = ledger.task("t")
        for key in ("", 7, None, "k" * 600):
            with pytest.raises(intentlog.UsageError):
                task.effect(key, {"q": 1}, never)  # type: ignore[arg-type]
        assert not (root / "tasks" / "t.jsonl").exists()


# -- resume ----------------------------------------------------------------------------


def test_a_prepared_call_is_resumed_as_a_new_linked_call(ledger: intentlog.Ledger) -> None:
    """A call recorded by an earlier process with no attempt is resumed: call.resumed, then the new call's intent."""
    ledger.task("t").prepare("k", {"q": 1}, name="first")
    task = reopen(ledger)
    assert task.effect("k", {"q": 1}, Provider(b"ok")) == b"ok"
    assert kinds(ledger)[3:6] == ["call.resumed", "call.requested", "call.manifest"]
    assert of_kind(ledger, "call.resumed") == [{"call": "call-1", "new_call": "call-2", "key": "k"}]
    got = of_kind(ledger, "call.requested")[1]
    assert {k: got[k] for k in ("call", "key", "name", "resumes")} == {
        "call": "call-2",
        "key": "k",
        "name": "first",
        "resumes": "call-1",
    }
    assert got["request_hash"] == of_kind(ledger, "call.manifest")[0]["request_hash"]
    ws = reopen(ledger).work_state()
    assert (ws.calls["call-1"].stage, ws.calls["call-1"].superseded_by) == ("superseded", "call-2")
    assert (ws.calls["call-2"].stage, ws.calls["call-2"].resumes) == ("completed", "call-1")
    assert ws.unresolved == () and ws.next_operation == "check and accept"


def test_a_resume_torn_between_its_two_records_is_completed_once(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between call.resumed and the new call.requested: the next run records the promised call, once.

    Meanwhile a new key does not take the promised id, and the finished record is what an
    uninterrupted resume leaves (so it verifies).
    """
    ledger.task("t").prepare("k", {"q": 1})
    task = reopen(ledger)
    kill_before(monkeypatch, "call.requested")
    with pytest.raises(Killed):
        task.effect("k", {"q": 1}, never)
    monkeypatch.undo()
    assert kinds(ledger)[-1] == "call.resumed"
    task = reopen(ledger)
    st = task.work_state().calls["call-1"]
    assert (st.stage, st.next_operation, st.superseded_by) == ("manifest_recorded", "start call", None)
    assert task.effect("other", {"q": 2}, Provider(b"other")) == b"other"
    provider = Provider(b"ok")
    assert task.effect("k", {"q": 1}, provider) == b"ok"
    assert len(provider.sent) == 1
    assert of_kind(ledger, "call.resumed") == [{"call": "call-1", "new_call": "call-2", "key": "k"}]
    assert [(d["call"], d["key"], d.get("resumes")) for d in of_kind(ledger, "call.requested")] == [
        ("call-1", "k", None),
        ("call-3", "other", None),
        ("call-2", "k", "call-1"),
    ]
    ws = reopen(ledger).work_state()
    assert ws.calls["call-1"].superseded_by == "call-2" and ws.calls["call-2"].stage == "completed"
    assert ws.anomalies == () and ws.unresolved == ()
    if verify_ledger is not None:
        assert verify_ledger(ledger).ok


def test_a_call_requested_without_its_manifest_is_resumed(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between call.requested and call.manifest: stage requested, and the next run resumes it."""
    kill_before(monkeypatch, "call.manifest")
    with pytest.raises(Killed):
        ledger.task("t").effect("k", {"q": 1}, never)
    monkeypatch.undo()
    task = reopen(ledger)
    st = task.work_state().calls["call-1"]
    assert (st.stage, st.next_operation, st.provider_effect) == ("requested", "start call", "none")
    assert task.effect("k", {"q": 1}, Provider(b"ok")) == b"ok"
    assert reopen(ledger).work_state().calls["call-2"].resumes == "call-1"


# -- concurrency inside one process ----------------------------------------------------


def test_a_key_running_in_this_process_is_refused_a_second_run(ledger: intentlog.Ledger) -> None:
    """While one thread is inside send for a key, another thread's run of that key is refused."""
    task = ledger.task("t")
    inside, release = threading.Event(), threading.Event()
    results: list[Any] = []

    def slow(request: Any) -> bytes:
        inside.set()
        assert release.wait(10)
        return b"ok"

    worker = threading.Thread(target=lambda: results.append(task.effect("k", {"q": 1}, slow)))
    worker.start()
    assert inside.wait(10)
    try:
        with pytest.raises(intentlog.UsageError, match="already running"):
            task.effect("k", {"q": 1}, never)
    finally:
        release.set()
        worker.join(10)
    assert results == [b"ok"]
    assert kinds(ledger).count("attempt.started") == 1


def test_threads_with_distinct_keys_get_distinct_calls(ledger: intentlog.Ledger) -> None:
    """Threads sharing a task handle never take the same call id."""
    task = ledger.task("t")
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            task.effect(f"k{i}", {"i": i}, Provider(b"ok"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    ws = reopen(ledger).work_state()
    assert sorted(ws.calls) == sorted(f"call-{i}" for i in range(1, 9))
    assert {c.key for c in ws.calls.values()} == {f"k{i}" for i in range(8)}
    assert all(c.stage == "completed" for c in ws.calls.values()) and ws.anomalies == ()


# -- the documentation ------------------------------------------------------------------


def test_the_docs_example_runs_twice_and_sends_once(tmp_path: Path) -> None:
    """The first example of docs/effects.md prints what the text says; a second run replays, with one receipt."""
    import re
    import subprocess
    import sys

    from intentlog.demo.provider import read_receipts

    doc = (Path(__file__).resolve().parents[1] / "docs" / "effects.md").read_text()
    code = re.findall(r"```python\n(.*?)```", doc, re.S)[0]
    script = tmp_path / "example.py"
    script.write_text(code)
    for _ in range(2):
        p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == "accept check and accept"
    assert len(read_receipts(tmp_path / "receipts.jsonl")) == 1
    assert files_containing(tmp_path / "evidence", b"sk-not-recorded") == []
    ws = intentlog.open(tmp_path / "evidence", create=False).task("review-p7").work_state()
    assert [(c.stage, c.attempts) for c in ws.calls.values()] == [("completed", 1)]
