"""gc and keep on a ledger on the store: the same plan as a folder holding the same streams, and a safe apply.

A ledger is written on a real SeaweedFS (tasks that expire, one with an unknown effect,
one kept, an orphan object, inline and stored payloads), merged to a folder, and the
folder given the same keep mark: ``plan_gc`` and ``gc --json`` on both give the same
bytes. ``apply_gc`` on both deletes the same; on the store every key of a deleted stream is
gone, the store's gc log records it, and ``verify`` and ``export`` read that log the way
they read a folder's ``gc.jsonl``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import orjson
import pytest
import s3_server
from click.testing import CliRunner

import intentlog
from intentlog.bundle import export_bundle
from intentlog.checker import verify_ledger, verify_path
from intentlog.cli import main
from intentlog.eventlog.remote import events_in
from intentlog.merge import merge
from intentlog.refs import INLINE, walk
from intentlog.retention import GcRefused, apply_gc, keep, kept_tasks, plan_gc, unkeep
from intentlog.s3 import ObjectStreams, S3Client, parse_s3_url
from intentlog.s3.retire import read_log
from intentlog.s3.seals import create_seal

LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=60)
BIG = b"a stored report " * 400  # more than 4 KiB: an object


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


def client_of(url: str) -> S3Client:
    return S3Client(parse_s3_url(url))


def assert_retired(url: str, name: str) -> bool:
    """What gc leaves of a stream on a store: segment 0 and lease segments only, and no task for a reader."""
    left = keys(url, f"tasks/{name}")
    streams = ObjectStreams(client_of(url))
    assert left and left[0].endswith("/s/000000000000"), left
    assert all(streams.segment(name, int(k[-12:]))[0].kind == "lease" for k in left[1:]), left
    assert name not in intentlog.open(url, create=False).task_ids()
    return True


def keys(url: str, folder: str) -> list[str]:
    return [k for k, _ in client_of(url).scan(folder)]


def crash(request: object) -> bytes:
    raise ConnectionError("connection reset")  # the request may have left: effect unknown


def build(url: str) -> None:
    """Tasks that expire (one naming an object, one carrying inline bytes a kept task names), one unknown, one kept."""
    with intentlog.open(url) as ledger:
        ledger.task("old-1").effect("fetch", {"n": 1}, send=lambda r: BIG)
        ledger.task("old-2").effect("fetch", {"n": 2}, send=lambda r: b"small inline bytes")
        inline = [d for ev in ledger.task("old-2").events() for d, ref in walk(ev.data, INLINE) if ref is not None]
        ledger.task("audit").append("note", {"copy": inline[0]})  # names bytes only old-2 carries
        try:
            ledger.task("unknown").effect("fetch", {"n": 3}, send=crash)
        except intentlog.EffectUnknown:
            pass
        ledger.task("kept").effect("fetch", {"n": 4}, send=lambda r: BIG + b"!")
        ledger.artifacts.put(b"referenced by nothing at all " * 200)
    ledger = intentlog.open(url)
    keep(ledger, "audit", note="evidence for the audit")
    keep(ledger, "kept")


def folder_copy(url: str, folder: Path) -> Path:
    """The store merged to a folder, with the store's keep marks written as that folder's keep.json."""
    merge(url, folder)
    marks = kept_tasks(intentlog.open(url, create=False))
    body = {"format": "intentlog-keep/1", "tasks": {t: {"since": m.since, "note": m.note} for t, m in marks.items()}}
    (folder / "keep.json").write_bytes(orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")
    return folder


def test_a_preview_on_the_store_is_the_preview_of_a_folder_holding_the_same(url: str, tmp_path: Path) -> None:
    build(url)
    folder = folder_copy(url, tmp_path / "copy")
    store = intentlog.open(url, create=False)
    local = intentlog.open(folder)
    for policy in ({}, {"max_age": "none", "max_size": "10KB"}, {"max_age": "45d", "grace": "0s"}):
        on_store = plan_gc(store, now=LATER, **policy)  # type: ignore[arg-type]
        on_folder = plan_gc(local, now=LATER, **policy)  # type: ignore[arg-type]
        assert on_store.render() == on_folder.render()
        assert b"".join(on_store.iter_json()) == b"".join(on_folder.iter_json())
    plan = plan_gc(store, now=LATER)
    assert [t.task for t in plan.expired] == ["old-1", "old-2"]  # the test can fail: it deletes something
    assert {k.task: k.rule for k in plan.kept} == {"audit": "keep", "kept": "keep", "unknown": "protected"}
    assert len(plan.blobs) == 2 and len(plan.evacuate) == 1  # BIG and the orphan; old-2's inline bytes move
    runner = CliRunner()
    for args in (["gc"], ["gc", "--json"], ["keep"], ["keep", "--json"]):
        a = runner.invoke(main, ["--root", url, *args])
        b = runner.invoke(main, ["--root", str(folder), *args])
        assert (a.exit_code, same_clock(a.stdout)) == (b.exit_code, same_clock(b.stdout)), args


def same_clock(out: str) -> str:
    """A command's output with its own clock (the plan's "now", printed first) taken out."""
    if out.startswith("{"):
        doc = json.loads(out)
        doc.pop("now")
        return json.dumps(doc)
    return out.split("\n", 1)[1] if out.startswith("gc plan at ") else out


def test_apply_on_the_store_deletes_what_a_folder_deletes_and_logs_it(url: str, tmp_path: Path) -> None:
    build(url)
    folder = folder_copy(url, tmp_path / "copy")
    create_seal(client_of(url))  # sealed before gc: the deleted streams are in the seal
    intentlog.open(folder)  # a folder's seal, for the same check there
    CliRunner().invoke(main, ["--root", str(folder), "seal"], catch_exceptions=False)
    before_objects = set(keys(url, "objects"))
    on_store = apply_gc(intentlog.open(url), now=LATER)
    on_folder = apply_gc(intentlog.open(folder), now=LATER)
    assert on_store.deleted == on_folder.deleted == ("old-1", "old-2")
    assert on_store.blobs_deleted == on_folder.blobs_deleted and len(on_store.blobs_deleted) == 2
    assert on_store.evacuated == on_folder.evacuated and on_store.bytes_freed == on_folder.bytes_freed
    assert_retired(url, "old-1") and assert_retired(url, "old-2")
    after_objects = set(keys(url, "objects"))
    assert len(before_objects - after_objects) == 2 and len(after_objects - before_objects) == 1  # evacuated
    data = read_log(client_of(url))
    assert data is not None
    kinds = [ev.kind for ev in events_in(data, "gc log")]
    assert "gc.heartbeat" in kinds  # gc proved its lease before its deletes
    kinds = [k for k in kinds if k != "gc.heartbeat"]
    assert kinds == ["task.created", "gc.kept", "gc.kept", "gc.started", "gc.leasing", "gc.leased", "gc.finished"]
    started = next(ev for ev in events_in(data, "gc log") if ev.kind == "gc.started")
    assert [t["task"] for t in started.data["tasks"]] == ["old-1", "old-2"]
    # verify reads the store's gc log as a folder's gc.jsonl: deleted on purpose, not lost
    store_report = verify_ledger(intentlog.open(url, create=False))
    folder_report = verify_path(folder)
    assert store_report.ok and folder_report.ok
    codes = sorted((p.code, p.task) for p in store_report.problems if p.code == "deleted_by_gc")
    assert codes == [("deleted_by_gc", "old-1"), ("deleted_by_gc", "old-2")]
    assert codes == sorted((p.code, p.task) for p in folder_report.problems if p.code == "deleted_by_gc")
    ledger = intentlog.open(url)
    assert ledger.task("audit").events()  # the kept task still verifies with the evacuated bytes
    out = tmp_path / "bundle"
    export_bundle(url, out=out)
    assert sorted(p.name for p in (out / "tasks").iterdir()) == ["audit.jsonl", "kept.jsonl", "unknown.jsonl"]
    # a deleted id is used again, as on a folder: a new stream after what gc left (its numbers stay taken)
    left = keys(url, "tasks/old-1")
    ledger.task("old-1").append("note", {"again": True})
    assert set(left) < set(keys(url, "tasks/old-1"))
    assert [ev.kind for ev in ledger.task("old-1").events()] == ["task.created", "note"]
    ledger.close()
    report = verify_ledger(intentlog.open(url, create=False))
    assert report.ok, [p.to_json() for p in report.problems]


def test_keep_on_the_store_marks_and_releases_through_the_gc_log(url: str) -> None:
    with intentlog.open(url) as ledger:
        ledger.task("a").append("note", {})
        ledger.task("b").append("note", {})
    ledger = intentlog.open(url)
    with pytest.raises(intentlog.UsageError, match="no task 'zz'"):
        keep(ledger, "zz")
    assert read_log(client_of(url)) is None  # refused: nothing written
    mark = keep(ledger, "a", note="why")
    assert kept_tasks(ledger) == {"a": mark}
    assert not unkeep(ledger, "b")
    assert unkeep(ledger, "a") and kept_tasks(ledger) == {}
    r = CliRunner().invoke(main, ["--root", url, "keep", "b", "--note", "audit"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["--root", url, "keep", "--json"])
    assert [m["task"] for m in json.loads(r.stdout)] == ["b"]
    plan = plan_gc(ledger, now=LATER)
    assert [t.task for t in plan.expired] == ["a"] and [k.rule for k in plan.kept] == ["keep"]


def test_a_leased_task_is_busy_and_a_writer_after_the_preview_refuses_the_apply(url: str) -> None:
    with intentlog.open(url) as ledger:
        for name in ("a", "b", "c"):
            ledger.task(name).append("note", {})
    ledger = intentlog.open(url)
    preview = plan_gc(ledger, now=LATER, max_age="1d")
    assert [t.task for t in preview.expired] == ["a", "b", "c"] and preview.refused  # would delete everything
    keep(ledger, "c")
    preview = plan_gc(ledger, now=LATER)
    assert [t.task for t in preview.expired] == ["a", "b"]
    writer = intentlog.open(url)
    writer.task("a").append("note", {"more": True})  # the stream's lease is now held by this handle
    busy = plan_gc(ledger, now=LATER)
    assert [(k.task, k.rule) for k in busy.kept if k.task == "a"] == [("a", "busy")]
    with pytest.raises(GcRefused, match="changed since the preview"):
        apply_gc(ledger, preview)
    assert keys(url, "tasks/a") and keys(url, "tasks/b")  # nothing deleted
    result = apply_gc(ledger, now=LATER)
    assert result.deleted == ("b",) and keys(url, "tasks/a")
    writer.close()
    assert apply_gc(ledger, now=LATER).deleted == ("a",)


def test_a_backlogs_unfinished_item_is_kept_on_the_store_as_in_the_folder(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backlog_steps import serve

    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        b = led.backlog("nb")
        b.add("x", {"item": "x", "effects": 1})
        b.add("y", {"item": "y", "effects": 1})
        item_task = b.task_id("x")
        led.task(item_task).effect("e0", {"pkey": "x:0"}, serve)  # paid, then the run died before the backlog knew
        led.task("other").append("note", {})
    merge(root, url)
    on_folder = plan_gc(intentlog.open(root), max_age="1d", now=LATER)
    on_store = plan_gc(intentlog.open(url, create=False), max_age="1d", now=LATER)
    assert on_store.render() == on_folder.render()
    kept = {k.task: k.rule for k in on_store.kept}
    assert kept[item_task] == "backlog" and kept["nb.backlog"] == "backlog"
    assert [t.task for t in on_store.expired] == ["other"]
    result = apply_gc(intentlog.open(url), max_age="1d", now=LATER)
    assert result.deleted == ("other",) and keys(url, f"tasks/{item_task}")


def test_gc_apply_and_keep_on_the_command_line(url: str) -> None:
    with intentlog.open(url) as ledger:
        ledger.task("a").append("note", {})
        ledger.task("b").append("note", {})
        ledger.artifacts.put(BIG)
    runner = CliRunner()
    r = runner.invoke(main, ["--root", url, "keep", "a", "--note", "audit"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["--root", url, "gc", "--max-age", "0s", "--grace", "0s", "--apply", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["deleted"] == ["b"] and doc["blobs_deleted"] == 1 and doc["log"]["file"] == "gc/tasks/log"
    assert assert_retired(url, "b") and keys(url, "objects") == []
    r = runner.invoke(main, ["--root", url, "gc", "--take-over-after", "1s"])
    assert r.exit_code == 2 and "--take-over-after goes with --apply" in r.output


def test_a_re_put_touches_the_object_and_gc_keeps_only_the_latest_touch(url: str) -> None:
    with intentlog.open(url) as ledger:
        ledger.task("a").append("note", {})
        digest = ledger.artifacts.put(BIG).digest
        for _ in range(3):
            ledger.artifacts.put(BIG)  # the same bytes: refused creates, three touches
    assert len(keys(url, "gc/touch")) == 3
    keep(intentlog.open(url), "a")
    plan = plan_gc(intentlog.open(url), grace="1h")
    assert plan.blobs == () and plan.blobs_in_grace == 1  # touched just now: in its grace period
    apply_gc(intentlog.open(url), grace="1h")
    assert len(keys(url, "gc/touch")) == 1  # the latest dates it; the others are swept
    assert digest in {b.digest for b in plan_gc(intentlog.open(url), now=LATER).blobs}


def test_a_store_that_cannot_fence_is_refused_before_gc_or_keep_writes() -> None:
    from s3_server import MemoryClient

    from intentlog.errors import StoreRefused
    from intentlog.ledger import Ledger
    from intentlog.s3 import on_client

    good = MemoryClient(name="fences")
    with Ledger(Path("mem"), storage=on_client(good, write=False), location="mem") as ledger:
        ledger.task("a").append("note", {})
        ledger.task("b").append("note", {})
    fake = MemoryClient(fencing=False, name="no-fence")
    fake.objects = dict(good.objects)
    ledger = Ledger(Path("mem"), storage=on_client(fake, write=False), location="mem")
    assert [t.task for t in plan_gc(ledger, now=LATER, max_age="1d").expired] == ["a", "b"]  # reading is fine
    before = dict(fake.objects)
    with pytest.raises(StoreRefused):
        apply_gc(ledger, now=LATER)
    with pytest.raises(StoreRefused):
        keep(ledger, "a")
    assert {k: v for k, v in fake.objects.items() if not k.startswith("_probe/")} == before
