"""intentlog.http with plain httpx (and httpx2): every request an effect, checked against a server's own bill.

The loopback server in ``fake_llm_server.py`` writes an fsynced receipt for every request
before it answers, so "nothing was sent" is read from its log, not from the ledger.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")

from fake_llm_server import FakeLLMServer  # noqa: E402

import intentlog  # noqa: E402
import intentlog.http  # noqa: E402
from intentlog.artifacts.inline import inline_bytes  # noqa: E402
from intentlog.http._wire import RESPONSE_MAGIC, decode_response, plan_request  # noqa: E402

SECRET = "sk-test-0123456789-very-secret"
COOKIE = "s3cr3t-cookie-value"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FakeLLMServer]:
    with FakeLLMServer(tmp_path / "receipts.jsonl", api_key=SECRET) as s:
        yield s


@pytest.fixture
def task(ledger: intentlog.Ledger) -> intentlog.Task:
    return ledger.task("http")


def _chat(content: str, model: str = "gpt-fake", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


def _client(task: intentlog.Task, server: FakeLLMServer, **kwargs: Any) -> Any:
    headers = {"Authorization": f"Bearer {SECRET}", "User-Agent": "test/1.0"}
    return intentlog.http.client(task, base_url=server.url, headers=headers, **kwargs)


def _ledger_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _calls(task: intentlog.Task) -> list[Any]:
    return list(task.work_state().calls.values())


def _stored(task: intentlog.Task, ref: Any) -> bytes:
    data = inline_bytes(ref)
    return data if data is not None else task.ledger.artifacts.get(ref["digest"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- what is hashed and stored ------------------------------------------------------------


def test_envelope_hash_ignores_per_try_headers_and_key_order() -> None:
    """Two tries of one logical call hash equal although user-agent, SDK retry counters and keys differ."""
    a = plan_request(
        "POST",
        "https://api.example.com/v1/chat/completions",
        [
            (b"User-Agent", b"OpenAI/Python 3.57.0"),
            (b"X-Stainless-Retry-Count", b"0"),
            (b"Idempotency-Key", b"stainless-python-retry-1"),
            (b"Content-Type", b"application/json"),
            (b"Content-Length", b"40"),
            (b"Authorization", f"Bearer {SECRET}".encode()),
        ],
        b'{"model": "m", "messages": [], "temperature": 0.5}',
    )
    b = plan_request(
        "post",
        "https://api.example.com/v1/chat/completions",
        [
            (b"content-type", b"application/json"),
            (b"user-agent", b"OpenAI/Python 3.58.0"),
            (b"x-stainless-retry-count", b"2"),
            (b"idempotency-key", b"stainless-python-retry-2"),
            (b"authorization", b"Bearer another-key-entirely"),
        ],
        b'{"temperature":0.5,"messages":[],"model":"m"}',
    )
    assert a.canonical.digest == b.canonical.digest
    assert a.envelope["headers"] == {"content-type": "application/json"}
    changed = plan_request(
        "POST",
        "https://api.example.com/v1/chat/completions",
        [(b"Content-Type", b"application/json"), (b"anthropic-version", b"2023-06-01")],
        b'{"model": "m", "messages": [], "temperature": 0.5}',
    )
    assert changed.canonical.digest != a.canonical.digest  # an API version header changes the call


def test_envelope_redacts_credentials_everywhere() -> None:
    """Credentials in headers, user-info, query, form fields, JSON keys and echoed values never reach the record."""
    plan = plan_request(
        "POST",
        f"https://user:{SECRET}@api.example.com/v1/x?key=AIzaSyA-secret-query-key&page=2",
        [
            (b"Content-Type", b"application/json"),
            (b"X-Api-Key", SECRET.encode()),
            (b"Cookie", f"session={COOKIE}".encode()),
        ],
        f'{{"api_key": "another-secret-123", "note": "my key is {SECRET}", "cookie": "{COOKIE}"}}'.encode(),
        hash_headers=frozenset({"content-type", "x-api-key"}),
    )
    data = plan.canonical.data
    for secret in (SECRET, COOKIE, "AIzaSyA-secret-query-key", "another-secret-123"):
        assert secret.encode() not in data, secret
    assert b"page=2" in data
    assert plan.envelope["body"]["json"]["note"] == "my key is [REDACTED]"
    assert "$.headers.x-api-key" in plan.canonical.redacted
    form = plan_request(
        "POST",
        "https://auth.example.com/token",
        [(b"Content-Type", b"application/x-www-form-urlencoded")],
        b"grant_type=client_credentials&client_secret=cs-0123456789abcdef",
    )
    assert form.envelope["body"] == {"form": [["grant_type", "client_credentials"], ["client_secret", "[REDACTED]"]]}


def test_multipart_boundary_does_not_change_the_hash() -> None:
    """Two uploads of the same file hash equal although httpx draws a random boundary for each."""
    plans = []
    for _ in range(2):
        req = httpx.Request("POST", "https://api.example.com/v1/files", files={"file": ("a.txt", b"hello")})
        req.read()
        plans.append(plan_request(req.method, str(req.url), req.headers.raw, req.content))
    assert plans[0].canonical.digest == plans[1].canonical.digest
    assert "intentlog-boundary" in plans[0].envelope["headers"]["content-type"]


def test_evidence_round_trips_and_body_alone_is_a_200() -> None:
    """evidence() builds the response artifact; bytes without the magic line are a body-only 200."""
    data = intentlog.http.evidence(b'{"ok": true}', status=201, headers={"content-type": "application/json"})
    assert data.startswith(RESPONSE_MAGIC)
    parts = decode_response(data)
    assert (parts.status, parts.headers, parts.body) == (201, [(b"content-type", b"application/json")], b'{"ok": true}')
    alone = decode_response(b"plain body")
    assert (alone.status, alone.headers, alone.body, alone.evidence_only) == (200, [], b"plain body", True)


# -- record, replay, resume ------------------------------------------------------------------


def test_completed_request_replays_byte_identical_and_sends_nothing(
    task: intentlog.Task, server: FakeLLMServer, ledger_root: Path
) -> None:
    """A completed call answers from the record on the next run: same status, headers and bytes, zero receipts."""
    with _client(task, server) as c:
        first = c.post("/v1/chat/completions", json=_chat("doc-1"))
    assert first.status_code == 200 and first.extensions["intentlog"]["sent"] is True
    assert len(server.receipts()) == 1
    intentlog.http.restart(task)  # as a new process would
    with _client(task, server) as c:
        again = c.post("/v1/chat/completions", json=_chat("doc-1"))
    assert len(server.receipts()) == 1
    assert again.extensions["intentlog"]["sent"] is False
    assert (again.status_code, again.headers.raw, again.content) == (
        first.status_code,
        first.headers.raw,
        first.content,
    )
    assert again.content == server.responses[0]
    [call] = _calls(intentlog.open(ledger_root).task("http"))
    assert (call.stage, call.attempts, call.key) == ("completed", 1, f"http:{call.request_hash}#0")


def test_identical_requests_are_numbered_and_replayed_in_order(task: intentlog.Task, server: FakeLLMServer) -> None:
    """The i-th identical request is occurrence i: a re-run replays each one; a longer run sends only the new one."""
    with _client(task, server) as c:
        first = [c.post("/v1/chat/completions", json=_chat("same")).json()["id"] for _ in range(2)]
    intentlog.http.restart(task)
    with _client(task, server) as c:
        again = [c.post("/v1/chat/completions", json=_chat("same")).json()["id"] for _ in range(3)]
    assert again[:2] == first and again[2] not in first
    assert len(server.receipts()) == 3
    assert [k.rsplit("#", 1)[1] for k in (c.key for c in _calls(task))] == ["0", "1", "2"]


def test_named_keys_number_extra_requests_and_refuse_drift(task: intentlog.Task, server: FakeLLMServer) -> None:
    """Inside task.key(k) requests get k, k#1, …; the same key with a changed request is refused, not sent."""
    with _client(task, server) as c, task.key("doc-7"):
        c.post("/v1/chat/completions", json=_chat("first"))
        c.post("/v1/chat/completions", json=_chat("second"))
    assert [c.key for c in _calls(task)] == ["doc-7", "doc-7#1"]
    intentlog.http.restart(task)
    before = task.next_seq
    with _client(task, server) as c, task.key("doc-7"), pytest.raises(intentlog.ResumeRefused, match="DRIFT"):
        c.post("/v1/chat/completions", json=_chat("first, edited"))
    assert task.next_seq == before and len(server.receipts()) == 2


