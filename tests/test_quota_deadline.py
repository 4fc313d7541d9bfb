"""A quota grant has a deadline, checked at the last moment before the send: a late grant is never sent.

A provider on 127.0.0.1 keeps its own receipt log (the arrival of every request on the
provider's clock, fsync'd before it answers): the ground truth the test counts. One
worker is held between its grant and its send (a stall there -- a slow sync, a paused
process -- is what a client-side delay is) until every other item has been served, the
window having reopened meanwhile. Sent then, its request would land past its window next
to the three the reopened window granted; its grant is refused instead
(``attempt.not_sent``) and asked again, and no one-second window at the provider holds
more than ``calls=3/1s`` allows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import intentlog

TESTS = Path(__file__).parent
GATE_TIMEOUT = 120.0


# -- the provider: a receipt per request, on its own clock -------------------------------------


class _Provider(BaseHTTPRequestHandler):
    receipts: Path

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        key = json.loads(body)["pkey"]
        line = json.dumps({"key": key, "at": time.monotonic()}) + "\n"
        fd = os.open(self.receipts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        answer = json.dumps({"served": key}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    receipts = tmp_path / "receipts.jsonl"
    handler = type("Handler", (_Provider,), {"receipts": receipts})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", receipts
    finally:
        server.shutdown()
        server.server_close()


def _receipts(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def _busiest_window(times: list[float], window: float) -> int:
    """The most receipts any window of ``window`` seconds holds (closed on both ends: the strict count)."""
    times = sorted(times)
    return max((sum(1 for u in times[i:] if u - t <= window) for i, t in enumerate(times)), default=0)


# -- the step (runs in the workers) ------------------------------------------------------------


class _HeldAfterGrant:
    """Wraps the item's gate: the first attempt granted anywhere in the run waits for ``GATE/open`` before going on."""

    def __init__(self, inner: Any, gate: str, item: str) -> None:
        self.inner, self.gate, self.item = inner, gate, item

    def admit(self, kind: str, data: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
        first = list(self.inner.admit(kind, data))  # the grant, if this is an attempt
        if kind != "attempt.started":
            return first
        try:
            fd = os.open(os.path.join(self.gate, "held"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return first  # someone else was held: this one goes on
        os.write(fd, self.item.encode())
        os.fsync(fd)
        os.close(fd)
        deadline = time.monotonic() + GATE_TIMEOUT
        while not os.path.exists(os.path.join(self.gate, "open")):
            if time.monotonic() > deadline:
                raise RuntimeError("the gate was never opened")
            time.sleep(0.01)
        return first

    def __getattr__(self, name: str) -> Any:  # whatever else the gate answers (the check before the send)
        return getattr(self.inner, name)


def held_step(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """One effect through the provider; the first attempt granted in the run is held after its grant."""
    task.stream.gate = _HeldAfterGrant(task.stream.gate, os.environ["QUOTA_GATE"], payload["item"])

    def send(request: dict[str, Any]) -> bytes:
        req = urllib.request.Request(os.environ["QUOTA_PROVIDER"], data=json.dumps(request).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            return bytes(r.read())

    raw = task.effect("e0", {"pkey": payload["item"]}, send)
    return {"served": json.loads(raw)["served"]}


# -- the test ----------------------------------------------------------------------------------


def _wait_for(pred: Any, what: str, limit: float = GATE_TIMEOUT) -> None:
    """Wait for an event (a file, a receipt): a bound on a hang, never a step of the test."""
    deadline = time.monotonic() + limit
    while not pred():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.01)


def test_a_grant_held_past_its_deadline_is_not_sent_and_no_window_at_the_provider_exceeds_the_quota(
    tmp_path: Path, provider: tuple[str, Path]
) -> None:
    url, receipts = provider
    root, gate = tmp_path / "l", tmp_path / "gate"
    gate.mkdir()
    items = [f"i{k}" for k in range(6)]
    with intentlog.open(root) as led:
        led.backlog("g").add_many([{"item": i, "payload": {"item": i}} for i in items])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["QUOTA_PROVIDER"], env["QUOTA_GATE"] = url, str(gate)
    cmd = [
        sys.executable, "-m", "intentlog.cli", "--root", str(root), "run", "g", "--step",
        "test_quota_deadline:held_step", "--workers", "4", "--until-idle", "--quota", "calls=3/1s",
    ]  # fmt: skip
    run = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (gate / "held").exists(), "an attempt held after its grant")
        # every other item served: the window the held grant was made in has closed and reopened
        _wait_for(lambda: len(_receipts(receipts)) == len(items) - 1, "the other items served")
        (gate / "open").touch()
        _out, err = run.communicate(timeout=GATE_TIMEOUT)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err
    got = _receipts(receipts)
    assert sorted(r["key"] for r in got) == items  # every item served, each once
    assert _busiest_window([r["at"] for r in got], 1.0) <= 3, got
    held = (gate / "held").read_text()
    with intentlog.open(root) as led:
        events = list(led.task(f"g.item.{held}").events())
    not_sent = [e.data for e in events if e.kind == "attempt.not_sent"]
    assert len(not_sent) == 1 and "grant" in not_sent[0]["reason"], not_sent
    assert [e.kind for e in events].count("quota.reserved") == 2  # the late grant stays counted; a new one sent


def test_a_grant_is_valid_for_its_wait_at_the_supervisor_plus_the_margin_s_share() -> None:
    """The worker counts a grant's life from when it asked: the time it waited for the window is added, no more."""
    from intentlog.backlog.broker import QuotaBroker
    from intentlog.backlog.messages import Grant
    from intentlog.backlog.quota import GRANT_VALID, MARGIN, parse_quota

    class Clock:
        t = 100.0

        def __call__(self) -> float:
            return self.t

    class Journal:
        def record(self, kind: str, data: dict[str, Any]) -> None:
            pass

    mono = Clock()
    broker = QuotaBroker(Journal(), (parse_quota("calls=1/10s"),), clock=mono, wall=mono)  # type: ignore[arg-type]
    broker.asked("a")
    first = broker.answer("a", {"calls": 1.0})
    assert isinstance(first, Grant) and first.valid == GRANT_VALID < MARGIN
    broker.asked("b")
    assert broker.answer("b", {"calls": 1.0}) is None  # the window is full: b waits
    mono.t += 11.0
    second = broker.answer("b", {"calls": 1.0})
    assert isinstance(second, Grant) and second.valid == pytest.approx(11.0 + GRANT_VALID)
    broker.asked("b")  # a reservation the run never answered is replaced by the next one's arrival
    mono.t += 20.0
    broker.asked("b")
    third = broker.answer("b", {"calls": 1.0})
    assert isinstance(third, Grant) and third.valid == GRANT_VALID
