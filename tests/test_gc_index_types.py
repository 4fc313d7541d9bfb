"""An index entry of the wrong types (``cache/index-gc.json``, ``cache/index-rows.json``), with a valid
block digest and the stream's real facts, is not used: the stream is read instead, and the plan or the
listing is what the stream says -- never a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from blake3 import blake3

import intentlog
from intentlog.retention import plan_gc
from intentlog.viewcache.index import INDEX_FORMAT, facts_of
from intentlog.views import task_rows


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), *args], capture_output=True, text=True, check=False
    )


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under the ledger but cache/ (derived), with its bytes."""
    out: dict[str, bytes] = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "cache"]
        for f in files:
            out[os.path.join(dirpath, f)] = Path(dirpath, f).read_bytes()
    return out


def _forge(led: intentlog.Ledger, part: str, task: str, value: object) -> None:
    st = os.lstat(led.tasks_dir / f"{task}.jsonl")
    body = orjson.dumps([task, *facts_of(st), value]) + b"\n"
    (led.root / "cache").mkdir(exist_ok=True)
    (led.root / "cache" / f"index-{part}.json").write_bytes(
        INDEX_FORMAT + b"\n" + b"#%d %s\n" % (len(body), blake3(body).hexdigest().encode()) + body
    )


def _one_closed_task(led: intentlog.Ledger) -> None:
    t = led.task("a")
    t.append("note", {"x": 1})
    t.close()  # no writer lock held: the plan's rule for it comes from its age alone


# -- gc's preview ------------------------------------------------------------------------------------


D = "blake3:" + "0" * 64
TS = "2026-01-01T00:00:00.000000Z"
GOOD = [D, "s", 1, TS, "complete", None, [], [], None, []]


@pytest.mark.parametrize(
    ("at", "bad"),
    [
        (0, 7), (1, 7), (2, "1"), (2, True), (2, -1), (3, 12345), (3, "yesterday"), (4, 3), (4, "not-a-state"),
        (5, 1), (6, ["zz"]), (6, [1]), (7, [None]), (8, 7), (9, None), (9, [1]),
    ],
)  # fmt: skip
def test_a_gc_index_entry_of_the_wrong_type_means_the_stream_is_read(
    tmp_path: Path, at: int, bad: object
) -> None:
    root = tmp_path / "led"
    with intentlog.open(root) as led:
        _one_closed_task(led)
        truth = plan_gc(led)  # read from the stream (no index yet)
        value = list(GOOD)
        value[at] = bad
        _forge(led, "gc", "a", value)
        before = _tree(root)
        plan = plan_gc(led)
    assert plan.kept == truth.kept  # what the stream says, not the entry
    assert plan.incomplete == truth.incomplete
    assert _tree(root) == before
    p = _cli(root, "gc")
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_well_typed_gc_entry_is_still_used(tmp_path: Path) -> None:
    """The check rejects only the wrong types: a forged entry of the right types with the stream's facts
    is taken as it is (the index is a cache for the preview; the apply reads every stream)."""
    root = tmp_path / "led"
    with intentlog.open(root) as led:
        _one_closed_task(led)
        value = list(GOOD)
        value[3] = "2001-01-01T00:00:00.000000Z"
        _forge(led, "gc", "a", value)
        plan = plan_gc(led)
    assert [t.task for t in plan.expired] == ["a"]


# -- the tasks listing -------------------------------------------------------------------------------

ROW = ["queued", None, "ok", None, 1, TS, None, "run", "nothing to do", None, None]


@pytest.mark.parametrize(
    ("at", "bad"),
    [
        (0, 7), (0, "no-such-state"), (1, 7), (2, None), (2, "fine"), (3, ["x"]), (4, "1"), (4, True), (4, -1),
        (5, 12345), (6, 7), (7, None), (8, 7), (9, 7), (10, ["p"]),
    ],
)  # fmt: skip
def test_a_rows_index_entry_of_the_wrong_type_means_the_stream_is_read(
    tmp_path: Path, at: int, bad: object
) -> None:
    root = tmp_path / "led"
    with intentlog.open(root) as led:
        _one_closed_task(led)
        truth = [r.to_json() for r in task_rows(led)]  # read from the stream (no index yet)
        row = list(ROW)
        row[at] = bad
        _forge(led, "rows", "a", [row, None])
        before = _tree(root)
        got = [r.to_json() for r in task_rows(led)]
    assert got == truth
    assert _tree(root) == before
    p = _cli(root, "tasks", "--json")
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    assert [r["state"] for r in orjson.loads(p.stdout)] == [truth[0]["state"]]


def test_a_well_typed_rows_entry_is_still_used(tmp_path: Path) -> None:
    """Only the wrong types are rejected: a right-typed entry with the stream's facts is taken (a display cache)."""
    root = tmp_path / "led"
    with intentlog.open(root) as led:
        _one_closed_task(led)
        row = list(ROW)
        row[6] = "a phase of its own"
        _forge(led, "rows", "a", [row, None])
        got = [r.phase for r in task_rows(led)]
    assert got == ["a phase of its own"]
