"""Misuse and edge paths: refused before anything is written, never a resend, never a leaked secret."""

from __future__ import annotations

from pathlib import Path

import pytest

import intentlog
from intentlog.errors import ProviderFailure, UnknownCall, UsageError


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_fork_refuses_a_cut_that_would_drop_a_sent_call(tmp_path: Path) -> None:
    """A call prepared before the cut and run after it would look unsent in the fork: the fork is refused."""
    ledger = intentlog.open(tmp_path / "ev")
    t = ledger.task("orig")
    a = t.prepare("charge-a", {"amount": 10})
    b = t.prepare("charge-b", {"amount": 20})
    a.run(lambda r: b"ok")
    b.run(lambda r: b"ok")
    t.close()
    before = _snapshot(tmp_path / "ev")
    with pytest.raises(UsageError, match="call-1 began before it"):
        ledger.fork("orig", "charge-b")
    assert _snapshot(tmp_path / "ev") == before


def test_a_session_message_secret_never_reaches_an_error_text(tmp_path: Path) -> None:
    """A credential inside a conversation message is scrubbed from a recorded send error too."""
    secret = "sk-live-hunter2-XYZ"
    session = intentlog.open(tmp_path / "ev").session("chat")

    def send(_: object) -> bytes:
        raise RuntimeError(f"401 for key {secret}")

    with pytest.raises(intentlog.EffectUnknown):
        session.turn({"model": "m", "messages": [{"role": "user", "content": "hi", "api_key": secret}]}, send)
    for data in _snapshot(tmp_path / "ev").values():
        assert secret.encode() not in data


@pytest.mark.parametrize("arg", [{"redact": "authorization"}, {"drop": "ts"}])
def test_a_single_string_rule_is_refused_before_writing(tmp_path: Path, arg: dict[str, str]) -> None:
    """redact='authorization' would be a set of letters: refused, nothing written, no secret recorded."""
    t = intentlog.open(tmp_path / "ev").task("t")
    before = _snapshot(tmp_path / "ev")
    with pytest.raises(UsageError, match="single string"):
        t.effect("k", {"authorization": "Bearer s3cret"}, send=lambda r: b"ok", **arg)  # type: ignore[arg-type]
    assert _snapshot(tmp_path / "ev") == before


def test_bad_run_arguments_are_refused_before_writing(tmp_path: Path) -> None:
    """A retry that is not a RetryPolicy, or a lookup that is not callable: UsageError, nothing written."""
    t = intentlog.open(tmp_path / "ev").task("t")
    before = _snapshot(tmp_path / "ev")
    with pytest.raises(UsageError, match="RetryPolicy"):
        t.effect("k", {"q": 1}, send=lambda r: b"ok", retry=3)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="lookup must be a callable"):
        t.effect("k", {"q": 1}, send=lambda r: b"ok", lookup="nope")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="response bytes"):
        intentlog.Served("text")  # type: ignore[arg-type]
    assert _snapshot(tmp_path / "ev") == before


def test_a_provider_failure_without_a_body_is_still_an_observation(tmp_path: Path) -> None:
    """ProviderFailure(body=None) records an observed failure, not an unknown effect."""
    t = intentlog.open(tmp_path / "ev").task("t")

    def send(_: object) -> bytes:
        raise ProviderFailure("HTTP 400", body=None)

    with pytest.raises(intentlog.CallFailed):
        t.effect("k", {"q": 1}, send=send, retry=intentlog.NO_RETRY)
    c = t.work_state().calls["call-1"]
    assert c.stage == "failed" and c.provider_effect == "happened"


def test_refusals_do_not_create_the_task_they_refuse(tmp_path: Path) -> None:
    """reconcile / fail / decide on a task that does not exist raise and leave no stream behind."""
    ledger = intentlog.open(tmp_path / "ev")
    t = ledger.task("nosuch")
    with pytest.raises(UnknownCall):
        t.reconcile("call-1", "not_served")
    with pytest.raises(UnknownCall):
        t.fail("call-1", "gave up")
    with pytest.raises(intentlog.IntentlogError):
        t.decide("ship", "approve")
    assert not t.exists()
    assert ledger.task_ids() == []


def test_a_rejected_turn_stays_rejected_when_the_script_runs_again(tmp_path: Path) -> None:
    """Re-running a session script replays the turn but never overrides a reviewer's rejection."""
    ledger = intentlog.open(tmp_path / "ev")
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    s = ledger.session("chat")
    s.turn(request, lambda r: b"answer")
    s.reject(1, note="wrong answer")
    ledger.task("chat").close()
    again = intentlog.open(tmp_path / "ev").session("chat")
    turn = again.turn(request, lambda r: b"never sent")
    assert turn.replayed and not turn.accepted
    assert again.history() == []


def test_compile_refuses_non_json_content_even_with_an_explicit_size(tmp_path: Path) -> None:
    """Content that is not JSON is recorded as a failed compilation (fix inputs), never left half-done."""
    t = intentlog.open(tmp_path / "ev").task("t")
    with pytest.raises(intentlog.PreparationFailed):
        t.compile("ctx", [{"id": "a", "size": 3, "content": {1, 2}}])
    comp = t.work_state().compilations["ctx"]
    assert comp.stage == "failed" and comp.next_operation == "fix inputs"
