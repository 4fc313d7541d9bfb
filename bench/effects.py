"""Benchmarks for the effect protocol and the work-state projection.

    python bench/effects.py [--effects 200] [--repeats 7] [--events 100000] [--dir PATH] [--json]

1. Effects per second with a no-op provider and small (<= 4 KiB) requests and responses,
   interpreted (the designed three syncs: intent+started, observed, interpreted+completed)
   and raw (two syncs: nothing interprets the bytes), against a raw loop of one
   ``write`` + ``fdatasync`` of a line of the same size on the same filesystem, measured in
   the same run. Goal: at least 0.25 of the raw rate. Stream syncs per effect are counted.
2. ``work_state`` of a 100k-event task (read, chain-checked, folded) against reading the
   same file and ``orjson.loads`` of each line. Goal: at most 3x. Reported apart: the
   reading alone (``task.events()``: parse, seq/prev checks, a BLAKE3 digest per line) and
   the fold alone over already parsed events.

Medians over the repeats: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

import intentlog
import intentlog.eventlog.writer as writer
from intentlog.projections.workstate import work_state

REQUEST = {
    "model": "synthetic-1",
    "temperature": 0,
    "messages": [
        {"role": "system", "content": "You review paragraphs for clarity."},
        {"role": "user", "content": "Review this paragraph: " + "The step that didn't finish. " * 20},
    ],
}
RESPONSE = orjson.dumps({"verdict": "accept", "review": "clear and specific. " * 10, "tokens": 812})


def noop_send(request: Any) -> bytes:
    return RESPONSE


def parse(raw: bytes) -> Any:
    return orjson.loads(raw)


def median_of(repeats: int, fn: Callable[[], float]) -> tuple[float, list[float]]:
    runs = [fn() for _ in range(repeats)]
    return statistics.median(runs), runs


def raw_fsync_rate(folder: Path, n: int, line_size: int) -> float:
    """Appends per second of one write + fdatasync, the floor every durable record pays."""
    path = folder / f"raw-{time.perf_counter_ns()}.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    line = b"x" * (line_size - 1) + b"\n"
    sync = getattr(os, "fdatasync", os.fsync)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            os.write(fd, line)
            sync(fd)
        return n / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()


class _Counter:
    def __init__(self) -> None:
        self.real = writer._fdatasync
        self.n = 0

    def __call__(self, fd: int) -> None:
        self.n += 1
        self.real(fd)


def effect_rate(folder: Path, n: int, *, interpret: bool) -> tuple[float, float]:
    """Effects per second and stream syncs per effect, on a fresh task in an existing ledger."""
    ledger = intentlog.open(folder / "ledger")
    task = ledger.task(f"bench-{time.perf_counter_ns()}")
    task.append("bench.started", {})
    counter = _Counter()
    writer._fdatasync = counter  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        for i in range(n):
            if interpret:
                task.effect(f"k{i}", REQUEST, noop_send, interpret=parse)
            else:
                task.effect(f"k{i}", REQUEST, noop_send)
        elapsed = time.perf_counter() - t0
    finally:
        writer._fdatasync = counter.real
        task.close()
    return n / elapsed, counter.n / n


def build_long_task(folder: Path, events: int) -> intentlog.Task:
    """A task of ``events`` events shaped like recorded effects (six per call), written with group commit."""
    ledger = intentlog.open(folder / "ledger")
    task = ledger.task("long")
    request = intentlog.canonicalize(REQUEST)
    request_ref = {"digest": request.digest, "size": len(request.data), "inline": request.data.decode()}
    response_ref = {
        "digest": intentlog.request_hash({"r": 1}),
        "size": len(RESPONSE),
        "inline": RESPONSE.decode(),
    }
    value = orjson.loads(RESPONSE)
    i = 0
    with task.batch():
        while task.next_seq + 6 <= events:
            i += 1
            c, k = f"call-{i}", f"key-{i}"
            task._append("call.requested", {"call": c, "key": k, "name": "review"})
            task._append(
                "call.manifest",
                {
                    "call": c,
                    "key": k,
                    "request_hash": request.digest,
                    "request": request_ref,
                    "inputs": {},
                    "canon": request.version,
                    "dropped": [],
                    "redacted": [],
                },
            )
            task._append("attempt.started", {"call": c, "attempt": 1})
            task._append("attempt.observed", {"call": c, "attempt": 1, "response": response_ref})
            task._append(
                "attempt.interpreted",
                {"call": c, "attempt": 1, "interpreter": {"name": "bench.parse", "version": "1"}, "result": value},
            )
            task._append("call.completed", {"call": c, "attempt": 1, "result": {"value": value}})
        while task.next_seq < events:
            task.append("note", {"n": task.next_seq})
    task.close()
    return task


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--effects", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp folder under the current one)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    base = Path(args.dir) if args.dir else Path.cwd()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="intentlog-bench-", dir=base) as tmp:
        folder = Path(tmp)
        line_size = len(orjson.dumps({"data": {"call": "call-1", "attempt": 1}, "kind": "attempt.started"})) + 120
        raw_rates, eff_rates, raw_eff_rates, syncs, raw_syncs = [], [], [], [], []
        for _ in range(args.repeats):  # interleaved, so drift in the machine's load hits all alike
            raw_rates.append(raw_fsync_rate(folder, args.effects, line_size))
            rate, per = effect_rate(folder, args.effects, interpret=True)
            eff_rates.append(rate)
            syncs.append(per)
            rate, per = effect_rate(folder, args.effects, interpret=False)
            raw_eff_rates.append(rate)
            raw_syncs.append(per)
        raw = statistics.median(raw_rates)
        eff = statistics.median(eff_rates)
        eff_raw = statistics.median(raw_eff_rates)
        out["raw_fsync_per_s"] = round(raw, 1)
        out["effects_per_s"] = round(eff, 1)
        out["effects_per_s_raw_result"] = round(eff_raw, 1)
        out["syncs_per_effect"] = statistics.median(syncs)
        out["syncs_per_effect_raw_result"] = statistics.median(raw_syncs)
        out["effect_ratio"] = round(eff / raw, 3)
        out["effect_ratio_raw_result"] = round(eff_raw / raw, 3)

        task = build_long_task(folder, args.events)
        data = task.path.read_bytes()
        n_lines = data.count(b"\n")

        def t_loads() -> float:
            t0 = time.perf_counter()
            lines = task.path.read_bytes().splitlines()
            for line in lines:
                orjson.loads(line)
            return time.perf_counter() - t0

        def t_work_state() -> float:
            t0 = time.perf_counter()
            ws = task.work_state()
            elapsed = time.perf_counter() - t0
            if ws.events != n_lines:  # pragma: no cover - a broken bench
                raise SystemExit(f"projected {ws.events} events of {n_lines}")
            return elapsed

        def t_read() -> float:
            t0 = time.perf_counter()
            for _ in task.events():
                pass
            return time.perf_counter() - t0

        loads, _ = median_of(args.repeats, t_loads)
        ws_time, _ = median_of(args.repeats, t_work_state)
        read, _ = median_of(args.repeats, t_read)

        # only now hold every event in memory (the garbage collector walks what is held)
        events = list(task.events())

        def t_fold() -> float:
            t0 = time.perf_counter()
            work_state(events)
            return time.perf_counter() - t0

        fold, _ = median_of(args.repeats, t_fold)
        out["events"] = n_lines
        out["stream_bytes"] = len(data)
        out["orjson_loads_s"] = round(loads, 4)
        out["work_state_s"] = round(ws_time, 4)
        out["read_only_s"] = round(read, 4)
        out["read_only_ratio"] = round(read / loads, 2)
        out["fold_only_s"] = round(fold, 4)
        out["work_state_ratio"] = round(ws_time / loads, 2)
        out["fold_only_ratio"] = round(fold / loads, 2)

    if args.json:
        print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
    else:
        print(f"raw write+fdatasync      {out['raw_fsync_per_s']:>10.1f} /s")
        print(
            f"effect (interpreted)     {out['effects_per_s']:>10.1f} /s  ratio {out['effect_ratio']:.3f}  "
            f"syncs/effect {out['syncs_per_effect']:.2f}   (goal ratio >= 0.25)"
        )
        print(
            f"effect (raw result)      {out['effects_per_s_raw_result']:>10.1f} /s  "
            f"ratio {out['effect_ratio_raw_result']:.3f}  syncs/effect {out['syncs_per_effect_raw_result']:.2f}"
        )
        print(f"{out['events']} events, {out['stream_bytes']} bytes")
        print(f"orjson.loads of lines    {out['orjson_loads_s'] * 1000:>10.1f} ms")
        print(
            f"task.work_state()        {out['work_state_s'] * 1000:>10.1f} ms  ratio {out['work_state_ratio']:.2f}"
            "   (goal <= 3)"
        )
        print(f"  of which task.events() {out['read_only_s'] * 1000:>10.1f} ms  ratio {out['read_only_ratio']:.2f}")
        print(f"fold of parsed events    {out['fold_only_s'] * 1000:>10.1f} ms  ratio {out['fold_only_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
