"""Benchmark: what a durable unit of a pydantic-ai agent run costs with intentlog, against no durability and DBOS.

    python bench/pydantic_ai.py [--runs 30] [--latency 0] [--dir PATH] [--json]

One agent, one tool that "sends an email", a model (pydantic-ai's ``FunctionModel``)
answering after ``--latency`` seconds (0: the engines' own cost alone): each run is a model
request, the tool call, a second model request. Each way runs ``--runs`` fresh agent runs,
interleaved (one run of each way in turn, so load drifts hit all alike), in one process:

1. **plain**: the agent with no durability capability (the baseline);
2. **intentlog**: ``IntentlogDurability`` on a folder ledger; every unit (2 model requests and
   the tool call) is an effect: intent and ``attempt.started`` fdatasynced before the unit
   runs, the response and completion fdatasynced after (the library's only setting);
3. **dbos** (when ``dbos`` is installed): ``DBOSDurability`` with each run inside a
   ``@DBOS.workflow``, on SQLite (DBOS's defaults: rollback journal, ``synchronous=FULL``:
   each commit fsynced). DBOS records the 2 model requests as steps and runs function tools
   inline (not a step), and writes the workflow's own rows.

Reported: the median wall time per run of each, its ratio to plain, and the overhead per
durable unit: (median run - plain median) / units recorded per run (3 for intentlog, 2 for
DBOS), with the fdatasyncs per run of the intentlog ledger.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# this file's name is the package's: its folder leaves the path before pydantic_ai is imported
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

import intentlog.eventlog.writer as writer  # noqa: E402
from intentlog.pydantic_ai import IntentlogDurability  # noqa: E402

UNITS = {"plain": 0, "intentlog": 3, "dbos": 2}


class Syncs:
    """Counts the ledger's fdatasyncs."""

    def __init__(self) -> None:
        self.real = writer._fdatasync
        self.n = 0

    def __call__(self, fd: int) -> None:
        self.n += 1
        self.real(fd)


def model_with(latency: float) -> FunctionModel:
    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if latency:
            await asyncio.sleep(latency)
        if not any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts):
            return ModelResponse(parts=[ToolCallPart("send_email", {"to": "ana@example.com", "subject": "minutes"})])
        return ModelResponse(parts=[TextPart("mailed ana")])

    return FunctionModel(model)


def build(latency: float, capabilities: list[Any], name: str) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model_with(latency), name=name, capabilities=capabilities)

    @agent.tool_plain
    def send_email(to: str, subject: str) -> str:
        return f"sent to {to}"

    return agent


def dbos_runner(workdir: Path, latency: float) -> tuple[Any, str] | None:
    """A DBOS-durable run on SQLite, or None when dbos is not installed."""
    try:
        from dbos import DBOS
        from pydantic_ai.durable_exec.dbos import DBOSDurability
    except ImportError:
        return None
    db = workdir / "dbos.sqlite"
    DBOS(config={"name": "bench-pydantic-ai", "system_database_url": f"sqlite:///{db}", "log_level": "WARNING"})
    agent = build(latency, [DBOSDurability()], "dbos_mailer")

    @DBOS.workflow()
    async def mail(prompt: str) -> str:
        return (await agent.run(prompt)).output

    DBOS.launch()
    import sqlite3

    with sqlite3.connect(db) as con:
        journal = con.execute("PRAGMA journal_mode").fetchone()[0]
        sync = con.execute("PRAGMA synchronous").fetchone()[0]
    return mail, f"SQLite journal_mode={journal}, synchronous={sync} (2=FULL: fsync per commit)"


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    plain = build(args.latency, [], "plain_mailer")
    durable = build(args.latency, [IntentlogDurability(workdir / "evidence", task="bench")], "mailer")
    dbos = dbos_runner(workdir, args.latency)
    ways: dict[str, Any] = {
        "plain": lambda p: plain.run(p),
        "intentlog": lambda p: durable.run(p),
    }
    if dbos is not None:
        ways["dbos"] = dbos[0]
    syncs = Syncs()
    writer._fdatasync = syncs
    times: dict[str, list[float]] = {w: [] for w in ways}
    intentlog_syncs: list[int] = []
    counter = itertools.count()
    for _ in range(args.runs + 2):  # the first two are warm-up (imports, the ledger's creation)
        for way, run in ways.items():
            prompt = f"mail ana the minutes #{next(counter)}"
            before = syncs.n
            t0 = time.perf_counter()
            await run(prompt)
            times[way].append(time.perf_counter() - t0)
            if way == "intentlog":
                intentlog_syncs.append(syncs.n - before)
    writer._fdatasync = syncs.real
    med = {w: statistics.median(ts[2:]) for w, ts in times.items()}
    return {
        "runs": args.runs,
        "latency_s": args.latency,
        "median_run_ms": {w: m * 1000 for w, m in med.items()},
        "ratio_to_plain": {w: m / med["plain"] for w, m in med.items()},
        "overhead_per_unit_ms": {w: (m - med["plain"]) * 1000 / UNITS[w] for w, m in med.items() if UNITS[w]},
        "units_per_run": {w: UNITS[w] for w in med},
        "intentlog_fdatasyncs_per_run": statistics.median(intentlog_syncs[2:]),
        "sync_settings": {
            "intentlog": "fdatasync per append group (intent+started before the unit, observed+completed after)",
            "dbos": dbos[1] if dbos is not None else "not installed (pip install dbos)",
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--latency", type=float, default=0.0, help="the model's answer time, seconds")
    ap.add_argument("--dir", default=None, help="where to make the ledger and the DBOS database (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = asyncio.run(measure(args, Path(tmp)))
        try:
            from dbos import DBOS

            DBOS.destroy()
        except ImportError:
            pass
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.runs} agent runs each (model request, tool call, model request), model latency {args.latency}s,")
    print(f"medians, interleaved, on {os.uname().sysname} with {os.cpu_count()} CPUs")
    for way, ms in result["median_run_ms"].items():
        extra = ""
        if way in result["overhead_per_unit_ms"]:
            extra = f"  {result['overhead_per_unit_ms'][way]:6.2f} ms per durable unit ({UNITS[way]} units a run)"
        print(f"  {way:10} {ms:8.2f} ms a run  {result['ratio_to_plain'][way]:6.1f}x plain{extra}")
    print(f"  intentlog fdatasyncs a run: {result['intentlog_fdatasyncs_per_run']}")
    for way, setting in result["sync_settings"].items():
        print(f"  sync setting, {way}: {setting}")


if __name__ == "__main__":
    main()
