"""``StatusFold``: the status projection fed one event at a time says what ``task_status`` says of every prefix.

A backlog worker folds an item task once and reads the status twice (to decide the
acceptance after the result, and for the item's view-cache line after the release), so
the incremental fold must never drift from a whole fold, whatever the record holds.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import intentlog
from intentlog.projections.status import StatusFold, task_status

OPS = ["effect", "failing", "approval", "approve", "reject", "checkpoint", "accept", "note", "finish", "fail"]


def _run(task: intentlog.Task, op: str, n: int) -> None:
    if op == "effect":
        task.effect(f"e{n}", {"n": n}, lambda request: b"ok")
    elif op == "failing":
        try:
            task.effect(f"f{n}", {"n": n}, _refuse)
        except Exception:
            pass
    elif op == "approval":
        task.request_approval(f"a{n}", "go?")
    elif op in ("approve", "reject"):
        task.request_approval(f"b{n}", "go?")
        task.decide(f"b{n}", op, by="test")
    elif op == "checkpoint":
        task.checkpoint(f"p{n}")
    elif op == "accept":
        task.accept(by="test")
    elif op == "note":
        task.append("note.added", {"n": n})
    elif op == "finish":
        task.finish({"n": n})
    elif op == "fail":
        task.append("note.failed", {"why": n})


def _refuse(request: object) -> bytes:
    raise ConnectionError("refused")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(OPS), min_size=1, max_size=8))
def test_the_fold_fed_event_by_event_says_what_a_whole_fold_says_at_every_prefix(ops: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        with intentlog.open(Path(d) / "led") as ledger:
            task = ledger.task("t")
            for n, op in enumerate(ops):
                try:
                    _run(task, op, n)
                except intentlog.errors.IntentlogError:
                    pass  # refused by the record (a second finish, an approval decided twice): nothing written
            task.close()
            events = list(task.events())
        fold = StatusFold("t")
        assert fold.folded([])
        for i, ev in enumerate(events):
            fold.apply(ev)
            assert fold.status() == task_status(events[: i + 1], task_id="t"), (ops, i, ev.kind)
            assert fold.folded(events[: i + 1]) and not fold.folded(events[:i])