def test_gzip_body_is_stored_as_sent_and_decoded_on_replay(task: intentlog.Task, server: FakeLLMServer) -> None:
    """The stored body is the compressed wire bytes; both runs decode the same JSON from them."""
    with _client(task, server) as c:
        first = c.get("/gzip")
    [call] = _calls(task)
    stored = decode_response(_stored(task, call.response))
    assert stored.body == server.responses[0] and stored.body[:2] == b"\x1f\x8b"
    intentlog.http.restart(task)
    with _client(task, server) as c:
        assert c.get("/gzip").json() == first.json() == {"n": 0, "gzip": True}
    assert len(server.receipts()) == 1


def test_stream_is_recorded_raw_and_replayed_as_a_stream(task: intentlog.Task, server: FakeLLMServer) -> None:
    """A server-sent event stream replays chunk by chunk, and the joined bytes equal what the server sent."""
    with _client(task, server) as c, c.stream("POST", "/v1/chat/completions", json=_chat("s", stream=True)) as r:
        first = b"".join(r.iter_raw())
    intentlog.http.restart(task)
    with _client(task, server) as c, c.stream("POST", "/v1/chat/completions", json=_chat("s", stream=True)) as r:
        chunks = list(r.iter_raw())
    assert b"".join(chunks) == first == server.responses[0]
    assert len(chunks) > 3 and all(ch.endswith(b"\n\n") for ch in chunks)
    assert len(server.receipts()) == 1


