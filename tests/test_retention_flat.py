"""gc's plan in bounded memory: per-task records in a scratch file, the deletion order in arrays.

The records a scan writes (:class:`~intentlog.retention.rows.TaskRows`) and the kept tasks
read back from them (:class:`~intentlog.retention.rows.KeptTasks`) are held to a list
model, with a scratch file small enough that every case crosses from memory to disk; the
deletion order sorted in runs and merged is held to ``sorted``; a plan made with a tiny
scratch budget is the plan made with the default one, and an apply carries it out exactly
(the ledger read back from disk). The plan and result print and dump the bytes of their
whole documents, written a kept task at a time.
"""

from __future__ import annotations

import datetime as dt
import os
from array import array
from pathlib import Path
from typing import Any

import orjson
import pytest
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

import intentlog
from intentlog.eventlog import canonical
from intentlog.eventlog.format import encode_line
from intentlog.retention import KeptTask, apply_gc, keep, plan_gc, rows
from intentlog.retention import plan as plan_module

TS = "%Y-%m-%dT%H:%M:%S.%fZ"
UTC = dt.timezone.utc
OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS


def _record(i: int, young: bool) -> list[Any]:
    ts = f"2026-01-01T00:00:{i % 60:02d}.000000Z"
    return [f"t{i:04d}", None if young else "keep", "" if young else f"note {i}", 100 + i, ts, "done",
            f"blake3:{i:064x}", 3, f"s{i}", [i, 100 + i, i]]  # fmt: skip


def _model_kept(n: int, gone: set[int]) -> list[KeptTask]:
    out = []
    for i in range(n):
        if i in gone:
            continue
        r = _record(i, i % 3 != 0)
        young = r[1] is None
        rule, detail = ("young", f"last activity {r[4]}") if young else (r[1], r[2])
        out.append(KeptTask(r[0], rule, detail, r[3], r[4], r[5]))
    return out


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 120), data=st.data())
def test_kept_tasks_read_back_are_the_list_they_stand_for(n: int, data: st.DataObject) -> None:
    gone = data.draw(st.sets(st.integers(0, max(0, n - 1)), max_size=n)) if n else set()
    saved = rows.SPOOL_BYTES
    rows.SPOOL_BYTES = 512  # a few records in memory, the rest on disk
    try:
        table = rows.TaskRows()
    finally:
        rows.SPOOL_BYTES = saved
    for i in range(n):
        table.append(_record(i, i % 3 != 0))
    kept = rows.KeptTasks(table, sorted(gone))
    model = _model_kept(n, gone)
    assert len(kept) == len(model) and list(kept) == model and list(kept) == model  # re-iterable
    assert [kept[i] for i in range(len(model))] == model
    assert [kept[-i] for i in range(1, len(model) + 1)] == [model[-i] for i in range(1, len(model) + 1)]
    assert kept == tuple(model) and kept[1:3] == tuple(model[1:3])
    assert [(a, b) for a, b in zip(kept, kept, strict=True)] == [(m, m) for m in model]  # interleaved readers
    for i in sorted(gone):
        assert table.get(i)[0] == f"t{i:04d}"  # an expired task's record, by its place
    with pytest.raises(IndexError):
        kept[len(model)]


@settings(max_examples=100, deadline=None)
@given(ts=st.lists(st.integers(-(2**62), 2**62) | st.sampled_from([0, 5, 5, 7]), max_size=60), data=st.data())
def test_the_deletion_order_is_sorted_by_age_then_id(ts: list[int], data: st.DataObject) -> None:
    eligible = data.draw(st.lists(st.booleans(), min_size=len(ts), max_size=len(ts)))
    last_us = array("q", ts)
    idx = array("i", [i for i, e in enumerate(eligible) if e])
    saved = plan_module._RUN
    plan_module._RUN = 3  # many runs to merge
    try:
        got = list(plan_module.oldest_first(idx, last_us))
    finally:
        plan_module._RUN = saved
    assert got == sorted(idx, key=lambda i: (ts[i], i))


