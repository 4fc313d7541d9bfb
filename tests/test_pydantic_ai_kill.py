"""Real SIGKILLs at each boundary of a model request and of a tool call of a pydantic-ai agent run.

A child process (``pydantic_ai_child.py``) runs a real pydantic-ai agent -- its OpenAI
provider pointed at a loopback OpenAI-compatible server that fsyncs a receipt for every
request before working on it -- made durable with ``IntentlogDurability``. The parent kills
it at a point the child (or the server) signals by an event, runs it again, reconciles with
the very command the refusal printed, and runs it to the end. Ground truth is outside the
ledger: the server's receipts and the tool's own side-effect log. Every case ends with 0
duplicate sends, 0 duplicate emails, and every receipt covered by a model unit's
``attempt.started``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import pydantic_ai  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip(
        "pydantic_ai.durable_exec",
        reason="SKIPPED LOUDLY: the pydantic-ai tests need pip install 'intentlog[pydantic-ai]'",
    )

from pydantic_ai_provider import ChatServer, read_lines

import intentlog

TESTS = Path(__file__).parent
CHILD = TESTS / "pydantic_ai_child.py"
MODEL_UNIT = "mailer__model.request"
TOOL_UNIT = "mailer__function_toolset__<agent>.call_tool:send_email"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ChatServer]:
    with ChatServer(tmp_path / "receipts.jsonl") as s:
        yield s


class Run:
    """One scenario: the ledger, the server, the side-effect log, the child's command line."""

    def __init__(self, root: str, server: ChatServer, tmp: Path, *flags: str) -> None:
        self.root = root
        self.server = server
        self.side_effects = tmp / "emails.jsonl"
        self.marker = tmp / "marker"
        self.flags = flags

    def _argv(self, stop_at: str) -> list[str]:
        return [
            sys.executable,
            str(CHILD),
            self.root,
            self.server.url,
            str(self.side_effects),
            str(self.marker),
            stop_at,
            *self.flags,
        ]

    def to_end(self) -> dict[str, Any]:
        done = subprocess.run(self._argv("none"), capture_output=True, text=True, timeout=120, env=dict(os.environ))
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    def killed_at(self, stop_at: str, *, receipts: int | None = None) -> None:
        """Start the child, wait for its marker (or for the server's ``receipts``-th receipt), SIGKILL it."""
        self.marker.unlink(missing_ok=True)
        child = subprocess.Popen(
            self._argv(stop_at), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ)
        )
        try:
            deadline = time.monotonic() + 120
            while not self._reached(receipts):
                if child.poll() is not None:
                    out, err = child.communicate()
                    pytest.fail(f"the child ended before the kill point {stop_at}: {out} {err}")
                if time.monotonic() > deadline:
                    pytest.fail(f"the child never reached {stop_at}")
                time.sleep(0.005)  # polling for the event (a file), not racing a step
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.wait(timeout=30)
            child.communicate()
        assert child.returncode == -signal.SIGKILL
        self.server.release()

    def _reached(self, receipts: int | None) -> bool:
        if receipts is not None:
            return len(self.server.receipts()) >= receipts
        return self.marker.exists()

    def emails(self) -> list[dict[str, Any]]:
        return read_lines(self.side_effects)

    def cli(self, command: str) -> None:
        argv = shlex.split(command)
        assert argv[0] == "intentlog"
        done = subprocess.run(
            [sys.executable, "-m", "intentlog.cli", *argv[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ),
        )
        assert done.returncode == 0, done.stdout + done.stderr

    def events(self) -> list[intentlog.Event]:
        return list(intentlog.open(self.root, create=False).task("mail").events())

    def check_ground_truth(self, *, receipts: int, emails: int) -> None:
        """Counted outside the ledger: sends and emails as expected, each send covered by an ``attempt.started``."""
        assert len(self.server.receipts()) == receipts
        assert len(self.emails()) == emails
        events = self.events()
        keys = {e.data["call"]: e.data["key"] for e in events if e.kind == "call.requested"}
        model_starts = [e for e in events if e.kind == "attempt.started" and MODEL_UNIT in keys[e.data["call"]]]
        tool_starts = [e for e in events if e.kind == "attempt.started" and TOOL_UNIT in keys[e.data["call"]]]
        assert len(self.server.receipts()) <= len(model_starts)
        assert len(self.emails()) <= len(tool_starts)


def _reconcile(outcome: dict[str, Any], flag: str) -> str:
    assert outcome["outcome"] == "unknown", outcome
    matches = [c for c in outcome["commands"] if flag in c]
    assert matches, outcome["commands"]
    return str(matches[0])


def _root(tmp_path: Path) -> str:
    return str(tmp_path / "evidence")


def test_killed_before_the_model_request_left_refuses_then_resumes_once_reconciled(
    tmp_path: Path, server: ChatServer
) -> None:
    """Killed after the first model unit's attempt.started, before its request left: the re-run refuses
    (EffectUnknown, nothing sent); reconciled not-served, the run completes with one send per request."""
    run = Run(_root(tmp_path), server, tmp_path)
    run.killed_at("model-send-1")
    assert server.receipts() == []
    again = run.to_end()
    assert again["outcome"] == "unknown" and MODEL_UNIT in again["key"]
    assert server.receipts() == []  # refused, not sent on a guess
    run.cli(_reconcile(again, "--not-served"))
    assert run.to_end() == {"outcome": "done", "output": "done #1: sent to ana@example.com"}
    run.check_ground_truth(receipts=2, emails=1)


def test_killed_while_the_provider_holds_the_request_is_never_sent_again(tmp_path: Path, server: ChatServer) -> None:
    """Killed after the provider's receipt, before its answer: every re-run refuses and the provider sees no
    second request; the operator's reconciliation (served, answer lost) then fail ends it, still one send."""
    run = Run(_root(tmp_path), server, tmp_path)
    server.hold_next()
    run.killed_at("none", receipts=1)
    for _ in range(2):
        again = run.to_end()
        assert again["outcome"] == "unknown" and MODEL_UNIT in again["key"]
    run.cli(_reconcile(again, "--served").replace(" --evidence RESPONSE_FILE", ""))  # the answer is lost
    run.cli(
        f"intentlog --root {shlex.quote(run.root)} fail mail {again['call']} --reason 'answer lost; not paying twice'"
    )
    ended = run.to_end()
    assert ended["outcome"] == "error" and ended["type"] == "CallFailed"
    run.check_ground_truth(receipts=1, emails=0)


def test_killed_after_the_model_answered_replays_the_answer(tmp_path: Path, server: ChatServer) -> None:
    """Killed inside the tool before it acted (so the first model answer is recorded): the re-run replays
    that answer without a send and refuses the tool (it started); not-served, the tool runs once."""
    run = Run(_root(tmp_path), server, tmp_path)
    run.killed_at("tool-entered")
    assert len(server.receipts()) == 1 and run.emails() == []
    again = run.to_end()
    assert again["outcome"] == "unknown" and TOOL_UNIT in again["key"]
    assert len(server.receipts()) == 1 and run.emails() == []
    run.cli(_reconcile(again, "--not-served"))
    assert run.to_end()["outcome"] == "done"
    run.check_ground_truth(receipts=2, emails=1)


def test_killed_after_the_tool_acted_never_sends_the_email_twice(tmp_path: Path, server: ChatServer) -> None:
    """Killed after the email went out, before the tool returned: the re-run refuses; the operator
    reconciles served with the tool's return as evidence; the run completes and the email went once."""
    from intentlog.pydantic_ai import tool_return_evidence

    run = Run(_root(tmp_path), server, tmp_path)
    run.killed_at("tool-acted")
    assert len(run.emails()) == 1
    again = run.to_end()
    assert again["outcome"] == "unknown" and TOOL_UNIT in again["key"]
    assert len(run.emails()) == 1
    evidence = tmp_path / "evidence.json"
    evidence.write_bytes(tool_return_evidence("sent to ana@example.com"))
    run.cli(_reconcile(again, "--served").replace("RESPONSE_FILE", shlex.quote(str(evidence))))
    assert run.to_end() == {"outcome": "done", "output": "done #1: sent to ana@example.com"}
    run.check_ground_truth(receipts=2, emails=1)


def test_killed_after_the_tool_returned_replays_the_tool(tmp_path: Path, server: ChatServer) -> None:
    """Killed before the second model request left (the tool's return is recorded): the re-run replays the
    first answer and the tool's return (no email, no send) and refuses only the second request."""
    run = Run(_root(tmp_path), server, tmp_path)
    run.killed_at("model-send-2")
    assert len(server.receipts()) == 1 and len(run.emails()) == 1
    again = run.to_end()
    assert again["outcome"] == "unknown" and again["key"].endswith(f"{MODEL_UNIT}#1")
    run.cli(_reconcile(again, "--not-served"))
    assert run.to_end()["outcome"] == "done"
    run.check_ground_truth(receipts=2, emails=1)


def test_a_completed_run_replays_without_any_send(tmp_path: Path, server: ChatServer) -> None:
    """Run to the end, then again: the same output, from the record; the provider and the mailbox see nothing new."""
    run = Run(_root(tmp_path), server, tmp_path)
    first = run.to_end()
    assert run.to_end() == first
    run.check_ground_truth(receipts=2, emails=1)


def test_an_idempotent_tool_killed_mid_call_runs_again_and_says_so(tmp_path: Path, server: ChatServer) -> None:
    """A tool declared idempotent, killed after it acted: the re-run reconciles it 'resend' (recorded, by this
    engine) and runs it again -- the one duplicate the declaration asked for, and no other."""
    run = Run(_root(tmp_path), server, tmp_path, "--idempotent")
    run.killed_at("tool-acted")
    assert run.to_end()["outcome"] == "done"
    assert len(run.emails()) == 2
    resent = [e for e in run.events() if e.kind == "effect.reconciled"]
    assert [(e.data["outcome"], e.data["by"]) for e in resent] == [("resend", "intentlog.pydantic_ai")]
    names = {e.data["name"] for e in run.events() if e.kind == "call.requested" and TOOL_UNIT in e.data["key"]}
    assert names == {f"{TOOL_UNIT} (idempotent)"}
    assert len(server.receipts()) == 2


def test_streaming_run_killed_mid_tool_resumes_the_same_way(tmp_path: Path, server: ChatServer) -> None:
    """agent.run_stream: killed inside the tool before it acted, then reconciled not-served: the streamed model
    answer replays from the record and the run ends as an uninterrupted one would."""
    run = Run(_root(tmp_path), server, tmp_path, "--stream")
    run.killed_at("tool-entered")
    again = run.to_end()
    assert again["outcome"] == "unknown" and "call_tool:send_email" in again["key"]
    run.cli(_reconcile(again, "--not-served"))
    assert run.to_end() == {"outcome": "done", "output": "done #1: sent to ana@example.com "}
    run.check_ground_truth(receipts=2, emails=1)


def test_a_provider_that_deduplicates_settles_the_unknown_request_without_a_person(tmp_path: Path) -> None:
    """The model unit's key sent as Idempotency-Key, the provider's window declared: killed while the provider
    held the request, the re-run records provider_dedup and resends under the same key; the provider replays
    its first answer, so it worked once and the run completes unattended."""
    with ChatServer(tmp_path / "receipts.jsonl", dedup=True) as server:
        run = Run(_root(tmp_path), server, tmp_path, "--dedup")
        server.hold_next()
        run.killed_at("none", receipts=1)
        assert run.to_end() == {"outcome": "done", "output": "done #1: sent to ana@example.com"}
        replays = [r for r in read_lines(server.receipts_path) if r.get("replayed")]
        assert len(replays) == 1 and replays[0]["key"] == f"mail.1/{MODEL_UNIT}#0"
        dedups = [e for e in run.events() if e.kind == "effect.reconciled"]
        assert [e.data["outcome"] for e in dedups] == ["provider_dedup"]
        run.check_ground_truth(receipts=2, emails=1)


def test_on_an_object_store_a_kill_mid_tool_resumes_the_same_way(
    tmp_path: Path, server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An s3:// ledger (SeaweedFS): killed inside the tool before it acted, the re-run (taking over the dead
    writer's lease) replays the model answer and refuses the tool; not-served, the run completes, 1 email."""
    from s3_server import ledger_url

    run = Run(ledger_url(monkeypatch), server, tmp_path)
    run.killed_at("tool-entered")
    again = run.to_end()
    assert again["outcome"] == "unknown" and TOOL_UNIT in again["key"]
    assert len(server.receipts()) == 1 and run.emails() == []
    run.cli(_reconcile(again, "--not-served"))
    assert run.to_end()["outcome"] == "done"
    run.check_ground_truth(receipts=2, emails=1)
