"""LangGraph checkpointer benchmark: IntentlogSaver against langgraph-checkpoint-sqlite, at equal durability.

    python bench/langgraph.py            # the figures (about a minute)
    python bench/langgraph.py --quick    # smaller counts, for a smoke run

Both savers run on the same disk with every write durable when it returns:

- ``IntentlogSaver`` on a folder ledger: each ``put`` / ``put_writes`` is one appended
  event, written and ``fdatasync``ed before it returns (the ledger's only mode);
- ``SqliteSaver`` (``langgraph-checkpoint-sqlite``) on a file: its own ``journal_mode=WAL``
  and ``PRAGMA synchronous=FULL`` (set here, and read back), so each commit syncs the WAL.

A step is what a LangGraph superstep writes: one ``put`` (a checkpoint whose one changed
channel holds ``--value-bytes`` of text) then one ``put_writes`` of two writes. Reads are
``get_tuple`` of the latest checkpoint (with its pending writes), and of a checkpoint by id.

A thread whose nodes call tools (``--tool-steps``, intentlog only: SQLite has no effects):
each step is a ``put``, one ``task.effect`` recorded in the thread's task, then a
``put_writes``; the saver folds what the effect appended before its next write. The
figure is ms per step over the first and the last tenth of the thread, and their ratio:
near 1 when a step's cost does not grow with the thread.

The machine is usually shared and noisy: each figure is the median of ``--rounds``
rounds; in each round the two savers run back to back, alternating which goes first, on
fresh files, and the ratio is taken within the round (then the median of the ratios).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# run as a script, this file's folder comes first on sys.path, and this file is named like the package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

from intentlog.langgraph import IntentlogSaver  # noqa: E402


def _checkpoint(step: int, value: str) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=str(uuid6(clock_seq=step)),
        ts=datetime.now(timezone.utc).isoformat(),
        channel_values={"messages": value, "step": step},
        channel_versions={"messages": step + 1, "step": step + 1},
        versions_seen={"agent": {"messages": step}},
        updated_channels=["messages", "step"],
    )


def run_steps(saver: BaseCheckpointSaver[Any], steps: int, value: str, thread: str) -> tuple[float, list[str]]:
    """Seconds for ``steps`` supersteps (put + put_writes), and the checkpoint ids written."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    ids = []
    t0 = time.perf_counter()
    for i in range(steps):
        cp = _checkpoint(i, value)
        config = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}}, {"messages": i + 1, "step": i + 1})
        saver.put_writes(config, [("messages", f"w{i}"), ("step", i)], f"task-{i}")
        ids.append(cp["id"])
    return time.perf_counter() - t0, ids


def run_gets(saver: BaseCheckpointSaver[Any], thread: str, ids: list[str], n: int) -> tuple[float, float]:
    """Seconds for ``n`` latest reads, and for ``n`` reads by id."""
    latest = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    t0 = time.perf_counter()
    for _ in range(n):
        assert saver.get_tuple(latest) is not None
    t1 = time.perf_counter()
    for i in range(n):
        cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": ids[i % len(ids)]}}
        assert saver.get_tuple(cfg) is not None
    return t1 - t0, time.perf_counter() - t1


def run_tool_steps(steps: int, value: str, where: Path) -> tuple[float, float]:
    """ms per step (put, a tool's effect in the thread's task, put_writes) over the first and last tenth."""
    saver = IntentlogSaver(where / "ledger")
    config: dict[str, Any] = {"configurable": {"thread_id": "tools", "checkpoint_ns": ""}}
    task = saver.task("tools")
    tenth = max(1, steps // 10)
    marks: list[float] = []
    for i in range(steps):
        if i in (0, tenth, steps - tenth):
            marks.append(time.perf_counter())
        cp = _checkpoint(i, value)
        config = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}}, {"messages": i + 1, "step": i + 1})
        task.effect(f"tool-{i}", {"step": i}, lambda request: b"ok")
        saver.put_writes(config, [("messages", f"w{i}"), ("step", i)], f"task-{i}")
    end = time.perf_counter()
    saver.close()
    return (marks[1] - marks[0]) * 1e3 / tenth, (end - marks[2]) * 1e3 / tenth


def intentlog_saver(where: Path) -> tuple[BaseCheckpointSaver[Any], Callable[[], None]]:
    saver = IntentlogSaver(where / "ledger")
    return saver, saver.close


def sqlite_saver(where: Path) -> tuple[BaseCheckpointSaver[Any], Callable[[], None]]:
    conn = sqlite3.connect(where / "checkpoints.sqlite", check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()  # journal_mode=WAL
    conn.execute("PRAGMA synchronous=FULL")
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert (sync, mode) == (2, "wal"), (sync, mode)  # 2 = FULL: every commit syncs the WAL
    return saver, conn.close


SAVERS = {"intentlog": intentlog_saver, "sqlite": sqlite_saver}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--gets", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--tool-steps", type=int, default=1500)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.gets, args.rounds, args.tool_steps = 60, 200, 3, 300
    value = "x" * args.value_bytes
    rates: dict[str, dict[str, list[float]]] = {n: {"put": [], "latest": [], "by_id": []} for n in SAVERS}
    ratios: dict[str, list[float]] = {"put": [], "latest": [], "by_id": []}
    for r in range(args.rounds):
        order = list(SAVERS) if r % 2 == 0 else list(reversed(SAVERS))
        this: dict[str, dict[str, float]] = {}
        for name in order:
            where = Path(tempfile.mkdtemp(prefix=f"bench-lg-{name}-"))
            try:
                saver, close = SAVERS[name](where)
                put_s, ids = run_steps(saver, args.steps, value, "bench")
                latest_s, by_id_s = run_gets(saver, "bench", ids, args.gets)
                close()
            finally:
                shutil.rmtree(where, ignore_errors=True)
            this[name] = {"put": args.steps / put_s, "latest": args.gets / latest_s, "by_id": args.gets / by_id_s}
            for k, v in this[name].items():
                rates[name][k].append(v)
        for k in ratios:
            ratios[k].append(this["intentlog"][k] / this["sqlite"][k])
    med = statistics.median
    print(f"{args.steps} steps (put + put_writes of 2), {args.gets} gets, {args.rounds} rounds, "
          f"{args.value_bytes}-byte channel value; medians")
    print("durability: intentlog fdatasync per event; sqlite journal_mode=WAL, synchronous=FULL")
    labels = {"put": "steps/s (put+put_writes)", "latest": "get_tuple latest/s", "by_id": "get_tuple by id/s"}
    print(f"{'':28} {'intentlog':>12} {'sqlite':>12} {'intentlog/sqlite':>17}")
    for k, label in labels.items():
        print(f"{label:28} {med(rates['intentlog'][k]):12.1f} {med(rates['sqlite'][k]):12.1f} {med(ratios[k]):16.2f}x")
    firsts, lasts = [], []
    for _ in range(args.rounds):
        where = Path(tempfile.mkdtemp(prefix="bench-lg-tools-"))
        try:
            first, last = run_tool_steps(args.tool_steps, value, where)
        finally:
            shutil.rmtree(where, ignore_errors=True)
        firsts.append(first)
        lasts.append(last)
    print(f"\na thread of {args.tool_steps} steps, each with a tool's effect in the thread's task (intentlog); medians")
    print(f"ms per step, first tenth {med(firsts):.2f}, last tenth {med(lasts):.2f}: "
          f"last/first {med([b / a for a, b in zip(firsts, lasts, strict=True)]):.2f}x")


if __name__ == "__main__":
    main()
