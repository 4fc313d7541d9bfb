"""Retention (issue 7): gc deletes what the policy expires and never evidence still needed.

Ledgers are built through the public API; ages are controlled by passing ``now`` in the
future, or by re-chaining a stream's lines with older timestamps (``_age_stream``), never
by file mtimes. Every test ends by reading the ledger back from disk.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from blake3 import blake3
from hypothesis import event, given, settings
from hypothesis import strategies as st

import intentlog
from intentlog import retention
from intentlog.errors import InvalidTaskId, UsageError
from intentlog.eventlog import canonical
from intentlog.eventlog.format import encode_line
from intentlog.eventlog.reader import StreamScan
from intentlog.retention import GcRefused, apply_gc, keep, kept_tasks, plan_gc, unkeep
from intentlog.retention import folder as folder_gc

ROOT = Path(__file__).resolve().parents[1]
TS = "%Y-%m-%dT%H:%M:%S.%fZ"
DIGEST = re.compile(r"blake3:[0-9a-f]{64}")
UTC = dt.timezone.utc
# each example builds a ledger with fsync'd appends: few by default, the profile's count
# under INTENTLOG_HYPOTHESIS_PROFILE=intentlog-long
EXAMPLES = settings().max_examples if os.environ.get("INTENTLOG_HYPOTHESIS_PROFILE", "intentlog") != "intentlog" else 25


# -- helpers -------------------------------------------------------------------------------


def _now() -> dt.datetime:
    return dt.datetime.now(UTC)


def _age_stream(path: Path, days: float) -> None:
    """Rewrite a closed stream with every timestamp ``days`` earlier, re-chaining the lines."""
    _rewrite_ts(path, lambda ts: (dt.datetime.strptime(ts, TS) - dt.timedelta(days=days)).strftime(TS))


def _rewrite_ts(path: Path, change: Any) -> None:
    """Rewrite a closed stream's timestamps with ``change(ts)``, re-chaining the lines."""
    prev: str | None = None
    out = []
    for seq, line in enumerate(path.read_bytes().splitlines(keepends=True)):
        obj = orjson.loads(line)
        new = encode_line(obj["kind"], canonical.dumps(obj["data"]), prev, seq, change(obj["ts"]))
        prev = "blake3:" + blake3(new).hexdigest()
        out.append(new)
    path.write_bytes(b"".join(out))


def _age_objects(root: Path, days: float) -> None:
    """Set every object's mtime ``days`` back (as if stored then: past the grace period)."""
    past = (_now() - dt.timedelta(days=days)).timestamp()
    for p in (root / "objects").glob("*/*"):
        os.utime(p, (past, past))


def _walk_strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _walk_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk_strings(v)
    elif isinstance(value, str):
        yield value


def _inline_refs(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        if "inline" in value or "inline_b64" in value:
            yield value
        for v in value.values():
            yield from _inline_refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _inline_refs(v)


def _events(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _named_digests(path: Path) -> set[str]:
    """Every digest named in a stream's event data (read without intentlog's reader)."""
    out: set[str] = set()
    for ev in _events(path):
        for s in _walk_strings(ev["data"]):
            out.update(DIGEST.findall(s))
    return out


def _inline_digests(path: Path) -> set[str]:
    return {r["digest"] for ev in _events(path) for r in _inline_refs(ev["data"])}


def _object(root: Path, digest: str) -> Path:
    h = digest.split(":", 1)[1]
    return root / "objects" / h[:2] / h[2:]


def _objects(root: Path) -> dict[str, int]:
    out = {}
    for p in (root / "objects").glob("*/*"):
        out["blake3:" + p.parent.name + p.name] = p.stat().st_size
    return out


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock") and p.parent.name != "tmp"
    }


def _ledger_size(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "tasks").glob("*.jsonl")) + sum(_objects(root).values())


def _gc_log(root: Path) -> list[dict[str, Any]]:
    return [ev.to_json() for ev in StreamScan(root / "gc.jsonl")]


def _verify_ok(led: intentlog.Ledger) -> None:
    try:
        from intentlog.projections.verify import verify_ledger
    except ImportError:  # pragma: no cover - the checker lands separately
        return
    report = verify_ledger(led)
    assert report.ok, report.render()


def _boom(request: Any) -> bytes:
    raise RuntimeError("connection reset")


def _fail(request: Any) -> bytes:
    raise intentlog.ProviderFailure("bad request", body=b'{"error": "bad"}', retryable=False)


def _answer(body: bytes) -> Any:
    """A ``send`` that answers ``body``."""

    def send(request: Any) -> bytes:
        return body

    return send


BIG_A = b"A" * 5000
BIG_B = b"B" * 6000
SMALL = b'{"ok": true}'


# -- durations and sizes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 30 * 86400),
        ("12h", 43200),
        ("90m", 5400),
        ("1h", 3600),
        ("45s", 45),
        ("2w", 14 * 86400),
        ("1.5h", 5400),
        (" 7 d ", 7 * 86400),
        (10, 10),
        (dt.timedelta(hours=2), 7200),
    ],
)
def test_parse_duration_reads_units(text: Any, seconds: float) -> None:
    """parse_duration turns '30d', '12h', '90m' (and numbers, timedeltas) into seconds."""
    assert retention.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["30", "30x", "d", "-1d", "", "thirty days", "1e3d", True, None])
