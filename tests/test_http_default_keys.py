"""The idempotency key a provider sees for a request made without ``task.key``.

A provider that deduplicates by key replays the first answer to any later request under
the same key. The key an unnamed request travels with must therefore be unique to the
ledger's task stream and the call, and the same on every resend of that call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

httpx = pytest.importorskip("httpx")

import intentlog  # noqa: E402
import intentlog.http  # noqa: E402
from intentlog import ProviderDedup  # noqa: E402
from intentlog.artifacts.inline import inline_bytes  # noqa: E402
from intentlog.http import _keys  # noqa: E402

HEADER = "Idempotency-Key"
CHARGE = {"customer": "cus_1", "amount": 1000, "currency": "eur"}


def _provider(seen: list[str], answers: list[int] | None = None) -> Any:
    """A transport that records each request's key header and answers with the next status (then 200)."""

    def handle(request: Any) -> Any:
        seen.append(request.headers.get(HEADER, ""))
        status = answers.pop(0) if answers else 200
        return httpx.Response(status, json={"id": f"ch_{len(seen)}"})

    return httpx.MockTransport(handle)


def _post(task: intentlog.Task, seen: list[str], answers: list[int] | None = None) -> Any:
    dedup = ProviderDedup(window=3600, header=HEADER)
    with intentlog.http.client(task, base_url="https://pay.example", inner=_provider(seen, answers), dedup=dedup) as c:
        return c.post("/v1/charges", json=CHARGE)


def _recorded_headers(task: intentlog.Task) -> list[str]:
    out: list[str] = []
    for ev in task.stream.events():
        if ev.kind == "call.manifest":
            ref = ev.data["request"]
            data = inline_bytes(ref)
            raw = data if data is not None else task.ledger.artifacts.get(ref["digest"])
            out.append(orjson.loads(raw)["headers"][HEADER.lower()])
    return out


def test_two_tasks_posting_the_same_body_send_different_keys(ledger: intentlog.Ledger) -> None:
    seen: list[str] = []
    first, second = ledger.task("order-1001"), ledger.task("order-1002")
    _post(first, seen)
    _post(second, seen)
    assert len(seen) == 2 and all(seen)
    assert seen[0] != seen[1]  # a deduplicating provider would otherwise replay 1001's charge to 1002
    assert _recorded_headers(first) == [seen[0]] and _recorded_headers(second) == [seen[1]]


def test_two_ledgers_with_the_same_task_send_different_keys(tmp_path: Any) -> None:
    seen: list[str] = []
    for name in ("a", "b"):
        with intentlog.open(tmp_path / name) as led:
            _post(led.task("order"), seen)
    assert len(seen) == 2 and seen[0] != seen[1]


def test_two_calls_of_one_task_send_different_keys(ledger: intentlog.Ledger) -> None:
    seen: list[str] = []
    task = ledger.task("orders")
    _post(task, seen)
    _post(task, seen)  # the second occurrence of the same request: a second call
    assert len(seen) == 2 and seen[0] != seen[1]


def test_a_resend_of_the_same_call_reuses_its_key(ledger_root: Any) -> None:
    seen: list[str] = []
    with intentlog.open(ledger_root) as led:
        r = _post(led.task("order"), seen, answers=[503])  # handed back: the call is unfinished
        assert r.status_code == 503
    with intentlog.open(ledger_root) as led:  # a later run resends the same call
        task = led.task("order")
        intentlog.http.restart(task)
        assert _post(task, seen).status_code == 200
        calls = list(task.work_state().calls.values())
    assert len(seen) == 2 and seen[0] == seen[1]
    assert len(calls) == 1


def test_a_call_recorded_with_the_old_key_keeps_it_on_resume(ledger_root: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record made when the header carried the call key itself: the resend carries what was recorded."""
    seen: list[str] = []
    old: Callable[[str, str], str] = lambda identity, key: key  # noqa: E731
    with monkeypatch.context() as m:
        m.setattr(_keys, "sent_key", old)
        with intentlog.open(ledger_root) as led:
            assert _post(led.task("order"), seen, answers=[503]).status_code == 503
    assert seen[0].startswith("http:blake3:")
    with intentlog.open(ledger_root) as led:
        task = led.task("order")
        intentlog.http.restart(task)
        assert _post(task, seen).status_code == 200
        calls = list(task.work_state().calls.values())
    assert seen[1] == seen[0] and len(calls) == 1
    assert calls[0].stage == "completed" and calls[0].attempts == 2


def test_offline_replay_sends_the_recorded_key(ledger: intentlog.Ledger) -> None:
    seen: list[str] = []
    task = ledger.task("order")
    assert _post(task, seen).json() == {"id": "ch_1"}
    dedup = ProviderDedup(window=3600, header=HEADER)
    with intentlog.http.replay(task, dedup=dedup).client(base_url="https://pay.example") as offline:
        again = offline.post("/v1/charges", json=CHARGE)
    assert again.json() == {"id": "ch_1"} and again.request.headers[HEADER] == seen[0]
    assert seen[0].startswith("intentlog-") and len(seen) == 1


def test_the_async_client_sends_the_same_keys_as_the_sync_one(ledger: intentlog.Ledger) -> None:
    import asyncio

    seen: list[str] = []

    async def handle(request: Any) -> Any:
        seen.append(request.headers.get(HEADER, ""))
        return httpx.Response(200, json={"id": f"ch_{len(seen)}"})

    async def post(task: intentlog.Task) -> None:
        dedup = ProviderDedup(window=3600, header=HEADER)
        inner = httpx.MockTransport(handle)
        async with intentlog.http.async_client(task, base_url="https://pay.example", inner=inner, dedup=dedup) as c:
            await c.post("/v1/charges", json=CHARGE)

    asyncio.run(post(ledger.task("a")))
    asyncio.run(post(ledger.task("b")))
    sync_seen: list[str] = []
    _post(ledger.task("a"), sync_seen)  # the second call of task a
    assert len(set(seen + sync_seen)) == 3
    assert _recorded_headers(ledger.task("a")) == [seen[0], sync_seen[0]]


def test_a_fork_replays_the_calls_it_copied(ledger: intentlog.Ledger) -> None:
    """A forked task has its own stream identity; the calls it copied keep the key they were sent with."""
    seen: list[str] = []
    task = ledger.task("orders")
    dedup = ProviderDedup(window=3600, header=HEADER)
    with intentlog.http.client(task, base_url="https://pay.example", inner=_provider(seen), dedup=dedup) as c:
        c.post("/v1/charges", json=CHARGE)
        c.post("/v1/charges", json={**CHARGE, "amount": 2000})
    calls = list(task.work_state().calls.values())
    fork = task.fork(calls[1].call_id, "orders-2")
    with intentlog.http.client(fork, base_url="https://pay.example", inner=_provider(seen), dedup=dedup) as c:
        assert c.post("/v1/charges", json=CHARGE).json() == {"id": "ch_1"}  # replayed from the copied record
        c.post("/v1/charges", json={**CHARGE, "amount": 2000})  # the call the fork starts anew: sent
    assert len(seen) == 3 and seen[2] not in seen[:2]
