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


# -- a backlog's items in flight: the shared disk thread never waits on a sync itself ------------


async def _one_effect(task: intentlog.Task, payload: Any) -> Any:
    async def send(request: Any) -> bytes:
        return b"ok"

    await task.aeffect("call", {"n": payload}, send)
    return {"ok": payload}


def test_items_in_flight_sync_three_times_each_and_never_on_the_shared_disk_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease adds no sync of its own, and no sync (a new stream's creation included) runs on the shared thread.

    Each item's stream is synced three times: the attempt's start (with the lease's
    ``lease.acquired`` before it), the observation (with the interpretation), the result
    with the release. Every ``fsync`` and ``fdatasync`` of the run runs outside the
    process's shared disk thread, which does every item's record work: a sync there would
    make every other item in flight wait for it (on a slow disk, one after another).
    """
    from intentlog._internal import fsops

    syncs = tmp_path / "syncs.jsonl"
    real_fdatasync, real_fsync = writer._fdatasync, fsops.fsync

    def logged(real: Any, what: str) -> Any:
        def sync(fd: int) -> None:
            real(fd)
            st = os.fstat(fd)
            with open(syncs, "a", encoding="utf-8") as f:
                f.write(json.dumps([what, st.st_ino, st.st_size, threading.current_thread().name]) + "\n")

        return sync

    monkeypatch.setattr(writer, "_fdatasync", logged(real_fdatasync, "fdatasync"))
    monkeypatch.setattr(fsops, "fsync", logged(real_fsync, "fsync"))
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    b = ledger.backlog("fly")
    items = [f"i{n}" for n in range(12)]
    b.add_many([{"item": i, "payload": n} for n, i in enumerate(items)])
    syncs.unlink()  # the run's syncs only
    view = b.run(_one_effect, workers=1, in_flight=6, until_idle=True)
    assert view.counts["done"] == len(items)
    ledger.close()

    synced = [json.loads(line) for line in syncs.read_text().splitlines()]
    assert {name for *_, name in synced}.isdisjoint({"intentlog-disk-shared"}), synced
    assert sum(1 for what, *_ in synced if what == "fsync") >= 2 * len(items)  # each new stream: file and folder
    for i in items:
        path = root / "tasks" / f"fly.item.{i}.jsonl"
        sizes = [size for what, ino, size, _ in synced if what == "fdatasync" and ino == os.stat(path).st_ino]
        lines = path.read_bytes().splitlines(keepends=True)
        kinds_ = [json.loads(line)["kind"] for line in lines]
        ends = [sum(len(x) for x in lines[: n + 1]) for n in range(len(lines))]
        assert len(sizes) == 3, (i, sizes, kinds_)
        assert kinds_.index("lease.acquired") < kinds_.index("attempt.started")
        assert sizes[0] == ends[kinds_.index("attempt.started")] and sizes[-1] == ends[-1], (i, sizes, kinds_)
        assert sizes[1] >= ends[kinds_.index("attempt.observed")], (i, sizes, kinds_)
