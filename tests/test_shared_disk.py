"""The shared disk thread: many tasks' effects in one process, one thread for their record work, syncs side by side.

A backlog worker holding many items in flight shares one disk thread among their tasks
(:meth:`intentlog.effects.disk.Disk.share`). Each task keeps its order: its
``attempt.started`` durable before its send, its observation before its interpretation;
a failed sync of one stream fails that task's effect alone. Every test asserts on the
record on disk and on the provider's own fsync'd receipt log.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import intentlog
import intentlog.eventlog.writer as writer
from intentlog.effects.disk import disk_of

sys.path.insert(0, str(Path(__file__).parent))
from async_provider import AsyncProvider

N = 30
CALL = [
    "call.requested", "call.manifest", "attempt.started", "attempt.observed", "attempt.interpreted", "call.completed",
]  # fmt: skip


class Synced:
    """Every fdatasync: the synced file's inode and its size then, and the threads that did them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_inode: int | None = None) -> None:
        self.real = writer._fdatasync
        self.fail_inode = fail_inode
        self.lock = threading.Lock()
        self.sizes: dict[int, int] = {}
        self.threads: set[int] = set()
        monkeypatch.setattr(writer, "_fdatasync", self)

    def __call__(self, fd: int) -> None:
        st = os.fstat(fd)
        if st.st_ino == self.fail_inode:
            raise OSError(5, "Input/output error (injected)")
        self.real(fd)
        with self.lock:
            self.sizes[st.st_ino] = max(self.sizes.get(st.st_ino, 0), st.st_size)
            self.threads.add(threading.get_ident())


def started_end(path: Path) -> int | None:
    """The byte offset just past the stream's ``attempt.started`` line, or None."""
    offset = 0
    for line in path.read_bytes().splitlines(keepends=True):
        offset += len(line)
        if json.loads(line).get("kind") == "attempt.started":
            return offset
    return None


def kinds(root: Path, task_id: str) -> list[str]:
    return [ev.kind for ev in intentlog.open(root).task(task_id).events()]


def shared_tasks(ledger: intentlog.Ledger) -> list[intentlog.Task]:
    tasks = []
    for i in range(N):
        t = ledger.task(f"t{i}")
        t.append("note.opened")  # each stream exists and its writer is open
        assert disk_of(t.stream).share(True)
        tasks.append(t)
    return tasks