def test_parse_duration_refuses_with_a_clear_error(text: Any) -> None:
    """A malformed duration is a UsageError that names the accepted forms."""
    with pytest.raises(UsageError, match="duration"):
        retention.parse_duration(text)


def test_parse_duration_none_only_where_allowed() -> None:
    """'none' means no limit for max age, and is refused for the grace period."""
    assert retention.parse_duration("none", allow_none=True) is None
    with pytest.raises(UsageError):
        retention.parse_duration("none")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("500MiB", 500 << 20),
        ("2GiB", 2 << 30),
        ("10MB", 10_000_000),
        ("4096", 4096),
        ("1kib", 1024),
        ("0", 0),
        (123, 123),
        ("1.5KiB", 1536),
    ],
)
def test_parse_size_reads_units(text: Any, size: int) -> None:
    """parse_size reads binary and decimal units, case-insensitively."""
    assert retention.parse_size(text) == size


@pytest.mark.parametrize("text", ["500M", "MiB", "-1MiB", "lots", "", True, 1.5])
def test_parse_size_refuses_with_a_clear_error(text: Any) -> None:
    """A malformed size is a UsageError that lists the units."""
    with pytest.raises(UsageError, match="size"):
        retention.parse_size(text)


def test_formatting_round_trips_the_defaults() -> None:
    """The defaults render as they are written in the docs."""
    assert retention.format_duration(retention.DEFAULT_MAX_AGE) == "30d"
    assert retention.format_duration(retention.DEFAULT_GRACE) == "1h"
    assert retention.format_size(retention.DEFAULT_MAX_SIZE) == "500 MiB"
    assert retention.format_duration(93600) == "1d 2h"
    assert retention.format_size(None) == "none"


def _set_retention(root: Path, config: Any) -> None:
    marker = root / "intentlog.json"
    obj = orjson.loads(marker.read_bytes())
    obj["retention"] = config
    os.chmod(marker, 0o644)
    marker.write_bytes(orjson.dumps(obj))


def test_policy_comes_from_arguments_then_intentlog_json_then_defaults(ledger_root: Path) -> None:
    """resolve_policy: an argument beats intentlog.json's retention, which beats the defaults."""
    intentlog.open(ledger_root).close()
    assert retention.resolve_policy(intentlog.open(ledger_root)) == retention.GcPolicy()
    _set_retention(ledger_root, {"max_age": "7d", "max_size": "1GiB"})
    led = intentlog.open(ledger_root)
    assert retention.resolve_policy(led) == retention.GcPolicy(7 * 86400, 1 << 30, 3600)
    assert retention.resolve_policy(led, max_age="1d", grace="0s") == retention.GcPolicy(86400, 1 << 30, 0)
    assert retention.resolve_policy(led, max_size="none").max_size is None


@pytest.mark.parametrize("config", [{"max_age": "soon"}, {"maxage": "1d"}, ["30d"], {"grace": True}])
def test_bad_retention_config_is_a_usage_error_naming_the_file(ledger_root: Path, config: Any) -> None:
    """A malformed retention section is refused, naming intentlog.json; nothing is deleted."""
    intentlog.open(ledger_root).close()
    _set_retention(ledger_root, config)
    led = intentlog.open(ledger_root)
    with pytest.raises(UsageError, match=r"intentlog\.json"):
        plan_gc(led)


# -- the property: generated ledgers ------------------------------------------------------------

STATES = ("notes", "complete", "complete_big", "accepted", "unknown", "failed", "not_served", "open")
PROTECTED = {"unknown", "failed"}
# what a task's last note names: a shared blob as a ref, a blob as a bare string in text, or
# bytes riding inline in an earlier task's event (weighted: it is the case that needs evacuation)
REFS = ("blob_a", "blob_b", "bare_b", "small_of_prev", "small_of_prev")


@st.composite
def ledgers(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(min_value=2, max_value=6))
    tasks = []
    for i in range(n):
        tasks.append(
            {
                "id": f"t{i}",
                "state": draw(st.sampled_from(STATES)),
                "age": draw(st.sampled_from([0, 5, 20, 45, 100, 400])),
                "keep": draw(st.booleans().map(lambda b: b and draw(st.integers(0, 3)) == 0)),
                "refs": draw(st.lists(st.sampled_from(REFS), max_size=2)),
            }
        )
    return {
        "tasks": tasks,
        "orphans": draw(st.integers(min_value=0, max_value=2)),
        "now_offset": draw(st.sampled_from([0, 10, 60, 500])),
        "max_age": draw(st.sampled_from(["30d", "none", "none", "1d", "0s"])),
        "max_size": draw(st.sampled_from(["500MiB", "none", "24KiB", "16KiB", "8KiB", "0"])),
        "grace": draw(st.sampled_from(["1h", "0s"])),
    }


