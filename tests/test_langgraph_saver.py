"""The LangGraph checkpointer and tools through their public API: graphs run, resume, delete, verify.

Beyond the conformance suite: a real graph compiled on ``IntentlogSaver`` (sync and
async), read back by a fresh saver as another process would; thread ids that are not
task ids; deletion that is recorded (the stream keeps its bytes and still verifies);
tools refused outside a graph, results that are not JSON, a tool that raised, all read
back from disk. Skipped loudly without the extra; failed under CI.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

import pytest

if os.environ.get("CI"):
    import langgraph  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip(
        "langgraph", reason="SKIPPED LOUDLY: the LangGraph tests need: pip install 'intentlog[langgraph]'"
    )

from langgraph.graph import END, START, StateGraph

import intentlog
from intentlog.langgraph import IntentlogSaver, intentlog_tool


class State(TypedDict, total=False):
    n: int
    out: Any


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), *args], capture_output=True, text=True
    )


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _two_steps(saver: IntentlogSaver, node: Any = None) -> Any:
    g = StateGraph(State)
    g.add_node("one", node or (lambda s: {"n": s["n"] + 1}))
    g.add_node("two", lambda s: {"n": s["n"] * 10})
    g.add_edge(START, "one")
    g.add_edge("one", "two")
    g.add_edge("two", END)
    return g.compile(checkpointer=saver)


def test_a_graph_checkpoints_into_a_task_that_a_fresh_saver_reads_and_verify_passes(tmp_path: Path) -> None:
    """Every step is a langgraph.checkpoint event of the thread's task; a fresh saver sees the same state."""
    root = tmp_path / "ledger"
    with IntentlogSaver(root) as saver:
        graph = _two_steps(saver)
        assert graph.invoke({"n": 1}, {"configurable": {"thread_id": "t1"}}) == {"n": 20}
        history = list(saver.list({"configurable": {"thread_id": "t1"}}))
    with IntentlogSaver(root) as fresh:
        state = _two_steps(fresh).get_state({"configurable": {"thread_id": "t1"}})
        assert state.values == {"n": 20} and state.next == ()
        assert [t.checkpoint["id"] for t in fresh.list({"configurable": {"thread_id": "t1"}})] == [
            t.checkpoint["id"] for t in history
        ]
    kinds = {ev.kind for ev in intentlog.open(root).task("lg-t1").events()}
    assert {"langgraph.checkpoint", "langgraph.writes"} <= kinds
    assert _cli(root, "verify").returncode == 0
    status = _cli(root, "status", "lg-t1")
    assert status.returncode == 0, status.stderr


def test_a_thread_id_that_is_not_a_task_id_gets_a_hashed_task_and_lists_under_its_own_name(tmp_path: Path) -> None:
    """``a/b c`` is kept in ``lg-h<hash>``; list(None) names the thread as given."""
    with IntentlogSaver(tmp_path / "ledger") as saver:
        _two_steps(saver).invoke({"n": 1}, {"configurable": {"thread_id": "a/b c"}})
        task_id = saver.task_id("a/b c")
        assert task_id.startswith("lg-h") and len(task_id) == len("lg-h") + 32
        assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"a/b c"}


def test_deleting_and_pruning_are_recorded_and_a_fresh_saver_agrees(tmp_path: Path) -> None:
    """After prune and delete_thread readers see what is left; the stream keeps every byte and verifies."""
    root = tmp_path / "ledger"
    with IntentlogSaver(root) as saver:
        graph = _two_steps(saver)
        for thread in ("keep", "gone"):
            graph.invoke({"n": 1}, {"configurable": {"thread_id": thread}})
        before = len(list(saver.list({"configurable": {"thread_id": "keep"}})))
        saver.prune(["keep"])
        saver.delete_thread("gone")
    size_gone = (root / "tasks" / "lg-gone.jsonl").stat().st_size
    with IntentlogSaver(root) as fresh:
        kept = list(fresh.list({"configurable": {"thread_id": "keep"}}))
        assert before > 1 and len(kept) == 1 and kept[0].checkpoint["channel_values"] == {"n": 20}
        assert fresh.get_tuple({"configurable": {"thread_id": "gone"}}) is None
    kinds = [ev.kind for ev in intentlog.open(root).task("lg-gone").events()]
    assert kinds[-1] == "langgraph.deleted" and "langgraph.checkpoint" in kinds
    assert size_gone > 0 and _cli(root, "verify").returncode == 0


def test_a_tool_called_outside_a_graph_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """No node, no key: UsageError naming what to do, and the ledger's bytes are unchanged."""
    root = tmp_path / "ledger"
    saver = IntentlogSaver(root)
    tool = intentlog_tool(lambda to: "sent", saver, name="send")
    before = _snapshot(root)
    with pytest.raises(intentlog.UsageError, match="inside a LangGraph node"):
        tool("ana")
    assert _snapshot(root) == before
    saver.close()


def test_a_prefix_that_cannot_start_a_task_id_is_refused_before_the_disk_is_touched(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    intentlog.open(root).close()
    before = _snapshot(root)
    with pytest.raises(intentlog.UsageError, match="prefix"):
        IntentlogSaver(root, prefix="../")
    assert _snapshot(root) == before


def test_a_result_that_is_not_json_is_recorded_with_the_serde_and_replayed_equal(tmp_path: Path) -> None:
    """A datetime result goes through LangGraph's serde; the second call with the same arguments replays it."""
    root = tmp_path / "ledger"
    calls: list[str] = []
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)

    with IntentlogSaver(root) as saver:

        def schedule(to: str) -> dt.datetime:
            calls.append(to)
            return when

        tool = intentlog_tool(schedule, saver)

        def node(s: State) -> State:
            first, second = tool("ana"), tool(to="ana")
            return {"n": s["n"] + 1, "out": [first, second]}

        out = _two_steps(saver, node).invoke({"n": 1}, {"configurable": {"thread_id": "t"}})
    assert out["out"] == [when, when] and calls == ["ana"]


