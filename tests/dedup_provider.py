"""A synthetic provider that deduplicates by idempotency key, and a client to kill mid-send.

``python tests/dedup_provider.py serve DIR [--window S]`` serves on loopback and prints
its port. Like a payment API it keeps, per ``Idempotency-Key``, the parameters (body
hash) and the first response for ``--window`` seconds after the first send:

- a new key (or one whose window passed, or no key): a new *effect* — a line in
  ``DIR/effects.jsonl``, fsynced before it works on it — then the answer;
- the same key and body while the first is still being worked on: 409 "key in use";
- the same key and body after it: the first answer again, ``Idempotent-Replayed: true``;
- the same key with another body: 400 naming the key (reused with other parameters).

Every request, whatever it gets, is a line in ``DIR/requests.jsonl`` (fsynced first).
``POST /_control {"hold": s}`` makes the provider sleep ``s`` seconds after recording an
effect and before answering (a slow provider; the window to kill the client in); a
negative ``s`` holds it until ``POST /_control {"release": true}``, so a test kills the
client at a moment it chose, not inside a window it must beat. Every answer the provider
keeps for a key is a line in ``DIR/answers.jsonl`` (fsynced once it is kept).
Endpoints: ``POST /v1/charges`` (a small JSON charge) and ``POST /v1/chat/completions``
(OpenAI-shaped).

``python tests/dedup_provider.py client LEDGER URL --via core|httpx|openai [--window S]
[--margin S] [--no-dedup]`` runs one effect ``charge-1`` of task ``pay`` and prints one
JSON line with how it ended. The tests kill it (SIGKILL) while the provider holds its
request.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

KEY_HEADER = "Idempotency-Key"
TASK = "pay"
KEY = "charge-1"
CHARGE = {"amount": 1200, "currency": "eur", "description": "order 7"}


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _append(path: Path, fields: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, json.dumps(fields, sort_keys=True).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


class _Entry:
    def __init__(self, body_hash: str, first: float) -> None:
        self.body_hash = body_hash
        self.first = first
        self.response: tuple[int, bytes] | None = None  # None: still being worked on


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, folder: Path, window: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.folder = folder
        self.window = window
        self.hold = 0.0
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.keys: dict[str, _Entry] = {}
        self.effects = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client killed mid-answer is what the tests do


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes, extra: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        srv = self.server
        if self.path == "/_control":
            control = json.loads(body)
            if control.get("release"):
                srv.released.set()
            else:
                srv.hold = float(control["hold"])
                if srv.hold < 0:
                    srv.released.clear()
            self._reply(200, b"{}")
            return
        key = self.headers.get(KEY_HEADER)
        bh = "sha256:" + hashlib.sha256(body).hexdigest()
        _append(srv.folder / "requests.jsonl", {"key": key, "body_hash": bh, "path": self.path, "ts": time.time()})
        now = time.time()
        with srv.lock:
            entry = srv.keys.get(key) if key is not None else None
            if entry is not None and now - entry.first > srv.window:
                entry = None  # the provider forgot the key: a repeat is a new effect
            if entry is not None:
                if entry.body_hash != bh:
                    msg = f"Keys for idempotent requests can only be used with the same parameters: {key}"
                    err = {"error": {"type": "idempotency_error", "message": msg}}
                    self._reply(400, json.dumps(err).encode())
                    return
                if entry.response is None:
                    err = {"error": {"type": "idempotency_error", "message": f"key {key} is in use by another request"}}
                    self._reply(409, json.dumps(err).encode())
                    return
                status, data = entry.response
                self._reply(status, data, [("Idempotent-Replayed", "true")])
                return
            srv.effects += 1
            n = srv.effects
            if key is not None:
                entry = srv.keys[key] = _Entry(bh, now)
            hold = srv.hold  # as set when the effect is recorded (a test may change it once it sees the effect)
            _append(srv.folder / "effects.jsonl", {"n": n, "key": key, "body_hash": bh, "ts": now})
        if hold < 0:
            srv.released.wait(120)
        elif hold:
            time.sleep(hold)
        if self.path == "/v1/chat/completions":
            out: dict[str, Any] = {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 1_700_000_000 + n,
                "model": "gpt-fake",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": f"answer #{n}"}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        else:
            out = {"id": f"ch_{n}", "n": n, "status": "succeeded", **json.loads(body or b"{}")}
        data = json.dumps(out).encode()
        if entry is not None:
            with srv.lock:
                entry.response = (200, data)
            _append(srv.folder / "answers.jsonl", {"n": n, "key": key, "ts": time.time()})
        self._reply(200, data)


def serve(folder: Path, window: float) -> None:
    srv = _Server(folder, window)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


def client(ledger: str, url: str, via: str, window: float, margin: float | None, dedup_on: bool) -> None:
    import httpx

    import intentlog
    import intentlog.http

    task = intentlog.open(ledger).task(TASK)
    dedup = intentlog.ProviderDedup(window=window, header=KEY_HEADER, margin=margin) if dedup_on else None
    try:
        if via == "core":
            result = task.effect(KEY, CHARGE, send_charge(url), interpret=json.loads, dedup=dedup)
        elif via == "httpx":
            with intentlog.http.client(task, base_url=url, dedup=dedup) as http, task.key(KEY):
                result = http.post("/v1/charges", json=CHARGE).json()
        else:
            import openai

            oa = openai.OpenAI(
                base_url=f"{url}/v1",
                api_key="sk-dedup-test",
                http_client=intentlog.http.client(task, dedup=dedup),
                max_retries=0,
            )
            with task.key(KEY):
                reply = oa.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": "hi"}])
            result = {"content": reply.choices[0].message.content}
    except intentlog.EffectUnknown as exc:
        print(json.dumps({"outcome": "unknown", "call": exc.call_id}), flush=True)
        return
    except httpx.HTTPError as exc:  # pragma: no cover - diagnostic
        print(json.dumps({"outcome": "http_error", "error": str(exc)}), flush=True)
        return
    print(json.dumps({"outcome": "completed", "result": result}), flush=True)


def send_charge(url: str, key: str = KEY) -> Any:
    """A core-API ``send``: POST the charge with the call's key in the Idempotency-Key header.

    409 (key in use) is a retryable ProviderFailure; 400/422 naming the key is KeyReused;
    a connection that never opened is NotSent; anything else after the send leaves the
    effect unknown (the exception propagates).
    """
    import httpx

    import intentlog

    def send(request: dict[str, Any]) -> bytes:
        try:
            r = httpx.post(f"{url}/v1/charges", json=request, headers={KEY_HEADER: key}, timeout=30)
        except httpx.ConnectError as exc:
            raise intentlog.NotSent(str(exc)) from exc
        if r.status_code == 409:
            raise intentlog.ProviderFailure("HTTP 409: key in use", body=r.content, retryable=True)
        if r.status_code in (400, 422) and b"idempoten" in r.content.lower():
            raise intentlog.KeyReused(f"HTTP {r.status_code}: key reused with other parameters", body=r.content)
        if r.status_code >= 400:
            raise intentlog.ProviderFailure(f"HTTP {r.status_code}", body=r.content, retryable=r.status_code >= 500)
        return r.content

    return send


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("folder")
    s.add_argument("--window", type=float, default=86400.0)
    c = sub.add_parser("client")
    c.add_argument("ledger")
    c.add_argument("url")
    c.add_argument("--via", choices=("core", "httpx", "openai"), default="core")
    c.add_argument("--window", type=float, default=3600.0)
    c.add_argument("--margin", type=float, default=None)
    c.add_argument("--no-dedup", action="store_true")
    a = ap.parse_args()
    if a.cmd == "serve":
        serve(Path(a.folder), a.window)
    else:
        client(a.ledger, a.url, a.via, a.window, a.margin, not a.no_dedup)


if __name__ == "__main__":
    sys.exit(main())
