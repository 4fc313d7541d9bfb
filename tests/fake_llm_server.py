"""A loopback HTTP server that speaks just enough of the OpenAI and Anthropic APIs, and keeps a bill.

The tests of ``intentlog.http`` check the ledger's claims against something the ledger did
not write: every request this server receives is appended (and fsynced) to its own
receipt log *before* it works on it or answers, as a provider's billing would be. A
client killed while the server holds a request still leaves the receipt behind.

Endpoints (all on ``127.0.0.1``, port chosen by the OS):

``POST /v1/chat/completions``
    OpenAI chat completions; ``"stream": true`` answers with server-sent events
    (``data: {chunk}`` … ``data: [DONE]``).
``POST /v1/messages``
    Anthropic messages; ``"stream": true`` answers with the typed event stream
    (``message_start`` … ``message_stop``).
``GET|POST /echo``
    Says what arrived (method, path, query, body hash) — for plain ``httpx`` tests.
``GET /gzip``
    A gzip-encoded JSON body, to show responses are stored as they came off the wire.

Every answer carries the receipt number ``n``, so a request served twice can never
produce the same bytes twice: a replay that is byte-identical to the first run was not
sent again. Credentials are checked (``Authorization: Bearer`` or ``x-api-key``) and a
wrong one gets a 401, so a passing test proves the key really went over the wire.

Behaviour switches ride in the request's ``model`` field:

``...-flaky-<status>``  the first request with a given body hash gets ``<status>``; later ones succeed.
``...-drop``            the receipt is written, then the connection is closed without an answer.
``...-hold``            the server sleeps ``hold`` seconds after the receipt (also ``server.hold`` for all).

``server.responses[n]`` keeps the raw bytes of every answer sent, so a test can play the
operator who looks the call up at the provider and reconciles it with the evidence.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["FakeLLMServer", "body_hash", "read_receipts"]


def body_hash(body: bytes) -> str:
    """The receipt's name for a request body: sha256 of the bytes as received."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


def read_receipts(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every receipt in the log, in order (an absent log means nothing arrived)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_bytes().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def _label(payload: dict[str, Any]) -> str:
    """The text of the last message: tests name their logical calls there."""
    messages = payload.get("messages")
    if isinstance(messages, list) and messages:
        last = messages[-1]
        if isinstance(last, dict):
            content = last.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list) and content and isinstance(content[0], dict):
                return str(content[0].get("text", ""))
    return ""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ---------------------------------------------------------------------

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> None:
        self.send_response(status)
        for k, v in headers or [("Content-Type", "application/json")]:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _send_stream(self, events: Iterator[bytes], n: int) -> None:
        chunks = list(events)
        self.server.responses[n] = b"".join(chunks)  # what the client would get, even if it dies mid-stream
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", f"req-{n}")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
            if self.server.chunk_delay:
                time.sleep(self.server.chunk_delay)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _authorized(self) -> bool:
        key = self.server.api_key
        if key is None:
            return True
        return self.headers.get("Authorization") == f"Bearer {key}" or self.headers.get("x-api-key") == key

    # -- verbs ------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch(b"")

    def do_POST(self) -> None:
        self._dispatch(self._body())

    def _dispatch(self, body: bytes) -> None:
        parts = urlsplit(self.path)
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            payload = {}
        if not isinstance(payload, dict):
            payload = {}
        model = str(payload.get("model", ""))
        n = self.server.receipt(
            {
                "method": self.command,
                "path": parts.path,
                "body_hash": body_hash(body),
                "model": model,
                "stream": payload.get("stream") is True,
                "label": _label(payload),
                "retry_count": self.headers.get("x-stainless-retry-count"),
            }
        )
        hold = self.server.hold
        if model.endswith("-hold"):
            hold = max(hold, self.server.slow_hold)
        if hold:
            time.sleep(hold)
        if model.endswith("-drop"):
            self.close_connection = True
            return
        if not self._authorized():
            err = {"error": {"message": "invalid credentials", "type": "authentication_error"}}
            self._send(401, json.dumps(err).encode())
            return
        flaky = self.server.flaky_status(model, body)
        if flaky is not None:
            err = json.dumps({"error": {"message": f"try again ({flaky})", "type": "overloaded_error"}}).encode()
            self.server.responses[n] = err
            headers = [("Content-Type", "application/json"), ("x-request-id", f"req-{n}"), ("retry-after-ms", "10")]
            self._send(flaky, err, headers)
            return
        if parts.path == "/v1/chat/completions" and self.command == "POST":
            self._openai(payload, n)
        elif parts.path == "/v1/messages" and self.command == "POST":
            self._anthropic(payload, n)
        elif parts.path == "/echo":
            out = {
                "n": n,
                "method": self.command,
                "path": parts.path,
                "query": parts.query,
                "body_hash": body_hash(body),
            }
            data = json.dumps(out, sort_keys=True).encode()
            self.server.responses[n] = data
            self._send(200, data, [("Content-Type", "application/json"), ("Set-Cookie", "session=s3cr3t-cookie-value")])
        elif parts.path == "/gzip":
            data = gzip.compress(json.dumps({"n": n, "gzip": True}).encode(), mtime=0)
            self.server.responses[n] = data
            self._send(200, data, [("Content-Type", "application/json"), ("Content-Encoding", "gzip")])
        else:
            self._send(404, b'{"error": {"message": "no such endpoint"}}')

    # -- the two APIs ---------------------------------------------------------------

    def _openai(self, payload: dict[str, Any], n: int) -> None:
        text = f"summary #{n} of {_label(payload)!r}"
        model = payload.get("model", "gpt-fake")
        if payload.get("stream") is True:
            self._send_stream(_openai_events(n, str(model), text), n)
            return
        out = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_700_000_000 + n,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
        }
        data = json.dumps(out).encode()
        self.server.responses[n] = data
        self._send(200, data, [("Content-Type", "application/json"), ("x-request-id", f"req-{n}")])

    def _anthropic(self, payload: dict[str, Any], n: int) -> None:
        text = f"summary #{n} of {_label(payload)!r}"
        model = str(payload.get("model", "claude-fake"))
        message = {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 7, "output_tokens": 5},
        }
        if payload.get("stream") is True:
            self._send_stream(_anthropic_events(message, text), n)
            return
        data = json.dumps(message).encode()
        self.server.responses[n] = data
        self._send(200, data, [("Content-Type", "application/json"), ("request-id", f"req-{n}")])


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


