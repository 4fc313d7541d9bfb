"""The conductor's tools: the experiment folder, its provider process, and one OS process per step.

Every step is ``python -m intentlog.demo.producer`` in its own process, recorded (argv,
pid, exit status, wall-clock start and end) for the case's termination record. A kill
is a real ``SIGKILL``: either the producer's own at a durable checkpoint, or the
conductor's once an event it waits for has happened (a receipt in the provider's log,
an event in the stream), never after a guessed delay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from ..errors import IntentlogError
from .plan import case_plan
from .provider import RECEIPTS, read_receipts
from .records import stream_digest

__all__ = ["Case", "Experiment", "Step", "utc_now"]

TASK = "chapter-16"
_PRODUCER = (sys.executable, "-m", "intentlog.demo.producer")
_STEP_TIMEOUT = 300.0  # a step that has not ended by then is broken, not slow (even on a machine at load 20)
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Step:
    """One process of a case, as the termination record keeps it."""

    mode: str
    argv: list[str]
    pid: int
    returncode: int
    started_at: str
    ended_at: str
    killed_by: str | None  # "itself" (at a durable checkpoint), "conductor", or None
    output: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "argv": self.argv,
            "pid": self.pid,
            "returncode": self.returncode,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "killed_by": self.killed_by,
            "output": self.output,
        }


@dataclass
class Case:
    """One case of the experiment: its folder, its steps, and the conductor's claims about it."""

    name: str
    folder: Path
    story: str
    expected: str = ""
    events_before: int = 0
    events_after: int = 0
    receipts_before: int = 0
    receipts_after: int = 0
    decision: str = ""
    claims: list[tuple[str, bool]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    verifier: dict[str, Any] | None = None  # the standalone verifier's claims about this case
    measured_text: str | None = None

    @property
    def ok(self) -> bool:
        return all(ok for _, ok in self.claims)

    def claim(self, text: str, ok: bool) -> None:
        self.claims.append((text, bool(ok)))

    @property
    def measured(self) -> str:
        if self.measured_text is not None:
            return self.measured_text
        return (
            f"events {self.events_before} -> {self.events_after}, receipts {self.receipts_before} -> "
            f"{self.receipts_after}; {self.decision}"
        )

    @property
    def stream(self) -> Path:
        return self.folder / "ledger" / "tasks" / f"{TASK}.jsonl"

    def events(self) -> int:
        return int(stream_digest(self.stream)["events"])

    def receipts(self) -> list[dict[str, Any]]:
        return read_receipts(self.folder / RECEIPTS)

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.name,
            "folder": str(self.folder),
            "story": self.story,
            "events_before": self.events_before,
            "events_after": self.events_after,
            "receipts_before": self.receipts_before,
            "receipts_after": self.receipts_after,
            "decision": self.decision,
            "expected": self.expected,
            "measured": self.measured,
            "claims": [{"claim": t, "passed": ok} for t, ok in self.claims],
            "verifier": self.verifier,
        }


class Experiment:
    """The experiment folder and its provider on 127.0.0.1 (a child process, stopped by :meth:`close`)."""

    def __init__(self, directory: Path, code: Path) -> None:
        self.directory = directory
        self.env = _env()
        self.provider = subprocess.Popen(
            [sys.executable, "-I", str(code / "provider.py"), str(directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.provider.stdout is not None
        line = self.provider.stdout.readline()  # the provider prints its port once it listens
        if not line.strip().isdigit():
            err = self.provider.stderr.read().decode() if self.provider.stderr else ""
            self.close()
            raise IntentlogError(f"the demo's provider did not start: {err.strip()[-500:]}")
        self.port = int(line)
        self.provider_started_at = utc_now()

    def url(self, case: Case) -> str:
        return f"http://127.0.0.1:{self.port}/{case.name}/v1/review"

    def close(self) -> int | None:
        if self.provider.poll() is None:
            self.provider.send_signal(signal.SIGTERM)
        code = self.provider.wait()
        for pipe in (self.provider.stdout, self.provider.stderr):
            if pipe is not None:
                pipe.close()
        return code

    def _argv(self, case: Case, mode: str, args: tuple[str, ...]) -> list[str]:
        url = ("--url", self.url(case)) if mode in ("produce", "resume", "naive") else ()
        return [*_PRODUCER, mode, str(case.folder), *url, *args]

    def step(self, case: Case, mode: str, *args: str) -> dict[str, Any]:
        """Run one producer process to its end (or its own SIGKILL); record it; return what it printed."""
        argv = self._argv(case, mode, args)
        started = utc_now()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)
        try:
            out, err = proc.communicate(timeout=_STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise IntentlogError(f"demo step {mode} in {case.folder} did not end in {_STEP_TIMEOUT:.0f} s") from None
        if proc.returncode not in (0, 3, -signal.SIGKILL):
            raise IntentlogError(f"demo step {mode} in {case.folder} failed: {err.decode().strip()[-800:]}")
        output = _last_json(out)
        killed = "itself" if proc.returncode == -signal.SIGKILL else None
        case.steps.append(Step(mode, _short(argv), proc.pid, proc.returncode, started, utc_now(), killed, output))
        return output

    def kill_when(self, case: Case, ready: Callable[[], bool], what: str, *args: str) -> Step:
        """Start ``produce``; SIGKILL it as soon as ``ready()`` (an event on disk) holds."""
        argv = self._argv(case, "produce", args)
        started = utc_now()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=self.env)
        deadline = time.monotonic() + _STEP_TIMEOUT
        try:
            while not ready():
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    raise IntentlogError(f"the producer of {case.name} never reached {what}: {err.strip()[-800:]}")
                time.sleep(0.005)  # waiting for an event on disk, not for a step to finish
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
        step = Step("produce", _short(argv), proc.pid, proc.returncode, started, utc_now(), "conductor", {})
        case.steps.append(step)
        return step


def _last_json(out: bytes) -> dict[str, Any]:
    lines = out.decode().strip().splitlines()
    if not lines:
        return {}
    doc = orjson.loads(lines[-1])
    return doc if isinstance(doc, dict) else {}


def _short(argv: list[str]) -> list[str]:
    """The argv without the interpreter's path (it names the machine, not the experiment)."""
    return ["python", *argv[1:]]


def _env() -> dict[str, str]:
    """The children's environment: this package first on the path, and no proxy (loopback is direct)."""
    env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARS}
    pkg_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    env["NO_PROXY"] = "*"
    return env


def plan_of(case: Case) -> dict[str, Any]:
    return case_plan(case.name)
