"""Cost against ledger size: does each command grow linearly from the smaller ledger to the larger?

    python bench/scale.py [--quick] [--sizes 10000,100000] [--add-sizes 1000,10000] [--dir /tmp/scale-bench] [--json]
    python bench/scale.py --only-add --add-sizes 10000,100000     # the add loop alone

For each size N a ledger is generated once into ``--dir`` and reused: a backlog ``b`` of N
items, each item task leased, one interpreted effect, its result and the release (the
shape a run leaves; the records are re-chained from a task recorded through the library,
with the writer's encoder and no fsync per line), so the ledger holds N + 1 tasks.
Then, each in a fresh process (``python -m intentlog.cli``), timed once:

- ``verify`` (its output's size beside: bounded, whatever N);
- ``report --out``;
- ``tasks``, warm (run once untimed first, so its index exists);
- ``backlog b --json``, cold (the backlog's cache file deleted) and warm;
- ``add`` one item at a time in a loop of M items into a fresh ledger (``--add-sizes``;
  default a tenth of each size: every add is a durable append), and the cost per add at
  each M (a writer's open checks only what was added since this process last checked the
  backlog's stream, so the per-add cost should not grow with M).

``ratio`` is (time at the larger size / time at the smaller) / (larger / smaller): 1.0 is
linear, 2.0 twice as costly per task at the larger size. ``--quick`` uses 1,000 and 10,000.
The machine is shared: run it twice and read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.eventlog.canonical import dumps
from intentlog.eventlog.format import encode_line, new_stream_id

PY = sys.executable
REQUEST = {"model": "synthetic-1", "messages": [{"role": "user", "content": "Review: " + "a step. " * 8}]}
RESPONSE = orjson.dumps({"verdict": "accept"})
ADD_LOOP = """
import sys, time, intentlog
led = intentlog.open(sys.argv[1], create=True)
b = led.backlog("loop")
t0 = time.perf_counter()
for i in range(int(sys.argv[2])):
    b.add(f"i{i}", {"n": i})