def test_effects_of_many_tasks_on_the_shared_disk_each_durable_before_its_send(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = shared_tasks(ledger)
    synced = Synced(monkeypatch)
    provider = AsyncProvider(tmp_path / "receipts.jsonl", latency=0.01)
    durable_at_send: dict[str, bool] = {}
    by_key = {f"k{i}": t for i, t in enumerate(tasks)}

    async def send(request: Any) -> bytes:
        task = by_key[request["key"]]
        end = started_end(task.stream.path)
        ino = os.stat(task.stream.path).st_ino
        durable_at_send[request["key"]] = end is not None and end <= synced.sizes.get(ino, 0)
        return await provider.send(request)

    async def main() -> list[Any]:
        return await asyncio.gather(
            *(t.aeffect(f"k{i}", {"key": f"k{i}"}, send, interpret=json.loads) for i, t in enumerate(tasks))
        )

    results = asyncio.run(main())
    assert results == [{"echo": f"k{i}"} for i in range(N)]
    assert provider.counts() == {f"k{i}": 1 for i in range(N)}
    assert durable_at_send == {f"k{i}": True for i in range(N)}  # each attempt.started durable before its send
    for t in tasks:
        size = os.stat(t.stream.path).st_size
        assert synced.sizes[os.stat(t.stream.path).st_ino] == size  # every line of every stream made durable
        t.close()
        assert kinds(ledger.root, t.id) == ["task.created", "note.opened", *CALL]

    # a re-run replays every one from the record: nothing sent again
    again = asyncio.run(main())
    assert again == results
    assert provider.counts() == {f"k{i}": 1 for i in range(N)}


def test_a_failed_sync_of_one_stream_fails_its_effect_alone(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = shared_tasks(ledger)
    bad = tasks[7]
    bad_bytes = bad.stream.path.read_bytes()
    synced = Synced(monkeypatch, fail_inode=os.stat(bad.stream.path).st_ino)
    provider = AsyncProvider(tmp_path / "receipts.jsonl")

    async def main() -> list[Any]:
        return await asyncio.gather(
            *(t.aeffect(f"k{i}", {"key": f"k{i}"}, provider.send, interpret=json.loads) for i, t in enumerate(tasks)),
            return_exceptions=True,
        )

    results = asyncio.run(main())
    failed = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
    assert failed == [7], results
    assert isinstance(results[7], intentlog.errors.IntentlogError)
    # its attempt never became durable, so it was never sent; every neighbour was sent once and completed
    assert provider.counts() == {f"k{i}": 1 for i in range(N) if i != 7}
    assert synced.threads  # the neighbours' syncs happened
    for i, t in enumerate(tasks):
        if i == 7:
            continue
        t.close()
        assert kinds(ledger.root, t.id) == ["task.created", "note.opened", *CALL]
    # the poisoned stream's file holds at most what its writer wrote before the failed sync, nothing after
    assert bad.stream.path.read_bytes().startswith(bad_bytes)


# -- a backlog's items in flight: a folder's lease on the shared disk thread ------------------


def _logged(log: Path, what: str, fn: Any) -> Any:
    """``fn`` that first appends ``what``, the item and the running thread's name to ``log`` (a forked worker's too)."""

    def wrapped(task: Any, *args: Any) -> Any:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps([what, task.id, threading.current_thread().name]) + "\n")
        return fn(task, *args)

    return wrapped


async def _one_effect(task: intentlog.Task, payload: Any) -> Any:
    async def send(request: Any) -> bytes:
        return b"ok"

    await task.aeffect("call", {"n": payload}, send)
    return {"ok": payload}


def test_a_folder_lease_of_an_item_in_flight_runs_on_the_shared_disk_and_syncs_with_its_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No pool thread and no sync of its own for a lease: its ``lease.acquired`` is durable with the attempt's start.

    Each item's lease is taken by the thread that records its result (the process's shared
    disk thread), and the item's stream is synced three times, no more: the attempt's
    start (with the lease before it), the observation (with the interpretation), the result
    with the release.
    """
    import intentlog.backlog.inflight as inflight

    log = tmp_path / "threads.jsonl"
    syncs = tmp_path / "syncs.jsonl"
    real_sync = writer._fdatasync

    def logged_sync(fd: int) -> None:
        real_sync(fd)
        with open(syncs, "a", encoding="utf-8") as f:
            f.write(json.dumps([os.fstat(fd).st_ino, os.fstat(fd).st_size]) + "\n")

    monkeypatch.setattr(inflight, "lease_item", _logged(log, "lease", inflight.lease_item))
    monkeypatch.setattr(inflight, "record_result", _logged(log, "result", inflight.record_result))
    monkeypatch.setattr(writer, "_fdatasync", logged_sync)
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    b = ledger.backlog("fly")
    items = [f"i{n}" for n in range(12)]
    b.add_many([{"item": i, "payload": n} for n, i in enumerate(items)])
    view = b.run(_one_effect, workers=1, in_flight=6, until_idle=True)
    assert view.counts["done"] == len(items)
    ledger.close()

    rows = [json.loads(line) for line in log.read_text().splitlines()]
    threads = {(what, task): name for what, task, name in rows}
    assert len(threads) == 2 * len(items), rows
    for i in items:
        task = f"fly.item.{i}"
        assert threads[("lease", task)] == threads[("result", task)] == "intentlog-disk-shared", rows
    synced = [json.loads(line) for line in syncs.read_text().splitlines()]
    for i in items:
        path = root / "tasks" / f"fly.item.{i}.jsonl"
        sizes = [size for ino, size in synced if ino == os.stat(path).st_ino]
        lines = path.read_bytes().splitlines(keepends=True)
        kinds_ = [json.loads(line)["kind"] for line in lines]
        ends = [sum(len(x) for x in lines[: n + 1]) for n in range(len(lines))]
        # the attempt's start, the observation (with what follows it), the result
        assert len(sizes) == 3, (i, sizes, kinds_)
        assert sizes[0] == ends[kinds_.index("attempt.started")] and sizes[-1] == ends[-1], (i, sizes, kinds_)
        assert sizes[1] >= ends[kinds_.index("attempt.observed")], (i, sizes, kinds_)
        assert kinds_.index("lease.acquired") < kinds_.index("attempt.started")