def test_a_tool_that_raised_leaves_its_effect_unknown_and_the_resume_refuses(tmp_path: Path) -> None:
    """The tool may have acted before raising: EffectUnknown at once, and the resumed graph never calls it again."""
    root = tmp_path / "ledger"
    calls: list[str] = []
    config = {"configurable": {"thread_id": "t"}}

    def send(to: str) -> str:
        calls.append(to)
        raise ConnectionError("connection reset after the request left")

    with IntentlogSaver(root) as saver:
        tool = intentlog_tool(send, saver)
        graph = _two_steps(saver, lambda s: {"n": s["n"] + len(tool("ana"))})
        with pytest.raises(intentlog.EffectUnknown):
            graph.invoke({"n": 1}, config)
        with pytest.raises(intentlog.EffectUnknown) as again:
            graph.invoke(None, config)
    assert calls == ["ana"]
    assert any("reconcile lg-t call-1 --not-served" in c for c in again.value.commands)
    status = _cli(root, "status", "lg-t")
    assert "send" in status.stdout and "reconcile" in status.stdout, status.stdout


def test_an_async_graph_with_an_async_tool_runs_the_tool_once(tmp_path: Path) -> None:
    """ainvoke on the saver's async methods; an async tool is an awaited effect, replayed on the second call."""
    root = tmp_path / "ledger"
    calls: list[str] = []

    async def main() -> Any:
        async with IntentlogSaver(root) as saver:

            async def notify(to: str) -> dict[str, str]:
                calls.append(to)
                return {"id": "m-1"}

            tool = intentlog_tool(notify, saver)

            async def node(s: State) -> State:
                return {"n": s["n"] + 1, "out": [await tool("ana"), await tool("ana")]}

            return await _two_steps(saver, node).ainvoke({"n": 1}, {"configurable": {"thread_id": "t"}})

    out = asyncio.run(main())
    assert out == {"n": 20, "out": [{"id": "m-1"}, {"id": "m-1"}]} and calls == ["ana"]
    assert _cli(root, "verify").returncode == 0


def test_gc_expires_an_idle_thread_and_keeps_one_whose_tool_effect_is_unknown(tmp_path: Path) -> None:
    """Retention bounds the record: a thread idle past max_age expires; a thread with an unknown send never does."""
    from intentlog.retention import apply_gc, plan_gc

    root = tmp_path / "ledger"

    def send(to: str) -> str:
        raise ConnectionError("reset")

    with IntentlogSaver(root) as saver:
        _two_steps(saver).invoke({"n": 1}, {"configurable": {"thread_id": "idle"}})
        tool = intentlog_tool(send, saver)
        with pytest.raises(intentlog.EffectUnknown):
            graph = _two_steps(saver, lambda s: {"n": len(tool("ana"))})
            graph.invoke({"n": 1}, {"configurable": {"thread_id": "sent"}})
    ledger = intentlog.open(root)
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=60)
    plan = plan_gc(ledger, now=later)
    result = apply_gc(ledger, plan)
    assert result.deleted == ("lg-idle",)
    assert ledger.task_ids() == ["lg-sent"]
    assert _cli(root, "verify").returncode == 0


def test_a_second_process_writing_a_held_thread_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """One writer per thread: while a process holds thread t, another process's put raises TaskBusy."""
    root = tmp_path / "ledger"
    ready = tmp_path / "ready"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, threading\n"
            "from pathlib import Path\n"
            "from langgraph.graph import END, START, StateGraph\n"
            "from intentlog.langgraph import IntentlogSaver\n"
            "saver = IntentlogSaver(sys.argv[1])\n"
            "g = StateGraph(dict)\n"
            "g.add_node('one', lambda s: {'n': 1})\n"
            "g.add_edge(START, 'one'); g.add_edge('one', END)\n"
            "g.compile(checkpointer=saver).invoke({'n': 0}, {'configurable': {'thread_id': 't'}})\n"
            "Path(sys.argv[2]).write_text('held')\n"
            "sys.stdin.read()\n",  # holds the thread until the parent closes stdin
            str(root),
            str(ready),
        ],
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        while not ready.exists():  # an event: the holder says it wrote
            assert holder.poll() is None, "the holder ended early"
            time.sleep(0.02)
        before = _snapshot(root)
        with IntentlogSaver(root) as saver:
            assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None  # reading takes no lock
            with pytest.raises(intentlog.TaskBusy):
                _two_steps(saver).invoke({"n": 1}, {"configurable": {"thread_id": "t"}})
        assert {k: v for k, v in _snapshot(root).items() if not k.endswith(".lock")} == {
            k: v for k, v in before.items() if not k.endswith(".lock")
        }
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)


def test_a_credential_in_the_run_config_never_reaches_the_record(tmp_path: Path) -> None:
    """LangGraph copies config values into checkpoint metadata; an api_key there is stored as [REDACTED]."""
    root = tmp_path / "ledger"
    secret = "sk-config-secret-0123456789"
    with IntentlogSaver(root) as saver:
        config = {"configurable": {"thread_id": "t", "api_key": secret, "user": "ana"}}
        _two_steps(saver).invoke({"n": 1}, config)
        metadata = saver.get_tuple({"configurable": {"thread_id": "t"}}).metadata  # type: ignore[union-attr]
    assert metadata["api_key"] == "[REDACTED]" and metadata["user"] == "ana"
    for f in root.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f
