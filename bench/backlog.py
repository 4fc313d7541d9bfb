"""Backlog throughput: items/s for a one-effect no-op step, beside the queues one would pick instead.

    python bench/backlog.py [--items 200] [--repeats 3] [--peers /tmp/bench-peers/bin/python] [--dir PATH] [--json]
                            [--dask] [--view [--view-items 10000]]
    python bench/backlog.py --in-flight [--quick] [--fly-items 2000] [--fly-cap 200] [--latency 0.1] [--json]

1. intentlog: ``backlog.run(step, workers=W, until_idle=True)`` over ``--items`` fresh items
   whose step makes one ``task.effect`` with a no-op provider, W = 1 and 2 (worker
   processes; the time includes the supervisor's start and the workers' fork), and the CPU
   time of all the run's processes per item (``*_cpu_ms_per_item``: the runner is
   CPU-bound, and a loaded machine moves CPU time far less than wall time).
2. The baseline, measured in the same run on the same filesystem: a bare ``task.effect``
   per task in one process, no runner. The per-item overhead of the runner is
   ``1/rate(backlog, 1 worker) - 1/rate(bare)``.
3. Peers, at equal durability (every state change synced to disk), in their own
   environment, never dependencies of intentlog:

       python3 -m venv /tmp/bench-peers && /tmp/bench-peers/bin/pip install huey dbos

   - Huey with ``SqliteHuey(fsync=True)`` (``PRAGMA synchronous=FULL``), a consumer of W
     worker processes; a no-op task with its result stored;
   - DBOS queues on SQLite (``system_database_url: sqlite:///...``), one workflow with one
     no-op step per item, queue concurrency W (DBOS runs its queue in one process).

   A peer that is not installed (or whose interpreter is missing) is skipped loudly.
4. ``--dask`` (the ``intentlog[dask]`` extra): the same backlog on the Dask engine, each item
   one Dask task, on a ``LocalCluster`` of W = 1 and 2 worker processes (one thread each)
   started once per W and timed apart (``dask_cluster_start_s``); the runs use it through
   ``DaskEngine(scheduler=ADDRESS)``, so their time is the steady state: the supervisor,
   one Dask task per item, the connection back and the item's own records. Ratios against
   the local engine of the same run.

5. ``--view``: the operator view and a run's start on a backlog of ``--view-items`` items
   (default 10,000) whose tasks have each run once (lease, one effect, result, release):
   ``backlog.view()`` with no cache (``cache/backlog-NAME.json`` deleted:
   every item task read, as before the cache), warm with nothing changed, and warm after
   ten item tasks changed (ten items added and run); beside it, in the same run, the view
   computed the old way (every task read whole and its lock probed one by one). A run's
   start likewise, cold, warm, and with ten item tasks changed, with a quota (which makes
   the start count every task's reservations): ``run_idle`` is a whole
   ``run(until_idle=True)`` with nothing left to do (start, a worker forked, the closing
   view), ``start_only`` the supervisor's start alone (the backlog's fold,
   ``backlog.run_started``, the scan of the item tasks, ``backlog.run_stopped``).

6. ``--in-flight``: an ``async def`` step, many items in flight per worker process, beside
   Huey and DBOS in the same run, interleaved (see :func:`bench_in_flight`); ``--quick``:
   one repeat, 500 latency-bound items at 50 in flight, 200 zero-latency items.

Medians over the repeats: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import intentlog


def noop_step(task: intentlog.Task, payload: Any) -> dict[str, Any]:
    task.effect("noop", {"n": payload}, lambda req: b"ok")
    return {"ok": True}


#: CPU ms per item of the last bench_bare / bench_backlog run (this process and its reaped children)
CPU_MS: dict[str, float] = {}


def _cpu() -> float:
    import resource

    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def bench_backlog(base: Path, items: int, workers: int) -> float:
    root = Path(tempfile.mkdtemp(dir=base))
    with intentlog.open(root / "ledger") as ledger:
        b = ledger.backlog("bench")
        for i in range(items):
            b.add(f"i{i}", i)
        c0, t0 = _cpu(), time.perf_counter()
        view = b.run(noop_step, workers=workers, until_idle=True, poll=0.005)
        dt = time.perf_counter() - t0
        CPU_MS[f"w{workers}"] = 1000 * (_cpu() - c0) / items  # the workers are reaped by the run's end
    assert view.counts["done"] == items, view.counts
    return items / dt


def bench_dask(base: Path, items: int, workers: int, repeats: int) -> tuple[float, float]:
    """Median items/s on the Dask engine over a LocalCluster of ``workers``, and the cluster's start time."""
    import logging

    import distributed

    from intentlog.backlog.dask_engine import DaskEngine

    t0 = time.perf_counter()
    cluster = distributed.LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
    )
    started = time.perf_counter() - t0
    rates = []
    try:
        for _ in range(repeats):
            root = Path(tempfile.mkdtemp(dir=base))
            with intentlog.open(root / "ledger") as ledger:
                b = ledger.backlog("bench")
                b.add_many([{"item": f"i{i}", "payload": i} for i in range(items)])
                engine = DaskEngine(scheduler=cluster.scheduler_address)
                t0 = time.perf_counter()
                view = b.run(noop_step, workers=workers, until_idle=True, poll=0.005, engine=engine)
                dt = time.perf_counter() - t0
            assert view.counts["done"] == items, view.counts
            rates.append(items / dt)
    finally:
        cluster.close()
    return statistics.median(rates), started