def _openai_events(n: int, model: str, text: str) -> Iterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
        obj = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000 + n,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    yield chunk({"role": "assistant", "content": ""}, None)
    for w in _words(text):
        yield chunk({"content": w}, None)
    yield chunk({}, "stop")
    yield b"data: [DONE]\n\n"


def _anthropic_events(message: dict[str, Any], text: str) -> Iterator[bytes]:
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: ".encode() + json.dumps({"type": kind, **data}).encode() + b"\n\n"

    start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": 7, "output_tokens": 0}}
    yield event("message_start", {"message": start})
    yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    for w in _words(text):
        yield event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": w}})
    yield event("content_block_stop", {"index": 0})
    yield event(
        "message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 5}}
    )
    yield event("message_stop", {})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, receipts: Path, api_key: str | None, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.receipts = receipts
        self.api_key = api_key
        self.hold = 0.0
        self.slow_hold = 0.5
        self.chunk_delay = 0.0
        self.responses: dict[int, bytes] = {}
        self._lock = threading.Lock()
        self._count = len(read_receipts(receipts))
        self._failed_once: set[str] = set()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client killed mid-answer is what the kill tests do; no tracebacks on stderr

    def receipt(self, fields: dict[str, Any]) -> int:
        """Append one fsynced receipt line before anything else happens; return its number."""
        with self._lock:
            n = self._count
            self._count += 1
            line = json.dumps({"n": n, **fields}, sort_keys=True).encode() + b"\n"
            fd = os.open(self.receipts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            return n

    def flaky_status(self, model: str, body: bytes) -> int | None:
        marker = "-flaky-"
        if marker not in model:
            return None
        status = int(model.rsplit(marker, 1)[1].split("-")[0])
        h = body_hash(body)
        with self._lock:
            if h in self._failed_once:
                return None
            self._failed_once.add(h)
        return status


class FakeLLMServer:
    """Start with ``with FakeLLMServer(receipts_path, api_key=...) as server:``; ``server.url`` is the base."""

    def __init__(
        self, receipts: str | os.PathLike[str], *, api_key: str | None = None, hold: float = 0.0, port: int = 0
    ) -> None:
        self.receipts_path = Path(receipts)
        self._server = _Server(self.receipts_path, api_key, port)
        self._server.hold = hold
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-llm-server", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def hold(self) -> float:
        return self._server.hold

    @hold.setter
    def hold(self, value: float) -> None:
        self._server.hold = value

    @property
    def chunk_delay(self) -> float:
        return self._server.chunk_delay

    @chunk_delay.setter
    def chunk_delay(self, value: float) -> None:
        self._server.chunk_delay = value

    @property
    def responses(self) -> dict[int, bytes]:
        return self._server.responses

    def receipts(self) -> list[dict[str, Any]]:
        return read_receipts(self.receipts_path)

    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
