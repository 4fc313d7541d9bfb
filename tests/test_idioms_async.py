"""The awaited forms: asleep_for / asleep_until / await_event keep the event loop free and record as the sync ones."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import pytest

import intentlog
from intentlog.idioms import Suspended
from intentlog.idioms import sleep as sleep_mod
from intentlog.projections.idioms import EVENT_RECEIVED, SLEEP_STARTED, WOKE


def _kinds(task: intentlog.Task) -> list[str]:
    return [ev.kind for ev in task.events()]


def test_asleep_records_once_and_a_re_run_pauses_what_is_left(
    ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The awaited sleep records the wake time once; the re-run awaits only the rest, then records waking once."""
    now = [2_000_000_000.0]
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(sleep_mod, "_now", lambda: now[0])
    monkeypatch.setattr(sleep_mod, "_apause", pause)

    async def first() -> str:
        with intentlog.open(ledger_root) as ledger:
            with pytest.raises(Suspended) as got:
                await ledger.task("t").asleep_for(50, name="nap", block=False)
            assert got.value.until is not None
            return got.value.until

    until = asyncio.run(first())
    now[0] += 20

    async def again() -> str:
        with intentlog.open(ledger_root) as ledger:
            when = dt.datetime.fromtimestamp(now[0] + 9999, dt.timezone.utc)
            return await ledger.task("t").asleep_until(when, name="nap")

    assert asyncio.run(again()) == until
    assert sum(pauses) == pytest.approx(30)
    with intentlog.open(ledger_root) as ledger:
        kinds = _kinds(ledger.task("t"))
    assert kinds.count(SLEEP_STARTED) == 1 and kinds.count(WOKE) == 1


def test_await_event_leaves_the_loop_free_for_the_signal(ledger: intentlog.Ledger) -> None:
    """One coroutine awaits the event while another, on the same loop, signals it: the wait returns the payload."""
    task = ledger.task("t")

    async def main() -> object:
        waiting = asyncio.create_task(task.await_event("review", poll=0.05))
        while not any(ev.kind == "task.event_awaited" for ev in task.events()):
            await asyncio.sleep(0.01)  # waiting for the record to appear
        await asyncio.to_thread(ledger.signal, "t", "review", {"ok": True})
        return await asyncio.wait_for(waiting, 60)

    assert asyncio.run(main()) == {"ok": True}
    assert _kinds(task).count(EVENT_RECEIVED) == 1
    assert asyncio.run(task.await_event("review")) == {"ok": True}  # from the record