def _build(root: Path, spec: dict[str, Any]) -> intentlog.Ledger:
    """Build a ledger from a spec through the public API; returns it with every handle closed."""
    led = intentlog.open(root)
    blob_a = led.artifacts.put(BIG_A)
    small_digests: list[dict[str, Any]] = []
    for t in spec["tasks"]:
        task = led.task(t["id"])
        state = t["state"]
        if state in ("complete", "accepted", "open"):
            task.effect("k", {"task": t["id"]}, send=_answer(SMALL + t["id"].encode()))
            ref = task.work_state().calls["call-1"].response
            assert ref is not None
            small_digests.append({"digest": ref["digest"], "size": ref["size"]})
            if state == "accepted":
                task.accept(note="checked")
        elif state == "complete_big":
            task.effect("k", {"task": t["id"]}, send=lambda r: BIG_B)
        elif state == "unknown":
            with pytest.raises(intentlog.EffectUnknown):
                task.effect("k", {"task": t["id"]}, send=_boom)
        elif state == "failed":
            with pytest.raises(intentlog.CallFailed):
                task.effect("k", {"task": t["id"]}, send=_fail, retry=intentlog.NO_RETRY)
        elif state == "not_served":
            with pytest.raises(intentlog.EffectUnknown):
                task.effect("k", {"task": t["id"]}, send=_boom)
            task.reconcile("call-1", "not_served", note="not in the provider's log")
        data: dict[str, Any] = {"phase": state}
        for r in t["refs"]:
            if r == "blob_a":
                data["a"] = blob_a.to_json()
            elif r == "blob_b":
                data["b"] = {"digest": "blake3:" + blake3(BIG_B).hexdigest(), "size": len(BIG_B)}
                led.artifacts.put(BIG_B)
            elif r == "bare_b":
                led.artifacts.put(BIG_B)
                data["text"] = "see blake3:" + blake3(BIG_B).hexdigest() + " for the body"
            elif r == "small_of_prev" and small_digests:
                data["input"] = small_digests[-1]  # bytes riding inline in another task's event
        task.append("note", data)
    for i in range(spec["orphans"]):
        led.artifacts.put(f"orphan {i} ".encode() * 700)
    led.close()
    for t in spec["tasks"]:
        if t["age"]:
            _age_stream(led.stream_path(t["id"]), t["age"])
    for t in spec["tasks"]:
        if t["keep"]:
            keep(led, t["id"], note="generated")
    for t in spec["tasks"]:
        if t["state"] == "open":
            _ = led.task(t["id"]).next_seq  # a writer holds the lock from here on
    return led


@settings(max_examples=EXAMPLES, deadline=None)
@given(spec=ledgers())
def test_gc_apply_keeps_every_needed_byte_and_equals_the_preview(spec: dict[str, Any]) -> None:
    """After gc --apply on any generated ledger: kept streams are byte-identical and verify,
    every digest they name is still stored (in objects/ or inline), protected, kept and open
    tasks survive, the applied deletions equal the preview's, and the size after is exact."""
    tmp = Path(tempfile.mkdtemp(prefix="gc-prop-"))
    try:
        root = tmp / "ledger"
        led = _build(root, spec)
        now = _now() + dt.timedelta(days=spec["now_offset"])
        policy = {"max_age": spec["max_age"], "max_size": spec["max_size"], "grace": spec["grace"]}
        before = _snapshot(root)
        objects_before = _objects(root)
        preview = plan_gc(led, now=now, **policy)
        assert _snapshot(root) == before, "a preview wrote something"

        never = {t["id"] for t in spec["tasks"] if t["state"] in PROTECTED | {"open"} or t["keep"]}
        expired = {t.task for t in preview.expired}
        assert not (expired & never), preview.render()
        assert not preview.incomplete

        event("refused" if preview.refused else "empty" if preview.empty else "deletes")
        for outcome, seen in [
            ("evicted by size", any(t.reason == "size" for t in preview.expired)),
            ("expired by age", any(t.reason == "age" for t in preview.expired)),
            ("blobs deleted", bool(preview.blobs)),
            ("blobs in grace", bool(preview.blobs_in_grace)),
            ("inline bytes evacuated", bool(preview.evacuate)),
            ("a protected task", any(k.rule == "protected" for k in preview.kept)),
        ]:
            if seen:
                event(outcome)
        if preview.refused:
            assert expired == {t["id"] for t in spec["tasks"]}
            with pytest.raises(GcRefused):
                apply_gc(led, preview)
            assert _snapshot(root) == before
            return

        result = apply_gc(led, preview)
        assert result.plan.deletions() == preview.deletions()
        assert result.exact
        assert set(result.deleted) == expired
        assert sorted(result.blobs_deleted) == [b.digest for b in preview.blobs]

        # from disk: expired streams are gone, kept ones untouched
        after = _snapshot(root)
        for t in spec["tasks"]:
            rel = f"tasks/{t['id']}.jsonl"
            if t["id"] in expired:
                assert rel not in after
            else:
                assert after[rel] == before[rel]
        kept_paths = [root / "tasks" / f"{t['id']}.jsonl" for t in spec["tasks"] if t["id"] not in expired]
        inline_kept = set().union(*(_inline_digests(p) for p in kept_paths)) if kept_paths else set()
        objects_after = _objects(root)
        for p in kept_paths:
            for d in _named_digests(p):
                assert d in objects_after or d in inline_kept, f"{d} named by {p.name} is gone"
        for d in objects_after:
            assert blake3(_object(root, d).read_bytes()).hexdigest() == d.split(":")[1]
            assert d in objects_before or d in {e.digest for e in preview.evacuate}
        # a blob within its grace period is never deleted
        grace = retention.parse_duration(spec["grace"])
        assert grace is not None
        for b in preview.blobs:
            assert (now - dt.datetime.fromtimestamp(b.mtime_ns / 1e9, UTC)).total_seconds() >= grace
        assert preview.bytes_after == _ledger_size(root)

        # the size cap takes the oldest eligible first
        young = [k for k in preview.kept if k.rule == "young"]
        by_size = [t for t in preview.expired if t.reason == "size"]
        if by_size and young:
            assert max(t.last_activity for t in by_size) <= min(k.last_activity or "" for k in young)
        max_size = retention.parse_size(spec["max_size"], allow_none=True)
        if max_size is not None and preview.bytes_after > max_size:
            assert not young

        # the record of what was deleted (an empty plan deletes and records nothing)
        if preview.empty:
            assert result.log_seq is None and not (root / "gc.jsonl").exists()
        else:
            log = _gc_log(root)
            assert [e["kind"] for e in log[-2:]] == ["gc.started", "gc.finished"]
            assert {t["task"] for t in log[-2]["data"]["tasks"]} == expired
            assert log[-1]["data"]["bytes_freed"] == result.bytes_freed == preview.bytes_freed
        _verify_ok(led)
    finally:
        if (tmp / "ledger" / "intentlog.json").exists():
            intentlog.open(tmp / "ledger").close()  # release the locks of 'open' tasks
        shutil.rmtree(tmp, ignore_errors=True)


