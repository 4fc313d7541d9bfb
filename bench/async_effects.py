"""Benchmark for the awaitable protocol: many calls in flight in one task.

    python bench/async_effects.py [--effects 50] [--latency 0.02] [--repeats 5] [--dir PATH] [--json]

Against a provider answering after ``--latency`` seconds (20 ms), each repeat runs
``--effects`` (50) interpreted effects in a fresh task, four ways, in the same run:

1. ``asyncio.gather`` of 50 ``task.aeffect`` (the awaitable form, one task);
2. the same 50 ``await task.aeffect`` one after another (the sequential baseline);
3. the synchronous ``task.effect`` in 50 threads sharing the task (a thread pool);
4. the synchronous ``task.effect`` in a loop (one thread).

Reported: the median wall time of each, the ratios against (2) and (3), and the stream
syncs per effect of each form (fdatasyncs counted; the synchronous form pays three an
interpreted effect, gathered calls share theirs). Medians over the repeats: the machine is
shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import intentlog
import intentlog.eventlog.writer as writer

REQUEST = {"model": "synthetic-1", "messages": [{"role": "user", "content": "Summarise the paragraph. " * 8}]}
ANSWER = json.dumps({"summary": "short and clear. " * 8, "tokens": 120}).encode()


class Counter:
    """Counts the stream's fdatasyncs."""

    def __init__(self) -> None:
        self.real = writer._fdatasync
        self.n = 0

    def __call__(self, fd: int) -> None:
        self.n += 1
        self.real(fd)


def make_sends(latency: float) -> tuple[Callable[[Any], Any], Callable[[Any], bytes]]:
    async def asend(request: Any) -> bytes:
        await asyncio.sleep(latency)
        return ANSWER

    def send(request: Any) -> bytes:
        time.sleep(latency)
        return ANSWER

    return asend, send


def run_form(form: str, root: Path, n: int, latency: float, counter: Counter, rep: int) -> tuple[float, int]:
    """One repeat of one form in a fresh task: (seconds, syncs)."""
    task = intentlog.open(root).task(f"{form}-{rep}")
    task.append("bench.opened")  # the stream exists and the writer is open: the effects' syncs alone are counted
    asend, send = make_sends(latency)
    keys = [f"k{i}" for i in range(n)]
    before = counter.n
    t = time.perf_counter()
    if form == "gather":

        async def gathered() -> None:
            await asyncio.gather(*(task.aeffect(k, {**REQUEST, "key": k}, asend, interpret=json.loads) for k in keys))

        asyncio.run(gathered())
    elif form == "sequential":

        async def sequential() -> None:
            for k in keys:
                await task.aeffect(k, {**REQUEST, "key": k}, asend, interpret=json.loads)

        asyncio.run(sequential())
    elif form == "threads":
        with ThreadPoolExecutor(max_workers=n) as pool:
            list(pool.map(lambda k: task.effect(k, {**REQUEST, "key": k}, send, interpret=json.loads), keys))
    else:
        for k in keys:
            task.effect(k, {**REQUEST, "key": k}, send, interpret=json.loads)
    elapsed = time.perf_counter() - t
    syncs = counter.n - before
    task.close()
    return elapsed, syncs


FORMS = ("gather", "sequential", "threads", "sync_loop")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--effects", type=int, default=50)
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to make the ledger (default: a temporary folder)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    counter = Counter()
    writer._fdatasync = counter  # type: ignore[assignment]
    times: dict[str, list[float]] = {f: [] for f in FORMS}
    syncs: dict[str, list[int]] = {f: [] for f in FORMS}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp) / "ledger"
        intentlog.open(root)
        for rep in range(args.repeats):
            for form in FORMS:  # interleaved, so a noisy moment hits every form alike
                t, s = run_form(form, root, args.effects, args.latency, counter, rep)
                times[form].append(t)
                syncs[form].append(s)
    med = {f: statistics.median(times[f]) for f in FORMS}
    per = {f: statistics.median(syncs[f]) / args.effects for f in FORMS}
    result = {
        "effects": args.effects,
        "latency_s": args.latency,
        "repeats": args.repeats,
        "median_s": med,
        "syncs_per_effect": per,
        "ratios": {
            "sequential/gather": med["sequential"] / med["gather"],
            "threads/gather": med["threads"] / med["gather"],
            "sync_loop/gather": med["sync_loop"] / med["gather"],
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    n = args.effects
    print(f"{n} interpreted effects, provider latency {args.latency * 1000:.0f} ms, median of {args.repeats}")
    labels = {
        "gather": f"asyncio.gather of {n} aeffect",
        "sequential": f"{n} sequential aeffect",
        "threads": f"task.effect in {n} threads",
        "sync_loop": f"{n} sequential task.effect",
    }
    for f in FORMS:
        print(f"  {labels[f]:32} {med[f] * 1000:8.1f} ms   {per[f]:5.2f} syncs/effect")
    for name, ratio in result["ratios"].items():  # type: ignore[attr-defined]
        print(f"  {name:32} {ratio:8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
