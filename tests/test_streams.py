"""Stream format and durability (DESIGN §3, §4 rules 1, 4): what is on disk, byte for byte.

Every test ends by reading the file back — with :func:`strategies.check_chain`, an
independent verifier that does not use intentlog's reader — or by reading it through
``events()`` in another process.
"""

from __future__ import annotations

import gc
import json
import os
import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from strategies import TS_RE, b3, check_chain, raw_lines, snapshot_tree

import intentlog
import intentlog._internal.fsutil
import intentlog.eventlog.writer
from intentlog import CorruptStream

SAMPLE: list[dict[str, Any]] = [
    {"n": 1},
    {"text": 'héllo ☃ \u2028 "quoted" \\ back', "nested": {"z": [1, 2.5, None, True], "a": {}}},
    {"big": 2**64 - 1, "neg": -(2**63), "float": 1e-300, "zero": -0.0},
    {},
    {"list": [[], [{}], "x" * 300]},
]

# -- the format, for every form the stream can have been written in (STYLE 16) ---------


def _write_fresh(root: Path, run_child: Any) -> None:
    led = intentlog.open(root)
    t = led.task("t")
    for d in SAMPLE:
        t.append("note", d)
    # kept open: the stream must be complete on disk while its writer still holds it


def _write_reopened(root: Path, run_child: Any) -> None:
    with intentlog.open(root) as led:
        for d in SAMPLE[:2]:
            led.task("t").append("note", d)
    with intentlog.open(root) as led:
        for d in SAMPLE[2:]:
            led.task("t").append("note", d)


def _write_other_process(root: Path, run_child: Any) -> None:
    run_child(
        """
        import sys, json, intentlog
        with intentlog.open(sys.argv[1]) as led:
            for d in json.loads(sys.argv[2]):
                led.task("t").append("note", d)
        """,
        root,
        json.dumps(SAMPLE),
    )


FORMS: dict[str, Callable[[Path, Any], None]] = {
    "fresh": _write_fresh,
    "reopened": _write_reopened,
    "other-process": _write_other_process,
}


@pytest.mark.parametrize("form", list(FORMS))
def test_stream_format_is_exactly_design_section_3(form: str, ledger_root: Path, run_child: Any) -> None:
    """A stream is task.created then one compact, sorted, chained, \\n-terminated line per event, whoever wrote it."""
    FORMS[form](ledger_root, run_child)
    path = ledger_root / "tasks" / "t.jsonl"
    lines = raw_lines(path)
    assert len(lines) == 1 + len(SAMPLE), "one line per event"
    events = check_chain(path)
    head = events[0]
    assert head["kind"] == "task.created" and head["seq"] == 0 and head["prev"] is None
    assert head["data"]["task"] == "t" and head["data"]["format"] == "intentlog/1"
    assert re.fullmatch(r"[0-9a-f]{32}", head["data"]["stream"])
    assert [e["data"] for e in events[1:]] == SAMPLE
    assert [e["kind"] for e in events[1:]] == ["note"] * len(SAMPLE)
    for line, ev in zip(lines, events, strict=True):
        assert line == orjson.dumps(ev, option=orjson.OPT_SORT_KEYS) + b"\n"
        assert b"\n" not in line[:-1] and line.count(b"\n") == 1
        assert TS_RE.match(ev["ts"])
    # intentlog's own reader agrees with the independent one, digest by digest
    led = intentlog.open(ledger_root)
    read = list(led.task("t").events())
    assert [(e.seq, e.kind, e.prev, e.ts, e.data) for e in read] == [
        (e["seq"], e["kind"], e["prev"], e["ts"], e["data"]) for e in events
    ]
    assert [e.digest for e in read] == [b3(line) for line in lines]
    assert [e.seq for e in led.task("t").events(since=3)] == [3, 4, 5]
    led.close()


def test_streams_get_distinct_random_ids_and_utc_microsecond_times(ledger: intentlog.Ledger) -> None:
    """Each task.created carries its own random 128-bit stream id; ts is UTC with microseconds, non-decreasing."""
    for tid in ("a", "b", "c"):
        for _ in range(3):
            ledger.task(tid).append("note", {})
    heads = [check_chain(ledger.stream_path(t))[0]["data"]["stream"] for t in ("a", "b", "c")]
    assert len(set(heads)) == 3
    ts = [e["ts"] for e in check_chain(ledger.stream_path("a"))]
    assert ts == sorted(ts)
    assert ledger.task_ids() == ["a", "b", "c"]


def test_append_returns_the_event_as_written(ledger: intentlog.Ledger) -> None:
    """Task.append returns Event(seq, kind, ts, prev, data, digest) equal to what the file holds on return."""
    t = ledger.task("t")
    ev = t.append("step.done", {"k": [1, "two"]})
    lines = raw_lines(t.path)
    assert (ev.seq, ev.kind, ev.data) == (1, "step.done", {"k": [1, "two"]})
    assert ev.prev == b3(lines[0]) and ev.digest == b3(lines[1])
    assert orjson.loads(lines[1])["ts"] == ev.ts
    assert t.next_seq == 2


