"""Views at backlog scale: listing, reopening and reading a ledger of many tasks.

    python bench/views.py [--tasks 1000,10000] [--events 100000] [--repeats 5] [--dir /tmp/views-bench] [--json]

The ledgers (tasks of three interpreted effects each) are generated once into ``--dir``
and reused: a template task is recorded through the library, then its events are re-chained
under every task id (same encoder as the writer, without an fsync per line).

Measured in one run, medians of the repeats:

1. ``intentlog tasks`` (a fresh process) over 10,000 tasks against 1,000, warm cache.
   Goal: at most 2x, and under 0.5 s. ``verify`` and the gc preview are timed beside.
2. ``work_state()`` of a 100k-event task in a fresh process with a valid cache, against
   ``orjson.loads`` of its lines in the same kind of process. Goal: at most 0.1x.
3. Cold read + ``work_state()`` (no cache) against a sqlite3 ``SELECT`` of the same events
   + the same fold over ``orjson.loads`` of each row. Goal: at least 0.6x of its rate.
4. Durable ``task.append`` with the cache against without it. Goal: within 3 %.
5. Peak memory (ru_maxrss of a fresh child process) of ``tasks``, ``tasks --json``, the gc
   preview (``gc`` and ``gc --json``), ``verify`` and ``status`` of one task at each size. Goal: flat -- the largest
   ledger's figure within a few MB of the smallest's (printed as ``rss_*`` in MB, with the
   difference and the ratio).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

import intentlog
from intentlog.eventlog.format import encode_line, new_stream_id

REQUEST = {"model": "synthetic-1", "messages": [{"role": "user", "content": "Review: " + "a step. " * 20}]}
RESPONSE = orjson.dumps({"verdict": "accept", "review": "clear. " * 10})
PY = sys.executable


def _send(request: Any) -> bytes:
    return RESPONSE


def _template(folder: Path, effects: int) -> list[tuple[str, bytes, str]]:
    """(kind, data json, ts) of a task recorded through the library: ``effects`` interpreted effects."""
    led = intentlog.open(folder, create=True)
    t = led.task("template")
    for i in range(effects):
        t.effect(f"k{i}", REQUEST, _send, interpret=orjson.loads)
    t.close()
    out = []
    for line in (folder / "tasks" / "template.jsonl").read_bytes().splitlines():
        obj = orjson.loads(line)
        out.append((obj["kind"], orjson.dumps(obj["data"], option=orjson.OPT_SORT_KEYS), obj["ts"]))
    return out


def _write_stream(path: Path, task_id: str, events: list[tuple[str, bytes, str]]) -> None:
    prev: str | None = None
    lines = []
    from intentlog._internal.digest import digest_bytes

    for seq, (kind, data, ts) in enumerate(events):
        if seq == 0:
            data = orjson.dumps({"format": orjson.loads(data)["format"], "stream": new_stream_id(), "task": task_id},
                                option=orjson.OPT_SORT_KEYS)
        line = encode_line(kind, data, prev, seq, ts)
        prev = digest_bytes(line)
        lines.append(line)
    path.write_bytes(b"".join(lines))


def build_ledger(base: Path, n: int) -> Path:
    """A ledger of ``n`` tasks of three effects each, generated once under ``base`` and reused."""
    root = base / f"ledger-{n}"
    if (root / "intentlog.json").exists() and len(os.listdir(root / "tasks")) >= n:
        return root
    shutil.rmtree(root, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        events = _template(Path(tmp) / "t", 3)
    intentlog.open(root, create=True)
    for i in range(n):
        _write_stream(root / "tasks" / f"task-{i:05d}.jsonl", f"task-{i:05d}", events)
    return root


def build_long(base: Path, n_events: int) -> Path:
    """A ledger with one task of about ``n_events`` events (effects of six events each)."""
    root = base / f"long-{n_events}"
    if (root / "tasks" / "long.jsonl").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        one = _template(Path(tmp) / "t", 1)
    body = one[1:]
    events = [one[0]]
    i = 0
    while len(events) < n_events:
        for kind, data, ts in body:
            obj = orjson.loads(data)
            if "call" in obj:
                obj["call"] = f"call-{i + 1}"
            if "key" in obj:
                obj["key"] = f"k{i}"
            events.append((kind, orjson.dumps(obj, option=orjson.OPT_SORT_KEYS), ts))
        i += 1
    intentlog.open(root, create=True)
    _write_stream(root / "tasks" / "long.jsonl", "long", events)
    return root


def child_rss(code: str, *argv: str) -> tuple[float, int]:
    """Run ``code`` in a fresh interpreter; it prints ``seconds``; returns that and the child's peak RSS (KiB)."""
    wrapper = (
        "import resource,sys,time\n"
        + code
        + "\nprint(_t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    out = subprocess.run([PY, "-c", wrapper, *argv], check=True, capture_output=True, text=True).stdout.split()
    return float(out[-2]), int(out[-1])


def cli(root: Path, *args: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run([PY, "-m", "intentlog.cli", "--root", str(root), *args], capture_output=True)
    dt = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        raise RuntimeError(f"intentlog {args}: exit {p.returncode}: {p.stderr.decode()[-2000:]}")
    return dt, 0


def cli_rss(root: Path, *args: str) -> tuple[float, int]:
    code = (
        "import subprocess\n"
        "t0=time.perf_counter()\n"
        f"p=subprocess.run([{PY!r},'-m','intentlog.cli','--root',sys.argv[1],*sys.argv[2:]],"
        "stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)\n"
        "_t=time.perf_counter()-t0\n"
        "r=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(_t, r); sys.exit(0)\n"
    )
    out = subprocess.run([PY, "-c", "import resource,sys,time\n" + code, str(root), *args],
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[-2]), int(out[-1])


def med(fn: Any, repeats: int) -> tuple[float, int]:
    runs = [fn() for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def drop_cache(root: Path) -> None:
    """No cache at all: without ``cache/`` a reader neither uses nor writes one."""
    shutil.rmtree(root / "cache", ignore_errors=True)


def fresh_cache(root: Path) -> None:
    drop_cache(root)
    (root / "cache").mkdir()


WS_CACHED = (
    "import intentlog\n"
    "t0=time.perf_counter()\n"
    "ws=intentlog.open(sys.argv[1]).task('long').work_state()\n"
    "_t=time.perf_counter()-t0\n"
)
LOADS = (
    "import orjson\n"
    "t0=time.perf_counter()\n"
    "with open(sys.argv[1]+'/tasks/long.jsonl','rb') as f:\n"
    "    xs=[orjson.loads(l) for l in f]\n"
    "_t=time.perf_counter()-t0\n"
)


def sqlite_fold(db: Path) -> float:
    from intentlog.eventlog.format import Event
    from intentlog.projections.workstate import work_state

    t0 = time.perf_counter()
    con = sqlite3.connect(db)
    loads = orjson.loads
    evs = (Event(s, k, ts, p, loads(d), dg) for s, k, ts, p, d, dg in
           con.execute("SELECT seq, kind, ts, prev, data, digest FROM events ORDER BY seq"))
    work_state(evs)
    con.close()
    return time.perf_counter() - t0


def cold_fold(root: Path) -> float:
    """A read with no cache: the chain-checking read and the fold of every event (nothing written)."""
    drop_cache(root)
    led = intentlog.open(root, create=False)
    t0 = time.perf_counter()
    led.task("long").work_state()
    dt = time.perf_counter() - t0
    fresh_cache(root)
    return dt


def make_sqlite(root: Path, db: Path) -> None:
    if db.exists():
        return
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT, ts TEXT, prev TEXT, data BLOB, digest TEXT)")
    from intentlog._internal.digest import digest_bytes

    rows = []
    for line in (root / "tasks" / "long.jsonl").read_bytes().splitlines(keepends=True):
        o = orjson.loads(line)
        rows.append((o["seq"], o["kind"], o["ts"], o["prev"], orjson.dumps(o["data"]), digest_bytes(line)))
    con.executemany("INSERT INTO events VALUES (?,?,?,?,?,?)", rows)
    con.commit()
    con.close()


def append_rate(folder: Path, n: int, cache: bool) -> float:
    """Durable appends per second to a task of 300 events, its cache entry written (or no cache/ at all)."""
    root = folder / f"app-{time.perf_counter_ns()}"
    led = intentlog.open(root, create=True)
    t = led.task("a")
    for i in range(300):
        t.append("note", {"i": i})
    t.close()
    if cache:
        t.work_state()  # writes the entry
        assert (root / "cache" / "views" / "a.json").exists()
    else:
        drop_cache(root)
    t0 = time.perf_counter()
    for i in range(n):
        t.append("note", {"i": i, "text": "x" * 200})
    dt = time.perf_counter() - t0
    t.close()
    shutil.rmtree(root)
    return n / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="1000,10000")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/views-bench")
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--only", default="tasks,json,status,verify,gc,gcjson,ws,cold,append")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    base = Path(a.dir)
    base.mkdir(parents=True, exist_ok=True)
    only = set(a.only.split(","))
    sizes = [int(x) for x in a.tasks.split(",")]
    res: dict[str, Any] = {}
    for n in sizes:
        root = build_ledger(base, n)
        (root / "cache").mkdir(exist_ok=True)  # ledgers generated before the cache existed
        if "tasks" in only:
            cli(root, "tasks")  # warms the cache (and the page cache)
            res[f"tasks_{n}"], res[f"tasks_rss_{n}"] = med(lambda root=root: cli_rss(root, "tasks"), a.repeats)
        if "json" in only:
            cli(root, "tasks", "--json")
            res[f"json_{n}"], res[f"json_rss_{n}"] = med(
                lambda root=root: cli_rss(root, "tasks", "--json"), a.repeats
            )
        if "status" in only:
            res[f"status_{n}"], res[f"status_rss_{n}"] = med(
                lambda root=root: cli_rss(root, "status", "task-00000"), a.repeats
            )
        if "verify" in only:
            few = max(1, a.repeats // 2)
            res[f"verify_{n}"], res[f"verify_rss_{n}"] = med(lambda root=root: cli_rss(root, "verify"), few)
        if "gc" in only:
            cli(root, "gc")  # warms the index
            res[f"gc_{n}"], res[f"gc_rss_{n}"] = med(lambda root=root: cli_rss(root, "gc"), max(1, a.repeats // 2))
        if "gcjson" in only:
            cli(root, "gc")
            res[f"gcjson_{n}"], res[f"gcjson_rss_{n}"] = med(
                lambda root=root: cli_rss(root, "gc", "--json"), max(1, a.repeats // 2)
            )
    if {"ws", "cold"} & only:
        long = build_long(base, a.events)
        if "ws" in only:
            fresh_cache(long)
            intentlog.open(long).task("long").work_state()  # writes the entry (where the tree has a cache)
            res["ws_cached"], _ = med(lambda: child_rss(WS_CACHED, str(long)), a.repeats)
            res["loads"], _ = med(lambda: child_rss(LOADS, str(long)), a.repeats)
            res["ws_cached/loads"] = res["ws_cached"] / res["loads"]
        if "cold" in only:
            db = base / f"long-{a.events}.sqlite"
            make_sqlite(long, db)
            cold, sq = [], []
            for _ in range(a.repeats):
                cold.append(cold_fold(long))
                sq.append(sqlite_fold(db))
            res["cold"], res["sqlite"] = statistics.median(cold), statistics.median(sq)
            res["cold rate/sqlite rate"] = res["sqlite"] / res["cold"]
    if "append" in only:
        with_c, without = [], []
        for _ in range(a.repeats):
            without.append(append_rate(base, a.appends, False))
            with_c.append(append_rate(base, a.appends, True))
        res["append_no_cache"], res["append_cache"] = statistics.median(without), statistics.median(with_c)
        res["append cache/none"] = res["append_cache"] / res["append_no_cache"]
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        for k in ("tasks", "json", "status", "verify", "gc", "gcjson"):
            for n in sizes[1:]:
                if f"{k}_{lo}" in res:
                    res[f"{k} {n}/{lo}"] = res[f"{k}_{n}"] / res[f"{k}_{lo}"]
        for k in ("tasks", "json", "status", "verify", "gc", "gcjson"):
            if f"{k}_rss_{lo}" in res:
                for n in sizes:
                    res[f"rss_{k}_{n} MB"] = res[f"{k}_rss_{n}"] / 1024
                res[f"rss_{k} {hi}-{lo} MB"] = (res[f"{k}_rss_{hi}"] - res[f"{k}_rss_{lo}"]) / 1024
                res[f"rss_{k} {hi}/{lo}"] = res[f"{k}_rss_{hi}"] / res[f"{k}_rss_{lo}"]
    if a.json:
        print(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode())
    else:
        for k, v in res.items():
            print(f"{k:28} {v:12.4f}" if isinstance(v, float) else f"{k:28} {v:12}")


if __name__ == "__main__":
    main()
