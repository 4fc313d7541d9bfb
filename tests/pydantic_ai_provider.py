"""A loopback OpenAI-compatible chat server for the pydantic-ai tests, with its own fsynced receipt log.

Every ``POST /v1/chat/completions`` is appended to ``receipts`` (one JSON line, fsynced)
*before* the server works on it, as a provider's bill would be; the record the ledger keeps
is checked against it. The answer follows the conversation so a pydantic-ai agent with one
tool runs a whole loop against it:

- the request offers tools and holds no tool result yet: a tool call of the first tool
  offered, ``{"to": "ana@example.com", "subject": "<prompt>"}``, id ``call_<n>``;
- otherwise: the text ``done #<n>: <last message>`` (or, when ``response_format`` asks for
  a JSON schema, ``{"answer": "done #<n>"}``).

``"stream": true`` answers the same as server-sent events. ``server.hold_next()`` makes the
next request wait after its receipt until ``server.release()`` (or ``stop``): a test kills
its client at that moment, chosen by an event, never by a sleep. With ``dedup=True`` it keeps
the first answer per ``Idempotency-Key`` and replays it (no new receipt, ``replayed`` line in
``receipts`` instead), as a provider that deduplicates would.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["ChatServer", "read_lines"]


def read_lines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every JSON line of a log (an absent log: nothing happened)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_bytes().splitlines() if line.strip()]


def append_line(path: str | os.PathLike[str], fields: dict[str, Any]) -> None:
    """Append one JSON line and fsync it before returning."""
    line = json.dumps(fields, sort_keys=True).encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _last_text(messages: list[Any]) -> str:
    for m in reversed(messages):
        if isinstance(m, dict):
            content = m.get("content")
            if isinstance(content, str) and content:
                return content
            if isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        return str(part["text"])
    return ""


def _answer(payload: dict[str, Any], n: int) -> dict[str, Any]:
    """The assistant message for this conversation: a tool call first, then a text (or JSON) answer."""
    messages = payload.get("messages") or []
    tools = payload.get("tools") or []
    has_result = any(isinstance(m, dict) and m.get("role") == "tool" for m in messages)
    fmt = payload.get("response_format") or {}
    if tools and not has_result:
        tool = tools[0]["function"]["name"]
        if tool.startswith("final_result"):  # an output tool: answer through it
            args = {"answer": f"done #{n}"}
        else:
            args = {"to": "ana@example.com", "subject": _last_text(messages)}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"call_{n}", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
            ],
        }
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return {"role": "assistant", "content": json.dumps({"answer": f"done #{n}"})}
    return {"role": "assistant", "content": f"done #{n}: {_last_text(messages)}"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        payload = json.loads(body) if body else {}
        key = self.headers.get("Idempotency-Key")
        srv = self.server
        kept = srv.kept.get(key) if (srv.dedup and key) else None
        if kept is not None:
            append_line(srv.receipts, {"replayed": True, "key": key})
            self._send(kept)
            return
        n = srv.receipt(
            {
                "path": self.path,
                "key": key,
                "stream": payload.get("stream") is True,
                "messages": len(payload.get("messages") or []),
            }
        )
        message = _answer(payload, n)
        out = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1_700_000_000 + n,
            "model": payload.get("model", "gpt-fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
        }
        data = self._stream(out) if payload.get("stream") is True else json.dumps(out).encode()
        if srv.dedup and key:
            srv.kept[key] = data  # kept before any hold: a repeat after the client died is replayed
        srv.maybe_hold()
        self._send(data, stream=payload.get("stream") is True)

    def _stream(self, out: dict[str, Any]) -> bytes:
        message = out["choices"][0]["message"]
        base = {k: out[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

        def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
            obj = base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        parts = [chunk({"role": "assistant", "content": ""}, None)]
        if message.get("tool_calls"):
            call = message["tool_calls"][0]
            parts.append(chunk({"tool_calls": [{"index": 0, **call}]}, None))
        else:
            for word in str(message["content"]).split(" "):
                parts.append(chunk({"content": word + " "}, None))
        parts.append(chunk({}, "stop"))
        parts.append(b"data: [DONE]\n\n")
        return b"".join(parts)

    def _send(self, data: bytes, *, stream: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, receipts: Path, dedup: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.receipts = receipts
        self.dedup = dedup
        self.kept: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.count = sum(1 for r in read_lines(receipts) if "n" in r)
        self.hold_one = False
        self.released = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client killed mid-answer is what the kill tests do

    def receipt(self, fields: dict[str, Any]) -> int:
        with self.lock:
            n = self.count
            self.count += 1
            append_line(self.receipts, {"n": n, **fields})
            return n

    def maybe_hold(self) -> None:
        with self.lock:
            hold, self.hold_one = self.hold_one, False
        if hold:
            self.released.wait()


class ChatServer:
    """``with ChatServer(receipts) as server:``; ``server.url`` is the OpenAI base URL (``.../v1``)."""

    def __init__(self, receipts: str | os.PathLike[str], *, dedup: bool = False) -> None:
        self.receipts_path = Path(receipts)
        self._server = _Server(self.receipts_path, dedup)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def receipts(self) -> list[dict[str, Any]]:
        """The requests that reached the provider (replays of a kept answer excluded)."""
        return [r for r in read_lines(self.receipts_path) if "n" in r]

    def hold_next(self) -> None:
        """The next request waits after its receipt until :meth:`release`."""
        self._server.released.clear()
        with self._server.lock:
            self._server.hold_one = True

    def release(self) -> None:
        self._server.released.set()

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