# -- corruption in the middle: reported, never repaired ---------------------------------


def _ten_line_stream(ledger: intentlog.Ledger) -> Path:
    t = ledger.task("t")
    for i in range(9):
        t.append("note", {"i": i, "payload": "abcdef"})
    t.close()
    assert len(raw_lines(t.path)) == 10
    return t.path


@pytest.mark.parametrize(
    ("where", "reported_line", "reason"),
    [
        (b"{", 3, "not valid JSON"),  # the line no longer parses: that line is named
        (b'"seq":2', 3, "seq is"),  # it parses but its seq is wrong
        (b"abcdef", 4, "hashes to"),  # it parses and chains back: the next line's prev breaks
    ],
    ids=["structure", "seq", "content"],
)
def test_a_flipped_byte_mid_file_is_corruption_naming_file_and_line(
    ledger: intentlog.Ledger, where: bytes, reported_line: int, reason: str
) -> None:
    """A byte flipped in line 3 of 10: events() and the writer raise CorruptStream naming file and line; no repair."""
    path = _ten_line_stream(ledger)
    lines = raw_lines(path)
    bad = bytearray(lines[2])
    bad[bad.index(where) + len(where) - 1] ^= 0x01
    lines[2] = bytes(bad)
    path.write_bytes(b"".join(lines))
    before = snapshot_tree(ledger.root)

    t = ledger.task("t")
    seen: list[int] = []
    with pytest.raises(CorruptStream) as info:
        for ev in t.events():
            seen.append(ev.seq)
    assert seen == list(range(reported_line - 1)), "readers yield the trusted prefix, then stop"
    err = info.value
    assert (err.path, err.line) == (str(path), reported_line)
    assert f"{path} line {reported_line}" in str(err) and reason in str(err)

    with pytest.raises(CorruptStream) as winfo:
        t.append("note", {"after": True})
    assert (winfo.value.path, winfo.value.line) == (str(path), reported_line)
    assert "never repaired automatically" in str(winfo.value)
    after = snapshot_tree(ledger.root)
    after.pop("tasks/t.jsonl.lock", None)
    before.pop("tasks/t.jsonl.lock", None)
    assert after == before, "the writer changed nothing"
    assert os.listdir(ledger.quarantine_dir) == []
    assert raw_lines(path) == lines


# -- tails: torn, suspect, everything -----------------------------------------------------


@pytest.mark.parametrize("suspect", ["replayed-line", "forged-prev", "wrong-seq"])
def test_a_whole_last_line_that_does_not_chain_is_refused_until_repair_accepts_it(
    ledger: intentlog.Ledger, suspect: str
) -> None:
    """A whole last line that does not chain: readers and writers refuse it; repair --accept-damage moves it."""
    t = ledger.task("t")
    for i in range(4):
        t.append("note", {"i": i})
    t.close()
    lines = raw_lines(t.path)
    good = b"".join(lines)
    obj = orjson.loads(lines[2])
    if suspect == "forged-prev":
        obj["seq"], obj["prev"] = 5, b3(b"forged")
        bad = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n"
    elif suspect == "wrong-seq":
        obj["seq"], obj["prev"] = 9, b3(lines[-1])
        bad = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n"
    else:
        bad = lines[2]
    with open(t.path, "ab") as f:
        f.write(bad)

    with pytest.raises(CorruptStream) as info:
        list(t.events())
    assert info.value.line == 6
    before = Path(t.path).read_bytes()
    with pytest.raises(CorruptStream, match=r"line 6.*does not chain.*--accept-damage") as info:
        t.append("note", {"after": "repair"})
    assert info.value.line == 6 and Path(t.path).read_bytes() == before, "nothing written"
    with pytest.raises(CorruptStream):
        ledger.repair("t")  # without accepting damage it does only what a writer would
    assert Path(t.path).read_bytes() == before

    report = ledger.repair("t", accept_damage=True)
    assert (report.action, report.line, report.size) == ("damage", 6, len(bad))
    ev = t.append("note", {"after": "repair"})
    events = check_chain(t.path)
    repaired = events[5]
    assert repaired["data"]["accepted"] == "damage" and repaired["data"]["suspect"] is True
    assert report.event is not None and report.event.seq == 5
    assert repaired["kind"] == "stream.repaired"
    q = repaired["data"]["quarantined"]
    assert (q["digest"], q["size"]) == (b3(bad), len(bad))
    assert (repaired["data"]["line"], repaired["data"]["offset"]) == (6, len(good))
    assert (ledger.root / q["file"]).read_bytes() == bad, "the suspect bytes are kept, not dropped"
    assert events[6]["data"] == {"after": "repair"} and ev.seq == 6
    assert Path(t.path).read_bytes().startswith(good)


