"""Listings at scale hold one task at a time: the index is streamed beside the directory listing.

The memory of ``tasks`` (table and ``--json``) and of the gc preview is measured in fresh
processes at two ledger sizes ten times apart; ``iter_task_rows`` is measured in process
with tracemalloc. The index (``cache/index-*.json``, :mod:`intentlog.viewcache.index`) is put in
the states a ledger can leave it in -- a damaged block, an entry out of order, an entry
for a task that is gone, a listing stopped early -- and the rows must still be those of
a full read. gc's preview takes a backlog's unfinished items from the index only while
the backlog stream's file facts are the ones recorded, and gc never deletes an
unfinished item's task, whatever the index says.
"""

from __future__ import annotations

import datetime as _dt
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from blake3 import blake3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import intentlog
from intentlog import viewcache
from intentlog._internal.digest import digest_bytes
from intentlog._internal.text import format_table
from intentlog.errors import GcRefused
from intentlog.eventlog.format import encode_line, new_stream_id
from intentlog.retention import apply_gc, plan_gc
from intentlog.viewcache import index as viewindex
from intentlog.viewcache.index import INDEX_FORMAT, IndexJoin, iter_index, write_index
from intentlog.views import iter_task_rows, task_rows

ENV = {k: v for k, v in os.environ.items() if not k.startswith("COV")}


def _template(folder: Path) -> list[tuple[str, bytes, str]]:
    led = intentlog.open(folder)
    t = led.task("template")
    t.effect("k", {"q": "a question " * 4}, lambda r: b'{"a": "an answer"}', interpret=orjson.loads)
    t.close()
    out = []
    for line in (folder / "tasks" / "template.jsonl").read_bytes().splitlines():
        o = orjson.loads(line)
        out.append((o["kind"], orjson.dumps(o["data"], option=orjson.OPT_SORT_KEYS), o["ts"]))
    return out


def build(root: Path, n: int, template: list[tuple[str, bytes, str]]) -> Path:
    """A ledger of ``n`` tasks, each the template's events re-chained under its own id (the writer's encoder)."""
    intentlog.open(root)
    for i in range(n):
        tid = f"task-{i:05d}"
        prev: str | None = None
        lines = []
        for seq, (kind, data, ts) in enumerate(template):
            if seq == 0:
                head = orjson.loads(data) | {"stream": new_stream_id(), "task": tid}
                data = orjson.dumps(head, option=orjson.OPT_SORT_KEYS)
            line = encode_line(kind, data, prev, seq, ts)
            prev = digest_bytes(line)
            lines.append(line)
        (root / "tasks" / f"{tid}.jsonl").write_bytes(b"".join(lines))
    return root


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    base = tmp_path_factory.mktemp("flat")
    template = _template(base / "template")
    return {n: build(base / f"l{n}", n, template) for n in (200, 2000)}