@settings(max_examples=min(EXAMPLES, 20), deadline=None)
@given(
    max_age=st.sampled_from(["0s", "1d", "none"]),
    max_size=st.sampled_from(["0", "1KiB", "none"]),
    grace=st.sampled_from(["0s", "1h"]),
    offset=st.sampled_from([0, 1, 1000]),
)
def test_unresolved_tasks_survive_any_policy(max_age: str, max_size: str, grace: str, offset: int) -> None:
    """An unknown effect or a paused-for-review call keeps its task under every policy, however tight."""
    tmp = Path(tempfile.mkdtemp(prefix="gc-unres-"))
    try:
        led = _build(
            tmp / "ledger",
            {
                "tasks": [
                    {"id": "unknown", "state": "unknown", "age": 400, "keep": False, "refs": ["blob_a"]},
                    {"id": "failed", "state": "failed", "age": 400, "keep": False, "refs": []},
                    {"id": "done", "state": "complete_big", "age": 400, "keep": False, "refs": []},
                ],
                "orphans": 1,
            },
        )
        now = _now() + dt.timedelta(days=offset)
        plan = plan_gc(led, max_age=max_age, max_size=max_size, grace=grace, now=now)
        assert {k.task: k.rule for k in plan.kept if k.task != "done"} == {
            "unknown": "protected",
            "failed": "protected",
        }
        if not plan.empty:
            apply_gc(led, plan)
        assert (tmp / "ledger/tasks/unknown.jsonl").exists() and (tmp / "ledger/tasks/failed.jsonl").exists()
        assert _object(tmp / "ledger", "blake3:" + blake3(BIG_A).hexdigest()).exists()
        _verify_ok(led)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- specific guarantees ---------------------------------------------------------------------


def test_a_blob_stored_just_before_gc_survives_while_an_old_orphan_goes(ledger: intentlog.Ledger) -> None:
    """An unreferenced blob younger than the grace period is kept (its event may be on its way);
    one whose mtime is past the grace period is deleted."""
    ledger.task("keepme").append("note", {})
    old = ledger.artifacts.put(b"old orphan " * 600)
    past = (_now() - dt.timedelta(hours=2)).timestamp()
    os.utime(ledger.artifacts.path_for(old.digest), (past, past))
    fresh = ledger.artifacts.put(b"fresh, its event not yet appended " * 200)
    ledger.close()
    plan = plan_gc(ledger)
    assert [b.digest for b in plan.blobs] == [old.digest]
    assert plan.blobs_in_grace == 1
    result = apply_gc(ledger)
    assert result.blobs_deleted == (old.digest,)
    assert ledger.artifacts.path_for(fresh.digest).exists()
    assert not ledger.artifacts.path_for(old.digest).exists()


def test_a_blob_stored_again_while_gc_runs_is_put_back(ledger: intentlog.Ledger, monkeypatch: Any) -> None:
    """A writer that re-puts a blob after gc planned to delete it refreshes its mtime; gc sees
    that after moving it aside and puts it back, so the writer's next event is not dangling."""
    ledger.task("keepme").append("note", {})
    data = b"re-put me " * 600
    ref = ledger.artifacts.put(data)
    past = (_now() - dt.timedelta(days=3)).timestamp()
    os.utime(ledger.artifacts.path_for(ref.digest), (past, past))
    ledger.close()
    real_plan = retention.plan.make_plan

    def plan_then_reput(*args: Any, **kwargs: Any) -> retention.GcPlan:
        p = real_plan(*args, **kwargs)
        ledger.artifacts.put(data)  # a writer, between the re-plan and the deletion
        return p

    monkeypatch.setattr(retention.apply, "make_plan", plan_then_reput)
    result = apply_gc(ledger)
    assert result.restored == (ref.digest,)
    assert not result.exact and result.blobs_deleted == ()
    assert ledger.artifacts.get(ref.digest) == data
    assert _gc_log(ledger.root)[-1]["data"]["restored"] == [ref.digest]