print(time.perf_counter() - t0)
"""


def _template(folder: Path) -> list[tuple[str, Any, str]]:
    """(kind, data, ts) of an item task as a run leaves it, recorded through the library."""
    led = intentlog.open(folder, create=True)
    t = led.task("template")
    t.append("lease.acquired", {"epoch": 1, "pid": 1, "host": "bench", "start_time": None, "backlog": "b",
                                "item": "x"})  # fmt: skip
    t.effect("k", REQUEST, lambda r: RESPONSE, interpret=orjson.loads)
    t.append("item.returned", {"result": {"ok": True}, "epoch": 1})
    t.append("lease.released", {"epoch": 1})
    t.close()
    out = []
    for line in (folder / "tasks" / "template.jsonl").read_bytes().splitlines():
        obj = orjson.loads(line)
        out.append((obj["kind"], obj["data"], obj["ts"]))
    return out


def _write(path: Path, task: str, events: list[tuple[str, Any, str]]) -> None:
    prev: str | None = None
    lines = []
    for seq, (kind, data, ts) in enumerate(events):
        if kind == "task.created":
            data = {**data, "task": task, "stream": new_stream_id()}
        line = encode_line(kind, orjson.dumps(data, option=orjson.OPT_SORT_KEYS), prev, seq, ts)
        prev = digest_bytes(line)
        lines.append(line)
    path.write_bytes(b"".join(lines))


def build(base: Path, n: int) -> Path:
    root = base / f"ledger-{n}"
    if (root / "intentlog.json").exists() and len(os.listdir(root / "tasks")) >= n + 1:
        return root
    shutil.rmtree(root, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        events = _template(Path(tmp) / "t")
    intentlog.open(root, create=True).close()
    created = events[0]
    backlog: list[tuple[str, Any, str]] = [created]
    for i in range(n):
        item = f"i{i:06d}"
        task = f"b.item.{item}"
        evs = [(k, {**d, "item": item} if k == "lease.acquired" else d, ts) for k, d, ts in events]
        _write(root / "tasks" / f"{task}.jsonl", task, evs)
        payload = {"n": i}
        backlog.append(("backlog.item_added", {
            "item": item, "task": task, "payload_hash": digest_bytes(dumps(payload)), "payload": payload,
            "priority": 0, "not_before": None, "max_attempts": None,
        }, created[2]))  # fmt: skip
    _write(root / "tasks" / "b.backlog.jsonl", "b.backlog", backlog)
    return root


def _cli(root: Path, *args: str) -> tuple[float, int]:
    """Seconds of ``intentlog --root ROOT ARGS`` in a fresh process, and the bytes it printed."""
    t0 = time.perf_counter()
    r = subprocess.run([PY, "-m", "intentlog.cli", "--root", str(root), *args], capture_output=True)
    dt = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"intentlog {' '.join(args)} failed ({r.returncode}): {r.stderr.decode()[-2000:]}")
    return dt, len(r.stdout)


def add_loop(base: Path, adds: int) -> float:
    """Seconds to add ``adds`` items one at a time (each a durable append) to a fresh backlog, in one process."""
    loop = base / f"adds-{adds}"
    shutil.rmtree(loop, ignore_errors=True)
    r = subprocess.run([PY, "-c", ADD_LOOP, str(loop), str(adds)], capture_output=True, check=True, text=True)
    shutil.rmtree(loop, ignore_errors=True)
    return float(r.stdout.strip())


def measure(base: Path, n: int, adds: int, only_add: bool = False) -> dict[str, float]:
    if only_add:
        return {"add_loop_s": add_loop(base, adds)}
    root = build(base, n)
    out: dict[str, float] = {}
    out["verify_s"], out["verify_output_bytes"] = _cli(root, "verify")
    out["report_s"], _ = _cli(root, "report", "--out", str(base / f"report-{n}.html"))
    _cli(root, "tasks")
    out["tasks_warm_s"], _ = _cli(root, "tasks")
    (root / "cache" / "backlog-b.json").unlink(missing_ok=True)
    out["backlog_view_cold_s"], _ = _cli(root, "backlog", "b", "--json")
    out["backlog_view_warm_s"], _ = _cli(root, "backlog", "b", "--json")
    out["add_loop_s"] = add_loop(base, adds)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 and 10,000 tasks")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--add-sizes", default=None, help="items added one by one (default: a tenth of each size)")
    ap.add_argument("--dir", default="/tmp/scale-bench")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only-add", action="store_true", help="only the add loop (no ledger is generated)")
    a = ap.parse_args()
    sizes = [1000, 10000] if a.quick else [int(s) for s in a.sizes.split(",")]
    adds = [int(s) for s in a.add_sizes.split(",")] if a.add_sizes else [max(1, s // 10) for s in sizes]
    if len(sizes) != 2 or len(adds) != 2:
        raise SystemExit("two sizes and two add sizes")
    base = Path(a.dir)
    base.mkdir(parents=True, exist_ok=True)
    got = [measure(base, n, m, a.only_add) for n, m in zip(sizes, adds, strict=True)]
    rows = []
    for key in got[0]:
        scale = (adds[1] / adds[0]) if key.startswith("add") else (sizes[1] / sizes[0])
        small, big = got[0][key], got[1][key]
        ratio = (big / small) / scale if small else float("nan")
        rows.append({"measure": key, "small": small, "large": big, "ratio_to_linear": round(ratio, 2)})
    if a.json:
        print(orjson.dumps({"sizes": sizes, "adds": adds, "rows": rows}, option=orjson.OPT_INDENT_2).decode())
        return
    print(f"sizes {sizes[0]:,} / {sizes[1]:,} tasks; add loop {adds[0]:,} / {adds[1]:,} items")
    for r in rows:
        fmt = "{:>12,.0f}" if r["measure"].endswith("bytes") else "{:>12.2f}"
        print(f"{r['measure']:<24}{fmt.format(r['small'])}{fmt.format(r['large'])}   ratio {r['ratio_to_linear']}")
    per = [g["add_loop_s"] / m * 1e6 for g, m in zip(got, adds, strict=True)]
    print(f"{'per add (us)':<24}{per[0]:>12.0f}{per[1]:>12.0f}   ratio {per[1] / per[0]:.2f}")


if __name__ == "__main__":
    main()
