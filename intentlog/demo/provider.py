"""A synthetic model provider on 127.0.0.1 that keeps its own fsync'd receipt log.

Run as ``python -I provider.py ROOT`` (the file, so that it imports no intentlog): it serves HTTP on an ephemeral port
of 127.0.0.1 only (it connects nowhere), prints the port on its first line, and answers
``POST /<case>/v1/review`` for each case folder under ``ROOT``. The ledger's claims are
checked against something the ledger did not write.

For every request it receives, *before* it works on it, it appends one JSON line to
``ROOT/<case>/provider/receipts.jsonl`` and fsyncs it: ``n``, ``body_hash`` (BLAKE3 of
the request body exactly as received), ``idempotency_key`` (the header), ``client``
(the ``User-Agent``, which names the sending process) and the ``status`` it answers
(``"held"`` for a request it holds and never answers).
A producer killed while the provider holds its request still leaves the receipt
behind, as a real provider's bill would.

How it behaves for a case is the experiment's setting, read from
``ROOT/<case>/provider/behaviour.json`` on each request: ``{"hold": true}`` holds every
request until the client goes away (the producer is killed meanwhile);
``{"refuse_first": 429}`` answers the case's first request with that status (nothing
served) and serves the later ones.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import blake3

__all__ = ["HOLD_LIMIT", "RECEIPTS", "SyntheticProvider", "read_receipts", "serve"]

RECEIPTS = Path("provider") / "receipts.jsonl"
BEHAVIOUR = Path("provider") / "behaviour.json"
HOLD_LIMIT = 120.0  # seconds a held request waits for its client to go away
_CASE = re.compile(r"^/([a-z0-9][a-z0-9-]{0,63})/v1/review$")


def read_receipts(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every receipt in a log (an absent log means the provider saw nothing)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_bytes().splitlines() if line.strip()]


class SyntheticProvider:
    """The same provider in-process, for tests and examples: ``send(request) -> bytes``.

    Each call appends (and fsyncs) ``{"body_hash", "key", "pid", "label"}`` to ``receipts``
    before answering (``body_hash``: the canonical request hash); ``hold`` seconds pass
    between the receipt and the answer.
    """

    def __init__(self, receipts: str | os.PathLike[str], *, hold: float = 0.0, label: str = "") -> None:
        self.receipts = Path(receipts)
        self.hold = hold
        self.label = label

    def send(self, request: Any) -> bytes:
        from intentlog.eventlog.canonical import canonicalize  # only in-process: the server imports no intentlog

        body = canonicalize(request).data
        _append(
            self.receipts,
            {
                "body_hash": "blake3:" + blake3.blake3(body).hexdigest(),
                "key": request.get("idempotency_key") if isinstance(request, dict) else None,
                "pid": os.getpid(),
                "label": self.label,
            },
        )
        if self.hold:
            time.sleep(self.hold)
        model = request.get("model") if isinstance(request, dict) else None
        doc = {"model": model, "review": f"reviewed {len(body)} request bytes", "verdict": "accept"}
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class _Provider(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _Provider

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the receipt log is the record
        pass

    def do_POST(self) -> None:
        m = _CASE.match(self.path)
        folder = self.server.root / m.group(1) if m else None
        if folder is None or not (folder / "provider").is_dir():
            self._answer(404, {"error": f"no such case: {self.path}"})
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        behaviour = _behaviour(folder)
        with self.server.lock:  # one receipt line at a time per provider, numbered in order
            n = len(read_receipts(folder / RECEIPTS)) + 1
            status: int | str = int(behaviour.get("refuse_first", 200)) if n == 1 else 200
            if behaviour.get("hold"):
                status = "held"
            _append(
                folder / RECEIPTS,
                {
                    "n": n,
                    "body_hash": "blake3:" + blake3.blake3(body).hexdigest(),
                    "size": len(body),
                    "idempotency_key": self.headers.get("Idempotency-Key"),
                    "client": self.headers.get("User-Agent"),
                    "status": status,
                },
            )
        if status == "held":
            self._hold()
            return
        if status != 200:
            self._answer(int(status), {"error": "rate limited: nothing was served"}, retry_after="0")
            return
        request = json.loads(body)
        self._answer(
            200,
            {"model": request.get("model"), "review": f"reviewed {len(body)} request bytes", "verdict": "accept"},
        )

    def _hold(self) -> None:
        """Keep the request until the client's socket closes (its process was killed), or the limit."""
        self.connection.settimeout(HOLD_LIMIT)
        try:
            self.connection.recv(1)  # returns b"" when the client goes away
        except OSError:
            pass

    def _answer(self, status: int, doc: dict[str, Any], *, retry_after: str | None = None) -> None:
        data = json.dumps(doc, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.end_headers()
        self.wfile.write(data)


def _behaviour(folder: Path) -> dict[str, Any]:
    p = folder / BEHAVIOUR
    doc = json.loads(p.read_bytes()) if p.exists() else {}
    return doc if isinstance(doc, dict) else {}


def _append(path: Path, receipt: dict[str, Any]) -> None:
    """One whole line, fsynced (and the folder, when the log is new) before the request is worked on."""
    new = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        data = json.dumps(receipt, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def serve(root: Path) -> None:
    """Serve until killed; the first line on stdout is the port."""
    server = _Provider(root)
    sys.stdout.write(f"{server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":  # run as a file (python -I provider.py ROOT): it imports no intentlog
    serve(Path(sys.argv[1]).resolve())
