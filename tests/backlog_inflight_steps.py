"""An async step for the in-flight backlog tests, and a provider on 127.0.0.1 that keeps its own receipt log.

The provider (``python backlog_inflight_steps.py serve RECEIPTS PORTFILE [GATE]``) is the
outside world: a TCP server on 127.0.0.1 answering one JSON line per connection. Before it
answers, it appends ``{"key": ...}`` to its receipt log (O_APPEND, fsync'd): the ground
truth the tests check the ledger against. With a gate folder, a request whose key is
listed in ``GATE/keys`` (one per line, ``*`` for all) writes ``GATE/<key>.waiting`` after
its receipt and waits until ``GATE/open`` exists, so a test acts on an event, never on a
sleep. The provider also keeps, in ``RECEIPTS.max``, the most requests it ever held at once.

The step (:func:`step`) makes ``$INFLIGHT_EFFECTS`` (default 2) effects in a row through
``task.aeffect``, each one connection to the provider named by ``$INFLIGHT_PORTFILE``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WAIT = 120.0


def _port() -> int:
    return int(Path(os.environ["INFLIGHT_PORTFILE"]).read_text())


async def _ask(port: int, request: Any) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(json.dumps(request, sort_keys=True).encode() + b"\n")
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
    if not line:
        raise ConnectionError("the provider closed the connection without an answer")
    return line.rstrip(b"\n")


def response_for(key: str) -> bytes:
    """The provider's answer for ``key`` (deterministic: a lost answer can be reconciled from the receipts)."""
    return json.dumps({"served": key}, sort_keys=True).encode()


async def step(task: Any, payload: Any) -> Any:
    port = _port()
    answers = []
    for i in range(int(os.environ.get("INFLIGHT_EFFECTS", "2"))):
        key = f"{payload['item']}:{i}"

        async def send(request: Any) -> bytes:
            return await _ask(port, request)

        answers.append(json.loads(await task.aeffect(f"e{i}", {"key": key}, send)))
    return {"answers": answers}


def sync_step(task: Any, payload: Any) -> Any:
    """The same work from a plain function (one item per worker process)."""
    port = _port()
    answers = []
    for i in range(int(os.environ.get("INFLIGHT_EFFECTS", "2"))):
        key = f"{payload['item']}:{i}"
        answers.append(json.loads(task.effect(f"e{i}", {"key": key}, lambda r: asyncio.run(_ask(port, r)))))
    return {"answers": answers}


# -- the provider ----------------------------------------------------------------------------


class _Provider:
    def __init__(self, receipts: Path, gate: Path | None) -> None:
        self.receipts, self.gate = receipts, gate
        self.now = 0
        self.max = 0

    def receipt(self, key: str) -> None:
        fd = os.open(self.receipts, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (json.dumps({"key": key}) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def gated(self, key: str) -> bool:
        if self.gate is None or (self.gate / "open").exists():
            return False
        try:
            keys = (self.gate / "keys").read_text().split()
        except OSError:
            return False
        return "*" in keys or key in keys

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.now += 1
        if self.now > self.max:
            self.max = self.now
            (self.receipts.parent / (self.receipts.name + ".max")).write_text(str(self.max))
        try:
            line = await reader.readline()
            if not line:
                return
            key = json.loads(line)["key"]
            self.receipt(key)  # served: the effect happened, whatever happens to the caller now
            if self.gated(key):
                assert self.gate is not None
                (self.gate / f"{key}.waiting").write_text("")
                while not (self.gate / "open").exists():
                    await asyncio.sleep(0.01)
            writer.write(response_for(key) + b"\n")
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.now -= 1
            writer.close()


async def _serve(receipts: Path, portfile: Path, gate: Path | None) -> None:
    provider = _Provider(receipts, gate)
    server = await asyncio.start_server(provider.serve, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    tmp = portfile.with_name(portfile.name + ".tmp")
    tmp.write_text(str(port))
    os.replace(tmp, portfile)
    async with server:
        await server.serve_forever()


def start_provider(tmp: Path, gate: Path | None = None) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """The provider in its own process; the environment a run needs to reach it (and import this module)."""
    receipts, portfile = tmp / "receipts.jsonl", tmp / "port"
    args = [sys.executable, __file__, "serve", str(receipts), str(portfile)] + ([str(gate)] if gate else [])
    proc = subprocess.Popen(args)
    deadline = time.monotonic() + WAIT
    while not portfile.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the provider did not start")
        time.sleep(0.01)
    env = dict(os.environ)
    here = str(Path(__file__).parent)
    env["PYTHONPATH"] = os.pathsep.join([here, env.get("PYTHONPATH", "")])
    env["INFLIGHT_PORTFILE"] = str(portfile)
    return proc, env


def receipts(tmp: Path) -> list[str]:
    path = tmp / "receipts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["key"] for line in path.read_text().splitlines() if line]


def wait_for(cond: Any, what: str, timeout: float = WAIT) -> None:
    """Wait for an event (a file, a record) the product makes, failing with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {timeout:g} s: {what}")
        time.sleep(0.01)


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    asyncio.run(_serve(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]) if len(sys.argv) > 4 else None))