def bench_bare(base: Path, items: int) -> float:
    root = Path(tempfile.mkdtemp(dir=base))
    with intentlog.open(root / "ledger") as ledger:
        c0, t0 = _cpu(), time.perf_counter()
        for i in range(items):
            t = ledger.task(f"bare.{i}")
            t.effect("noop", {"n": i}, lambda req: b"ok")
            t.close()
        dt = time.perf_counter() - t0
        CPU_MS["bare"] = 1000 * (_cpu() - c0) / items
    return items / dt


def _synth_done(ledger: intentlog.Ledger, b: Any, item: str) -> None:
    """An item task as one run of the runner leaves it: lease, one effect, result with acceptance, release."""
    t = ledger.task(b.task_id(item))
    lease = {"epoch": 1, "pid": os.getpid(), "host": "bench", "start_time": None, "boot_id": None,
             "backlog": b.name, "item": item}  # fmt: skip
    t.append("lease.acquired", lease)
    t.effect("noop", {"n": item}, lambda req: b"ok")
    with t.batch():
        t.append("item.returned", {"result": {"ok": True}, "epoch": 1})
        t.accept(by="bench")
        t.append("lease.released", {"epoch": 1})
    t.close()


def _old_view(ledger: intentlog.Ledger, b: Any) -> dict[str, int]:
    """The view as it was computed before the cache: every item task read whole, every lock probed."""
    from intentlog.backlog.itemcache import read_item_task
    from intentlog.backlog.model import ITEM_STATES, item_view

    counts = {s: 0 for s in ITEM_STATES}
    now = time.time()
    for rec in b.fold().ordered():
        t = ledger.task(rec.task)
        it = read_item_task(ledger, rec.task)
        counts[item_view(b.name, rec, it.status, it.extras, running=t.writer_pid() is not None, now=now).state] += 1
    return counts


def _start_only(b: Any, quota: str) -> None:
    """A run's start alone: the backlog's fold, ``backlog.run_started``, the scan of the item tasks, the stop."""
    from intentlog.backlog.engines import LocalEngine
    from intentlog.backlog.quota import parse_quota
    from intentlog.backlog.supervisor import Supervisor

    class StartOnly(Supervisor):
        def loop(self) -> None:
            return

    StartOnly(
        b, noop_step, workers=1, quotas=(parse_quota(quota),), until_idle=True, inactivity=300.0, max_duration=None,
        grace=1.0, backoff=1.0, max_backoff=300.0, poll=0.005, engine=LocalEngine(),
    ).run()  # fmt: skip