def test_an_unreadable_stream_blocks_all_blob_deletion(ledger: intentlog.Ledger) -> None:
    """A stream corrupt in the middle makes the scan incomplete: the plan says so, no blob is
    deleted (its references are unknown), the stream is kept, and other expired tasks still go."""
    led = ledger
    led.task("bad").effect("k", {"q": 1}, send=lambda r: BIG_B)
    led.task("old").append("note", {})
    led.task("young").append("note", {})
    orphan = led.artifacts.put(b"orphan " * 1000)
    led.close()
    _age_stream(led.stream_path("old"), 60)
    _age_stream(led.stream_path("bad"), 60)
    path = led.stream_path("bad")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"seq":2', b'"seq":9')
    path.write_bytes(b"".join(lines))
    now = _now() + dt.timedelta(hours=2)
    plan = plan_gc(led, now=now)
    assert plan.incomplete and "tasks/bad.jsonl line 3" in plan.incomplete[0]
    assert plan.blobs == ()
    assert [t.task for t in plan.expired] == ["old"]
    assert {k.task: k.rule for k in plan.kept} == {"bad": "unreadable", "young": "young"}
    assert "INCOMPLETE" in plan.render() and plan.to_json()["incomplete"]
    apply_gc(led, plan)
    assert led.artifacts.path_for(orphan.digest).exists()
    assert led.artifacts.path_for("blake3:" + blake3(BIG_B).hexdigest()).exists()
    assert not led.stream_path("old").exists() and led.stream_path("bad").exists()


def test_a_stray_file_in_tasks_blocks_blob_deletion(ledger: intentlog.Ledger) -> None:
    """A file in tasks/ not named like a stream might hold references: the scan is incomplete."""
    ledger.task("a").append("note", {})
    orphan = ledger.artifacts.put(b"o" * 5000)
    ledger.close()
    (ledger.tasks_dir / "not a task.jsonl").write_bytes(b"{}\n")
    plan = plan_gc(ledger, now=_now() + dt.timedelta(hours=2))
    assert plan.incomplete and plan.blobs == ()
    assert ledger.artifacts.path_for(orphan.digest).exists()


def test_too_many_digests_for_the_memory_budget_is_an_incomplete_scan(ledger: intentlog.Ledger) -> None:
    """Past max_tracked distinct digests the scan stops tracking and says so: no blob is deleted."""
    a = ledger.artifacts.put(b"a" * 5000)
    b = ledger.artifacts.put(b"b" * 5000)
    ledger.task("t").append("note", {"a": a.to_json(), "b": b.to_json()})
    ledger.artifacts.put(b"orphan" * 1000)
    ledger.close()
    plan = plan_gc(ledger, now=_now() + dt.timedelta(hours=2), max_tracked=1)
    assert any("max_tracked" in r for r in plan.incomplete)
    assert plan.blobs == ()


def test_an_incomplete_last_line_keeps_the_blobs_it_names(ledger: intentlog.Ledger) -> None:
    """A torn append is not trusted, but the digests in its bytes are kept, to be safe; the scan
    is still complete (a torn tail is what a crash leaves)."""
    big = ledger.artifacts.put(b"torn " * 2000)
    ledger.task("t").append("note", {})
    ledger.close()
    with open(ledger.stream_path("t"), "ab") as f:
        f.write(b'{"data":{"r":{"digest":"' + big.digest.encode() + b'","size":10000}},"kind":"no')
    plan = plan_gc(ledger, now=_now() + dt.timedelta(hours=2))
    assert not plan.incomplete
    assert big.digest not in {b.digest for b in plan.blobs}


def test_the_size_cap_evicts_the_oldest_eligible_tasks_first(ledger: intentlog.Ledger) -> None:
    """With no age limit, tasks go oldest first (by the timestamps inside them) until the
    ledger fits, and no further; protected and kept tasks are skipped over, never evicted."""
    ages = [("d10", 10), ("d40", 40), ("d20", 20), ("d30", 30), ("unk", 50), ("kept", 60)]
    for tid, _ in ages:
        t = ledger.task(tid)
        if tid == "unk":
            with pytest.raises(intentlog.EffectUnknown):
                t.effect("k", {}, send=_boom)
        t.append("note", {"pad": "x" * 3000})
    ledger.close()
    for tid, age in ages:
        _age_stream(ledger.stream_path(tid), age)
    keep(ledger, "kept")
    total = _ledger_size(ledger.root)
    sizes = {t: ledger.stream_path(t).stat().st_size for t in ("d40", "d30")}
    cap = total - sizes["d40"] - sizes["d30"] // 2
    plan = plan_gc(ledger, max_age="none", max_size=cap)
    assert [(t.task, t.reason) for t in plan.expired] == [("d40", "size"), ("d30", "size")]
    assert plan.bytes_after <= cap < plan.bytes_before
    result = apply_gc(ledger, plan)
    assert result.deleted == ("d40", "d30")
    assert sorted(p.name for p in ledger.tasks_dir.glob("*.jsonl")) == [
        "d10.jsonl",
        "d20.jsonl",
        "kept.jsonl",
        "unk.jsonl",
    ]
    assert _ledger_size(ledger.root) == plan.bytes_after


