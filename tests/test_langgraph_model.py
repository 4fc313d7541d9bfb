"""A model call in a LangGraph node, through LangChain's ChatOpenAI, is paid at most once across SIGKILLs.

The child graph's ``draft`` node asks a model (``langchain-openai``'s ``ChatOpenAI`` with
``http_client=intentlog.http.client(thread task)``, keyed by the node's LangGraph task)
on a loopback OpenAI-compatible server that keeps its own fsync'd receipt log
(``fake_llm_server.py``); ``send`` then mails the model's text through an
``intentlog_tool``. Killed while the server holds the model request (its receipt
written), the resume refuses with ``EffectUnknown``; reconciled with the server's answer
as evidence, the next resume finishes without asking the model again. Killed after the
model answered, the resume replays the answer from the record. Counted outside the
ledger: one model receipt and one mail, every time. Folder and s3://.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import langchain_openai  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip(
        "langchain_openai",
        reason="SKIPPED LOUDLY: the LangGraph model tests need: pip install 'intentlog[langgraph]' langchain-openai",
    )

from fake_llm_server import FakeLLMServer
from langgraph_child import MailService, read_receipts
from test_langgraph_kill import _cli

CHILD = Path(__file__).with_name("langgraph_child.py")
THREAD = "order-9"


@pytest.fixture(params=["folder", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "folder":
        return str(tmp_path / "ledger")
    import s3_server

    return s3_server.ledger_url(monkeypatch)


def _argv(root: str, mail: MailService, model: FakeLLMServer, *extra: str) -> list[str]:
    return [sys.executable, str(CHILD), root, mail.url, THREAD, "--model", model.url, *extra]


def _run(argv: list[str]) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip(), done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _kill_when(proc: subprocess.Popen[str], ready: Any) -> None:
    deadline = time.monotonic() + 120
    while not ready():  # an event (a receipt line, a marker file), never a timer
        if proc.poll() is not None:
            raise AssertionError(f"the child ended early: {proc.communicate()}")
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-0",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-fake",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
    }


@pytest.mark.parametrize("where", ["model-holds", "after-model"])
def test_a_model_call_in_a_killed_graph_is_paid_once(root: str, tmp_path: Path, where: str) -> None:
    with MailService(tmp_path / "mail.jsonl") as mail, FakeLLMServer(
        tmp_path / "model.jsonl", api_key="sk-test-langgraph"
    ) as model:
        if where == "model-holds":
            model.hold = 600  # the server sleeps after the receipt; the child is killed meanwhile
            argv = _argv(root, mail, model)
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            _kill_when(proc, lambda: len(model.receipts()) == 1)
            model.hold = 0
            refused = _run(_argv(root, mail, model))
            assert refused["error"] == "EffectUnknown", refused
            assert len(model.receipts()) == 1, "the refused resume asked the model nothing"
            evidence = tmp_path / "answer.json"  # the answer as the operator found it at the provider
            evidence.write_text(json.dumps(_completion("Your order shipped today (from the provider's log).")))
            _cli(refused["commands"][1], ("RESPONSE_FILE", str(evidence)))
            expected = "Your order shipped today (from the provider's log)."
        else:
            marker = tmp_path / "marker"
            argv = _argv(root, mail, model, "--stop-at", "after-model", str(marker))
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            _kill_when(proc, marker.exists)
            expected = "summary #0 of 'Write a one-line shipping note for ana@example.com'"
        done = _run(_argv(root, mail, model))
        assert done.get("ok"), done
        assert len(model.receipts()) == 1
    assert done["state"]["body"] == expected
    assert len(read_receipts(tmp_path / "mail.jsonl")) == 1
    verify = subprocess.run([sys.executable, "-m", "intentlog.cli", "--root", root, "verify"], capture_output=True)
    assert verify.returncode == 0
    for f in Path(root).rglob("*") if not root.startswith("s3://") else []:
        if f.is_file():
            assert b"sk-test-langgraph" not in f.read_bytes(), f
