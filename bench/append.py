"""Stream benchmarks: durable and batched appends, read + fold, import cost.

    python bench/append.py                 # all figures (about a minute)
    python bench/append.py --quick         # smaller counts, for a smoke run
    python bench/append.py --profile       # also cProfile the append and read paths

The machine these run on is usually shared and noisy, so every figure is the median of
several repeats, and every ratio is taken between two measurements made in the same
repeat, back to back, alternating which goes first (then the median of those ratios).

Goals (docs/performance.md, "Streams"):

- durable ``task.append`` ≥ 0.85 x a raw ``O_APPEND`` write + ``fdatasync`` loop of the same line size;
- batched appends ≥ 10 x durable appends;
- ``list(task.events())`` and ``work_state(task.events())`` of a 100k-event stream ≤ 2 x ``orjson.loads`` of its lines;
- ``python -c "import intentlog"`` ≤ 1.3 x ``python -c "import orjson, blake3"``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from blake3 import blake3

import intentlog

PAYLOAD = {"step": 0, "note": "x" * 96, "ok": True}  # a typical small event: ~200-byte lines


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def _data(i: int) -> dict[str, Any]:
    return {**PAYLOAD, "step": i}


# -- durable appends --------------------------------------------------------------------

BLOCK = 100  # appends per interleaved block: intentlog and raw alternate every BLOCK appends


def _line_size(task: intentlog.Task) -> int:
    with open(task.path, "rb") as f:
        return len(f.read().splitlines(keepends=True)[-1])


def _durable_pair(work: Path, root: Path, r: int, n: int) -> tuple[float, float, int]:
    """Seconds for ``n`` durable task.append and ``n`` raw write+fdatasync of the same line size.

    The two alternate every BLOCK appends (order flipping each block), so a burst of load
    from a neighbour hits both alike.
    """
    task = intentlog.open(root).task(f"durable-{r}")
    task.append("note", _data(0))  # creates the stream: not timed
    task.append("note", _data(1))
    size = _line_size(task)
    line = b"x" * (size - 1) + b"\n"
    fd = os.open(work / f"raw-{r}.bin", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line)
    os.fdatasync(fd)
    t_il = t_raw = 0.0
    pc = time.perf_counter
    try:
        for b in range(n // BLOCK):
            for which in ("il", "raw") if b % 2 == 0 else ("raw", "il"):
                if which == "il":
                    t0 = pc()
                    for i in range(BLOCK):
                        task.append("note", _data(i))
                    t_il += pc() - t0
                else:
                    t0 = pc()
                    for _ in range(BLOCK):
                        os.write(fd, line)
                        os.fdatasync(fd)
                    t_raw += pc() - t0
    finally:
        os.close(fd)
        task.close()
    return t_il, t_raw, size


def _sqlite_durable(path: Path, n: int, line_size: int) -> float:
    """Seconds for ``n`` autocommitted inserts into sqlite3 in WAL mode with synchronous=FULL."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
        con.execute("CREATE TABLE ev (seq INTEGER PRIMARY KEY, line BLOB NOT NULL)")
        line = b"x" * line_size
        con.execute("INSERT INTO ev (line) VALUES (?)", (line,))
        t0 = time.perf_counter()
        for _ in range(n):
            con.execute("INSERT INTO ev (line) VALUES (?)", (line,))
        return time.perf_counter() - t0
    finally:
        con.close()


def _intentlog_batched(root: Path, tid: str, n: int) -> float:
    task = intentlog.open(root).task(tid)
    task.append("note", _data(0))
    t0 = time.perf_counter()
    with task.batch():
        for i in range(n):
            task.append("note", _data(i))
    dt = time.perf_counter() - t0
    task.close()
    return dt


