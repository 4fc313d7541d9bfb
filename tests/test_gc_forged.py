"""gc fed what it did not write: a stream file misnamed in bytes that are not UTF-8, an index entry
of the wrong types, no temp folder for its scratch file. Each gives a plan or a library error,
never a traceback, and leaves the ledger's bytes as they were.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

import intentlog
from intentlog.retention import plan_gc
from intentlog.viewcache.index import IndexJoin, iter_index

BAD_NAME = b"\xff.backlog.jsonl"


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), *args],
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        check=False,
    )


def _tree(root: Path) -> dict[bytes, bytes]:
    """Every file under the ledger but cache/ (derived) and gc.lock (an apply's own lock), with its bytes."""
    out: dict[bytes, bytes] = {}
    for dirpath, dirs, files in os.walk(os.fsencode(root)):
        dirs[:] = [d for d in dirs if d != b"cache"]
        for f in files:
            if f == b"gc.lock":
                continue
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[p] = fh.read()
    return out


def _ledger_with_misnamed_backlog(root: Path) -> None:
    with intentlog.open(root) as led:
        led.task("a").append("note", {"x": 1})
        src = led.tasks_dir / "a.jsonl"
        data = src.read_bytes()
    with open(os.path.join(os.fsencode(root), b"tasks", BAD_NAME), "wb") as f:
        f.write(data)


@pytest.mark.parametrize("args", [(), ("--apply",)])
def test_a_backlog_stream_named_in_bytes_that_are_not_utf8_is_reported_not_a_traceback(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    root = tmp_path / "led"
    _ledger_with_misnamed_backlog(root)
    before = _tree(root)
    p = _cli(root, "gc", *args)
    assert "Traceback" not in p.stderr, p.stderr
    assert "not named like a task stream" in p.stdout + p.stderr
    assert _tree(root) == before  # nothing deleted, nothing written (the misnamed file is kept)


def test_the_plan_names_the_misnamed_backlog_stream_and_keeps_the_others(tmp_path: Path) -> None:
    root = tmp_path / "led"
    _ledger_with_misnamed_backlog(root)
    with intentlog.open(root) as led:
        plan = plan_gc(led)
    assert "tasks/\\xff.backlog.jsonl is not named like a task stream; move it out of tasks/" in plan.incomplete
    assert [k.task for k in plan.kept] == ["a"]


def test_an_index_entry_that_cannot_be_encoded_is_dropped_the_others_written(ledger: intentlog.Ledger) -> None:
    facts = (1, 2, 3, 4, 5)
    with IndexJoin(ledger.root, "gc", write=True, read=False) as join:
        for task, value in (("a", [1]), ("b\udcff", [2]), ("c", ["\udcff"]), ("d", [4])):
            join.find(task)
            join.put(task, facts, value)
        join.commit()
    assert [(t, v) for t, _, v in iter_index(ledger.root, "gc")] == [("a", [1]), ("d", [4])]


def test_a_misnamed_backlog_stream_still_keeps_the_tasks_named_like_its_items(tmp_path: Path) -> None:
    """A backlog stream's name one character too long for a task id (129) is never read, but an item
    task named ``B.item.x`` (128: a valid id) is kept for it, never deleted: gc does not guess."""
    root = tmp_path / "led"
    backlog = "b" * 121
    item = f"{backlog}.item.x"
    with intentlog.open(root) as led:
        for task in ("old", item):
            t = led.task(task)
            t.append("note", {"x": 1})
            t.close()
        (led.tasks_dir / f"{backlog}.backlog.jsonl").write_bytes((led.tasks_dir / "old.jsonl").read_bytes())
        later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400)
        plan = plan_gc(led, now=later)
    assert [t.task for t in plan.expired] == ["old"]  # the policy does delete an old task...
    kept = {k.task: k.rule for k in plan.kept}
    assert kept == {item: "backlog"}  # ...but not the one the unreadable backlog may still need
    assert any("not named like a task stream" in line for line in plan.incomplete)