def bench_view(base: Path, items: int, repeats: int) -> dict[str, float]:
    """Seconds for the view and a run's start at ``items`` items: old way, cold, warm, ten changed (medians)."""
    root = Path(tempfile.mkdtemp(dir=base)) / "ledger"
    out: dict[str, list[float]] = {}

    def timed(key: str, fn: Any) -> Any:
        t0 = time.perf_counter()
        r = fn()
        out.setdefault(key, []).append(time.perf_counter() - t0)
        return r

    with intentlog.open(root) as ledger:
        b = ledger.backlog("big")
        b.add_many([{"item": f"i{i}", "payload": i} for i in range(items)])
        t0 = time.perf_counter()
        for i in range(items):
            _synth_done(ledger, b, f"i{i}")
        build = time.perf_counter() - t0
        cache = root / "cache" / "backlog-big.json"
        quota = "calls=100000000/1h"
        b.run(noop_step, until_idle=True, quota=quota, poll=0.005)  # records the items done
        for r in range(repeats):
            timed("view_old_s", lambda: _old_view(ledger, b))
            cache.unlink(missing_ok=True)
            timed("view_cold_s", b.view)
            timed("view_warm_s", b.view)
            new = range(items + 10 * r, items + 10 * (r + 1))
            b.add_many([{"item": f"i{i}", "payload": i} for i in new])
            for i in new:
                _synth_done(ledger, b, f"i{i}")
            v = timed("view_warm_10_changed_s", b.view)
            assert v.counts["done"] == items + 10 * (r + 1), v.counts
        for r in range(repeats):
            for what, fn in (("run_idle", lambda: b.run(noop_step, until_idle=True, quota=quota, poll=0.005)),
                             ("start_only", lambda: _start_only(b, quota))):  # fmt: skip
                cache.unlink(missing_ok=True)
                timed(f"{what}_cold_s", fn)
                timed(f"{what}_warm_s", fn)
                for i in range(10):
                    t = ledger.task(b.task_id(f"i{i}"))
                    t.append("bench.touched", {"r": r, "what": what})
                    t.close()
                timed(f"{what}_warm_10_changed_s", fn)
    res = {k: round(statistics.median(v), 4) for k, v in out.items()}
    res["build_s"] = round(build, 1)
    return res


HUEY = textwrap.dedent(
    """
    import json, sys, time
    from huey import SqliteHuey
    path, items, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    huey = SqliteHuey("bench", filename=path, fsync=True)

    @huey.task()
    def noop(n):
        return n

    results = [noop(i) for i in range(items)]
    consumer = huey.create_consumer(workers=workers, worker_type="process", periodic=False,
                                    check_worker_health=False)
    t0 = time.perf_counter()
    consumer.start()
    for r in results:
        r.get(blocking=True, timeout=120)
    dt = time.perf_counter() - t0
    consumer.stop(graceful=True)
    print(json.dumps({"rate": items / dt}))
    """
)

DBOS = textwrap.dedent(
    """
    import json, sys, time
    from dbos import DBOS, DBOSConfig
    path, items, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    config: DBOSConfig = {"name": "bench", "system_database_url": "sqlite:///" + path}
    DBOS(config=config)

    @DBOS.step()
    def noop(n):
        return n

    @DBOS.workflow()
    def item(n):
        return noop(n)

    DBOS.launch()
    # the default polling interval is 1 s; poll as often as the others do
    queue = DBOS.register_queue("bench", worker_concurrency=workers, polling_interval_sec=0.01)
    t0 = time.perf_counter()
    handles = [queue.enqueue(item, i) for i in range(items)]
    for h in handles:
        h.get_result()
    dt = time.perf_counter() - t0
    DBOS.destroy()
    print(json.dumps({"rate": items / dt}))
    """
)