def bench_appends(work: Path, n: int, nb: int, repeats: int) -> dict[str, float]:
    root = work / "ledger"
    durable, raw, ratio, batched, bratio, sqlite, sratio, sizes = [], [], [], [], [], [], [], []
    for r in range(repeats):
        t_il, t_raw, size = _durable_pair(work, root, r, n)
        sizes.append(float(size))
        d = n / t_il
        durable.append(d)
        raw.append(n / t_raw)
        ratio.append(t_raw / t_il)
        b = nb / _intentlog_batched(root, f"batched-{r}", nb)
        batched.append(b)
        bratio.append(b / d)
        q = n / _sqlite_durable(work / f"sqlite-{r}.db", n, size)
        sqlite.append(q)
        sratio.append(d / q)
    return {
        "line_size": median(sizes),
        "durable": median(durable),
        "raw": median(raw),
        "durable_vs_raw": median(ratio),
        "batched": median(batched),
        "batched_vs_durable": median(bratio),
        "sqlite": median(sqlite),
        "durable_vs_sqlite": median(sratio),
    }


# -- read + fold ----------------------------------------------------------------------------


def build_stream(root: Path, tid: str, n: int) -> Path:
    """A stream of ``n`` events shaped like the effect protocol (six events per completed call).

    Written inside one batch through the task's internal append (the same bytes the
    protocol writes, without paying ~n fsyncs to build a benchmark input).
    """
    task = intentlog.open(root).task(tid)
    ref = {"digest": "blake3:" + "ab" * 32, "size": 1234}
    with task.batch():
        i = 0
        while task.next_seq < n:
            call = f"call-{i}"
            key = f"key-{i}"
            task._append("call.requested", {"call": call, "key": key, "name": "review"})
            task._append(
                "call.manifest",
                {
                    "call": call,
                    "key": key,
                    "request_hash": ref["digest"],
                    "request": ref,
                    "inputs": {},
                    "canon": "intentlog-canon/1",
                    "dropped": [],
                    "redacted": ["$.headers.authorization"],
                },
            )
            task._append("attempt.started", {"call": call, "attempt": 1})
            task._append("attempt.observed", {"call": call, "attempt": 1, "response": ref})
            task._append(
                "attempt.interpreted",
                {"call": call, "attempt": 1, "interpreter": "bench:parse", "result": {"score": i % 7}},
            )
            task._append("call.completed", {"call": call, "attempt": 1, "result": {"value": {"score": i % 7}}})
            i += 1
    task.close()
    return task.path


def _baseline_read(path: Path) -> int:
    """orjson.loads of every line, each value dropped at once (the brief's baseline)."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            orjson.loads(line)
            n += 1
    return n


def _baseline_kept(path: Path) -> list[Any]:
    """orjson.loads of every line, kept in a list (like for like with ``list(task.events())``)."""
    with open(path, "rb") as f:
        return [orjson.loads(line) for line in f]


def _baseline_hashed(path: Path) -> int:
    """orjson.loads and a BLAKE3 digest of every line: the least a reader that checks the chain must do."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            orjson.loads(line)
            "blake3:" + blake3(line).hexdigest()
            n += 1
    return n


def bench_read(work: Path, n: int, repeats: int) -> dict[str, float]:
    root = work / "ledger"
    path = build_stream(root, "read", n)
    task = intentlog.open(root).task("read")
    steps: dict[str, Callable[[], object]] = {
        "base": lambda: _baseline_read(path),
        "kept": lambda: _baseline_kept(path),
        "hashed": lambda: _baseline_hashed(path),
        "list": lambda: list(task.events()),
        "stream": lambda: sum(1 for _ in task.events()),
        "ws": lambda: intentlog.work_state(task.events(), task_id="read"),
    }
    got: dict[str, list[float]] = {k: [] for k in steps}
    ratios: dict[str, list[float]] = {
        k: [] for k in ("list/base", "ws/base", "list/kept", "stream/hashed", "ws/hashed")
    }
    for r in range(repeats):
        names = list(steps)
        if r % 2:
            names.reverse()
        t: dict[str, float] = {}
        for name in names:
            gc.collect()
            t0 = time.perf_counter()
            steps[name]()
            t[name] = time.perf_counter() - t0
            got[name].append(t[name])
        for key in ratios:
            a, b = key.split("/")
            ratios[key].append(t[a] / t[b])
    out = {f"{k}_s": median(v) for k, v in got.items()}
    out.update({k: median(v) for k, v in ratios.items()})
    out["events"] = float(n)
    out["bytes"] = float(path.stat().st_size)
    return out