# -- failures: not sent, handed back, unknown ----------------------------------------------


def test_connection_refused_is_not_sent_and_sent_on_the_next_try(tmp_path: Path, task: intentlog.Task) -> None:
    """A refused connection raises httpx.ConnectError, records not_sent + a retry decision; the next try sends."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with intentlog.http.client(task, base_url=base) as c, pytest.raises(httpx.ConnectError):
        c.post("/echo", json={"x": 1})
    [call] = _calls(task)
    assert (call.stage, call.next_operation, call.provider_effect) == ("retry_decided", "start next attempt", "none")
    intentlog.http.restart(task)
    with FakeLLMServer(tmp_path / "late.jsonl", port=port) as late, intentlog.http.client(task, base_url=base) as c:
        assert c.post("/echo", json={"x": 1}).json()["n"] == 0
        assert len(late.receipts()) == 1
    [call] = _calls(task)
    assert (call.stage, call.attempts) == ("completed", 2)


def test_retryable_status_is_handed_back_and_the_next_try_is_the_next_attempt(
    task: intentlog.Task, server: FakeLLMServer
) -> None:
    """A 503 reaches the caller as a 503; the caller's retry is attempt 2 of the same call; a re-run sends nothing."""
    body = _chat("flaky", model="gpt-fake-flaky-503")
    with _client(task, server) as c:
        r1 = c.post("/v1/chat/completions", json=body)
        assert r1.status_code == 503 and r1.extensions["intentlog"]["retry_pending"] is True
        r2 = c.post("/v1/chat/completions", json=body)
        assert r2.status_code == 200
    [call] = _calls(task)
    assert (call.stage, call.attempts) == ("completed", 2)
    kinds = [e.kind for e in task.events() if e.data.get("call") == call.call_id]
    assert kinds.count("attempt.observed") == 2 and "attempt.retry_decided" in kinds
    intentlog.http.restart(task)
    with _client(task, server) as c:
        assert c.post("/v1/chat/completions", json=body).content == r2.content
    assert len(server.receipts()) == 2


def test_dropped_connection_is_an_unknown_effect_never_resent(
    task: intentlog.Task, server: FakeLLMServer, ledger_root: Path
) -> None:
    """A server that took the request and hung up leaves an unknown effect: EffectUnknown, now and on every retry."""
    body = _chat("charge", model="gpt-fake-drop")
    with _client(task, server) as c:
        with pytest.raises(intentlog.EffectUnknown) as info:
            c.post("/v1/chat/completions", json=body)
        assert info.value.next_operation == "reconcile effect"
        assert isinstance(info.value.__cause__, httpx.RemoteProtocolError)
        with pytest.raises(intentlog.EffectUnknown):  # a retry in the same run is the same call
            c.post("/v1/chat/completions", json=body)
    intentlog.http.restart(task)
    with _client(task, server) as c, pytest.raises(intentlog.EffectUnknown):
        c.post("/v1/chat/completions", json=body)
    assert len(server.receipts()) == 1
    [call] = _calls(task)
    evidence = intentlog.http.evidence(b'{"id": "from-the-dashboard"}', headers={"content-type": "application/json"})
    task.reconcile(call.call_id, "served", evidence=evidence)
    with _client(task, server) as c:
        assert c.post("/v1/chat/completions", json=body).json() == {"id": "from-the-dashboard"}
    assert len(server.receipts()) == 1
    [call] = _calls(intentlog.open(ledger_root).task("http"))
    assert call.stage == "completed"


