"""Steps for the backlog tests, and a synthetic provider that keeps its own fsync'd receipt log.

The provider is the outside world: its receipt log (``$BACKLOG_RECEIPTS``, one JSON line per
request served, written with O_APPEND and fsynced before the answer) is the ground truth
the tests check the record against. ``$BACKLOG_SLEEP`` (seconds) is how long a send takes,
half before the receipt and half after, so a kill lands before or after the provider served.

``$BACKLOG_GATE`` (a folder) holds a send at a point a test names, so the test waits for an
event instead of racing a sleep: for each key listed in ``$BACKLOG_GATE_KEYS`` (comma
separated, ``*`` for every key), at ``$BACKLOG_GATE_AT`` (``before`` or ``after`` the receipt,
default ``after``), the send writes ``GATE/<key>.waiting`` and waits until ``GATE/open``
exists. :func:`wait_at_gate` waits for the first, :func:`open_gate` makes the second.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import intentlog
from intentlog.backlog import units


def _receipts() -> str:
    return os.environ["BACKLOG_RECEIPTS"]


def response_for(pkey: str) -> bytes:
    """The provider's answer for a key: deterministic, so a lost answer can be reconciled from the log."""
    return json.dumps({"served": pkey}, sort_keys=True).encode()


GATE_TIMEOUT = 120.0


def _gate(pkey: str, at: str) -> None:
    gate = os.environ.get("BACKLOG_GATE")
    if not gate or os.environ.get("BACKLOG_GATE_AT", "after") != at:
        return
    keys = os.environ.get("BACKLOG_GATE_KEYS", "*").split(",")
    if "*" not in keys and pkey not in keys:
        return
    fd = os.open(os.path.join(gate, pkey + ".waiting"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.fsync(fd)
    os.close(fd)
    deadline = time.monotonic() + GATE_TIMEOUT
    while not os.path.exists(os.path.join(gate, "open")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{gate}: the gate was never opened for {pkey}")
        time.sleep(0.01)


def wait_at_gate(gate: str, pkey: str, timeout: float = GATE_TIMEOUT) -> None:
    """Wait until a send of ``pkey`` stands at the gate (it wrote ``GATE/<pkey>.waiting``)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(gate, pkey + ".waiting")):
        if time.monotonic() > deadline:
            raise AssertionError(f"no send of {pkey} reached the gate {gate} in {timeout:g} s")
        time.sleep(0.01)


def open_gate(gate: str) -> None:
    """Let every held send (and every later one) go on."""
    with open(os.path.join(gate, "open"), "w", encoding="utf-8"):
        pass


def serve(request: dict[str, Any]) -> bytes:
    pause = float(os.environ.get("BACKLOG_SLEEP", "0"))
    _gate(request["pkey"], "before")
    time.sleep(pause / 2)
    line = json.dumps({"key": request["pkey"], "ts": time.time(), "pid": os.getpid()}, sort_keys=True) + "\n"
    fd = os.open(_receipts(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    _gate(request["pkey"], "after")
    time.sleep(pause / 2)
    return response_for(request["pkey"])


def read_receipts(path: str) -> list[dict[str, Any]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n"):
                out.append(json.loads(line))
    return out


def step(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload["effects"]`` effects through the provider; the result lists what each returned."""
    got = []
    for j in range(int(payload.get("effects", 1))):
        pkey = f"{payload['item']}:{j}"
        units(task, tokens=int(payload.get("tokens", 0)))
        raw = task.effect(f"e{j}", {"pkey": pkey}, serve)
        got.append(json.loads(raw)["served"])
    return {"served": got}


def noop(task: intentlog.Task, payload: Any) -> dict[str, Any]:
    task.effect("noop", {"n": payload}, lambda req: b"ok")
    return {"ok": True}


def order_step(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """Appends its item to $BACKLOG_ORDER (the order items ran in)."""
    with open(os.environ["BACKLOG_ORDER"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"item": payload["item"], "ts": time.time()}) + "\n")
    return {"ok": True}


def flaky(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """Raises until it has been called ``payload['fail']`` times (counted in a file)."""
    path = os.environ["BACKLOG_ORDER"]
    with open(path, "a", encoding="utf-8") as f:
        f.write(payload["item"] + "\n")
    with open(path, encoding="utf-8") as f:
        n = sum(1 for line in f if line.strip() == payload["item"])
    if n <= int(payload["fail"]):
        raise RuntimeError(f"transient failure {n}")
    return {"calls": n}


def approval_step(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """Needs an approval bound to its send: blocks the item until a person decides."""
    if "go" not in task.approvals():
        task.request_approval("go", "send it?")
    task.wait_for_approval("go", timeout=0)
    raw = task.effect("e0", {"pkey": payload["item"] + ":0"}, serve)
    return {"served": json.loads(raw)["served"]}


def refused_step(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """The provider refuses the request for good: the call fails and the task pauses for review."""

    def send(request: Any) -> bytes:
        raise intentlog.ProviderFailure("400 bad request", body=b"{}", retryable=False)

    task.effect("e0", {"pkey": payload["item"] + ":0"}, send)
    return {"never": True}
