"""The backlog crash matrix with the ledger on SeaweedFS and the items on Dask: the receipt log as ground truth.

Rounds of ``intentlog --root s3://… run --engine dask`` (a real LocalCluster of 2 worker
processes) are interrupted at random moments: a Dask worker holding an item SIGKILLed, a
Dask worker SIGSTOPped (and continued after the round), the supervisor SIGKILLed (its
backlog stream and its items left leased on the store: the next run takes them back
after they stood still, fencing the dead holders). Between rounds, blocked items are
settled from the receipt log through the library (``Task.reconcile``, ``Backlog.unblock``).
Afterwards: no key served twice and no resend accepted, every receipt covered by an
``attempt.started``, every item done with one result, and ``verify`` clean.

Size: ``BACKLOG_STORE_ITEMS`` / ``BACKLOG_STORE_ROUNDS`` / ``BACKLOG_STORE_SEED`` (the
defaults keep it under a minute; e.g. 24 items and 10 rounds for a longer run).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import s3_server
from backlog_chaos import check_record, kill_at_random, receipt_counts, running_holders, settle

import intentlog

TESTS = Path(__file__).parent
ITEMS = int(os.environ.get("BACKLOG_STORE_ITEMS", "8"))
ROUNDS = int(os.environ.get("BACKLOG_STORE_ROUNDS", "3"))
EFFECTS = 2
NAMES = [f"i{n}" for n in range(ITEMS)]

if os.environ.get("CI"):
    import distributed  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip("distributed", reason="the Dask engine tests need: pip install 'intentlog[dask]'")


def _run_args(url: str) -> list[str]:
    return [
        sys.executable, "-m", "intentlog.cli", "--root", url, "run", "crash", "--step", "backlog_steps:step",
        "--engine", "dask", "--workers", "2", "--until-idle", "--inactivity", "1.5", "--grace", "1",
    ]  # fmt: skip


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = []
        try:
            threads = os.listdir(f"/proc/{p}/task")  # each thread lists the children it started
        except OSError:
            threads = []
        for tid in threads:
            try:
                with open(f"/proc/{p}/task/{tid}/children", encoding="ascii") as f:
                    kids += [int(x) for x in f.read().split()]
            except OSError:
                pass
        out += kids
        todo += kids
    return out


def _chaos_round(url: str, env: dict[str, str], rng: random.Random, ledger: intentlog.Ledger) -> dict[str, int]:
    did = {"sup_kill": 0, "worker_kill": 0, "worker_stop": 0}
    sup = subprocess.Popen(_run_args(url), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: set[int] = set()
    stopped: list[int] = []

    def holders() -> list[int]:
        family = set(_descendants(sup.pid))
        seen.update(family)
        return [p for p in running_holders(ledger, "crash", NAMES) if p in family]

    try:
        kill_at_random(sup, rng, holders, did, stopped, seconds=8.0, pause=(0.3, 0.9), odds=(0.12, 0.55, 0.7))
    finally:
        if sup.poll() is None:
            sup.kill()
        sup.wait()
        for pid in stopped:  # continued after the round: ended or fenced by then, it can neither write nor send
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
        for pid in seen:  # the cluster's processes we saw, should any outlive their supervisor
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return did


def test_crash_matrix_on_the_store_with_dask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = s3_server.seaweed()
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    receipts = tmp_path / "receipts.jsonl"
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(receipts))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("BACKLOG_SLEEP", "0.2")
    env = dict(os.environ)
    loc = s3_server.fresh_location()
    url = f"s3://{loc.bucket}/{loc.prefix}"
    rng = random.Random(int(os.environ.get("BACKLOG_STORE_SEED", "18")))
    ledger = intentlog.open(url)
    ledger.backlog("crash").add_many(
        [{"item": n, "payload": {"item": n, "effects": EFFECTS}, "priority": rng.randrange(3)} for n in NAMES]
    )
    totals = {"sup_kill": 0, "worker_kill": 0, "worker_stop": 0, "settled": 0, "fenced": 0}
    for _ in range(ROUNDS):
        for k, v in _chaos_round(url, env, rng, ledger).items():
            totals[k] += v
        assert all(v == 1 for v in receipt_counts(receipts).values()), receipt_counts(receipts)
        totals["settled"] += settle(ledger, "crash", set(receipt_counts(receipts)))
    env["BACKLOG_SLEEP"] = "0"
    for _ in range(6):  # then runs without chaos until every item is done
        r = subprocess.run(_run_args(url), env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode in (0, 3), r.stderr  # 3: items left for a person, settled next
        if settle(ledger, "crash", set(receipt_counts(receipts))) == 0:
            break
    assert totals["worker_kill"] + totals["sup_kill"] + totals["worker_stop"] > 0, totals
    check_record(ledger, "crash", receipts, NAMES, EFFECTS)
    totals["fenced"] = sum(1 for e in ledger.backlog("crash").task.events() if e.data.get("fenced"))
    ledger.close()
    v = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", url, "verify"], env=env, capture_output=True, text=True
    )
    assert v.returncode == 0, v.stdout + v.stderr
    assert "0 error" in v.stdout, v.stdout
    print(json.dumps(totals))