# -- import cost --------------------------------------------------------------------------


def _run(code: str, env: dict[str, str] | None) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - t0


def bench_import(runs: int, *, cached: bool, cache_dir: Path) -> dict[str, float]:
    """Median wall time of fresh interpreters importing intentlog vs orjson+blake3 (and nothing).

    ``cached=False`` runs in the environment as it is (here PYTHONDONTWRITEBYTECODE=1 may be
    set, so intentlog is compiled from source on every run while orjson and blake3 are
    compiled extensions); ``cached=True`` lets Python cache bytecode under ``cache_dir``,
    as an installed package would have it.
    """
    env: dict[str, str] | None = None
    if cached:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(cache_dir)
    cases = {"mine": "import intentlog", "theirs": "import orjson, blake3", "bare": "pass"}
    for code in cases.values():  # warm the page cache (and the bytecode cache)
        _run(code, env)
    got: dict[str, list[float]] = {k: [] for k in cases}
    ratio = []
    for r in range(runs):
        names = list(cases) if r % 2 == 0 else list(reversed(cases))
        t = {name: _run(cases[name], env) for name in names}
        for name in names:
            got[name].append(t[name])
        ratio.append(t["mine"] / t["theirs"])
    mine, theirs, bare = median(got["mine"]), median(got["theirs"]), median(got["bare"])
    return {
        "intentlog_s": mine,
        "orjson_blake3_s": theirs,
        "bare_s": bare,
        "ratio": median(ratio),
        "net": (mine - bare) / max(theirs - bare, 1e-9),
    }


# -- profiles ------------------------------------------------------------------------------


def profile(fn: Callable[[], object], title: str, top: int = 14) -> None:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print(f"\n--- profile: {title} (sorted by own time) ---")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])


def import_profile(cache_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache_dir)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import intentlog"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line.split("|")
        try:
            rows.append((int(parts[0].split(":")[1]), int(parts[1]), parts[2].rstrip()))
        except ValueError:
            continue
    print("\n--- import profile: python -X importtime -c 'import intentlog', bytecode cached (top own times, µs) ---")
    for own, cum, name in sorted(rows, reverse=True)[:20]:
        print(f"{own:8d} own {cum:8d} cumulative  {name}")


def durable_segments(root: Path, n: int) -> None:
    """Where the wall time of one durable append goes: before its sync, the sync, after it (medians)."""
    import intentlog.eventlog.writer as writer

    task = intentlog.open(root).task("segments")
    task.append("note", _data(0))
    marks: dict[str, float] = {}
    real = writer._fdatasync

    def timed(fd: int) -> None:
        marks["s0"] = time.perf_counter()
        real(fd)
        marks["s1"] = time.perf_counter()

    writer._fdatasync = timed
    rows = []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            task.append("note", _data(i))
            t1 = time.perf_counter()
            rows.append((marks["s0"] - t0, marks["s1"] - marks["s0"], t1 - marks["s1"]))
    finally:
        writer._fdatasync = real
        task.close()
    hot = _intentlog_batched(root, "segments-hot", 20 * n) / (20 * n)
    print(f"\n--- durable append, median µs per append over {n} (wall clock, not cProfile) ---")
    for k, name in enumerate(("before the sync (checks, encode, write)", "fdatasync", "after the sync (Event, fold)")):
        print(f"{median([r[k] for r in rows]) * 1e6:8.1f}  {name}")
    print(f"{hot * 1e6:8.1f}  the same append inside a batch (hot caches, no sync)")


