"""The operator's pace of a backlog: a pure fold over the backlog stream and the running rows."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from intentlog.eventlog.format import Event
from intentlog.projections.backlogs import PACE_WINDOW, PaceFold, Running

NOW = 1_800_000_000.0


def _ev(kind: str, at: float, **data: object) -> Event:
    ts = datetime.fromtimestamp(at, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    return Event(0, kind, ts, None, dict(data), "")


@given(st.lists(st.floats(min_value=0, max_value=300), max_size=40))
def test_the_rate_counts_the_items_settled_in_the_window_before_now(ages: list[float]) -> None:
    fold = PaceFold()
    for n, age in enumerate(ages):
        fold.apply(_ev("backlog.item_done" if n % 2 else "backlog.item_failed", NOW - age, item=f"i{n}"))
    pace = fold.pace([], NOW)
    inside = sum(1 for a in ages if a <= PACE_WINDOW)
    assert pace.settled_in_window == inside
    assert pace.rate == (inside / PACE_WINDOW if inside else None)
    assert pace.in_flight == 0 and pace.oldest is None
    rate_line = f"rate: {inside / PACE_WINDOW:.2f} items/s ({inside} settled in the last 60 s)"
    assert pace.lines() == ([rate_line] if inside else [])


def test_in_flight_per_process_the_oldest_and_the_open_run() -> None:
    fold = PaceFold()
    fold.apply(_ev("backlog.run_started", NOW - 100, pid=7, host="h", workers=2, in_flight=50, quota=["calls=9/1s"]))
    running = [
        Running("b", 11, "h", "2027-01-15T08:00:05Z"),
        Running("a", 11, "h", "2027-01-15T08:00:01Z"),
        Running("c", 12, "h", "2027-01-15T08:00:09Z"),
    ]
    pace = fold.pace(running, NOW)
    assert pace.in_flight == 3
    assert pace.by_process == {"pid 11 on h": 2, "pid 12 on h": 1}
    assert pace.oldest == running[1]
    assert pace.lines() == [
        "run open: 2 worker(s) x 50 in flight; quotas: calls=9/1s",
        "in flight: 3 (pid 11 on h: 2, pid 12 on h: 1)",
        "oldest running: a since 2027-01-15T08:00:01Z (pid 11 on h)",
    ]
    assert pace.to_json()["oldest_running"] == {"item": "a", "pid": 11, "host": "h", "since": "2027-01-15T08:00:01Z"}
    fold.apply(_ev("backlog.run_stopped", NOW - 1, reason="idle"))
    assert fold.pace([], NOW).run is None