def bench_peer(python: str, script: str, base: Path, items: int, workers: int) -> float | None:
    d = Path(tempfile.mkdtemp(dir=base))
    r = subprocess.run(
        [python, "-c", script, str(d / "queue.db"), str(items), str(workers)],
        capture_output=True, text=True, timeout=600, cwd=d,
    )  # fmt: skip
    if r.returncode != 0:
        print(f"  peer failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return float(json.loads(r.stdout.strip().splitlines()[-1])["rate"])


# -- in flight: an async step, many items per worker process ------------------------------------

PROVIDER = textwrap.dedent(
    """
    import asyncio, sys
    latency = float(sys.argv[1])

    async def serve(reader, writer):
        line = await reader.readline()
        if latency:
            await asyncio.sleep(latency)
        writer.write(b'{"ok":true}\\n')
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())
    """
)

INTENTLOG_FLY = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import intentlog
    root = sys.argv[1]
    items, workers, in_flight, port, cap = (int(a) for a in sys.argv[2:7])

    async def call(request):
        if not port:  # zero latency: no provider at all, as the no-op step
            return b"ok"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"go\\n")
        await writer.drain()
        line = await reader.readline()
        writer.close()
        return line

    async def step(task, payload):
        await task.aeffect("call", {"n": payload}, call)
        return {"ok": True}

    ledger = intentlog.open(root)
    b = ledger.backlog("bench")
    b.add_many([{"item": f"i{i}", "payload": i} for i in range(items)])
    t0, c0 = time.perf_counter(), time.process_time()
    view = b.run(step, workers=workers, in_flight=in_flight, quota=[f"in_flight={cap}"], until_idle=True, poll=0.005)
    dt = time.perf_counter() - t0
    assert view.counts["done"] == items, view.counts
    print(json.dumps({"wall": dt, "rate": items / dt, "supervisor_cpu_s": time.process_time() - c0}))
    """
)

HUEY_FLY = textwrap.dedent(
    """
    import json, socket, sys, time
    from huey import SqliteHuey
    path, items, workers, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    huey = SqliteHuey("bench", filename=path, fsync=True)

    @huey.task()
    def call(n):
        if not port:
            return n
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"go\\n")
            return s.makefile("rb").readline().decode()

    results = [call(i) for i in range(items)]
    kind = "thread" if port else "process"
    consumer = huey.create_consumer(workers=workers, worker_type=kind, periodic=False, check_worker_health=False)
    t0 = time.perf_counter()
    consumer.start()
    for r in results:
        r.get(blocking=True, timeout=600)
    dt = time.perf_counter() - t0
    consumer.stop(graceful=True)
    print(json.dumps({"wall": dt, "rate": items / dt}))
    """
)

DBOS_FLY = textwrap.dedent(
    """
    import json, socket, sys, time
    from dbos import DBOS, DBOSConfig
    path, items, workers, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    config: DBOSConfig = {"name": "bench", "system_database_url": "sqlite:///" + path}
    config["max_executor_threads"] = max(64, workers + 16)
    DBOS(config=config)

    @DBOS.step()
    def call(n):
        if not port:
            return n
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"go\\n")
            return s.makefile("rb").readline().decode()

    @DBOS.workflow()
    def item(n):
        return call(n)

    DBOS.launch()
    queue = DBOS.register_queue("bench", concurrency=workers, polling_interval_sec=0.01)
    t0 = time.perf_counter()
    handles = [queue.enqueue(item, i) for i in range(items)]
    for h in handles:
        h.get_result()
    dt = time.perf_counter() - t0
    DBOS.destroy()
    print(json.dumps({"wall": dt, "rate": items / dt}))
    """
)


def _tree_rss_kb(pid: int) -> int:
    """The resident memory of ``pid`` and every process under it, in KiB (0 once it is gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
            with open(f"/proc/{p}/task/{p}/children", encoding="ascii") as f:
                todo.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def run_measured(args: list[str], cwd: Path) -> tuple[dict[str, Any] | None, float]:
    """Run a bench script; its JSON answer (with ``cpu_s``: the CPU time of its whole process tree, every
    process of it reaped by its parent) and the peak resident memory of that tree (MiB)."""
    import threading

    cpu0 = _children_cpu()

    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], _tree_rss_kb(proc.pid))

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        out, err = proc.communicate(timeout=900)
    finally:
        done.set()
        t.join()
    if proc.returncode != 0:
        print(f"  a bench script failed: {err.strip().splitlines()[-3:]}", file=sys.stderr)
        return None, peak[0] / 1024
    got: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    got["cpu_s"] = _children_cpu() - cpu0
    return got, peak[0] / 1024


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def start_provider(latency: float) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", PROVIDER, str(latency)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def bench_in_flight(base: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Latency-bound and zero-latency runs of intentlog (async step, items in flight), Huey and DBOS, interleaved.

    Latency-bound: ``--fly-items`` items, each one call to a provider on 127.0.0.1 answering
    after ``--latency`` s, at most ``--fly-cap`` in flight (intentlog: 2 worker processes
    of ``cap/2`` lanes and a quota ``in_flight=cap``; Huey: ``cap`` consumer threads;
    DBOS: a queue of concurrency ``cap``): wall time against the ideal
    ``items * latency / cap``, and the peak resident memory of the whole run (every
    process of it, sampled every 20 ms). Zero latency: ``--items`` items with no provider,
    with 1 and 2 workers (intentlog: ``--fly-lanes`` lanes each; Huey: process workers;
    DBOS: concurrency 1, 2).
    """
    py = sys.executable
    peers = {name: _has(args.peers, name) for name in ("huey", "dbos")}
    for name, ok in peers.items():
        if not ok:
            print(f"SKIPPED peer {name}: not importable by {args.peers} (pip install huey dbos)", file=sys.stderr)
    prov, port = start_provider(args.latency)
    rows: dict[str, list[float]] = {}

    def keep(key: str, value: float | None) -> None:
        if value is not None:
            rows.setdefault(key, []).append(value)

    try:
        n, cap = args.fly_items, args.fly_cap
        for _ in range(args.repeats):  # interleaved: each repeat runs every runner once
            d = Path(tempfile.mkdtemp(dir=base))
            fly = [py, "-c", INTENTLOG_FLY, str(d / "l"), str(n), "2", str(cap // 2), str(port), str(cap)]
            got, rss = run_measured(fly, d)
            keep("latency_intentlog_wall_s", got and got["wall"])
            keep("latency_intentlog_peak_rss_mib", rss if got else None)
            keep("latency_intentlog_cpu_ms_per_item", got and 1000 * got["cpu_s"] / n)
            # the run's own process (the supervisor) apart from its workers
            keep("latency_intentlog_supervisor_cpu_ms_per_item", got and 1000 * got["supervisor_cpu_s"] / n)
            workers_cpu = got and got["cpu_s"] - got["supervisor_cpu_s"]
            keep("latency_intentlog_workers_cpu_ms_per_item", got and 1000 * workers_cpu / n)
            for name, script in (("huey", HUEY_FLY), ("dbos", DBOS_FLY)):
                if peers[name]:
                    d = Path(tempfile.mkdtemp(dir=base))
                    got, rss = run_measured([args.peers, "-c", script, str(d / "q.db"), str(n), str(cap), str(port)], d)
                    keep(f"latency_{name}_wall_s", got and got["wall"])
                    keep(f"latency_{name}_peak_rss_mib", rss if got else None)
                    keep(f"latency_{name}_cpu_ms_per_item", got and 1000 * got["cpu_s"] / n)
            for w in (1, 2):
                d = Path(tempfile.mkdtemp(dir=base))
                lanes = args.fly_lanes
                zero = [py, "-c", INTENTLOG_FLY, str(d / "l"), str(args.items), str(w), str(lanes), "0", str(w * lanes)]
                got, _ = run_measured(zero, d)
                keep(f"zero_intentlog_w{w}_items_per_s", got and got["rate"])
                keep(f"zero_intentlog_w{w}_cpu_ms_per_item", got and 1000 * got["cpu_s"] / args.items)
                for name, script in (("huey", HUEY_FLY), ("dbos", DBOS_FLY)):
                    if peers[name]:
                        d = Path(tempfile.mkdtemp(dir=base))
                        peer = [args.peers, "-c", script, str(d / "q.db"), str(args.items), str(w), "0"]
                        got, _ = run_measured(peer, d)
                        keep(f"zero_{name}_w{w}_items_per_s", got and got["rate"])
                        keep(f"zero_{name}_w{w}_cpu_ms_per_item", got and 1000 * got["cpu_s"] / args.items)
    finally:
        prov.kill()
        prov.wait()
    out: dict[str, Any] = {
        "fly_items": args.fly_items, "latency_s": args.latency, "fly_cap": args.fly_cap,
        "ideal_s": args.fly_items * args.latency / args.fly_cap, "zero_items": args.items, "repeats": args.repeats,
    }  # fmt: skip
    out.update({k: round(statistics.median(v), 3) for k, v in rows.items()})
    for name in ("intentlog", "huey", "dbos"):
        wall = out.get(f"latency_{name}_wall_s")
        if wall:
            out[f"latency_{name}_vs_ideal"] = round(wall / out["ideal_s"], 2)
    for name in ("huey", "dbos"):
        mine, theirs = out.get("latency_intentlog_wall_s"), out.get(f"latency_{name}_wall_s")
        if mine and theirs:
            out[f"ratio_latency_wall_intentlog_vs_{name}"] = round(mine / theirs, 2)
        for w in (1, 2):
            mine, theirs = out.get(f"zero_intentlog_w{w}_items_per_s"), out.get(f"zero_{name}_w{w}_items_per_s")
            if mine and theirs:
                out[f"ratio_zero_w{w}_intentlog_vs_{name}"] = round(mine / theirs, 2)
    if peers["huey"] or peers["dbos"]:
        from importlib.metadata import version

        out["versions"] = {
            name: subprocess.run(
                [args.peers, "-c", f"from importlib.metadata import version; print(version({name!r}))"],
                capture_output=True, text=True,
            ).stdout.strip()
            for name, ok in peers.items() if ok
        }  # fmt: skip
        out["versions"]["intentlog"] = version("intentlog")
    return out


def _has(python: str, module: str) -> bool:
    if not Path(python).exists():
        return False
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peers", default="/tmp/bench-peers/bin/python", help="the peers' interpreter")
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dask", action="store_true", help="also the Dask engine (needs intentlog[dask])")
    ap.add_argument("--view", action="store_true", help="only the view and a run's start at --view-items items")
    ap.add_argument("--view-items", type=int, default=10_000)
    ap.add_argument("--in-flight", action="store_true", help="only the async step with items in flight, and peers")
    ap.add_argument("--quick", action="store_true", help="with --in-flight: 1 repeat, 500 items at 50 in flight")
    ap.add_argument("--fly-items", type=int, default=2000, help="latency-bound items")
    ap.add_argument("--fly-cap", type=int, default=200, help="latency-bound: at most this many in flight")
    ap.add_argument("--fly-lanes", type=int, default=50, help="zero latency: lanes per worker process")
    ap.add_argument("--latency", type=float, default=0.1, help="the provider's answer time, seconds")
    args = ap.parse_args()
    if not Path(args.peers).exists():
        args.peers = sys.executable  # the peers installed beside intentlog
    base = Path(tempfile.mkdtemp(prefix="bench-backlog.", dir=args.dir))
    if args.in_flight:
        if args.quick:
            args.repeats, args.fly_items, args.fly_cap, args.items = 1, 500, 50, 200
        out = bench_in_flight(base, args)
        if args.json:
            print(json.dumps(out, indent=2, sort_keys=True))
        else:
            for k, v in out.items():
                print(f"{k:44} {v}")
        return
    out: dict[str, Any] = {"items": args.items, "repeats": args.repeats}
    if args.view:
        out = {"view_items": args.view_items, "repeats": args.repeats}
        out.update(bench_view(base, args.view_items, args.repeats))
        for k in ("view_cold_s", "view_warm_s", "view_warm_10_changed_s"):
            out[f"ratio_{k[:-2]}_vs_old"] = round(out[k] / out["view_old_s"], 3)
        for what in ("run_idle", "start_only"):
            for k in (f"{what}_warm_s", f"{what}_warm_10_changed_s"):
                out[f"ratio_{k[:-2]}_vs_cold"] = round(out[k] / out[f"{what}_cold_s"], 3)
        lines = [f"{k:34} {v}" for k, v in out.items()]
        print(json.dumps(out, indent=2, sort_keys=True) if args.json else "\n".join(lines))
        return

    def med(fn: Any) -> float:
        return statistics.median(fn() for _ in range(args.repeats))

    cpu: dict[str, list[float]] = {}

    def run_and_cpu(fn: Any, key: str) -> float:
        rate = float(fn())
        cpu.setdefault(key, []).append(CPU_MS[key])
        return rate

    out["bare_effect_items_per_s"] = med(lambda: run_and_cpu(lambda: bench_bare(base, args.items), "bare"))
    for w in (1, 2):
        out[f"intentlog_w{w}_items_per_s"] = med(
            lambda: run_and_cpu(lambda: bench_backlog(base, args.items, w), f"w{w}")  # noqa: B023
        )
    # CPU time of all the run's processes per item: the runner is CPU-bound, and load moves it less than wall time
    out["bare_effect_cpu_ms_per_item"] = round(statistics.median(cpu["bare"]), 3)
    for w in (1, 2):
        out[f"intentlog_w{w}_cpu_ms_per_item"] = round(statistics.median(cpu[f"w{w}"]), 3)
    over = out["intentlog_w1_cpu_ms_per_item"] - out["bare_effect_cpu_ms_per_item"]
    out["runner_overhead_cpu_ms_per_item"] = round(over, 3)
    if args.dask:
        for w in (1, 2):
            rate, start = bench_dask(base, args.items, w, args.repeats)
            out[f"dask_w{w}_items_per_s"], out[f"dask_w{w}_cluster_start_s"] = rate, start
            out[f"ratio_dask_w{w}_vs_local_w{w}"] = round(rate / out[f"intentlog_w{w}_items_per_s"], 2)
    peers = {"huey": ("huey", HUEY), "dbos": ("dbos", DBOS)}
    for name, (module, script) in peers.items():
        if not _has(args.peers, module):
            print(
                f"SKIPPED peer {name}: {module!r} is not importable by {args.peers}; install it with: "
                f"python3 -m venv /tmp/bench-peers && /tmp/bench-peers/bin/pip install huey dbos",
                file=sys.stderr,
            )
            continue
        for w in (1, 2):
            runs = [bench_peer(args.peers, script, base, args.items, w) for _ in range(args.repeats)]
            ok = [r for r in runs if r is not None]
            out[f"{name}_w{w}_items_per_s"] = statistics.median(ok) if ok else None
    bare, w1 = out["bare_effect_items_per_s"], out["intentlog_w1_items_per_s"]
    out["runner_overhead_ms_per_item"] = round(1000 * (1 / w1 - 1 / bare), 3)
    for w in (1, 2):
        mine = out[f"intentlog_w{w}_items_per_s"]
        for name in peers:
            theirs = out.get(f"{name}_w{w}_items_per_s")
            if theirs:
                out[f"ratio_w{w}_vs_{name}"] = round(mine / theirs, 2)
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return
    for k, v in out.items():
        print(f"{k:34} {v:.1f}" if isinstance(v, float) else f"{k:34} {v}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
