"""Shared helpers of the backlog chaos tests (Dask, object store): the receipt log read, holders found, items settled.

The receipt log (``backlog_steps.serve``) is the ground truth; everything here reads the
record through the public API only, so the same helpers serve a folder ledger and one
on the object store.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from backlog_steps import read_receipts, response_for

import intentlog
from intentlog.errors import TaskBusy


def receipt_counts(path: Path) -> dict[str, int]:
    """How many times the provider served each key."""
    out: dict[str, int] = {}
    for r in read_receipts(str(path)) if path.exists() else []:
        out[r["key"]] = out.get(r["key"], 0) + 1
    return out


def running_holders(ledger: intentlog.Ledger, backlog: str, items: list[str]) -> list[int]:
    """The pids whose ``lease.acquired`` is the last lease record of an item: the processes holding items now."""
    pids = []
    for item in items:
        t = ledger.task(f"{backlog}.item.{item}")
        if not t.exists():
            continue
        last = None
        for ev in t.events():
            if ev.kind in ("lease.acquired", "lease.released"):
                last = ev
        if last is not None and last.kind == "lease.acquired":
            pids.append(int(last.data["pid"]))
    return pids


def settle(ledger: intentlog.Ledger, backlog: str, served: set[str]) -> int:
    """Reconcile every unknown effect from the receipt log (served: its answer as evidence), then unblock.

    Through the library (``Task.reconcile``, ``Backlog.unblock``); the number of items unblocked.
    An item whose task is still leased (``TaskBusy``) is left for after the next run.
    """
    n = 0
    bl = ledger.backlog(backlog)
    for row in bl.view().items:
        if row.state == "done":
            continue
        assert row.state in ("blocked", "queued", "scheduled"), row
        if row.state != "blocked":
            continue
        task = ledger.task(row.task)
        try:
            for cid, c in task.work_state().calls.items():
                if c.stage != "effect_unknown":
                    continue
                pkey = f"{row.item}:{c.key[1:]}"
                if pkey in served:
                    task.reconcile(cid, "served", evidence=response_for(pkey), by="test")
                else:
                    task.reconcile(cid, "not_served", by="test")
        except TaskBusy:
            # on a store, a holder SIGKILLed with its supervisor keeps the item's lease until the
            # next run takes it back (after `inactivity`): that item is settled after that run
            continue
        finally:
            task.close()
        bl.unblock(row.item, by="test")
        n += 1
    return n


def check_record(ledger: intentlog.Ledger, backlog: str, receipts: Path, items: list[str], effects: int) -> None:
    """No key served twice; every receipt covered by an attempt.started; no resend accepted; every item done once."""
    rows = read_receipts(str(receipts))
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)), f"a key was served twice: {sorted(k for k in keys if keys.count(k) > 1)}"
    assert set(keys) == {f"{i}:{j}" for i in items for j in range(effects)}
    for pkey in keys:
        item, j = pkey.split(":")
        evs = list(ledger.task(f"{backlog}.item.{item}").events())
        calls = {e.data["call"] for e in evs if e.kind == "call.requested" and e.data["key"] == f"e{j}"}
        assert any(e.kind == "attempt.started" and e.data["call"] in calls for e in evs), (
            f"receipt {pkey} has no attempt.started in the record"
        )
        assert not any(e.kind == "effect.reconciled" and e.data.get("outcome") == "resend" for e in evs)
    view = ledger.backlog(backlog).view()
    assert view.counts["done"] == len(items), view.to_json()
    for row in view.items:
        res = [e for e in ledger.task(row.task).events() if e.kind == "item.returned"]
        assert len(res) == 1 and res[0].data["result"] == {"served": [f"{row.item}:{j}" for j in range(effects)]}


def _signal(pid: int, sig: int) -> bool:
    """Send ``sig`` to ``pid``; False when the process ended since it was listed (nothing to hit: roll again)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def kill_at_random(
    sup: subprocess.Popen[bytes],
    rng: random.Random,
    victims: Callable[[], list[int]],
    did: dict[str, int],
    stopped: list[int],
    *,
    seconds: float,
    pause: tuple[float, float],
    odds: tuple[float, float, float],
    first: float = 120.0,
) -> None:
    """Until the supervisor ends or ``seconds`` pass, after each pause roll once (``odds`` are cumulative):
    SIGKILL the supervisor (and stop), SIGKILL one of ``victims()``, or SIGSTOP one (once, into ``stopped``).

    The ``seconds`` start when ``victims()`` first names a process (waited for, up to ``first``
    seconds, or until the supervisor ends): a run slow to start on a loaded machine does not
    use up the window before there is anything to hit.
    Counts go to ``did``; the caller kills what is left and continues ``stopped`` afterwards.
    """
    p_sup, p_kill, p_stop = odds
    started = time.monotonic()
    while sup.poll() is None and not victims() and time.monotonic() - started < first:
        time.sleep(0.02)
    deadline = time.monotonic() + seconds
    while sup.poll() is None and time.monotonic() < deadline:
        time.sleep(rng.uniform(*pause))
        pids = victims()
        roll = rng.random()
        if roll < p_sup:
            sup.kill()
            did["sup_kill"] += 1
            return
        if pids and roll < p_kill:
            if _signal(rng.choice(pids), signal.SIGKILL):
                did["worker_kill"] += 1
        elif pids and roll < p_stop and not stopped:
            pid = rng.choice(pids)
            if _signal(pid, signal.SIGSTOP):
                stopped.append(pid)
                did["worker_stop"] += 1