def test_read_timeout_after_the_request_left_is_unknown(task: intentlog.Task, server: FakeLLMServer) -> None:
    """A read timeout is not a 'not sent': the server holds a receipt, the caller gets EffectUnknown."""
    with _client(task, server, timeout=0.2) as c, pytest.raises(intentlog.EffectUnknown):
        c.post("/v1/chat/completions", json=_chat("slow", model="gpt-fake-hold"))
    assert len(server.receipts()) == 1
    [call] = _calls(task)
    assert (call.stage, call.duplicate_effect_risk) == ("effect_unknown", True)
    task.reconcile(call.call_id, "not_served", note="test: pretend the provider says it never ran")
    with _client(task, server, timeout=5) as c:
        assert c.post("/v1/chat/completions", json=_chat("slow", model="gpt-fake-hold")).status_code == 200
    assert len(server.receipts()) == 2


# -- secrets, async, httpx2, proxies ---------------------------------------------------------


def test_no_credential_anywhere_under_the_ledger(
    task: intentlog.Task, server: FakeLLMServer, ledger_root: Path
) -> None:
    """Authorization, x-api-key, cookies, query keys and Set-Cookie answers are absent from every byte on disk."""
    with _client(task, server, hash_headers=["authorization"], cookies={"sid": COOKIE}) as c:
        c.post("/echo?key=AIzaSy-query-secret-1", json={"api_key": "body-secret-123456"}, headers={"x-api-key": SECRET})
        r = c.get("/echo")
        assert r.headers["set-cookie"] == "[REDACTED]"
        c.post("/v1/chat/completions", json=_chat("doc"))
    task.close()
    blob = b"".join(_ledger_bytes(ledger_root).values())
    for secret in (SECRET, COOKIE, "AIzaSy-query-secret-1", "body-secret-123456", "s3cr3t-cookie-value"):
        assert secret.encode() not in blob, secret
        assert base64.b64encode(secret.encode())[:12] not in blob, secret


def test_async_client_records_concurrent_requests_and_replays(task: intentlog.Task, server: FakeLLMServer) -> None:
    """Concurrent identical async requests become distinct occurrences; a re-run answers all from the record."""

    async def run() -> list[str]:
        headers = {"Authorization": f"Bearer {SECRET}"}
        async with intentlog.http.async_client(task, base_url=server.url, headers=headers) as c:
            rs = await asyncio.gather(*(c.post("/v1/chat/completions", json=_chat("same")) for _ in range(3)))
            async with c.stream("POST", "/v1/chat/completions", json=_chat("s", stream=True)) as r:
                streamed = b"".join([ch async for ch in r.aiter_raw()])
        return [*sorted(r.json()["id"] for r in rs), streamed.decode()]

    first = asyncio.run(run())
    intentlog.http.restart(task)
    assert asyncio.run(run()) == first
    assert len(server.receipts()) == 4
    assert sorted(c.key.rsplit("#", 1)[1] for c in _calls(task)) == ["0", "0", "1", "2"]
    assert {c.stage for c in _calls(task)} == {"completed"}


def test_async_failures_are_handed_back_or_unknown_like_sync(task: intentlog.Task, server: FakeLLMServer) -> None:
    """Async clients get the same outcomes: a 503 handed back then attempt 2, ConnectError, EffectUnknown."""
    flaky = _chat("async-flaky", model="gpt-fake-flaky-503")

    async def run() -> list[int]:
        auth = {"Authorization": f"Bearer {SECRET}"}
        async with intentlog.http.async_client(task, base_url=server.url, headers=auth) as c:
            codes = [(await c.post("/v1/chat/completions", json=flaky)).status_code for _ in range(2)]
            with pytest.raises(intentlog.EffectUnknown):
                await c.post("/v1/chat/completions", json=_chat("async-drop", model="gpt-fake-drop"))
        async with intentlog.http.async_client(task, base_url=f"http://127.0.0.1:{_free_port()}") as c:
            with pytest.raises(httpx.ConnectError):
                await c.get("/echo")
        return codes

    assert asyncio.run(run()) == [503, 200]
    stages = [(c.stage, c.attempts) for c in _calls(task)]
    assert stages == [("completed", 2), ("effect_unknown", 1), ("retry_decided", 1)]
    assert len(server.receipts()) == 3