def _peak_rss_kib(root: Path, *args: str) -> int:
    """Peak RSS of a fresh ``intentlog`` process (its output thrown away), as its parent's rusage reports it."""
    code = (
        "import resource,subprocess,sys\n"
        "subprocess.run([sys.executable,'-m','intentlog.cli',*sys.argv[1:]],stdout=subprocess.DEVNULL,check=False)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    run = [sys.executable, "-c", code, "--root", str(root), *args]
    subprocess.run(run, check=True, capture_output=True, env=ENV)  # warms the index
    return min(int(subprocess.run(run, check=True, capture_output=True, env=ENV, text=True).stdout) for _ in range(2))


@pytest.mark.skipif(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss == 0, reason="no ru_maxrss here")
@pytest.mark.parametrize("args", [("tasks",), ("tasks", "--json"), ("gc",), ("gc", "--json")])
def test_a_listing_ten_times_larger_takes_no_more_memory(ledgers: dict[int, Path], args: tuple[str, ...]) -> None:
    small, large = (_peak_rss_kib(ledgers[n], *args) for n in (200, 2000))
    # before the streamed index: +5.9 MB (tasks), +7.0 MB (--json), +4.5 MB (gc) for these 1,800 tasks more;
    # with the index streamed but the plan holding every task: +2.1 MB (gc), +2.8 MB (gc --json).
    # now gc keeps 48 bytes a task in arrays (86 KB here) and its records in a scratch file
    bound = 1536 if args[0] == "tasks" else 1024
    assert large - small < bound, f"intentlog {' '.join(args)}: {small} KiB at 200 tasks, {large} KiB at 2,000"


def _traced_peak(root: Path) -> int:
    led = intentlog.open(root, create=False)
    tracemalloc.start()
    try:
        n = sum(1 for _ in iter_task_rows(led))
        return tracemalloc.get_traced_memory()[1] if n else 0
    finally:
        tracemalloc.stop()


def test_the_rows_are_projected_one_at_a_time(ledgers: dict[int, Path]) -> None:
    for root in ledgers.values():
        assert len(task_rows(intentlog.open(root, create=False))) > 0  # warm the index
    small, large = _traced_peak(ledgers[200]), _traced_peak(ledgers[2000])
    # the ids (about 70 bytes each) and one block of the index; held rows would be ~2.5 KB each
    assert large - small < 400_000, (small, large)


def test_tasks_json_streamed_is_the_document_it_was(ledgers: dict[int, Path], tmp_path: Path) -> None:
    root = ledgers[200]
    out = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), "tasks", "--json"], capture_output=True, env=ENV
    ).stdout
    from intentlog._internal.commands import complete

    # each next step as the command line prints hints: complete, with the --root it was given
    listed = task_rows(intentlog.open(root, create=False))
    rows = [r.to_json() | {"next_step": complete(r.next_step, str(root))} for r in listed]
    assert out == orjson.dumps(rows, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    intentlog.open(tmp_path / "empty")
    empty = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(tmp_path / "empty"), "tasks", "--json"],
        capture_output=True,
        env=ENV,
    ).stdout
    assert empty == b"[]\n"


def _cells(r: Any) -> list[str]:
    return [r.task, str(r.events), r.last_activity or "-", r.state, r.stream, r.phase or "-", r.next_operation]


def test_the_table_of_a_few_hundred_tasks_is_the_table_it_was(ledgers: dict[int, Path]) -> None:
    root = ledgers[200]
    out = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), "tasks"], capture_output=True, env=ENV, text=True
    ).stdout
    rows = task_rows(intentlog.open(root, create=False))
    header = ["task", "events", "last activity", "state", "stream", "phase", "next operation"]
    assert out == "\n".join(format_table(header, [_cells(r) for r in rows])) + "\n"


def test_a_long_cell_past_the_first_rows_pushes_only_its_own_line(tmp_path: Path) -> None:
    from intentlog.cli.reading import TABLE_HEAD

    root = tmp_path / "l"
    with intentlog.open(root) as led:
        for i in range(TABLE_HEAD + 3):
            led.task(f"t{i:04d}").append("note", {})
        led.task(f"t{TABLE_HEAD + 1:04d}").checkpoint("a-phase-name-much-longer-than-any-before", status="passed")
    out = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), "tasks"], capture_output=True, env=ENV, text=True
    ).stdout.splitlines()
    assert len(out) == TABLE_HEAD + 4
    state_at = out[0].index("state")
    long_line = out[TABLE_HEAD + 2]
    assert "a-phase-name-much-longer-than-any-before" in long_line and long_line.startswith(f"t{TABLE_HEAD + 1:04d} ")
    for line in out[1:]:
        assert line[state_at - 2 : state_at] == "  " and line[state_at] != " "  # every state cell where the header's is


# -- the index's checks ---------------------------------------------------------------------------


def _small(tmp_path: Path, n: int = 6) -> Path:
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        for i in range(n):
            led.task(f"t{i}").append("note", {"i": i})
    return root


def _json_rows(root: Path) -> list[dict[str, Any]]:
    return [r.to_json() for r in task_rows(intentlog.open(root, create=False))]


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    read: list[str] = []
    real = viewcache.fold_task

    def counting(root_: Path, tasks_dir: Path, task_id: str, **kw: Any) -> Any:
        read.append(task_id)
        return real(root_, tasks_dir, task_id, **kw)

    monkeypatch.setattr("intentlog.views.fold_task", counting)
    return read


