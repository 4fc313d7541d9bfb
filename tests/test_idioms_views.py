"""A task that sleeps or waits is seen so everywhere: the tasks listing, gc (which keeps it), status."""

from __future__ import annotations

import datetime as dt

import pytest

import intentlog
from intentlog.idioms import Suspended
from intentlog.retention import plan_gc
from intentlog.views import task_rows


def _suspend(ledger: intentlog.Ledger) -> None:
    with pytest.raises(Suspended):
        ledger.task("sleeper").sleep_for(3600, name="nap", block=False)
    with pytest.raises(Suspended):
        ledger.task("waiter").wait_for_event("review", block=False)
    ledger.task("done").value("v", lambda: 1)
    ledger.close()


def test_the_listing_names_sleeping_and_waiting_tasks_interrupted(ledger: intentlog.Ledger) -> None:
    """`intentlog tasks` names an open sleep's recorded wake time and an open wait's event, as status does."""
    _suspend(ledger)
    with intentlog.open(ledger.root) as again:
        rows = {r.task: r for r in task_rows(again)}
        assert rows["sleeper"].state == rows["waiter"].state == "interrupted"
        assert rows["sleeper"].reason is not None and rows["sleeper"].reason.startswith("sleeping until ")
        assert rows["sleeper"].waiting == rows["sleeper"].reason
        assert rows["waiter"].waiting == "waiting for event 'review'"
        assert "intentlog signal waiter review" in rows["waiter"].next_step
        assert rows["done"].state == "queued"
        st = again.task("sleeper").status()
        assert st.waiting is not None and st.waiting.startswith("sleeping until ")


def test_gc_keeps_a_task_that_sleeps_or_waits(ledger: intentlog.Ledger) -> None:
    """Idle for a year by its timestamps, a sleeper and a waiter are protected; an idle finished task expires."""
    _suspend(ledger)
    with intentlog.open(ledger.root) as again:
        plan = plan_gc(again, max_age="1d", grace=0, now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=365))
        kept = {k.task: k for k in plan.kept}
        assert {t.task for t in plan.expired} >= {"done"}
        for task in ("sleeper", "waiter"):
            assert kept[task].rule == "protected" and "sleeping or waiting" in kept[task].detail, kept[task]
