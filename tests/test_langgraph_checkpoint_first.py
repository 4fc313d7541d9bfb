"""An effect in a node starts only after the checkpoint the node runs from is recorded.

LangGraph's default ``durability="async"`` writes a step's checkpoint on a background
thread while the next node already runs. A node's task id -- the key of its tools' and
model calls' effects -- derives from that checkpoint: had the process been killed before
the checkpoint landed, a resume would run from an older one, derive new task ids and send
the email again (seen under load: two mails in the receipt log of the kill test). Here the
saver's write of that checkpoint is held back until the tool has been called (or 2 s
pass); the record must show the checkpoint before the tool's ``attempt.started``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, TypedDict

import pytest

if os.environ.get("CI"):
    import langgraph  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip(
        "langgraph", reason="SKIPPED LOUDLY: the LangGraph tests need: pip install 'intentlog[langgraph]'"
    )

from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph

import intentlog
from intentlog.errors import UsageError
from intentlog.langgraph import IntentlogSaver, intentlog_tool, node_run


class Mail(TypedDict, total=False):
    to: str
    message_id: str


class SlowSaver(IntentlogSaver):
    """Holds back the write of the checkpoint after step 0 until the tool is called (at most 2 s)."""

    def __init__(self, root: Path) -> None:
        super().__init__(str(root))
        self.tool_called = threading.Event()

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if metadata.get("step") == 0:
            self.tool_called.wait(2.0)
        return super().put(config, checkpoint, metadata, new_versions)


def _graph(saver: SlowSaver, sent: list[str], parents: list[str]) -> Any:
    def send_email(to: str) -> str:
        parents.append(get_config()["configurable"]["checkpoint_map"][""])
        saver.tool_called.set()
        sent.append(to)
        return f"m-{len(sent)}"

    tool = intentlog_tool(send_email, saver)

    def draft(state: Mail) -> Mail:
        return {"to": state["to"]}

    def send(state: Mail) -> Mail:
        return {"message_id": tool(to=state["to"])}

    graph = StateGraph(Mail)
    graph.add_node("draft", draft)
    graph.add_node("send", send)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "send")
    graph.add_edge("send", END)
    return graph.compile(checkpointer=saver)


def test_a_tool_starts_only_after_the_checkpoint_its_node_runs_from_is_recorded(tmp_path: Path) -> None:
    sent: list[str] = []
    parents: list[str] = []
    with SlowSaver(tmp_path / "ledger") as saver:
        graph = _graph(saver, sent, parents)
        out = graph.invoke({"to": "ana@example.com"}, {"configurable": {"thread_id": "t1"}})
    assert out["message_id"] == "m-1" and sent == ["ana@example.com"]
    ledger = intentlog.open(tmp_path / "ledger", create=False)
    events = list(ledger.task("lg-t1").events())
    ledger.close()
    recorded = {e.data["id"]: e.seq for e in events if e.kind == "langgraph.checkpoint"}
    started = [e.seq for e in events if e.kind == "attempt.started"]
    assert len(started) == 1 and parents[0] in recorded
    assert recorded[parents[0]] < started[0], "the tool started before its node's checkpoint was recorded"


def test_a_tool_refuses_a_run_whose_checkpoints_are_written_only_at_exit(tmp_path: Path) -> None:
    sent: list[str] = []
    with SlowSaver(tmp_path / "ledger") as saver:
        saver.tool_called.set()
        graph = _graph(saver, sent, [])
        with pytest.raises(UsageError, match="durability='exit'"):
            graph.invoke({"to": "ana@example.com"}, {"configurable": {"thread_id": "t2"}}, durability="exit")
    assert sent == []
    ledger = intentlog.open(tmp_path / "ledger", create=False)
    kinds = [e.kind for e in ledger.task("lg-t2").events()] if ledger.task("lg-t2").exists() else []
    ledger.close()
    assert not [k for k in kinds if k.startswith(("call.", "attempt."))], kinds


def test_node_run_outside_a_node_refuses(tmp_path: Path) -> None:
    with IntentlogSaver(str(tmp_path / "ledger")) as saver, pytest.raises(UsageError, match="inside a LangGraph node"):
        node_run(saver)