def test_age_comes_from_timestamps_inside_the_stream_never_mtimes(ledger: intentlog.Ledger) -> None:
    """A stream whose file mtime is ancient but whose events are recent is young; one with old
    events but a fresh mtime (a git checkout) is old."""
    ledger.task("recent").append("note", {})
    ledger.task("old").append("note", {})
    ledger.task("anchor").append("note", {})
    ledger.close()
    _age_stream(ledger.stream_path("old"), 45)
    ancient = (_now() - dt.timedelta(days=900)).timestamp()
    os.utime(ledger.stream_path("recent"), (ancient, ancient))
    plan = plan_gc(ledger, now=_now() + dt.timedelta(hours=2))
    assert [t.task for t in plan.expired] == ["old"]
    assert plan.expired[0].reason == "age" and "older than max age 30d" in plan.expired[0].detail


def test_a_stream_without_a_real_date_is_kept_as_undated(ledger: intentlog.Ledger) -> None:
    """Timestamps that are not dates (a foreign or edited stream) cannot age a task: it is kept."""
    ledger.task("odd").append("note", {})
    ledger.task("other").append("note", {})
    ledger.close()
    _rewrite_ts(ledger.stream_path("odd"), lambda ts: "2026-13-45T99:00:00.000000Z")
    plan = plan_gc(ledger, now=_now() + dt.timedelta(days=90))
    assert {k.task: k.rule for k in plan.kept} == {"odd": "undated"}
    assert [t.task for t in plan.expired] == ["other"]


def test_a_task_open_for_writing_is_never_deleted(ledger: intentlog.Ledger) -> None:
    """A task whose writer lock is held (here by this very process) is kept as busy."""
    ledger.task("open").append("note", {})
    ledger.task("other").append("note", {})
    ledger.task("other").close()
    plan = plan_gc(ledger, now=_now() + dt.timedelta(days=90))
    assert {k.task: k.rule for k in plan.kept} == {"open": "busy"}
    assert [t.task for t in plan.expired] == ["other"]