def test_an_unchanged_listing_leaves_the_index_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(viewcache, "MIN_TASKS", 0)
    root = _small(tmp_path)
    full = _json_rows(root)
    index = root / "cache" / "index-rows.json"
    st = os.stat(index)
    read = _reads(monkeypatch)
    assert _json_rows(root) == full and read == []
    assert (os.stat(index).st_ino, os.stat(index).st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert sorted(p.name for p in (root / "cache").iterdir()) == ["index-rows.json"]  # no temp file left


def test_a_damaged_block_is_skipped_and_its_tasks_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(viewcache, "MIN_TASKS", 0)
    root = _small(tmp_path)
    full = _json_rows(root)
    index = root / "cache" / "index-rows.json"
    data = bytearray(index.read_bytes())
    at = data.index(b'"t3"')
    data[at + 1 : at + 3] = b"t4"  # a forged entry: two entries for t4, the block's digest no longer holds
    index.write_bytes(bytes(data))
    read = _reads(monkeypatch)
    assert _json_rows(root) == full
    assert read == [f"t{i}" for i in range(6)]  # one block: every task read again
    assert [t for t, _, _ in iter_index(root, "rows")] == [f"t{i}" for i in range(6)]  # and the index rebuilt


def test_entries_out_of_order_or_for_gone_tasks_are_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(viewcache, "MIN_TASKS", 0)
    root = _small(tmp_path)
    full = _json_rows(root)
    entries = list(iter_index(root, "rows"))
    t1 = entries[1]
    forged = [entries[0], ("t00", t1[1], t1[2]), *entries[1:], ("zz", t1[1], t1[2])]  # t00 sorts before t1: kept
    write_index(root, "rows", iter(forged))
    swapped = entries[:]
    swapped[2], swapped[3] = swapped[3], swapped[2]
    index = root / "cache" / "index-rows.json"
    read = _reads(monkeypatch)
    assert _json_rows(root) == full and read == []  # t00 and zz name no stream: unused, and dropped
    assert [t for t, _, _ in iter_index(root, "rows")] == [f"t{i}" for i in range(6)]
    write_index(root, "rows", iter(swapped))  # write_index drops what is out of order: t2 is missing
    assert [t for t, _, _ in iter_index(root, "rows")] == ["t0", "t1", "t3", "t4", "t5"]
    assert _json_rows(root) == full and read == ["t2"]
    read.clear()
    lines = [orjson.dumps([t, *f, v]) for t, f, v in iter_index(root, "rows")]
    lines[1], lines[2] = lines[2], lines[1]  # out of order inside a block whose digest holds
    body = b"\n".join(lines) + b"\n"
    index.write_bytes(INDEX_FORMAT + b"\n#%d %s\n" % (len(body), blake3(body).hexdigest().encode()) + body)
    assert _json_rows(root) == full and read == ["t1"]  # t2's entry came first and is used; t1's, after it, is not


def test_a_listing_stopped_early_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(viewcache, "MIN_TASKS", 0)
    root = _small(tmp_path)
    _json_rows(root)
    (root / "tasks" / "t9.jsonl").write_bytes((root / "tasks" / "t0.jsonl").read_bytes())
    before = (root / "cache" / "index-rows.json").read_bytes()
    rows = iter_task_rows(intentlog.open(root, create=False))
    next(rows)
    rows.close()
    assert (root / "cache" / "index-rows.json").read_bytes() == before
    assert sorted(p.name for p in (root / "cache").iterdir()) == ["index-rows.json"]


# -- gc's preview and the backlogs ----------------------------------------------------------------


def _later() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(days=2)


def _backlog_ledger(tmp_path: Path) -> tuple[Path, str, str]:
    root = tmp_path / "b"
    with intentlog.open(root) as led:
        b = led.backlog("nb")
        b.add("x", {"item": "x"})
        x = b.task_id("x")
        led.task(x).append("note", {})
        led.task("other").append("note", {})
        y = b.task_id("y")
    return root, x, y


def _backlog_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from intentlog.retention import backlogs

    calls: list[int] = []
    real = backlogs.unfinished_item_tasks

    def counting(events: Any) -> set[str]:
        calls.append(1)
        return real(events)

    monkeypatch.setattr(backlogs, "unfinished_item_tasks", counting)
    return calls


def test_the_preview_reads_a_backlog_stream_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(viewcache, "MIN_TASKS", 0)
    root, x, y = _backlog_ledger(tmp_path)
    calls = _backlog_reads(monkeypatch)
    with intentlog.open(root) as led:
        first = plan_gc(led, max_age="1d", now=_later())
        assert calls == [1]
        again = plan_gc(led, max_age="1d", now=_later())
        assert calls == [1], "the unchanged backlog stream was read again"
        assert again.to_json()["kept"] == first.to_json()["kept"]
        assert {k.task: k.rule for k in again.kept}[x] == "backlog"
        led.backlog("nb").add("y", {"item": "y"})  # the backlog stream changes: read again
        led.task(y).append("note", {})
        stale = plan_gc(led, max_age="1d", now=_later())
        assert calls == [1, 1]
        kept = {k.task: k.rule for k in stale.kept}
        assert kept[x] == kept[y] == kept["nb.backlog"] == "backlog"
        assert "other" in {e.task for e in stale.expired}


def test_a_forged_backlog_entry_never_lets_gc_delete_an_unfinished_items_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(viewcache, "MIN_TASKS", 0)
    root, x, _ = _backlog_ledger(tmp_path)
    with intentlog.open(root) as led:
        plan_gc(led, max_age="1d", now=_later())
    index = root / "cache" / "index-backlogs.json"
    [(task, facts, value)] = list(iter_index(root, "backlogs"))
    assert (task, value) == ("nb.backlog", [x])
    damaged = index.read_bytes().replace(x.encode(), b"nb.item.z")  # the block's digest no longer holds
    index.write_bytes(damaged)
    with intentlog.open(root) as led:
        assert {k.task: k.rule for k in plan_gc(led, max_age="1d", now=_later()).kept}[x] == "backlog"
    write_index(root, "backlogs", iter([(task, facts, [])]))  # a forgery that checks: "nothing unfinished"
    with intentlog.open(root) as led:
        preview = plan_gc(led, max_age="1d", now=_later())
        assert x in {e.task for e in preview.expired}  # the preview trusts file facts that match...
        with pytest.raises(GcRefused):
            apply_gc(led, preview)  # ...the plan gc carries out reads every stream, and differs
        assert (root / "tasks" / f"{x}.jsonl").exists()
        result = apply_gc(led, max_age="1d", now=_later())
        assert x not in {t for t in result.deleted} and (root / "tasks" / f"{x}.jsonl").exists()
        assert "other" in result.deleted


# -- the merge-join against a model ------------------------------------------------------------------

NAMES = [f"t{i:02d}" for i in range(24)]
ACTIONS = st.sampled_from(["keep", "put", "none"])


@contextmanager
def small_blocks() -> Iterator[None]:
    saved = viewindex.BLOCK_BYTES
    viewindex.BLOCK_BYTES = 70  # a block holds one or two entries: every path crosses blocks
    try:
        yield
    finally:
        viewindex.BLOCK_BYTES = saved


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    old=st.dictionaries(st.sampled_from(NAMES), st.integers(0, 3)),
    listing=st.dictionaries(st.sampled_from(NAMES), st.tuples(ACTIONS, st.integers(4, 6))),
)
def test_the_join_rewrites_exactly_what_the_listing_decided(
    old: dict[str, int], listing: dict[str, tuple[str, int]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp, small_blocks():
        root = Path(tmp)
        (root / "cache").mkdir()
        write_index(root, "rows", iter([(t, (v, 0, 0, 0, 0), v) for t, v in sorted(old.items())]))
        index = root / "cache" / "index-rows.json"
        before = os.stat(index) if index.exists() else None
        expected: list[tuple[str, int]] = []
        with IndexJoin(root, "rows", write=True) as join:
            for tid, (action, new) in sorted(listing.items()):
                found = join.find(tid)
                assert found == (((old[tid], 0, 0, 0, 0), old[tid]) if tid in old else None)
                if action == "keep" and found is not None:
                    join.keep()
                    expected.append((tid, old[tid]))
                elif action == "put":
                    join.put(tid, (new, 0, 0, 0, 0), new)
                    expected.append((tid, new))
            join.commit()
        assert [(t, v) for t, _, v in iter_index(root, "rows")] == expected
        if before is not None and expected == sorted(old.items()):
            assert os.stat(index).st_ino == before.st_ino  # nothing differed: nothing written
        assert [p.name for p in (root / "cache").iterdir() if p.name.endswith(".tmp")] == []


# -- gc's plan in bounded memory --------------------------------------------------------------------


def _traced_gc_peak(root: Path) -> int:
    """Peak traced bytes of a preview plan and its JSON written out (to nowhere), chunk by chunk."""
    led = intentlog.open(root, create=False)
    tracemalloc.start()
    try:
        plan = plan_gc(led)
        n = sum(len(chunk) for chunk in plan.iter_json()) + sum(len(line) for line in plan.iter_render())
        peak = tracemalloc.get_traced_memory()[1]
        assert n > 0 and len(plan.kept) > 0
        del plan
        return peak
    finally:
        tracemalloc.stop()


def test_the_gc_plan_holds_a_few_bytes_a_task(ledgers: dict[int, Path]) -> None:
    for root in ledgers.values():
        plan_gc(intentlog.open(root, create=False))  # warm the index
    small, large = _traced_gc_peak(ledgers[200]), _traced_gc_peak(ledgers[2000])
    # a plan holding a KeptTask per task (and the scan a record per task) traced +2.09 MB here (1,160
    # bytes a task); now the arrays (48 bytes a task: 86 KB) and the scratch file's part in memory
    # (at most 64 KiB) grow: +0.18 MB measured
    assert large - small < 250_000, (small, large)


def _parse_now(text: str) -> _dt.datetime:
    return _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_dt.timezone.utc)


def test_gc_prints_the_bytes_the_whole_plan_would(ledgers: dict[int, Path], tmp_path: Path) -> None:
    root = tmp_path / "l"
    shutil.copytree(ledgers[200], root)
    cli = [sys.executable, "-m", "intentlog.cli", "--root", str(root)]
    subprocess.run([*cli, "keep", "task-00007", "--note", "an audit"], check=True, env=ENV, capture_output=True)
    half = sum(p.stat().st_size for p in (root / "tasks").glob("*.jsonl")) // 2
    policy = ["--max-size", str(half), "--grace", "0s"]
    out = subprocess.run([*cli, "gc", "--json", *policy], env=ENV, capture_output=True).stdout
    doc = orjson.loads(out)
    with intentlog.open(root, create=False) as led:
        plan = plan_gc(led, max_size=half, grace="0s", now=_parse_now(doc["now"]))
        assert out == orjson.dumps(plan.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    assert 90 <= len(doc["expired"]) <= 110 and {e["reason"] for e in doc["expired"]} == {"size"}
    assert {k["rule"] for k in doc["kept"]} == {"young", "keep"} and len(doc["kept"]) + len(doc["expired"]) == 200
    text = subprocess.run([*cli, "gc", *policy], env=ENV, capture_output=True, text=True).stdout
    now = _parse_now(text.split()[3])
    with intentlog.open(root, create=False) as led:
        assert text == plan_gc(led, max_size=half, grace="0s", now=now).render() + "\n"
    assert "  task-00007  [keep] marked by 'intentlog keep'" in text
    applied = subprocess.run([*cli, "gc", "--json", "--apply", *policy], env=ENV, capture_output=True).stdout
    result = orjson.loads(applied)
    assert len(result["deleted"]) == len(doc["expired"]) and result["exact"] is True
    assert len(result["plan"]["kept"]) == 200 - len(doc["expired"])
    assert sorted(p.stem for p in (root / "tasks").glob("*.jsonl")) == sorted(k["task"] for k in doc["kept"])