# -- main ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    ap.add_argument("--profile", action="store_true", help="print cProfile tables for the append and read paths")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dir", help="where to write (default: a temp dir on the same filesystem as /tmp)")
    args = ap.parse_args(argv)
    n, nb, nread, import_runs = (300, 5000, 20_000, 5) if args.quick else (1000, 20_000, 100_000, 10)
    repeats = max(5, args.repeats) if not args.quick else 3

    work = Path(tempfile.mkdtemp(prefix="intentlog-bench-", dir=args.dir))
    try:
        print(f"python {sys.version.split()[0]}, intentlog {intentlog.__version__}, {os.cpu_count()} cpus, dir {work}")
        print(f"medians of {repeats} repeats; ratios are per-repeat, same run, alternating order\n")

        a = bench_appends(work, n, nb, repeats)
        print(f"line size                              {a['line_size']:10.0f} bytes")
        print(f"durable task.append                    {a['durable']:10,.0f} /s")
        print(f"raw O_APPEND write + fdatasync         {a['raw']:10,.0f} /s")
        print(f"  durable / raw                        {a['durable_vs_raw']:10.2f}   (goal >= 0.85)")
        print(f"batched task.append (one batch)        {a['batched']:10,.0f} /s")
        print(f"  batched / durable                    {a['batched_vs_durable']:10.1f}x  (goal >= 10)")
        print(f"sqlite3 WAL synchronous=FULL inserts   {a['sqlite']:10,.0f} /s (reference)")
        print(f"  durable / sqlite                     {a['durable_vs_sqlite']:10.2f}\n")

        rd = bench_read(work, nread, repeats)
        print(f"read: {rd['events']:,.0f} events, {rd['bytes'] / 1e6:.1f} MB (effect-protocol mix)")
        print(f"orjson.loads per line, dropped         {rd['base_s'] * 1000:10.0f} ms")
        print(f"orjson.loads per line, kept in a list  {rd['kept_s'] * 1000:10.0f} ms")
        print(f"orjson.loads + BLAKE3 per line         {rd['hashed_s'] * 1000:10.0f} ms")
        print(f"list(task.events())                    {rd['list_s'] * 1000:10.0f} ms")
        print(f"  / loads dropped                      {rd['list/base']:10.2f}x  (goal <= 2)")
        print(f"  / loads kept (like for like)         {rd['list/kept']:10.2f}x")
        print(f"sum(1 for _ in task.events())          {rd['stream_s'] * 1000:10.0f} ms")
        print(f"  / loads + BLAKE3 (verifying floor)   {rd['stream/hashed']:10.2f}x")
        print(f"work_state(task.events())              {rd['ws_s'] * 1000:10.0f} ms")
        print(f"  / loads dropped                      {rd['ws/base']:10.2f}x  (goal <= 2)")
        print(f"  / loads + BLAKE3                     {rd['ws/hashed']:10.2f}x\n")

        for cached in (False, True):
            im = bench_import(import_runs, cached=cached, cache_dir=work / "pycache")
            how = (
                "bytecode cached"
                if cached
                else "as configured"
                + (
                    " (PYTHONDONTWRITEBYTECODE=1: compiled every run)"
                    if os.environ.get("PYTHONDONTWRITEBYTECODE")
                    else ""
                )
            )
            print(f"import, {how}, median of {import_runs}")
            print(f"  python -c 'import intentlog'         {im['intentlog_s'] * 1000:10.1f} ms")
            print(f"  python -c 'import orjson, blake3'    {im['orjson_blake3_s'] * 1000:10.1f} ms")
            print(f"  python -c 'pass'                     {im['bare_s'] * 1000:10.1f} ms")
            print(f"  intentlog / orjson+blake3            {im['ratio']:10.2f}x  (goal <= 1.3)")
            print(f"  net of interpreter start             {im['net']:10.2f}x")

        if args.profile:
            root = work / "ledger"
            durable_segments(root, n)
            task = intentlog.open(root).task("profiled")
            task.append("note", _data(0))

            def batched() -> None:
                with task.batch():
                    for i in range(nb):
                        task.append("note", _data(i))

            profile(batched, f"{nb} batched appends (the CPU cost of an append without its sync)")
            task.close()
            reader = intentlog.open(root).task("read")
            profile(lambda: sum(1 for _ in reader.events()), f"streaming task.events() over {nread:,} events")
            import_profile(work / "pycache")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
