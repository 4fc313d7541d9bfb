"""A send says "the provider refused, nothing was served" with ProviderFailure.from_status, never an unknown effect.

A send that lets an HTTP error escape as an arbitrary exception (``raise_for_status()``)
leaves the effect unknown and needs a person; the same 429 mapped with
``ProviderFailure.from_status`` is recorded as the provider's answer and retried under the
call's policy, and a 400 fails the call. The status rule is the http drop-in's, written once.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import intentlog
from intentlog import EffectUnknown, ProviderFailure, RetryPolicy, UsageError
from intentlog.http import default_retryable

REQ = {"model": "m", "prompt": "p"}


class Provider:
    """Answers with the given statuses in turn (the last one repeats)."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.sent = 0

    def answer(self) -> int:
        self.sent += 1
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def send(self, request: Any) -> bytes:
        status = self.answer()
        if status >= 400:
            raise ProviderFailure.from_status(status, "Too Many Requests", body=b'{"error": "slow down"}')
        return b'{"v": 1}'

    def send_raising(self, request: Any) -> bytes:
        status = self.answer()
        if status >= 400:
            raise RuntimeError(f"HTTPStatusError: {status}")  # what raise_for_status() does
        return b'{"v": 1}'


def kinds(task: intentlog.Task) -> list[str]:
    return [e.kind for e in task.events()]


@pytest.mark.parametrize(
    ("status", "headers", "retryable"),
    [
        (429, None, True),
        (408, {}, True),
        (409, [], True),
        (500, None, True),
        (503, {"Retry-After": "1"}, True),
        (400, None, False),
        (401, None, False),
        (404, None, False),
        (422, None, False),
        (503, {"X-Should-Retry": "false"}, False),
        (400, [(b"x-should-retry", b"true")], True),
        (429, [("x-should-retry", " False ")], False),
    ],
)
def test_from_status_maps_an_http_status_to_a_refusal(status: int, headers: Any, retryable: bool) -> None:
    """408/409/429/5xx are retryable, other 4xx are not, x-should-retry overrides; the http drop-in agrees."""
    failure = ProviderFailure.from_status(status, body="the provider's answer", headers=headers)
    assert type(failure) is ProviderFailure
    assert failure.retryable is retryable and failure.body == b"the provider's answer"
    assert str(failure).startswith(f"HTTP {status}")
    raw = [(str(k).encode() if isinstance(k, str) else k, str(v).encode() if isinstance(v, str) else v)
           for k, v in (headers.items() if isinstance(headers, dict) else headers or [])]  # fmt: skip
    assert default_retryable(status, raw) is retryable


@pytest.mark.parametrize("status", [200, 204, 302, 399, True])
def test_from_status_refuses_a_status_that_is_not_a_refusal(status: int) -> None:
    with pytest.raises(UsageError, match="not a refusal"):
        ProviderFailure.from_status(status)


def test_a_429_mapped_with_from_status_is_retried_not_an_unknown_effect(ledger: intentlog.Ledger) -> None:
    """The 429 is recorded as the provider's answer and the call's next attempt is served: no person needed."""
    provider = Provider(429, 200)
    task = ledger.task("t")
    got = task.effect(
        "k", REQ, provider.send, interpret=orjson.loads, retry=RetryPolicy(backoff=0, sleep=lambda s: None)
    )
    assert got == {"v": 1} and provider.sent == 2
    observed = [e.data for e in task.events() if e.kind == "attempt.observed"]
    assert observed[0]["error"].startswith("HTTP 429") and observed[0]["retryable"] is True
    assert "attempt.errored" not in kinds(task)
    assert task.work_state().calls["call-1"].stage == "completed"


def test_a_400_mapped_with_from_status_fails_the_call(ledger: intentlog.Ledger) -> None:
    """A refusal that is not worth another try fails the call (known: nothing served), it is not left unknown."""
    provider = Provider(400)
    task = ledger.task("t")
    with pytest.raises(intentlog.CallFailed):
        task.effect("k", REQ, provider.send, retry=RetryPolicy(backoff=0, sleep=lambda s: None))
    assert provider.sent == 1
    assert "call.failed" in kinds(task) and "attempt.errored" not in kinds(task)
    assert task.work_state().calls["call-1"].provider_effect != "unknown"


def test_a_429_raised_as_any_other_exception_is_an_unknown_effect(ledger: intentlog.Ledger) -> None:
    """The contrast: raise_for_status() on a 429 leaves the effect unknown, for a person to reconcile."""
    provider = Provider(429, 200)
    task = ledger.task("t")
    with pytest.raises(EffectUnknown):
        task.effect("k", REQ, provider.send_raising, retry=RetryPolicy(backoff=0, sleep=lambda s: None))
    assert provider.sent == 1 and "attempt.errored" in kinds(task)