def test_cancelled_async_request_is_still_recorded(task: intentlog.Task, server: FakeLLMServer) -> None:
    """Cancelling the caller does not cut the exchange short: the answer it paid for is recorded and replays."""
    server.hold = 0.3
    body = _chat("cancel-me")

    async def run() -> None:
        auth = {"Authorization": f"Bearer {SECRET}"}
        async with intentlog.http.async_client(task, base_url=server.url, headers=auth) as c:
            pending = asyncio.ensure_future(c.post("/v1/chat/completions", json=body))
            await asyncio.sleep(0.1)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
            for _ in range(100):  # the worker thread finishes the protocol in the background
                if _calls(task) and _calls(task)[0].stage == "completed":
                    break
                await asyncio.sleep(0.02)

    asyncio.run(run())
    [call] = _calls(task)
    assert call.stage == "completed"
    intentlog.http.restart(task)
    server.hold = 0
    with _client(task, server) as c:
        assert c.post("/v1/chat/completions", json=body).json()["id"] == "chatcmpl-0"
    assert len(server.receipts()) == 1


def test_httpx2_client_is_an_httpx2_client(task: intentlog.Task, server: FakeLLMServer) -> None:
    """lib='httpx2' gives the client anthropic 2.x requires, with the same record and replay."""
    httpx2 = pytest.importorskip("httpx2")
    with intentlog.http.client(task, lib="httpx2", base_url=server.url) as c:
        assert isinstance(c, httpx2.Client)
        first = c.get("/echo")
    intentlog.http.restart(task)
    with intentlog.http.client(task, lib="httpx2", base_url=server.url) as c:
        assert c.get("/echo").content == first.content
    assert len(server.receipts()) == 1


def test_proxy_transports_go_through_the_record(task: intentlog.Task, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy from the environment or proxy= cannot bypass the record: its mount is wrapped too."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    with intentlog.http.client(task) as c:
        assert type(c._transport).__name__ == "SyncTransportCore"
        mounted = [t for t in c._mounts.values() if t is not None]
        assert mounted and all(type(t).__name__ == "SyncTransportCore" for t in mounted)
    with intentlog.http.client(task, proxy="http://127.0.0.1:9") as c:
        assert all(type(t).__name__ == "SyncTransportCore" for t in c._mounts.values() if t is not None)


# -- offline replay ----------------------------------------------------------------------------


def test_offline_replay_answers_from_the_record_and_names_what_differs(
    task: intentlog.Task, server: FakeLLMServer, ledger_root: Path
) -> None:
    """replay() answers recorded requests without network or writes, and a changed body fails naming the path."""
    with _client(task, server) as c:
        recorded = c.post("/v1/chat/completions", json=_chat("doc-1")).content
    task.close()
    server.stop()
    before = _ledger_bytes(ledger_root)
    rp = intentlog.http.replay(intentlog.open(ledger_root, create=False).task("http"))
    with rp.client(base_url=server.url) as c:
        assert c.post("/v1/chat/completions", json=_chat("doc-1")).content == recorded
        with pytest.raises(intentlog.http.NotRecorded) as info:
            c.post("/v1/chat/completions", json=_chat("doc-2"))
    message = str(info.value)
    assert "POST http://127.0.0.1" in message and "$.body.json.messages[0].content" in message
    assert "'doc-1'" in message and "'doc-2'" in message
    assert len(rp.misses) == 1
    after = {k: v for k, v in _ledger_bytes(ledger_root).items() if not k.endswith(".lock")}
    assert after == {k: v for k, v in before.items() if not k.endswith(".lock")}


def test_misuse_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """A client without a task, an unknown library or a string of names is a UsageError."""
    with pytest.raises(intentlog.UsageError, match="needs a task"):
        intentlog.http.client("not-a-task")  # type: ignore[call-overload]
    task = intentlog.open(tmp_path / "ledger").task("t")
    with pytest.raises(intentlog.UsageError, match="'httpx' or 'httpx2'"):
        intentlog.http.client(task, lib="requests")  # type: ignore[call-overload]
    with pytest.raises(intentlog.UsageError, match="collection of names"):
        intentlog.http.client(task, hash_headers="x-tenant")
    with pytest.raises(intentlog.UsageError, match="status"):
        intentlog.http.evidence(b"", status=42)
    assert not task.exists()


def test_import_intentlog_does_not_import_httpx() -> None:
    """The core never imports an HTTP library: intentlog.http is opt-in."""
    import subprocess
    import sys

    code = "import sys, intentlog; print('httpx' in sys.modules, 'httpx2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.split() == ["False", "False"]