def _rewrite_ts(path: Path, days: float) -> None:
    """Rewrite a closed stream with every timestamp ``days`` earlier, re-chaining the lines."""
    prev: str | None = None
    out = []
    for seq, line in enumerate(path.read_bytes().splitlines(keepends=True)):
        obj = orjson.loads(line)
        ts = (dt.datetime.strptime(obj["ts"], TS) - dt.timedelta(days=days)).strftime(TS)
        new = encode_line(obj["kind"], canonical.dumps(obj["data"]), prev, seq, ts)
        prev = "blake3:" + blake3(new).hexdigest()
        out.append(new)
    path.write_bytes(b"".join(out))


def _mixed_ledger(root: Path) -> intentlog.Ledger:
    """Tasks of many ages, each with its own blob; one kept by a mark; one never dated."""
    led = intentlog.open(root)
    for i in range(60):
        t = led.task(f"job-{i:02d}")
        t.append("note", {"blob": led.artifacts.put(f"payload {i}".encode() * 50).to_json()})
        t.close()
        _rewrite_ts(root / "tasks" / f"job-{i:02d}.jsonl", days=i)
    keep(led, "job-50", note="evidence")
    old = dt.datetime.now(UTC).timestamp() - 7 * 86400
    for p in (root / "objects").glob("*/*"):
        os.utime(p, (old, old))
    return led


def test_a_plan_spilled_to_disk_is_the_plan_held_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    led = _mixed_ledger(tmp_path / "l")
    now = dt.datetime.now(UTC)
    policy: dict[str, Any] = {"max_age": "40d", "max_size": "30KiB", "grace": "1h", "now": now}
    held = plan_gc(led, **policy)
    monkeypatch.setattr(rows, "SPOOL_BYTES", 256)
    spilled = plan_gc(led, **policy)
    assert spilled.to_json() == held.to_json() and spilled.kept == held.kept
    doc = held.to_json()
    assert {e["reason"] for e in doc["expired"]} == {"age", "size"} and doc["blobs"]
    ages = [(e["last_activity"], e["task"]) for e in doc["expired"]]
    assert ages == sorted(ages)  # oldest first, then the size cap takes the next oldest
    assert {k["task"]: k["rule"] for k in doc["kept"]}["job-50"] == "keep"
    assert b"".join(spilled.iter_json()) == orjson.dumps(doc, option=OPTIONS)
    assert "\n".join(spilled.iter_render()) == held.render()
    result = apply_gc(led, spilled)
    assert result.exact and sorted(result.deleted) == sorted(e["task"] for e in doc["expired"])
    assert b"".join(result.iter_json()) == orjson.dumps(result.to_json(), option=OPTIONS)
    assert "\n".join(result.iter_render()) == result.render()
    on_disk = sorted(p.stem for p in (tmp_path / "l" / "tasks").glob("*.jsonl"))
    assert on_disk == sorted(k["task"] for k in doc["kept"])
    left = {p.parent.name + p.name for p in (tmp_path / "l" / "objects").glob("*/*")}
    assert not left & {b["digest"].removeprefix("blake3:") for b in doc["blobs"]}


def test_an_empty_ledger_dumps_an_empty_kept_list(tmp_path: Path) -> None:
    led = intentlog.open(tmp_path / "e")
    plan = plan_gc(led)
    assert len(plan.kept) == 0 and list(plan.kept) == []
    assert b"".join(plan.iter_json()) == orjson.dumps(plan.to_json(), option=OPTIONS)
    assert b'"kept": [],' in b"".join(plan.iter_json())


def test_a_record_with_text_that_is_not_utf8_is_kept_escaped() -> None:
    table = rows.TaskRows()
    table.append(["t1", "unreadable", "cannot be read: \udcff", 1, None, None, None, 0, None, [0, 0, 0]])
    table.append(_record(2, True))
    assert table.get(0)[2] == "cannot be read: \\udcff" and table.get(1) == _record(2, True)
    assert [k.task for k in rows.KeptTasks(table, [])] == ["t1", "t0002"]
