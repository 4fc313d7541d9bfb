"""Property: any sequence of idiom calls, run again from its record, returns what the first run returned and
writes nothing new; the record passes verify.

The clocks of sleep and events are replaced by one in the past (no test waits for real
time); the events a run waits for are signalled before it, so every wait returns.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import intentlog
from intentlog.checker import verify_path
from intentlog.idioms import events as events_mod
from intentlog.idioms import sleep as sleep_mod

NAMES = st.sampled_from(["a", "b", "c"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("value"), NAMES, JSON),
        st.tuples(st.just("step"), NAMES, JSON),
        st.tuples(st.just("sleep"), NAMES, st.floats(0, 1000)),
        st.tuples(st.just("event"), NAMES, JSON),
        st.tuples(st.just("child"), NAMES, JSON),
    ),
    max_size=8,
)


def _run(root: Path, ops: list[tuple[str, str, Any]]) -> list[Any]:
    out: list[Any] = []
    with intentlog.open(root) as ledger:
        task = ledger.task("t")

        @task.step(name="double")
        def double(x: Any) -> list[Any]:
            return [x, x]

        for kind, name, arg in ops:
            if kind == "value":
                out.append(task.value(f"v-{name}", lambda arg=arg: arg))
            elif kind == "step":
                out.append(double(arg))
            elif kind == "sleep":
                out.append(task.sleep_for(arg, name=f"s-{name}"))
            elif kind == "event":
                try:
                    ledger.signal("t", f"e-{name}", arg)
                except intentlog.EventConflict:
                    pass  # a name signalled before with another payload: the first counts
                out.append(task.wait_for_event(f"e-{name}"))
            else:
                try:
                    out.append(task.spawn(f"child-{name}", arg, run=lambda child, arg=arg: arg).id)
                except intentlog.UsageError as exc:
                    out.append(str(exc))  # another payload under a spawned id: refused, the same on both runs
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_a_re_run_returns_what_the_first_run_returned_and_writes_nothing(ops: list[tuple[str, str, Any]]) -> None:
    now = [time.time() - 1e6]  # the fake clock stays in the past: a recorded wake time precedes its real waking
    clock = {"_now": lambda: now[0], "_pause": lambda s: now.__setitem__(0, now[0] + s)}
    saved = {m: {k: getattr(m, k) for k in clock} for m in (sleep_mod, events_mod)}
    for m in saved:
        for k, v in clock.items():
            setattr(m, k, v)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "ev"
            first = _run(root, ops)
            size = {p: p.stat().st_size for p in (root / "tasks").glob("*.jsonl")}
            assert _run(root, ops) == first
            assert {p: p.stat().st_size for p in (root / "tasks").glob("*.jsonl")} == size
            report = verify_path(root)
            assert not [p for p in report.problems if p.severity == "error"], report.render()
    finally:
        for m, attrs in saved.items():
            for k, v in attrs.items():
                setattr(m, k, v)