def test_a_stream_emptied_by_repair_starts_again_at_task_created(ledger: intentlog.Ledger) -> None:
    """When nothing in a stream is trustworthy, repair quarantines all of it and writes a new task.created first."""
    path = ledger.stream_path("t")
    garbage = b'{"data":{"format":"intentlog/1","str'  # a first line cut short
    path.write_bytes(garbage)
    assert list(ledger.task("t").events()) == []  # an incomplete last line ends reading quietly

    ledger.task("t").append("note", {"x": 1})
    events = check_chain(path)
    assert [e["kind"] for e in events] == ["task.created", "stream.repaired", "note"]
    assert events[0]["data"]["task"] == "t" and events[0]["data"]["format"] == "intentlog/1"
    q = events[1]["data"]["quarantined"]
    assert (q["size"], q["digest"], events[1]["data"]["offset"]) == (len(garbage), b3(garbage), 0)
    assert (ledger.root / q["file"]).read_bytes() == garbage


def test_an_empty_stream_file_starts_at_task_created(ledger: intentlog.Ledger) -> None:
    """A zero-byte stream file (truncated outside intentlog) still gets task.created as line 0 before any event."""
    path = ledger.stream_path("t")
    path.write_bytes(b"")
    ledger.task("t").append("note", {"x": 1})
    events = check_chain(path)
    assert [e["kind"] for e in events][:1] == ["task.created"]


# -- what gets synced -------------------------------------------------------------------


def test_creating_a_stream_fsyncs_the_file_then_its_directory(
    ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new ledger fsyncs every directory it made and their parents; a new stream fsyncs its bytes, then tasks/."""
    calls: list[tuple[str, str]] = []
    real_fsync_dir, real_fsync = intentlog._internal.fsutil.fsync_dir, os.fsync

    def rec_dir(path: Any) -> None:
        calls.append(("dir", os.path.realpath(path)))
        real_fsync_dir(path)

    def rec_file(fd: int) -> None:
        calls.append(("file", os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    monkeypatch.setattr(intentlog._internal.fsutil, "fsync_dir", rec_dir)
    monkeypatch.setattr(os, "fsync", rec_file)
    root = ledger_root / "deeper"
    led = intentlog.open(root)
    real = os.path.realpath
    made_dirs = {real(ledger_root.parent), real(ledger_root), real(root)}
    assert made_dirs <= {p for k, p in calls if k == "dir"}, "each new directory's parent was fsynced"
    assert all((root / sub).is_dir() for sub in ("tasks", "objects", "tmp", "quarantine"))

    calls.clear()
    led.task("t").append("note", {})
    stream = real(led.stream_path("t"))
    # tasks/ is synced by path or through the writer's descriptor on it (both are the folder)
    dir_syncs = [i for i, c in enumerate(calls) if c in (("dir", real(led.tasks_dir)), ("file", real(led.tasks_dir)))]
    assert dir_syncs, f"tasks/ was not fsynced after the stream was created: {calls}"
    file_syncs = [i for i, c in enumerate(calls) if c[0] == "file" and "t.jsonl" in os.path.basename(c[1])]
    assert file_syncs and file_syncs[0] < dir_syncs[0], f"the stream's bytes are synced before its name: {calls}"
    led.close()
    assert [e["kind"] for e in check_chain(stream)] == ["task.created", "note"]


def test_fdatasync_once_per_append_and_once_per_batch(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each durable append syncs once, after its line is written; a batch (even nested) syncs once, at its end."""
    t = ledger.task("t")
    path = t.path
    t.append("note", {"warm": 1})
    sizes: list[int] = []
    real = intentlog.eventlog.writer._fdatasync

    def counting(fd: int) -> None:
        sizes.append(os.fstat(fd).st_size)
        real(fd)

    monkeypatch.setattr(intentlog.eventlog.writer, "_fdatasync", counting)
    for i in range(5):
        t.append("note", {"i": i})
        assert len(sizes) == i + 1, "synced before append returned"
        assert sizes[-1] == path.stat().st_size, "the sync covered the whole line"
    sizes.clear()
    with t.batch():
        for i in range(20):
            t.append("note", {"b": i})
        with t.batch():
            t.append("note", {"inner": True})
        assert sizes == [], "nothing synced inside the batch"
    assert sizes == [path.stat().st_size], "one sync covering the whole batch"
    sizes.clear()
    with t.batch():
        pass
    assert sizes == [], "an empty batch syncs nothing"
    assert len(check_chain(path)) == 1 + 1 + 5 + 21


# -- streaming reads ----------------------------------------------------------------------


def test_events_streams_a_200k_event_stream_in_bounded_memory(ledger: intentlog.Ledger) -> None:
    """events() reads a 200 000-event stream with a memory peak far below the file's size (it streams)."""
    n = 200_000
    t = ledger.task("big")
    with t.batch():
        for i in range(n):
            t.append("note", {"i": i, "pad": "p" * 60})
    t.close()
    size = t.path.stat().st_size
    assert size > 20_000_000
    gc.collect()
    tracemalloc.start()
    try:
        count = 0
        last = None
        for ev in ledger.task("big").events():
            count += 1
            last = ev
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n + 1 and last is not None and last.data["i"] == n - 1
    assert last.digest == b3(raw_lines(t.path)[-1])
    assert peak < 8_000_000, f"peak {peak} bytes while reading a {size}-byte stream"
