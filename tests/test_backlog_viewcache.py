"""The backlog view and a run's start read only the item tasks that changed, and never trust the
cache (``cache/backlog-NAME.json``) over the record: a stale, corrupt or foreign entry is ignored
and rebuilt, and a run's start records nothing the cache alone says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from backlog_steps import read_receipts

import intentlog
from intentlog.backlog import itemcache
from intentlog.viewcache.store import read_lines, write_lines

N = 70  # at least itemcache.MIN_ITEMS


def _done(ledger: intentlog.Ledger, b: Any, item: str) -> None:
    """An item task as one run leaves it: lease, one effect, result, release."""
    t = ledger.task(b.task_id(item))
    t.append("lease.acquired", {"epoch": 1, "pid": 1, "host": "h", "start_time": None, "boot_id": None,
                                "backlog": b.name, "item": item})  # fmt: skip
    t.effect("noop", {"n": item}, lambda req: b"ok")
    with t.batch():
        t.append("item.returned", {"result": {"ok": True}, "epoch": 1})
        t.accept(by="test")
        t.append("lease.released", {"epoch": 1})
    t.close()


def _leased_only(ledger: intentlog.Ledger, b: Any, item: str) -> None:
    t = ledger.task(b.task_id(item))
    t.append("lease.acquired", {"epoch": 1, "pid": 1, "host": "h", "start_time": None, "boot_id": None,
                                "backlog": b.name, "item": item})  # fmt: skip
    t.append("lease.released", {"epoch": 1})
    t.close()


@pytest.fixture
def big(ledger: intentlog.Ledger) -> Any:
    b = ledger.backlog("big")
    b.add_many([{"item": f"i{i:02d}", "payload": {"item": f"i{i:02d}"}, "max_attempts": 1} for i in range(N)])
    for i in range(N - 10):
        _done(ledger, b, f"i{i:02d}")
    for i in range(N - 10, N - 5):
        _leased_only(ledger, b, f"i{i:02d}")
    return b  # 60 with a result, 5 leased and released, 5 never run


def _cache(ledger: intentlog.Ledger) -> Path:
    return ledger.root / "cache" / "backlog-big.json"


def _uncached(ledger: intentlog.Ledger, b: Any) -> dict[str, Any]:
    p = _cache(ledger)
    saved = p.read_bytes() if p.exists() else None
    p.unlink(missing_ok=True)
    try:
        return b.view(now=0).to_json()
    finally:
        p.unlink(missing_ok=True)
        if saved is not None:
            p.write_bytes(saved)


def _count_folds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = itemcache.fold_item

    def counting(task_id: str, events: Any, status: Any = None) -> Any:
        seen.append(task_id)
        return real(task_id, events, status)

    monkeypatch.setattr(itemcache, "fold_item", counting)
    return seen


def test_a_warm_view_reads_only_the_tasks_that_changed(
    ledger: intentlog.Ledger, big: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cold = big.view(now=0).to_json()
    assert cold["counts"]["done"] == N - 10 and cold["counts"]["queued"] == 10
    assert _cache(ledger).exists()
    seen = _count_folds(monkeypatch)
    assert big.view(now=0).to_json() == cold
    assert seen == []  # nothing changed: no task read
    seen.clear()
    for i in (60, 61, 62):  # three leased items fail: their streams change
        t = ledger.task(big.task_id(f"i{i}"))
        t.fail_task("given up", by="test")
        t.close()
    warm = big.view(now=0).to_json()
    assert sorted(set(seen)) == ["big.item.i60", "big.item.i61", "big.item.i62"]
    assert warm["counts"]["failed"] == 3 and warm == _uncached(ledger, big)


def test_a_warm_view_keeps_the_children_an_item_sent_to_another_backlog(
    ledger: intentlog.Ledger, big: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = ledger.task(big.task_id("i03"))
    t.spawn("kid", {"n": 1}, backlog="other")  # outside a run: added to that backlog at once
    t.close()
    cold = big.view(now=0)
    rows = {r.item: r for r in cold.items}
    assert rows["i03"].children == {"queued": 1} and (rows["kid"].backlog, rows["kid"].parent) == ("other", t.id)
    seen = _count_folds(monkeypatch)
    warm = big.view(now=0)
    assert [x for x in seen if x.startswith("big.")] == []  # every item task from the cache, its links too
    assert warm.to_json() == cold.to_json()


@pytest.mark.parametrize("damage", ["corrupt", "foreign", "malformed", "swapped"])
def test_a_damaged_or_foreign_cache_is_ignored_and_rebuilt(
    ledger: intentlog.Ledger, big: Any, damage: str, tmp_path: Path
) -> None:
    truth = big.view(now=0).to_json()
    p = _cache(ledger)
    dfd = os.open(p.parent, os.O_RDONLY)
    try:
        lines = read_lines(dfd, p.name, itemcache.FORMAT)
        assert lines is not None and len(lines) == N - 5  # the 5 never run have no stream
        rows = [orjson.loads(x) for x in lines]
        by = {r[0]: r for r in rows}
        if damage == "corrupt":  # a flipped byte: the file's digest fails
            raw = bytearray(p.read_bytes())
            raw[-3] ^= 0x01
            p.write_bytes(bytes(raw))
        else:
            if damage == "foreign":  # a done item's entry under another id: its facts are another file's
                src = by["big.item.i00"]
                by["big.item.i60"] = ["big.item.i60", *src[1:]]
            elif damage == "malformed":  # the right facts, a value of the wrong shape
                by["big.item.i61"][2] = {"state": "done"}
            else:  # the right facts, but another task's value: the facts of i62 with i01's (done) value
                by["big.item.i62"][2] = by["big.item.i01"][2]
            write_lines(dfd, p.name, itemcache.FORMAT, [orjson.dumps(r) for r in by.values()])
    finally:
        os.close(dfd)
    got = big.view(now=0).to_json()
    if damage == "swapped":
        # an entry that names the right file facts is trusted by the view, as the listings' index is;
        # what a run does never follows it (next test); the next change of that task rebuilds it
        assert got["counts"]["done"] == truth["counts"]["done"] + 1
        t = ledger.task(big.task_id("i62"))
        t.fail_task("given up", by="test")
        t.close()
        assert next(r for r in big.view(now=0).to_json()["items"] if r["item"] == "i62")["state"] == "failed"
        return
    assert got == truth
    assert big.view(now=0).to_json() == truth  # and the rebuilt file serves the same
    assert p.exists()


def test_a_run_start_never_records_what_only_the_cache_says(
    ledger: intentlog.Ledger, big: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("BACKLOG_SLEEP", "0")
    big.view(now=0)
    p = _cache(ledger)
    dfd = os.open(p.parent, os.O_RDONLY)
    try:
        rows = [orjson.loads(x) for x in read_lines(dfd, p.name, itemcache.FORMAT) or []]
        for r in rows:
            if r[0] == "big.item.i63":  # leased and released, never returned: the cache now says it returned
                r[2][1][1] = True
        write_lines(dfd, p.name, itemcache.FORMAT, [orjson.dumps(r) for r in rows])
    finally:
        os.close(dfd)
    assert next(r for r in big.view(now=0).items if r.item == "i63").state == "done"  # the view is fooled...
    from backlog_steps import step

    view = big.run(step, until_idle=True, quota="calls=1000/1h")  # ...the run is not
    found = [e.data["item"] for e in big.task.events() if e.kind == "backlog.item_done" and e.data.get("found")]
    assert "i63" not in found and len(found) == N - 10
    keys = [r["key"] for r in read_receipts(str(tmp_path / "receipts.jsonl"))]
    assert sorted(keys) == sorted(f"{k}:0" for k in ("i65", "i66", "i67", "i68", "i69", "i60", "i61", "i62", "i63",
                                                      "i64"))  # fmt: skip
    assert view.counts["done"] == N
    assert json.loads(json.dumps(view.to_json()))["counts"] == _uncached(ledger, big)["counts"]


def test_a_run_start_reads_only_the_tasks_that_changed(
    ledger: intentlog.Ledger, big: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("BACKLOG_SLEEP", "0")
    from backlog_steps import step

    big.run(step, until_idle=True, quota="calls=1000/1h")  # runs the 10 left; its closing view fills the cache
    seen = _count_folds(monkeypatch)
    view = big.run(step, until_idle=True, quota="calls=1000/1h")  # a quota: units read from each stream, no fold
    assert seen == [] and view.counts["done"] == N
    t = ledger.task(big.task_id("i05"))
    t.append("note.touched", {})
    t.close()
    big.run(step, until_idle=True, quota="calls=1000/1h")
    assert sorted(set(seen)) == ["big.item.i05"]
    assert len(read_receipts(str(tmp_path / "receipts.jsonl"))) == 10  # nothing ran twice


async def _astep(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """An ``async def`` step (lanes of one worker): one recorded value, one effect."""
    async def size() -> int:
        return len(payload["item"])

    n = await task.avalue("n", size)
    raw = await task.aeffect("e", {"pkey": payload["item"]}, _asend)
    return {"n": n, "raw": raw.decode()}


async def _asend(request: Any) -> bytes:
    return b"ok"


@pytest.mark.parametrize("in_flight", [1, 4], ids=["sync", "async-lanes"])
def test_a_runs_closing_view_reads_no_task_its_workers_just_wrote(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_flight: int
) -> None:
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("BACKLOG_SLEEP", "0")
    from backlog_steps import step

    b = ledger.backlog("big")
    b.add_many([{"item": f"i{i:02d}", "payload": {"item": f"i{i:02d}"}, "max_attempts": 1} for i in range(N)])
    seen = _count_folds(monkeypatch)  # in this process: the supervisor and its view (the workers fold their own)
    view = b.run(step if in_flight == 1 else _astep, workers=2, until_idle=True, in_flight=in_flight)
    assert view.counts["done"] == N
    assert [x for x in seen if x.startswith("big.item.")] == []  # each task's line came from the worker that wrote it
    fresh = _uncached(ledger, b)
    assert [(r["item"], r["state"], r["task_state"], r["last_progress"]) for r in view.to_json()["items"]] == [
        (r["item"], r["state"], r["task_state"], r["last_progress"]) for r in fresh["items"]
    ]  # the lines the workers made say what a whole read says
    _a_later_append_is_read_again(ledger, b, seen)


def _a_later_append_is_read_again(ledger: intentlog.Ledger, b: Any, seen: list[str]) -> None:
    """An append to one item task after the run makes its line stale: the next view reads that task alone."""
    t = ledger.task(b.task_id("i05"))
    t.append("note.touched", {})
    t.close()
    seen.clear()
    b.view()
    assert [x for x in seen if x.startswith("big.item.")] == ["big.item.i05"]


def _forge_cache(ledger: intentlog.Ledger, name: str, edit: Any) -> None:
    """Rewrite ``cache/backlog-NAME.json`` as anyone who can write ``cache/`` could: facts kept, digest recomputed."""
    p = ledger.root / "cache" / f"backlog-{name}.json"
    dfd = os.open(p.parent, os.O_RDONLY)
    try:
        rows = [orjson.loads(x) for x in read_lines(dfd, p.name, itemcache.FORMAT) or []]
        assert rows  # the cache was there to forge
        for r in rows:
            edit(r)
        write_lines(dfd, p.name, itemcache.FORMAT, [orjson.dumps(r) for r in rows])
    finally:
        os.close(dfd)


def test_a_forged_cache_never_lets_a_run_spend_past_its_quota(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receipts = tmp_path / "receipts.jsonl"
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(receipts))
    monkeypatch.setenv("BACKLOG_SLEEP", "0")
    from backlog_steps import step

    b = ledger.backlog("q")
    b.add_many([{"item": f"i{n:03d}", "payload": {"item": f"i{n:03d}", "effects": 1}} for n in range(N)])
    b.run(step, workers=1, quota="calls=64", until_idle=True)
    assert len(read_receipts(str(receipts))) == 64  # the budget, spent
    b.view()  # the cache, filled

    def empty_reservations(r: list[Any]) -> None:
        r[2][2] = []  # no quota.reserved in the task, says the cache
        r[2][1][4] = {}

    _forge_cache(ledger, "q", empty_reservations)
    ids = [b.task_id(f"i{n:03d}") for n in range(N)]
    assert all(it.reservations == () for it in itemcache.read_items(ledger, "q", ids).values())  # forged in place
    b.run(step, workers=1, quota="calls=64", until_idle=True)
    assert len(read_receipts(str(receipts))) == 64  # the provider was paid nothing more
    exhausted = [e for e in b.task.events() if e.kind == "backlog.quota_exhausted"]
    assert len(exhausted) == 2  # each run stopped at the budget, the second before any send
    reserved = sum(1 for tid in ids for e in ledger.task(tid).events() if e.kind == "quota.reserved")
    assert reserved == 64  # the record holds the 64 grants, no more


def test_a_forged_cache_saying_not_returned_never_sends_a_returned_item_again(
    ledger: intentlog.Ledger, big: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receipts = tmp_path / "receipts.jsonl"
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(receipts))
    monkeypatch.setenv("BACKLOG_SLEEP", "0")
    from backlog_steps import step

    big.view(now=0)

    def not_returned(r: list[Any]) -> None:
        r[2][1][1] = False

    _forge_cache(ledger, "big", not_returned)
    view = big.run(step, until_idle=True, quota="calls=1000/1h")
    keys = sorted(r["key"] for r in read_receipts(str(receipts)))
    assert keys == sorted(f"i{i:02d}:0" for i in range(N - 10, N))  # the 10 never returned; none of the 60 again
    assert view.counts["done"] == N


@pytest.mark.parametrize("in_flight", [1, 4], ids=["sync", "async-lanes"])
def test_on_the_store_a_runs_closing_view_reads_no_task_its_workers_just_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_flight: int
) -> None:
    """The workers' lines checked by one LIST per task (the stream's stamp) instead of reading its segments."""
    import s3_server

    from intentlog.s3.streams import ObjectStreams

    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("BACKLOG_SLEEP", "0")
    from backlog_steps import step

    url = s3_server.ledger_url(monkeypatch)
    n = 12  # a store keeps the lines of any backlog (no file to spare a small one)
    with intentlog.open(url) as ledger:
        b = ledger.backlog("big")
        b.add_many([{"item": f"i{i:02d}", "payload": {"item": f"i{i:02d}"}, "max_attempts": 1} for i in range(n)])
        seen = _count_folds(monkeypatch)  # in this process: the supervisor and its view
        reads: list[str] = []
        real_read = ObjectStreams.read

        def reading(self: ObjectStreams, name: str, offset: int = 0) -> bytes:
            reads.append(name)
            return real_read(self, name, offset)

        view = b.run(step if in_flight == 1 else _astep, workers=2, until_idle=True, in_flight=in_flight)
        assert view.counts["done"] == n
        assert [x for x in seen if x.startswith("big.item.")] == []  # each task's line came from its worker
        monkeypatch.setattr(ObjectStreams, "read", reading)
        again = b.view()
        assert [x for x in reads if x.startswith("big.item.")] == [], "no item task's segments read"
        # another process, nothing cached: every task read whole says what the workers' lines say
        out = subprocess.run(
            [sys.executable, "-m", "intentlog.cli", "--root", url, "backlog", "big", "--json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        key = ("item", "state", "task_state", "last_progress")
        whole = [tuple(r[k] for k in key) for r in json.loads(out.stdout)["items"]]
        assert [tuple(r[k] for k in key) for r in again.to_json()["items"]] == whole
        _a_later_append_is_read_again(ledger, b, seen)
