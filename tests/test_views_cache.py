"""The view cache (intentlog/viewcache/__init__.py): a projection read through it is the projection a full read gives.

Histories are generated protocol events written through the stream core's privileged
append (so the lines are the writer's own); the cache is then put in every state a
ledger can leave it in -- fresh, stale, corrupt, deleted, from another stream, under a
stream truncated (and re-appended), with a torn tail -- and a fresh handle's
``work_state()``, ``status`` row and listing must equal a full read of the stream as it
is now, or raise the same refusal. A stream shorter than its entry says is reported.
"""

from __future__ import annotations

import os
import tempfile
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
from intentlog.errors import CorruptStream, IntentlogError
from intentlog.projections.status import task_status
from intentlog.projections.workstate import WorkState, work_state
from intentlog.stream import read_events
from intentlog.viewcache import store as viewstore
from intentlog.views import task_row, task_rows

CALLS = st.sampled_from(["call-1", "call-2", "call-3"])
KEYS = st.sampled_from(["k1", "k2"])
ATTEMPTS = st.integers(1, 3)
HASHES = st.sampled_from(["blake3:" + "a" * 64, "blake3:" + "b" * 64])


def _ev(kind: str, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    return st.fixed_dictionaries(fields).map(lambda d: (kind, d))


EVENTS = st.one_of(
    _ev("call.requested", call=CALLS, key=KEYS, request_hash=HASHES),
    _ev("call.manifest", call=CALLS, request_hash=HASHES, request=st.just({"digest": "blake3:" + "a" * 64})),
    _ev("attempt.started", call=CALLS, attempt=ATTEMPTS),
    _ev("attempt.observed", call=CALLS, attempt=ATTEMPTS, response=st.just({"digest": "blake3:" + "c" * 64})),
    _ev("attempt.interpreted", call=CALLS, attempt=ATTEMPTS, result=st.integers(0, 3)),
    _ev("attempt.retry_decided", call=CALLS, attempt=ATTEMPTS, decision=st.sampled_from(["retry", "fail"])),
    _ev("effect.reconciled", call=CALLS, attempt=ATTEMPTS, outcome=st.sampled_from(["served", "not_served"])),
    _ev("call.completed", call=CALLS, attempt=ATTEMPTS, result=st.fixed_dictionaries({"value": st.integers(0, 3)})),
    _ev("call.failed", call=CALLS, reason=st.just("given up")),
    _ev("call.resumed", call=CALLS, new_call=CALLS),
    _ev("approval.requested", approval=st.sampled_from(["a1", "a2"]), question=st.just("ok?"),
        binds=st.fixed_dictionaries({"call": CALLS, "key": KEYS, "request_hash": HASHES})),
    _ev("approval.decided", approval=st.sampled_from(["a1", "a2"]), request_hash=HASHES,
        decision=st.sampled_from(["approve", "reject"])),
    _ev("task.checkpoint", phase=st.sampled_from(["draft", "review"]), status=st.sampled_from(["passed", "failed"])),
    _ev("task.accepted"),
    _ev("note", text=st.text(max_size=5)),
)
HISTORIES = st.lists(EVENTS, max_size=25)
STATES = st.sampled_from(
    ["fresh", "stale", "corrupt", "record", "forged", "deleted", "foreign", "truncated", "rewritten", "torn", "none"]
)


@contextmanager
def cache_always() -> Iterator[None]:
    """Write entries and the index for every read (the defaults skip small streams)."""
    saved = viewcache.MIN_EVENTS, viewcache.MIN_TASKS
    viewcache.MIN_EVENTS = viewcache.MIN_TASKS = 0
    try:
        yield
    finally:
        viewcache.MIN_EVENTS, viewcache.MIN_TASKS = saved


def record(root: Path, task: str, events: list[tuple[str, dict[str, Any]]]) -> None:
    led = intentlog.open(root)
    s = led.task(task).stream
    s.open_writer()  # the stream exists (task.created) even for an empty history
    for kind, data in events:
        s.append(kind, data)
    s.close()


def full_read(root: Path, task: str) -> WorkState | str:
    """The work state of a read from line 0 that never touches the cache, or the refusal's text."""
    try:
        return work_state(read_events(root / "tasks" / f"{task}.jsonl", root / "tasks"), task_id=task)
    except CorruptStream as exc:
        return f"refused: {exc}"


def through_cache(root: Path, task: str) -> WorkState | str:
    try:
        return intentlog.open(root, create=False).task(task).work_state()
    except CorruptStream as exc:
        return f"refused: {exc}"


def same(a: WorkState | str, b: WorkState | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return (a.to_json(), dict(a.calls), dict(a.compilations), a.keys) == (
        b.to_json(),
        dict(b.calls),
        dict(b.compilations),
        b.keys,
    )


def entry(root: Path, task: str) -> Path:
    return root / "cache" / "views" / f"{task}.json"


def rewrite_entry(path: Path, change: Any) -> None:
    """Change an entry's meta and give it a valid header again (an entry that passes its own checksum)."""
    raw = path.read_bytes()
    head, _, rest = raw.partition(b"\n")
    n = int(head.split(b" ")[1])
    meta, records = orjson.loads(rest[:n]), rest[n + 1 :]
    body = orjson.dumps(change(meta))
    header = b"%s %d %s\n" % (viewstore.ENTRY_FORMAT, len(body), blake3(body).hexdigest().encode())
    path.write_bytes(header + body + b"\n" + records)


def entry_end(path: Path) -> int:
    head, _, rest = path.read_bytes().partition(b"\n")
    return int(orjson.loads(rest[: int(head.split(b" ")[1])])["end"])


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=HISTORIES, more=HISTORIES, other=HISTORIES, state=STATES, cut=st.integers(0, 30))
def test_the_projection_from_the_cache_is_the_projection_of_a_full_read(
    history: list[tuple[str, dict[str, Any]]],
    more: list[tuple[str, dict[str, Any]]],
    other: list[tuple[str, dict[str, Any]]],
    state: str,
    cut: int,
) -> None:
    with tempfile.TemporaryDirectory() as d, cache_always():
        root = Path(d) / "ledger"
        record(root, "t", history)
        stream = root / "tasks" / "t.jsonl"
        if state != "none":
            through_cache(root, "t")  # writes the entry at the end of `history`
            assert entry(root, "t").exists()
        expect_cut = False
        if state == "stale":
            record(root, "t", more)
        elif state == "corrupt":
            raw = bytearray(entry(root, "t").read_bytes())
            raw[len(raw) // 2] ^= 0x20
            entry(root, "t").write_bytes(bytes(raw))
            record(root, "t", more)
        elif state == "record":  # a record damaged, nothing appended: found when that call is read
            raw = bytearray(entry(root, "t").read_bytes())
            raw[-3] ^= 0x01
            entry(root, "t").write_bytes(bytes(raw))
        elif state == "forged":  # passes its checksum, but its anchor names a line the stream does not hold
            rewrite_entry(entry(root, "t"), lambda e: e | {"digest": "blake3:" + "0" * 64})
        elif state == "deleted":
            entry(root, "t").unlink()
            record(root, "t", more)
        elif state == "foreign":  # another stream's entry under this name
            record(root, "u", other)
            through_cache(root, "u")
            os.replace(entry(root, "u"), entry(root, "t"))
            rewrite_entry(entry(root, "t"), lambda e: e | {"task": "t"})
        elif state in ("truncated", "rewritten"):
            kept = lines(stream)[: max(1, min(cut, len(lines(stream)) - 1))]
            expect_cut = len(kept) < len(lines(stream))
            stream.write_bytes(b"".join(kept))
            if state == "rewritten":
                record(root, "t", [*more, ("note", {"text": "after the cut"})])
                # re-appended: reported only while still shorter than the entry says
                expect_cut = stream.stat().st_size < entry_end(entry(root, "t"))
        elif state == "torn":
            record(root, "t", more)
            with open(stream, "ab") as f:
                f.write(b'{"data":{},"kind":"no')
        if state in ("fresh", "stale"):  # the entry is used, not quietly bypassed
            led = intentlog.open(root, create=False)
            assert viewcache.fold_task(led.root, led.tasks_dir, "t", save=False).resumed_at == len(history)
        got, want = through_cache(root, "t"), full_read(root, "t")
        if expect_cut:
            assert isinstance(got, str) and "events were cut from its end" in got
        else:
            assert same(got, want), (state, got, want)
            # a second read (through the entry the first one wrote) gives it again
            assert same(through_cache(root, "t"), want)
            if not isinstance(want, str):
                led = intentlog.open(root, create=False)
                row = task_row(led, "t")
                full = task_status(read_events(stream, root / "tasks"), task_id="t")
                assert row.status is not None and row.status.to_json() == full.to_json()


def test_a_stream_cut_shorter_than_its_entry_is_reported_not_papered_over(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with cache_always():
        record(root, "t", [("note", {"i": i}) for i in range(5)])
        assert intentlog.open(root).task("t").work_state().events == 6
        stream = root / "tasks" / "t.jsonl"
        stream.write_bytes(b"".join(lines(stream)[:3]))
        before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
        with pytest.raises(CorruptStream, match="events were cut from its end"):
            intentlog.open(root, create=False).task("t").work_state()
        row = task_row(intentlog.open(root, create=False), "t")
        assert row.state == "unreadable" and "cut from its end" in (row.problem or "")
        assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # nothing rewritten
        # the full read still sees three events: only the cache knows more were there
        assert full_read(root, "t").events == 3  # type: ignore[union-attr]


def test_a_resumed_read_folds_only_what_follows_the_entry(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with cache_always():
        record(root, "t", [("note", {"i": i}) for i in range(50)])
        led = intentlog.open(root)
        first = viewcache.fold_task(led.root, led.tasks_dir, "t")
        assert first.resumed_at == -1 and first.scan.count == 51
        record(root, "t", [("note", {"i": 99})])
        again = viewcache.fold_task(led.root, led.tasks_dir, "t")
        assert again.resumed_at == 50 and again.scan.count == 52 and again.scan.start > 0
        assert same(again.work.result(), full_read(root, "t"))


def test_the_listing_reads_only_streams_whose_file_facts_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ledger"
    with cache_always():
        for i in range(4):
            record(root, f"t{i}", [("note", {"i": i})])
        led = intentlog.open(root, create=False)
        full = [r.to_json() for r in task_rows(led)]
        assert (root / "cache" / "index-rows.json").exists()
        read: list[str] = []
        real = viewcache.fold_task

        def counting(root_: Path, tasks_dir: Path, task_id: str, **kw: Any) -> Any:
            read.append(task_id)
            return real(root_, tasks_dir, task_id, **kw)

        monkeypatch.setattr("intentlog.views.fold_task", counting)
        assert [r.to_json() for r in task_rows(led)] == full
        assert read == []  # nothing changed: no stream read
        record(root, "t2", [("task.accepted", {})])
        rows = [r.to_json() for r in task_rows(led)]
        assert read == ["t2"]
        monkeypatch.undo()
        shutil_rm(root / "cache")
        (root / "cache").mkdir()
        assert rows == [r.to_json() for r in task_rows(led)]  # the same rows with no cache at all


def shutil_rm(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


def test_the_cache_never_follows_a_link_out_of_the_ledger(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    outside = tmp_path / "outside"
    outside.mkdir()
    with cache_always():
        record(root, "t", [("note", {"i": 1})])
        (root / "cache").rmdir()
        (root / "cache").symlink_to(outside)
        ws = intentlog.open(root, create=False).task("t").work_state()
        task_rows(intentlog.open(root, create=False))
        assert ws.events == 2 and list(outside.iterdir()) == []  # nothing written through the link
        (root / "cache").unlink()
        (root / "cache").mkdir()
        (root / "cache" / "views").mkdir()
        target = outside / "planted.json"
        target.write_bytes(b"not an entry")
        entry(root, "t").symlink_to(target)
        record(root, "t", [("note", {"i": 2})])
        assert intentlog.open(root, create=False).task("t").work_state().events == 3
        # the link was never read through nor written through: the rename replaced the link itself
        assert target.read_bytes() == b"not an entry" and not entry(root, "t").is_symlink()


def test_init_writes_the_cache_folder_into_gitignore(tmp_path: Path) -> None:
    intentlog.open(tmp_path / "ledger")
    assert b"\ncache/\n" in (tmp_path / "ledger" / ".gitignore").read_bytes()
    assert (tmp_path / "ledger" / "cache").is_dir()


def test_a_small_read_writes_nothing(tmp_path: Path) -> None:
    """Below the thresholds a read writes no entry: small ledgers stay byte-for-byte as written."""
    root = tmp_path / "ledger"
    record(root, "t", [("note", {"i": 1})])
    before = sorted(p for p in root.rglob("*"))
    intentlog.open(root, create=False).task("t").work_state()
    task_rows(intentlog.open(root, create=False))
    assert sorted(p for p in root.rglob("*")) == before


def test_repair_drops_the_entry_it_invalidates(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with cache_always():
        record(root, "t", [("note", {"i": i}) for i in range(4)])
        intentlog.open(root).task("t").work_state()
        stream = root / "tasks" / "t.jsonl"
        ls = lines(stream)
        ls[2] = ls[2].replace(b'"i":1', b'"i":7')  # damage mid-file: a bad line followed by events
        stream.write_bytes(b"".join(ls))
        led = intentlog.open(root)
        try:
            led.repair("t", accept_damage=True)
        except IntentlogError:
            pytest.skip("repair refuses this damage")
        assert not entry(root, "t").exists() or same(through_cache(root, "t"), full_read(root, "t"))
        assert same(through_cache(root, "t"), full_read(root, "t"))


def test_the_gc_preview_from_the_index_is_the_preview_of_a_full_read(tmp_path: Path) -> None:
    import datetime as dt

    from intentlog.retention import plan_gc

    root = tmp_path / "ledger"
    with cache_always():
        led = intentlog.open(root)
        for i in range(5):
            t = led.task(f"t{i}")
            ref = led.artifacts.put(f"bytes of {i}".encode() * 100)
            t.append("note", {"ref": ref.digest, "i": i})
            t.close()
        later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400)
        first = plan_gc(led, now=later, grace=0)
        assert (root / "cache" / "index-gc.json").exists()
        record(root, "t3", [("task.accepted", {})])
        again = plan_gc(led, now=later, grace=0)  # t3 read, the others from the index
        shutil_rm(root / "cache")
        (root / "cache").mkdir()
        full = plan_gc(led, now=later, grace=0)
        assert again.to_json() == full.to_json()
        plan = full.to_json()
        assert len(plan["expired"]) + len(plan["kept"]) == 5 and plan["expired"] != []
        assert first.to_json()["blobs"] == plan["blobs"] != []


def test_a_state_from_the_entry_reads_only_the_calls_looked_at_and_survives_a_damaged_record(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    events: list[tuple[str, dict[str, Any]]] = []
    for i in range(1, 6):
        events += [
            ("call.requested", {"call": f"call-{i}", "key": f"k{i}", "request_hash": "blake3:" + "a" * 64}),
            ("call.manifest", {"call": f"call-{i}", "request_hash": "blake3:" + "a" * 64, "request": {}}),
            ("attempt.started", {"call": f"call-{i}", "attempt": 1}),
        ]
    with cache_always():
        record(root, "t", events)
        want = full_read(root, "t")
        assert not isinstance(want, str)
        intentlog.open(root).task("t").work_state()  # writes the entry
        led = intentlog.open(root, create=False)
        folded = viewcache.fold_task(led.root, led.tasks_dir, "t")
        assert folded.records is not None  # nothing after the entry: records read on demand
        ws = folded.work_state()
        assert ws.next_operation == want.next_operation and ws.unresolved == want.unresolved
        raw = bytearray(entry(root, "t").read_bytes())
        raw[-3] ^= 0x01  # the last record (call-5) no longer matches its checksum
        entry(root, "t").write_bytes(bytes(raw))
        assert ws.calls["call-1"] == want.calls["call-1"]  # the entry file changed: read from the stream instead
        assert same(ws, want)
        assert same(intentlog.open(root, create=False).task("t").work_state(), want)


@settings(max_examples=300, deadline=None)
@given(history=HISTORIES, more=HISTORIES)
def test_a_fold_resumed_from_its_snapshot_answers_as_the_fold_of_every_event(
    history: list[tuple[str, dict[str, Any]]], more: list[tuple[str, dict[str, Any]]]
) -> None:
    """What the live protocol asks of a fold (not only its result) survives a snapshot round trip through JSON."""
    from intentlog.eventlog.format import Event
    from intentlog.projections.operator import OperatorFold
    from intentlog.projections.workstate import WorkStateFold

    stamp = "2026-01-01T00:00:00.000000Z"
    evs = [Event(i, k, stamp, None, d, f"d{i}") for i, (k, d) in enumerate(history + more)]
    whole, ops = WorkStateFold("t"), OperatorFold()
    part, part_ops = WorkStateFold("t"), OperatorFold()
    for ev in evs[: len(history)]:
        part.apply(ev)
        part_ops.apply(ev)
    snap = orjson.loads(orjson.dumps({"w": part.snapshot(), "o": part_ops.snapshot()}))
    resumed, resumed_ops = WorkStateFold.from_snapshot(snap["w"]), OperatorFold.from_snapshot(snap["o"])
    for ev in evs:
        whole.apply(ev)
        ops.apply(ev)
    for ev in evs[len(history) :]:
        resumed.apply(ev)
        resumed_ops.apply(ev)
    assert same(resumed.result(), whole.result())
    assert resumed_ops.result(whole.result()) == ops.result(whole.result())
    assert resumed.next_call_id() == whole.next_call_id()
    for key in ("k1", "k2"):
        assert resumed.approvals_of(key) == whole.approvals_of(key)
        assert resumed.latest_call(key) == whole.latest_call(key)
    for cid in whole.records():
        assert resumed.pending_resume(cid) == whole.pending_resume(cid)
