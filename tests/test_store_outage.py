"""A store outage of seconds is retried with backoff, not fatal; an unreachable store says so.

The supervisor and its worker reach a real SeaweedFS through a TCP proxy the test
controls: while it is down, every connection is reset at once (what a restarting store
looks like to a client), and the proxy counts them. The outage is held while a send is
held at the provider's gate and lasts until the clients have met many more refusals than
a client that gives up after three retries could take; then the store comes back and the
send goes on. The run must end 0 with its item done and one receipt at the provider.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import s3_server
from backlog_chaos import receipt_counts
from backlog_steps import open_gate, wait_at_gate

import intentlog
from intentlog.errors import LedgerError

TESTS = Path(__file__).parent


class Proxy:
    """A TCP proxy to ``target``; ``down()`` resets every connection (open or new) until ``up()``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.is_down = False
        self.refused = 0
        self.changed = threading.Condition()
        self.open: set[socket.socket] = set()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def down(self) -> None:
        with self.changed:
            self.is_down = True
            for s in list(self.open):
                _reset(s)
            self.open.clear()

    def up(self) -> None:
        with self.changed:
            self.is_down = False

    def wait_refused(self, n: int, ended: Callable[[], bool], timeout: float = 120.0) -> None:
        """Wait until ``n`` connections were reset while down (an event, not a duration), or ``ended()``."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.refused < n and not ended():
                assert time.monotonic() < deadline, f"only {self.refused} refused"
                self.changed.wait(0.05)

    def close(self) -> None:
        self.closed = True
        self.listener.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.changed:
                if self.is_down:
                    _reset(client)
                    self.refused += 1
                    self.changed.notify_all()
                    continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                _reset(client)
                continue
            with self.changed:
                self.open.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _reset(s: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0): the peer sees ECONNRESET, as from a store that went away.

    The read side is shut first: a pump thread blocked in ``recv`` on it holds the socket, and
    a close from this thread alone would not release it (no reset sent) until that ``recv``
    returned -- never, for a client waiting for the answer to a request it sent before the
    outage: it would hang until its own timeout instead of seeing the reset."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        try:
            s.shutdown(socket.SHUT_RD)  # wakes a recv blocked on it; sends nothing
        except OSError:
            pass
        s.close()
    except OSError:
        pass


@pytest.fixture
def proxied(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[str, Proxy]]:
    """A fresh ledger URL reached through a proxy; the environment every child inherits points at the proxy."""
    env = s3_server.seaweed().env()
    target = urlparse(env["AWS_ENDPOINT_URL"])
    proxy = Proxy((target.hostname or "127.0.0.1", target.port or 80))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    loc = s3_server.fresh_location()
    try:
        yield f"s3://{loc.bucket}/{loc.prefix}", proxy
    finally:
        proxy.close()


#: connections reset during the outage: well past the four tries (one and three retries) a client
#: that gave up after ~200 ms made, from the two or three processes asking the store
OUTAGE_RESETS = 16


def test_a_store_outage_of_seconds_mid_run_is_retried_and_the_run_ends_with_its_item_done(
    proxied: tuple[str, Proxy], tmp_path: Path
) -> None:
    url, proxy = proxied
    gate = tmp_path / "gate"
    gate.mkdir()
    with intentlog.open(url) as led:
        led.backlog("g").add("i0", {"item": "i0", "effects": 1})
    env = {**os.environ, "BACKLOG_GATE": str(gate), "BACKLOG_GATE_AT": "before"}
    cmd = [
        sys.executable, "-m", "intentlog.cli", "--root", url, "run", "g", "--step", "backlog_steps:step",
        "--workers", "1", "--until-idle",
    ]  # fmt: skip
    run = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_at_gate(str(gate), "i0:0")  # its attempt.started is stored; the send stands at the provider
        proxy.down()
        started = time.monotonic()
        proxy.wait_refused(OUTAGE_RESETS, lambda: run.poll() is not None)
        outage = time.monotonic() - started
        proxy.up()
        open_gate(str(gate))
        _out, err = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, f"after an outage of {outage:.1f} s: {err}"
    assert receipt_counts(tmp_path / "receipts.jsonl") == {"i0:0": 1}
    with intentlog.open(url) as led:
        v = led.backlog("g").view()
        assert v.counts["done"] == 1, v.to_json()


def test_an_unreachable_store_is_reported_as_unreachable_not_as_one_that_cannot_fence(
    proxied: tuple[str, Proxy],
) -> None:
    url, proxy = proxied
    proxy.down()
    with pytest.raises(LedgerError, match="cannot reach the store") as got:
        intentlog.open(url)
    assert "cannot keep one writer" not in str(got.value)
