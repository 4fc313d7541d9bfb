"""Many items in flight per worker process: an async step on one event loop, each item its own lease.

Real processes throughout: the supervisor, its worker processes and a provider on
127.0.0.1 with its own fsync'd receipt log (``backlog_inflight_steps``), the ground truth.
Every wait is for an event (a file the provider writes when a request reaches its gate, a
record, a process's exit), never a sleep racing a step.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from backlog_inflight_steps import receipts, response_for, start_provider, step, sync_step, wait_for

import intentlog
from intentlog.cli.progress import EXIT_NEEDS_PERSON
from intentlog.errors import UsageError

Env = dict[str, str]


@pytest.fixture
def provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Env, Path]]:
    gate = tmp_path / "gate"
    gate.mkdir()
    proc, env = start_provider(tmp_path, gate)
    monkeypatch.setenv("INFLIGHT_PORTFILE", env["INFLIGHT_PORTFILE"])
    try:
        yield env, gate
    finally:
        (gate / "open").write_text("")
        proc.kill()
        proc.wait()


def _events(root: Path, task: str) -> list[dict[str, Any]]:
    path = root / "tasks" / f"{task}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _backlog_records(root: Path, name: str, kind: str) -> list[dict[str, Any]]:
    return [ev["data"] for ev in _events(root, f"{name}.backlog") if ev["kind"] == kind]


def _lease_pids(root: Path, name: str, items: list[str]) -> dict[str, list[int]]:
    return {
        i: [ev["data"]["pid"] for ev in _events(root, f"{name}.item.{i}") if ev["kind"] == "lease.acquired"]
        for i in items
    }


def _started_keys(root: Path, name: str, items: list[str]) -> collections.Counter[str]:
    """Each provider key with an ``attempt.started`` in the record (the call's manifest names the key)."""
    out: collections.Counter[str] = collections.Counter()
    for i in items:
        evs = _events(root, f"{name}.item.{i}")
        keys = {
            ev["data"]["call"]: json.loads(ev["data"]["request"]["inline"])["key"]
            for ev in evs
            if ev["kind"] == "call.manifest"
        }
        for ev in evs:
            if ev["kind"] == "attempt.started":
                out[keys[ev["data"]["call"]]] += 1
    return out


def _assert_ground_truth(root: Path, tmp: Path, name: str, items: list[str]) -> None:
    """No key served twice; every receipt covered by an attempt.started in the record."""
    served = collections.Counter(receipts(tmp))
    assert not [k for k, n in served.items() if n > 1], served
    started = _started_keys(root, name, items)
    assert set(served) <= set(started), set(served) - set(started)


def _cli_run(root: Path, env: Env, name: str, *extra: str) -> subprocess.Popen[str]:
    args = [
        sys.executable, "-m", "intentlog.cli", "--root", str(root), "run", name,
        "--step", "backlog_inflight_steps:step", "--until-idle", *extra,
    ]  # fmt: skip
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _cli(root: Path, env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _settle(root: Path, env: Env, tmp: Path, name: str) -> int:
    """Reconcile every unknown effect from the receipt log (the ground truth), then unblock; how many."""
    served = set(receipts(tmp))
    ledger = intentlog.open(root)
    rows = [r for r in ledger.backlog(name).view().items if r.state == "blocked"]
    for row in rows:
        for cid, c in ledger.task(row.task).work_state().calls.items():
            if c.stage != "effect_unknown":
                continue
            key = f"{row.item}:{c.key[1:]}"
            if key in served:
                ev = tmp / f"evidence-{row.item}-{cid}"
                ev.write_bytes(response_for(key))
                r = _cli(root, env, "reconcile", row.task, cid, "--served", "--evidence", str(ev), "--by", "test")
            else:
                r = _cli(root, env, "reconcile", row.task, cid, "--not-served", "--by", "test")
            assert r.returncode == 0, r.stderr
    ledger.close()
    for row in rows:
        r = _cli(root, env, "unblock", name, row.item, "--by", "test")
        assert r.returncode == 0, r.stderr
    return len(rows)


def _worker_of(sup: int) -> list[int]:
    with open(f"/proc/{sup}/task/{sup}/children", encoding="ascii") as f:
        return [int(x) for x in f.read().split()]


# -- many items in one process ------------------------------------------------------------------


def test_items_in_flight_share_one_worker_process(tmp_path: Path, provider: tuple[Env, Path]) -> None:
    """Eight items of one worker are at the provider at once; each has its own lease; all done, none paid twice."""
    env, gate = provider
    (gate / "keys").write_text("*")
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    items = [f"i{n}" for n in range(8)]
    ledger.backlog("fly").add_many([{"item": i, "payload": {"item": i}} for i in items])
    ledger.close()
    run = _cli_run(root, env, "fly", "--workers", "1", "--in-flight", "8")
    try:
        for i in items:  # all eight held at the provider at once: one process holds them all
            wait_for(lambda i=i: (gate / f"{i}:0.waiting").exists(), f"{i} at the provider")
        pids = _lease_pids(root, "fly", items)
        assert len({p for ps in pids.values() for p in ps}) == 1, pids
        assert all(len(ps) == 1 for ps in pids.values())
        # the operator sees them: eight in flight in one process, the oldest, the run's limits
        (pid,) = {p for ps in pids.values() for p in ps}
        shown = _cli(root, env, "backlog", "fly")
        assert shown.returncode == 0, shown.stderr
        assert f"in flight: 8 (pid {pid} on " in shown.stdout, shown.stdout
        assert "oldest running: i" in shown.stdout
        assert "run open: 1 worker(s) x 8 in flight; quotas: none" in shown.stdout
        pace = json.loads(_cli(root, env, "backlog", "fly", "--json").stdout)["pace"]
        assert pace["in_flight"] == 8 and list(pace["by_process"].values()) == [8]
        assert pace["run"]["in_flight"] == 8 and pace["rate"] is None
        (gate / "open").write_text("")
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert "done: 8" in out
    last = max(
        datetime.fromisoformat(ev["ts"]).timestamp()
        for ev in _events(root, "fly.backlog")
        if ev["kind"] == "backlog.item_done"
    )
    with intentlog.open(root) as ledger:
        after = ledger.backlog("fly").view(now=last).pace
    assert after is not None and after.in_flight == 0 and after.run is None and after.settled_in_window == 8
    assert collections.Counter(receipts(tmp_path)) == {f"{i}:{e}": 1 for i in items for e in range(2)}
    _assert_ground_truth(root, tmp_path, "fly", items)
    # each item's task: its own lease, released, the result recorded under it
    for i in items:
        kinds = [ev["kind"] for ev in _events(root, f"fly.item.{i}")]
        assert kinds.count("lease.acquired") == 1 and kinds.count("lease.released") == 1
        assert kinds.count("quota.reserved") == kinds.count("attempt.started") == 2
    assert _cli(root, env, "verify").returncode == 0


def test_a_sync_and_an_async_step_run_one_backlog(tmp_path: Path, provider: tuple[Env, Path]) -> None:
    """Half the items by a plain step (one per process), the rest by an async one in flight: all done once."""
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    b = ledger.backlog("mix")
    b.add_many([{"item": f"s{n}", "payload": {"item": f"s{n}"}} for n in range(4)])
    view = b.run(sync_step, workers=2, until_idle=True)
    assert view.counts["done"] == 4
    b.add_many([{"item": f"a{n}", "payload": {"item": f"a{n}"}} for n in range(12)])
    view = b.run(step, workers=2, in_flight=6, until_idle=True)
    assert view.counts["done"] == 16
    ledger.close()
    items = [f"s{n}" for n in range(4)] + [f"a{n}" for n in range(12)]
    assert collections.Counter(receipts(tmp_path)) == {f"{i}:{e}": 1 for i in items for e in range(2)}


def test_a_quota_in_flight_caps_the_items_running_at_once(tmp_path: Path, provider: tuple[Env, Path]) -> None:
    """``in_flight=3``: never more than three requests at the provider at once, whatever each process could hold."""
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    b = ledger.backlog("cap")
    b.add_many([{"item": f"i{n}", "payload": {"item": f"i{n}"}} for n in range(24)])
    view = b.run(step, workers=2, in_flight=8, quota=["in_flight=3", "calls=1000/60s"], until_idle=True)
    ledger.close()
    assert view.counts["done"] == 24
    assert int((tmp_path / "receipts.jsonl.max").read_text()) <= 3
    reserved = [ev for n in range(24) for ev in _events(root, f"cap.item.i{n}") if ev["kind"] == "quota.reserved"]
    assert len(reserved) == 48


def test_in_flight_needs_an_async_step(tmp_path: Path) -> None:
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    b = ledger.backlog("x")
    b.add("a", {"item": "a"})
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(UsageError, match="not an async def"):
        b.run(sync_step, in_flight=4, until_idle=True)
    with pytest.raises(UsageError, match="in_flight must be a positive int"):
        b.run(step, in_flight=0, until_idle=True)
    with pytest.raises(UsageError, match="runs one item per slot"):
        b.run(step, in_flight=4, engine="dask", until_idle=True)
    ledger.close()
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


# -- stalls, kills and stops --------------------------------------------------------------------


def test_a_stalled_item_is_cancelled_alone(tmp_path: Path, provider: tuple[Env, Path]) -> None:
    """One item stalls at the provider: it is cancelled, its attempt unknown, the item blocked; its
    neighbours in the same process finish, and the process is never ended."""
    env, gate = provider
    (gate / "keys").write_text("i0:0")
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    items = [f"i{n}" for n in range(4)]
    b = ledger.backlog("st")
    b.add("i0", {"item": "i0"}, inactivity=1.0)  # its own limit: the neighbours are never judged stalled
    b.add_many([{"item": i, "payload": {"item": i}} for i in items[1:]])
    ledger.close()
    run = _cli_run(root, env, "st", "--workers", "1", "--in-flight", "4")
    try:
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == EXIT_NEEDS_PERSON, err  # the blocked item waits for a person
    assert "blocked: 1" in out and "done: 3" in out, out
    ended = _backlog_records(root, "st", "backlog.holder_ended")
    assert [(e["item"], e.get("cancelled")) for e in ended] == [("i0", True)]
    assert _backlog_records(root, "st", "backlog.holder_died") == []
    pids = _lease_pids(root, "st", items)
    assert len({p for ps in pids.values() for p in ps}) == 1, pids  # one process all along
    assert len(pids["i0"]) == 2  # cancelled, taken again, found unknown: blocked
    _assert_ground_truth(root, tmp_path, "st", items)
    (gate / "open").write_text("")
    assert _settle(root, env, tmp_path, "st") == 1
    r = _cli(root, env, "run", "st", "--step", "backlog_inflight_steps:step", "--in-flight", "4", "--until-idle")
    assert r.returncode == 0 and "done: 4" in r.stdout, r.stderr
    _assert_ground_truth(root, tmp_path, "st", items)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_a_worker_holding_many_items_killed_or_stopped(
    tmp_path: Path, provider: tuple[Env, Path], sig: signal.Signals
) -> None:
    """A worker holding six items, each served and waiting for its answer, is SIGKILLed or SIGSTOPped: every
    item is settled as a dead holder's (blocked: its attempt is unknown), none is paid twice; after the
    receipts settle them, a new run finishes them all without sending any key again."""
    env, gate = provider
    (gate / "keys").write_text("*")
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    items = [f"i{n}" for n in range(6)]
    ledger.backlog("k").add_many([{"item": i, "payload": {"item": i}} for i in items])
    ledger.close()
    # SIGKILL: no stall limit is ever reached (the kill is what settles them). SIGSTOP: the items stall once
    # stopped; the limit is long enough that a live loop is never asked to cancel them before the stop lands
    limits = ["--grace", "1"] + (["--inactivity", "6"] if sig == signal.SIGSTOP else [])
    run = _cli_run(root, env, "k", "--workers", "1", "--in-flight", "6", *limits)
    worker = 0
    try:
        for i in items:
            wait_for(lambda i=i: (gate / f"{i}:0.waiting").exists(), f"{i} served and held")
        (worker,) = {p for ps in _lease_pids(root, "k", items).values() for p in ps}
        assert worker in _worker_of(run.pid)
        os.kill(worker, sig)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
        if worker and sig == signal.SIGSTOP:
            try:
                os.kill(worker, signal.SIGCONT)  # ended by then: it can neither write nor send
            except ProcessLookupError:
                pass
    assert run.returncode == EXIT_NEEDS_PERSON, err  # the blocked items wait for a person
    assert "blocked: 6" in out, out
    settled = "backlog.holder_died" if sig == signal.SIGKILL else "backlog.holder_ended"
    recs = _backlog_records(root, "k", settled)
    assert sorted(r["item"] for r in recs) == items
    if sig == signal.SIGSTOP:
        assert all("event loop did not answer" in r["reason"] for r in recs), recs
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)  # reaped: gone
    _assert_ground_truth(root, tmp_path, "k", items)
    (gate / "open").write_text("")
    assert _settle(root, env, tmp_path, "k") == 6
    r = _cli(root, env, "run", "k", "--step", "backlog_inflight_steps:step", "--in-flight", "6", "--until-idle")
    assert r.returncode == 0 and "done: 6" in r.stdout, (r.stdout, r.stderr)
    assert collections.Counter(receipts(tmp_path)) == {f"{i}:{e}": 1 for i in items for e in range(2)}
    _assert_ground_truth(root, tmp_path, "k", items)
    assert _cli(root, env, "verify").returncode == 0


def test_the_docs_async_example_runs_and_a_second_run_sends_nothing(tmp_path: Path) -> None:
    import re

    text = (Path(__file__).parent.parent / "docs" / "backlog.md").read_text()
    code = next(c for c in re.findall(r"```python\n(.*?)```", text, re.S) if "async def step" in c)
    (tmp_path / "jobs.py").write_text(code)
    for _ in range(2):
        r = subprocess.run([sys.executable, "jobs.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and r.stdout.strip() == "200 done", (r.stdout, r.stderr)
    with intentlog.open(tmp_path / ".intentlog") as led:
        pids = set()
        for n in range(200):
            evs = list(led.task(f"nightly.item.m{n}").events())
            kinds = [e.kind for e in evs]
            assert kinds.count("attempt.started") == 1 and kinds.count("lease.acquired") == 1, (n, kinds)
            pids.update(e.data["pid"] for e in evs if e.kind == "lease.acquired")
        records = [(e.kind, e.data) for e in led.backlog("nightly").task.events() if "holder" in e.kind]
        assert len(pids) <= 2, (pids, records)  # two worker processes held all 200 items


def test_an_overrun_item_is_cancelled_and_counted_a_failed_attempt(tmp_path: Path, provider: tuple[Env, Path]) -> None:
    """``max_duration``: the item held at the provider is cancelled alone (``backlog.item_timed_out``), its
    neighbours finish in the same process, and with ``max_attempts=1`` it is failed."""
    _env, gate = provider
    (gate / "keys").write_text("slow:0")
    root = tmp_path / "led"
    ledger = intentlog.open(root)
    b = ledger.backlog("od")
    b.add("slow", {"item": "slow"}, priority=1, max_attempts=1, max_duration=1.0)  # its own limit alone
    b.add_many([{"item": f"n{k}", "payload": {"item": f"n{k}"}} for k in range(3)])
    view = b.run(step, workers=1, in_flight=4, until_idle=True)
    ledger.close()
    assert view.counts["failed"] == 1 and view.counts["done"] == 3, view.to_json()
    timed = _backlog_records(root, "od", "backlog.item_timed_out")
    assert [(t["item"], t.get("cancelled")) for t in timed] == [("slow", True)]
    pids = _lease_pids(root, "od", ["slow", "n0", "n1", "n2"])
    assert len({p for ps in pids.values() for p in ps}) == 1, pids
    _assert_ground_truth(root, tmp_path, "od", ["slow", "n0", "n1", "n2"])