def test_a_task_another_process_writes_is_never_deleted(ledger: intentlog.Ledger) -> None:
    """A writer in another process holds the task's lock: preview and apply keep the task, and
    its stream is untouched when that process exits."""
    ledger.task("theirs").append("note", {})
    ledger.task("other").append("note", {})
    ledger.task("anchor").append("note", {})
    ledger.close()
    keep(ledger, "anchor")
    code = (
        "import sys, intentlog\n"
        "t = intentlog.open(sys.argv[1]).task('theirs')\n"
        "t.next_seq\n"  # takes the writer lock
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(ledger.root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        before = ledger.stream_path("theirs").read_bytes()
        now = _now() + dt.timedelta(days=90)
        plan = plan_gc(ledger, now=now)
        assert {k.task: k.rule for k in plan.kept} == {"theirs": "busy", "anchor": "keep"}
        result = apply_gc(ledger, plan)
        assert result.deleted == ("other",)
    finally:
        child.communicate("\n", timeout=30)
    assert child.returncode == 0
    assert ledger.stream_path("theirs").read_bytes() == before


def test_a_plan_that_keeps_nothing_is_refused(ledger: intentlog.Ledger) -> None:
    """If every task stream would go, the plan is refused and apply deletes nothing."""
    ledger.task("a").append("note", {})
    ledger.task("b").effect("k", {}, send=lambda r: BIG_A)
    ledger.close()
    now = _now() + dt.timedelta(days=90)
    plan = plan_gc(ledger, now=now)
    assert plan.refused and "keep nothing" in plan.refused and "REFUSED" in plan.render()
    before = _snapshot(ledger.root)
    with pytest.raises(GcRefused, match="keep nothing"):
        apply_gc(ledger, now=now)
    assert _snapshot(ledger.root) == before


def test_apply_refuses_a_preview_the_ledger_has_moved_past(ledger: intentlog.Ledger) -> None:
    """A preview whose deletions no longer match the re-plan is refused: 're-run the preview'."""
    ledger.task("a").append("note", {})
    ledger.task("b").append("note", {})
    ledger.close()
    _age_stream(ledger.stream_path("a"), 60)
    preview = plan_gc(ledger)
    assert [t.task for t in preview.expired] == ["a"]
    with intentlog.open(ledger.root) as again:
        again.task("a").append("note", {"late": True})
    before = _snapshot(ledger.root)
    with pytest.raises(GcRefused, match="re-run the preview"):
        apply_gc(ledger, preview)
    assert _snapshot(ledger.root) == before


def test_a_task_reopened_between_plan_and_delete_is_skipped_with_its_blobs(
    ledger: intentlog.Ledger, monkeypatch: Any
) -> None:
    """A writer that takes an expired task's lock after the re-plan wins: its stream and every
    blob it names stay, and the result and gc.jsonl say it was skipped."""
    ledger.task("a").effect("k", {}, send=lambda r: BIG_A)
    ledger.task("b").append("note", {})
    ledger.close()
    _age_stream(ledger.stream_path("a"), 60)
    _age_objects(ledger.root, 2)
    real_plan = retention.plan.make_plan

    def plan_then_open(*args: Any, **kwargs: Any) -> retention.GcPlan:
        p = real_plan(*args, **kwargs)
        _ = ledger.task("a").next_seq  # takes the writer lock
        return p

    monkeypatch.setattr(retention.apply, "make_plan", plan_then_open)
    result = apply_gc(ledger)
    ledger.close()
    assert [t for t, _ in result.skipped] == ["a"] and result.deleted == ()
    assert "blake3:" + blake3(BIG_A).hexdigest() in {b.digest for b in result.plan.blobs}
    assert ledger.stream_path("a").exists()
    assert ledger.artifacts.get("blake3:" + blake3(BIG_A).hexdigest()) == BIG_A
    assert _gc_log(ledger.root)[-1]["data"]["skipped"][0]["task"] == "a"
    _verify_ok(ledger)


def test_inline_bytes_a_kept_task_needs_are_copied_out_before_their_stream_goes(ledger: intentlog.Ledger) -> None:
    """Bytes riding inline in an expiring stream, referred to by a kept one, are evacuated to
    objects/ first: the kept task still verifies."""
    ledger.task("producer").effect("k", {}, send=lambda r: SMALL)
    ref = ledger.task("producer").work_state().calls["call-1"].response
    assert ref is not None and "inline" in ref
    ledger.task("consumer").append("note", {"input": {"digest": ref["digest"], "size": ref["size"]}})
    ledger.close()
    _age_stream(ledger.stream_path("producer"), 60)
    plan = plan_gc(ledger)
    assert [t.task for t in plan.expired] == ["producer"]
    assert [(e.digest, e.task) for e in plan.evacuate] == [(ref["digest"], "producer")]
    result = apply_gc(ledger, plan)
    assert result.evacuated == (ref["digest"],)
    assert ledger.artifacts.path_for(ref["digest"]).read_bytes() == SMALL
    assert plan.bytes_after == _ledger_size(ledger.root)
    _verify_ok(ledger)


def test_shared_blobs_stay_while_any_retained_task_names_them(ledger: intentlog.Ledger) -> None:
    """A blob named by an expiring task and by a kept one (as a ref or a bare string) stays."""
    big = ledger.artifacts.put(BIG_A)
    ledger.task("old").append("note", {"r": big.to_json()})
    ledger.task("new").append("note", {"text": f"derived from {big.digest}"})
    ledger.close()
    _age_stream(ledger.stream_path("old"), 60)
    result = apply_gc(ledger)
    assert result.deleted == ("old",) and result.blobs_deleted == ()
    assert ledger.artifacts.get(big.digest) == BIG_A


def test_gc_log_records_what_was_deleted_before_deleting(ledger: intentlog.Ledger) -> None:
    """gc.jsonl is a hash-chained stream: gc.started names every task (with its head) and blob,
    gc.finished what was done; a second apply appends to the same chain."""
    ledger.task("old").effect("k", {}, send=lambda r: BIG_A)
    ledger.task("new").append("note", {})
    ledger.close()
    _age_stream(ledger.stream_path("old"), 60)
    _age_objects(ledger.root, 2)
    scan = StreamScan(ledger.stream_path("old"))
    stream_id = None
    for ev in scan:  # read to the end: scan.head and scan.count are checked below
        if ev.seq == 0:
            stream_id = ev.data["stream"]
    apply_gc(ledger)
    log = _gc_log(ledger.root)
    assert [e["kind"] for e in log] == ["task.created", "gc.started", "gc.finished"]
    started = log[1]["data"]
    assert started["tasks"][0]["task"] == "old" and started["tasks"][0]["head"] == scan.head
    assert started["tasks"][0]["stream"] == stream_id and started["tasks"][0]["events"] == scan.count
    assert started["blobs"]["digests"] == ["blake3:" + blake3(BIG_A).hexdigest()]
    assert log[2]["data"]["deleted"] == ["old"] and log[2]["data"]["started"] == 1
    assert apply_gc(ledger).log_seq is None  # nothing left to do: nothing logged
    ledger.task("newer").append("note", {})
    ledger.close()
    _age_stream(ledger.stream_path("new"), 60)
    apply_gc(ledger)
    assert [e["kind"] for e in _gc_log(ledger.root)][-2:] == ["gc.started", "gc.finished"]


def test_a_crash_mid_sweep_leaves_moved_blobs_that_the_next_apply_puts_back(ledger: intentlog.Ledger) -> None:
    """A blob moved aside by an apply that died before deciding is put back at the next apply."""
    ledger.task("t").append("note", {})
    data = b"moved " * 1000
    ref = ledger.artifacts.put(data)
    ledger.task("t").append("note", {"r": ref.to_json()})
    ledger.close()
    src = ledger.artifacts.path_for(ref.digest)
    os.rename(src, ledger.tmp_dir / folder_gc._moved_name(ref.digest))
    apply_gc(ledger)
    assert ledger.artifacts.get(ref.digest) == data
    assert not any(n.endswith(".moved") for n in os.listdir(ledger.tmp_dir))


def test_keep_marks_live_in_keep_json_and_protect_the_task(ledger: intentlog.Ledger) -> None:
    """keep writes keep.json atomically; a kept task survives; unkeep releases it."""
    ledger.task("a").append("note", {})
    ledger.task("b").append("note", {})
    ledger.close()
    _age_stream(ledger.stream_path("a"), 60)
    mark = keep(ledger, "a", note="audit 2026")
    assert kept_tasks(ledger) == {"a": mark}
    assert orjson.loads((ledger.root / "keep.json").read_bytes())["tasks"]["a"]["note"] == "audit 2026"
    plan = plan_gc(ledger)
    assert plan.expired == () and {k.task: k.rule for k in plan.kept}["a"] == "keep"
    assert unkeep(ledger, "a") is True and unkeep(ledger, "a") is False
    assert [t.task for t in plan_gc(ledger).expired] == ["a"]


def test_keep_refuses_bad_ids_and_unknown_tasks_before_touching_the_disk(ledger: intentlog.Ledger) -> None:
    """An invalid id or a task with no stream is refused and keep.json is not written."""
    ledger.task("a").append("note", {})
    ledger.close()
    before = _snapshot(ledger.root)
    with pytest.raises(InvalidTaskId):
        keep(ledger, "../a")
    with pytest.raises(UsageError, match="no task 'nope'"):
        keep(ledger, "nope")
    assert _snapshot(ledger.root) == before


def test_a_damaged_keep_json_refuses_the_plan(ledger: intentlog.Ledger) -> None:
    """If keep.json cannot be read, which tasks are kept is unknown: the plan is refused."""
    ledger.task("a").append("note", {})
    ledger.task("b").append("note", {})
    ledger.close()
    (ledger.root / "keep.json").write_bytes(b"{not json")
    plan = plan_gc(ledger, now=_now() + dt.timedelta(days=90))
    assert plan.refused and "keep.json" in plan.refused
    with pytest.raises(GcRefused):
        apply_gc(ledger, plan)


def test_a_running_gc_holds_the_lock(ledger: intentlog.Ledger) -> None:
    """A second gc (or a keep) while one holds gc.lock is refused, naming the holder."""
    ledger.task("a").append("note", {})
    ledger.close()
    with folder_gc.gc_lock(ledger, wait=0), pytest.raises(GcRefused, match="gc or a keep is running"):
        apply_gc(ledger)


def test_plan_json_and_render_say_what_goes_and_why(ledger: intentlog.Ledger) -> None:
    """The plan's JSON has every part the preview promises: tasks and reasons, blobs, kept and
    why, bytes before, freed and after."""
    ledger.task("old").effect("k", {}, send=lambda r: BIG_A)
    ledger.task("new").append("note", {})
    ledger.close()
    _age_stream(ledger.stream_path("old"), 60)
    _age_objects(ledger.root, 2)
    plan = plan_gc(ledger)
    j = plan.to_json()
    assert j["version"] == "intentlog-gc-plan/1"
    assert j["expired"][0]["task"] == "old" and j["expired"][0]["reason"] == "age"
    assert j["blobs"] == [{"digest": "blake3:" + blake3(BIG_A).hexdigest(), "size": len(BIG_A)}]
    assert j["kept"][0]["task"] == "new" and j["kept"][0]["rule"] == "grace"  # active a moment ago
    b = j["bytes"]
    assert b["after"] == b["before"] - b["freed"] and b["freed"] == b["streams_freed"] + b["blobs_freed"]
    assert j["policy"] == {"max_age": 30 * 86400.0, "max_size": 500 << 20, "grace": 3600.0}
    text = plan.render()
    assert "expire 1 task(s)" in text and "old  [age]" in text and "delete 1 unreferenced blob(s)" in text
    orjson.dumps(j)


def test_now_must_be_timezone_aware(ledger: intentlog.Ledger) -> None:
    """A naive datetime for now is a usage error, not a silent local-time guess."""
    with pytest.raises(UsageError, match="timezone-aware"):
        plan_gc(ledger, now=dt.datetime(2030, 1, 1))


def test_docs_example_runs(tmp_path: Path) -> None:
    """The Python example in docs/retention.md runs and leaves what it says."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "retention.md").read_text(), re.S)
    assert blocks
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "expire 1 task(s)" in p.stdout and "nightly-2  [protected] paused for review: unknown effect" in p.stdout
    assert p.stdout.strip().endswith("('nightly-1',)")
    root = tmp_path / "evidence"
    assert sorted(f.name for f in (root / "tasks").glob("*.jsonl")) == ["audit-2026.jsonl", "nightly-2.jsonl"]
    assert _objects(root) == {"blake3:" + blake3(b"nightly report " * 400).hexdigest(): 6000}
    assert [e["kind"] for e in _gc_log(root)] == ["task.created", "gc.started", "gc.finished"]
    _verify_ok(intentlog.open(root, create=False))


def test_a_task_awaiting_approval_survives_any_policy(tmp_path: Path) -> None:
    """A task with an undecided approval is protected: gc keeps it whatever its age."""
    from intentlog.retention import apply_gc, plan_gc

    ledger = intentlog.open(tmp_path / "ev")
    t = ledger.task("waiting")
    call = t.prepare("k", {"q": 1})
    t.request_approval("ship-it", "send the email?", binds=call)
    t.close()
    old = ledger.task("old")
    old.effect("k", {"q": 2}, send=lambda r: b"ok")
    old.accept()
    old.close()
    before = (tmp_path / "ev" / "tasks" / "waiting.jsonl").read_bytes()
    far = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=3650)
    plan = plan_gc(ledger, max_age="1d", grace="0s", now=far)
    kept = {k.task: k for k in plan.kept}
    assert kept["waiting"].rule == "protected"
    assert "awaiting approval" in kept["waiting"].detail
    apply_gc(ledger, max_age="1d", grace="0s", now=far)
    assert (tmp_path / "ev" / "tasks" / "waiting.jsonl").read_bytes() == before
    assert not (tmp_path / "ev" / "tasks" / "old.jsonl").exists()
