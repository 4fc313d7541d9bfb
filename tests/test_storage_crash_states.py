"""Power loss on every write path: crash states built from a recording of the folder's file-system calls.

A ``SIGKILL`` keeps the page cache, so the kill tests cannot see a missing ``fsync``. Here
each path runs once under :class:`crashsim.Recorder`; :func:`crashsim.explore` then builds
the folders a power cut at every point may leave (docs/streams.md, "Power loss": unsynced
bytes lost, cut or garbled within their page; names not followed by a directory sync
undone) and each is recovered by the library itself -- open, the repair a crash's damage
calls for, read -- and checked:

- every append that returned is there (same seq, same digest);
- every request the provider received (its receipt log: another machine, outside the
  model) has its ``attempt.started``;
- ``verify`` reports nothing but a torn tail before the repair and nothing after it (so no
  observation without its bytes, no ref without its object, nothing gc or a repair lost);
- every object's bytes match its name;
- a re-run never sends what the surviving record says may have been sent.

The planted mistakes at the end (a sync dropped before the send, a directory sync dropped
after a link) must be caught: they are the explorer's own tests. The number of crash states
per path is printed in the terminal summary, with the seed (``INTENTLOG_CRASH_SEED``;
``INTENTLOG_CRASH_SAMPLE`` / ``INTENTLOG_CRASH_CAP`` for a larger sample,
``INTENTLOG_CRASH_ALL=1`` for every point of the sampled paths too).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from blake3 import blake3
from crashsim import SEED, Mark, Recorder, Report, explore

import intentlog
import intentlog._internal.fsutil
from intentlog.checker.verify import verify_path

KEY = "k1"
REQUEST = {"model": "m", "prompt": "hello"}
RESPONSE = b'{"answer": "' + b"x" * 5000 + b'"}'  # larger than an inline payload: a stored object

_REPORTS: list[Report] = []
_REPAIRED: list[str] = []  # every crash state whose torn tail the library's recovery moved aside


class _Summary:
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not _REPORTS:
            return
        terminalreporter.section("crash states explored")
        for r in _REPORTS:
            terminalreporter.write_line(
                f"{r.path:<34} {r.points:>5} points {r.states:>6} crash states  seed={SEED}"
                + (f"  {len(set(r.sampled))} points sampled" if r.sampled else "  exhaustive")
                + (f"  {len(r.violations)} broken (a planted mistake or a known bug)" if r.violations else "")
            )


@pytest.fixture(scope="module", autouse=True)
def _summary(request: pytest.FixtureRequest) -> Iterator[None]:
    plugin = _Summary()
    if not request.config.pluginmanager.has_plugin("crashsim-summary"):
        request.config.pluginmanager.register(plugin, "crashsim-summary")
    yield


def _ledger(root: Path) -> intentlog.Ledger:
    led = intentlog.open(root)
    t = led.task("t")
    t.append("note", {"n": 0})
    t.close()
    return led


# -- recovery and the invariants ------------------------------------------------------------


def _events(root: Path, task: str) -> list[intentlog.Event]:
    led = intentlog.open(root)
    try:
        return list(led.task(task).events())
    finally:
        led.close()


def _recover(root: Path) -> list[str]:
    """The library's own recovery, and what a crash may not leave behind."""
    broken: list[str] = []
    before = verify_path(root)
    for p in before.problems:
        if p.severity in ("error", "changed") and p.code != "torn_tail":
            broken.append(f"before repair: {p.render()}")
    led = intentlog.open(root)
    try:
        for name in led.streams.names():
            if led.repair(name).action != "none":  # a crash's damage: a torn tail, moved aside (else it raises)
                _REPAIRED.append(name)
    finally:
        led.close()
    after = verify_path(root)
    broken += [f"after repair: {p.render()}" for p in after.problems if p.severity in ("error", "changed")]
    objects = root / "objects"
    if objects.is_dir():
        for shard in objects.iterdir():
            for obj in shard.iterdir():
                name = "blake3:" + shard.name + obj.name
                if "blake3:" + blake3(obj.read_bytes()).hexdigest() != name:
                    broken.append(f"object {name} holds other bytes")
    return broken


def _acked(root: Path, marks: list[Mark]) -> list[str]:
    broken: list[str] = []
    by_task: dict[str, dict[int, str]] = {}
    for m in marks:
        if m.kind != "ack":
            continue
        task = m.data["task"]
        if task not in by_task:
            by_task[task] = {e.seq: e.digest for e in _events(root, task)}
        if by_task[task].get(m.data["seq"]) != m.data["digest"]:
            broken.append(f"acknowledged append {task}#{m.data['seq']} ({m.data['event']}) lost")
    return broken


def _receipts(root: Path, marks: list[Mark], task: str = "t") -> list[str]:
    if not any(m.kind == "receipt" for m in marks):
        return []
    if not any(e.kind == "attempt.started" for e in _events(root, task)):
        return ["the provider's receipt log shows a request the record has no attempt.started for"]
    return []


def _rerun(root: Path, task: str = "t") -> list[str]:
    """Run the effect again on the recovered ledger: it may send only if no attempt of it started."""
    evs = _events(root, task)
    may_have_sent = any(e.kind == "attempt.started" for e in evs)
    sent: list[int] = []

    def send(req: Any) -> bytes:
        sent.append(1)
        return RESPONSE

    led = intentlog.open(root)
    try:
        try:
            led.task(task).effect(KEY, REQUEST, send, interpret=orjson.loads)
        except intentlog.EffectUnknown:
            pass
    finally:
        led.close()
    if may_have_sent and sent:
        return ["a re-run sent a request the surviving record says may have been sent"]
    return []


def _check(*extra: Callable[[Path], list[str]]) -> Callable[[Path, list[Mark]], list[str]]:
    def check(root: Path, marks: list[Mark]) -> list[str]:
        broken = _recover(root)
        broken += _acked(root, marks)
        broken += _receipts(root, marks)
        for f in extra:
            broken += f(root)
        return broken

    return check


def _record(root: Path, run: Callable[[Recorder], None], drop: Any = None) -> Recorder:
    rec = Recorder(root, drop=drop)
    rec.snapshot()
    rec.install()
    try:
        run(rec)
    finally:
        rec.uninstall()
    return rec


def _ack(rec: Recorder, task: str, ev: intentlog.Event) -> None:
    rec.mark("ack", task=task, seq=ev.seq, digest=ev.digest, event=ev.kind)


def _explore(rec: Recorder, name: str, check: Callable[[Path, list[Mark]], list[str]], **kw: Any) -> Report:
    report = explore(rec, check, name=name, **kw)
    _REPORTS.append(report)
    return report


def _clean(report: Report) -> None:
    assert report.states > 0
    assert report.violations == [], "\n".join(report.violations)


# -- the core paths, exhaustive ---------------------------------------------------------------


def test_durable_appends_and_group_commit(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _ledger(root).close()

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        t = led.task("t")
        for i in range(3):
            _ack(rec, "t", t.append("note", {"i": i}))
        with t.batch():
            evs = [t.append("note", {"b": i, "pad": "y" * 1500}) for i in range(4)]  # crosses a page
        for ev in evs:
            _ack(rec, "t", ev)
        _ack(rec, "t", t.append("note", {"after": True}))
        led.close()

    rec = _record(root, run)
    repaired = len(_REPAIRED)
    _clean(_explore(rec, "appends + batch", _check()))
    assert len(_REPAIRED) > repaired, "some crash states tore the tail (and recovery repaired it)"


def test_stream_creation(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _ledger(root).close()

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        t = led.task("fresh")
        _ack(rec, "fresh", t.append("note", {"first": True}))
        _ack(rec, "fresh", t.append("note", {"second": True}))
        led.close()

    rec = _record(root, run)
    _clean(_explore(rec, "stream creation", _check()))


def test_torn_tail_repair(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led = _ledger(root)
    path = led.stream_path("t")
    led.close()
    with open(path, "ab") as f:
        f.write(b'{"seq":2,"kind":"note","da')  # what a crash mid-append leaves
        f.flush()
        os.fsync(f.fileno())

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        _ack(rec, "t", led.task("t").append("note", {"after": "repair"}))
        led.close()

    rec = _record(root, run)
    assert any(op[0] == "trunc" for op in rec.ops), "the recording holds the repair"
    _clean(_explore(rec, "torn-tail repair", _check()))


def test_artifact_puts_referenced_by_events(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _ledger(root).close()
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(9000))

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        t = led.task("t")
        ref = led.artifacts.put(b"payload " * 1000)
        _ack(rec, "t", t.append("ref.noted", {"ref": ref.to_json()}))
        ref2 = led.artifacts.put_file(src)
        _ack(rec, "t", t.append("ref.noted", {"ref": ref2.to_json()}))
        led.close()

    rec = _record(root, run)
    assert any(op[0] == "link" for op in rec.ops)
    _clean(_explore(rec, "artifact puts", _check(_refs_present)))


def _refs_present(root: Path) -> list[str]:
    """Every ref a surviving ``artifact.noted`` names has its object (verify does not know this kind)."""
    led = intentlog.open(root)
    try:
        broken = []
        for e in led.task("t").events():
            if e.kind == "ref.noted":
                try:
                    led.artifacts.get(e.data["ref"]["digest"])
                except intentlog.IntentlogError as exc:
                    broken.append(f"event {e.seq} names an object the crash lost: {exc}")
        return broken
    finally:
        led.close()


def _effect_run(root: Path) -> Callable[[Recorder], None]:
    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        t = led.task("t")

        def send(req: Any) -> bytes:
            rec.mark("receipt", key=KEY)
            return RESPONSE

        t.effect(KEY, REQUEST, send, interpret=orjson.loads)
        for e in t.events():
            if e.kind in ("call.completed", "attempt.observed", "attempt.started"):
                _ack(rec, "t", e)
        led.close()

    return run


def test_an_effect(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _ledger(root).close()
    rec = _record(root, _effect_run(root))
    assert any(m.kind == "receipt" for m in rec.marks)
    _clean(_explore(rec, "effect", _check(_rerun)))


class _NoQuota:
    """A worker's connection in a run with no quota: nothing is asked, nothing is told."""

    def poll(self) -> bool:
        return False

    def send(self, msg: Any) -> None:  # pragma: no cover - nothing is asked without a quota
        raise AssertionError(f"asked {msg!r}")


def _lease_before_attempt(root: Path) -> list[str]:
    """``lease.acquired`` is written deferred: it may be lost only with everything after it."""
    kinds = [e.kind for e in _events(root, "t")]
    if "attempt.started" in kinds and "lease.acquired" not in kinds[: kinds.index("attempt.started")]:
        return ["an attempt.started survived without the lease.acquired written before it"]
    return []


def test_a_backlog_item(tmp_path: Path) -> None:
    """A new item's run: its stream created, the lease record deferred to the attempt's sync, the result."""
    from intentlog.backlog.worker import run_item

    root = tmp_path / "l"
    _ledger(root).close()

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)

        def step(task: intentlog.Task, payload: Any) -> Any:
            def send(req: Any) -> bytes:
                rec.mark("receipt", key=KEY)
                return RESPONSE

            return task.effect(KEY, REQUEST, send, interpret=orjson.loads)["answer"][:3]

        answer = run_item(led.task("t"), _NoQuota(), "x", "nb", {}, step, asks=False)  # type: ignore[arg-type]
        assert answer[:3] == ("done", "x", "xxx"), answer  # its view-cache line aside
        for e in led.task("t").events():
            if e.kind in ("attempt.started", "call.completed", "item.returned", "lease.released"):
                _ack(rec, "t", e)
        led.close()

    rec = _record(root, run)
    assert any(m.kind == "receipt" for m in rec.marks)
    _clean(_explore(rec, "backlog item", _check(_lease_before_attempt, _rerun)))


# -- the other paths, sampled ----------------------------------------------------------------


def _sampled(rec: Recorder, every: int = 3) -> Iterator[int]:
    """Every ``every``-th crash point (and the last); all of them with ``INTENTLOG_CRASH_ALL=1``."""
    if os.environ.get("INTENTLOG_CRASH_ALL") == "1":
        every = 1
    n = len(rec.ops)
    return iter(sorted(set(range(0, n + 1, every)) | {n}))


def test_reconcile_of_an_unknown_effect(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led = _ledger(root)

    def lost_answer(req: Any) -> bytes:
        raise ConnectionResetError("the answer never came")

    with pytest.raises(intentlog.IntentlogError):
        led.task("t").effect(KEY, REQUEST, lost_answer, interpret=orjson.loads)
    call_id = next(e.data["call"] for e in led.task("t").events() if e.kind == "attempt.started")
    led.close()

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        _ack(rec, "t", led.task("t").reconcile(call_id, "served", evidence=RESPONSE, note="the provider's log"))
        led.close()

    rec = _record(root, run)
    _clean(_explore(rec, "reconcile", _check(_rerun), points=_sampled(rec, 2)))


def test_seal(tmp_path: Path) -> None:
    from intentlog.heads import seal

    root = tmp_path / "l"
    _ledger(root).close()

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        seal(led)
        rec.mark("sealed")
        led.close()

    rec = _record(root, run)
    assert any(op[0] in ("link", "rename") for op in rec.ops)
    _clean(_explore(rec, "seal", _check(_sealed_or_not), points=_sampled(rec, 1)))


def _sealed_or_not(root: Path) -> list[str]:
    heads = root / "heads.json"
    if heads.exists():
        try:
            orjson.loads(heads.read_bytes())
        except orjson.JSONDecodeError:
            return ["heads.json survives half-written"]
    return []


def test_fork(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _ledger(root).close()
    _effect_run(root)(Recorder(root))  # a call to fork from (not recorded)
    led = intentlog.open(root)
    call_id = next(e.data["call"] for e in led.task("t").events() if e.kind == "attempt.started")
    led.close()

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        led.fork("t", call_id, "t2")
        for e in led.task("t2").events():
            _ack(rec, "t2", e)
        led.close()

    rec = _record(root, run)
    _clean(_explore(rec, "fork", _check(), points=_sampled(rec, 1)))


def test_merge_into_a_ledger(tmp_path: Path) -> None:
    """A merge cut by a power loss leaves DST holding a prefix of each SRC stream, its objects whole."""
    root = tmp_path / "l"
    _ledger(root).close()
    src = tmp_path / "src"
    shutil.copytree(root, src)
    with intentlog.open(src) as led:  # SRC is ahead on t and has a task DST lacks, naming an object
        led.task("t").append("note", {"n": 1})
        ref = led.artifacts.put(b"merged payload " * 300)
        led.task("u").append("ref.noted", {"ref": ref.to_json()})

    def run(rec: Recorder) -> None:
        from intentlog.merge import merge

        merge(src, root)
        for task in ("t", "u"):
            for e in _events(root, task):
                _ack(rec, task, e)

    def a_prefix_of_src(where: Path) -> list[str]:
        out = []
        for stream in sorted((where / "tasks").glob("*.jsonl")):
            theirs = (src / "tasks" / stream.name).read_bytes()
            if not theirs.startswith(stream.read_bytes()):
                out.append(f"{stream.name} is not a prefix of the source's stream")
        return out

    rec = _record(root, run)
    _clean(_explore(rec, "merge", _check(a_prefix_of_src, _refs_present), points=_sampled(rec, 2)))


def test_backlog_add(tmp_path: Path) -> None:
    """Items added to a backlog (its stream created, a batch of item records) survive as acknowledged."""
    root = tmp_path / "l"
    _ledger(root).close()

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        b = led.backlog("nb")
        b.add("x", {"n": 1})
        b.add_many([{"item": "y", "payload": {"n": 2}}, {"item": "z", "payload": {"n": 3}}])
        for e in _events(root, "nb.backlog"):
            _ack(rec, "nb.backlog", e)
        led.close()

    rec = _record(root, run)
    _clean(_explore(rec, "backlog add", _check(), points=_sampled(rec, 1)))


# -- planted mistakes: the explorer must catch them -----------------------------------------


def test_the_explorer_catches_a_sync_dropped_before_the_send(tmp_path: Path) -> None:
    """A writer that did not sync attempt.started before sending: a receipt without its record."""
    root = tmp_path / "l"
    _ledger(root).close()
    stream = root / "tasks" / "t.jsonl"

    def drop(name: str, op: Any) -> bool:
        return name == "fdatasync" and stream.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1].find(
            b'"attempt.started"'
        ) >= 0

    rec = _record(root, _effect_run(root), drop=drop)
    report = _explore(rec, "mutant: no sync before send", _check(_rerun), stop_after=1)
    assert any("receipt" in v or "re-run sent" in v for v in report.violations), report.violations


def test_the_explorer_catches_a_directory_sync_dropped_after_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An artifact put that did not sync objects/xx/ after linking: an event names a lost object."""
    root = tmp_path / "l"
    _ledger(root).close()
    real = intentlog._internal.fsutil.fsync_dir

    def no_shard_sync(path: Any) -> None:
        if Path(path).parent.name != "objects":
            real(path)

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        monkeypatch.setattr(intentlog._internal.fsutil, "fsync_dir", no_shard_sync)
        ref = led.artifacts.put(b"payload " * 1000)
        monkeypatch.setattr(intentlog._internal.fsutil, "fsync_dir", real)
        _ack(rec, "t", led.task("t").append("ref.noted", {"ref": ref.to_json()}))
        led.close()

    rec = _record(root, run)
    report = _explore(rec, "mutant: no dir sync after link", _check(_refs_present), stop_after=1)
    assert any("lost" in v for v in report.violations), report.violations


def test_the_explorer_catches_a_stream_created_without_its_directory_sync(tmp_path: Path) -> None:
    """A new stream linked into tasks/ without syncing tasks/: an acknowledged append vanishes with it."""
    root = tmp_path / "l"
    _ledger(root).close()

    def drop(name: str, op: Any) -> bool:
        return op[0] == "dsync" and op[1] == "tasks"

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        _ack(rec, "fresh", led.task("fresh").append("note", {"first": True}))
        led.close()

    rec = _record(root, run, drop=drop)
    report = _explore(rec, "mutant: no dir sync on create", _check(), stop_after=1)
    assert any("fresh#1" in v and "lost" in v for v in report.violations), report.violations


# -- what the explorer found -------------------------------------------------------------------


def _dead_pid() -> int:
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _stream_with_temp_twin(root: Path, pid: int) -> tuple[Path, Path]:
    """What a kill or a power cut between the new stream's link and its temp's unlink leaves."""
    led = _ledger(root)
    led.close()
    src = root / "tasks" / "t.jsonl"
    line0 = src.read_bytes().split(b"\n", 1)[0].replace(b'"task":"t"', b'"task":"fresh"') + b"\n"
    twin = root / "tmp" / f".fresh.jsonl.{pid}.{os.urandom(6).hex()}.tmp"
    twin.write_bytes(line0)
    os.link(twin, root / "tasks" / "fresh.jsonl")
    return root / "tasks" / "fresh.jsonl", twin


def test_a_new_stream_left_with_its_temp_name_by_a_dead_writer_opens(tmp_path: Path) -> None:
    """Found by the explorer (stream creation, fork): the stream has two names, the writer refused it."""
    stream, twin = _stream_with_temp_twin(tmp_path / "l", _dead_pid())
    led = intentlog.open(tmp_path / "l")
    ev = led.task("fresh").append("note", {"after": "crash"})
    led.close()
    assert not twin.exists(), "the dead writer's temp name was removed"
    assert os.stat(stream).st_nlink == 1
    assert [e.kind for e in _events(tmp_path / "l", "fresh")] == ["task.created", "note"] and ev.seq == 1


def test_a_stream_sharing_its_inode_with_a_live_writers_temp_is_still_refused(tmp_path: Path) -> None:
    stream, twin = _stream_with_temp_twin(tmp_path / "l", os.getpid())
    before = stream.read_bytes()
    led = intentlog.open(tmp_path / "l")
    with pytest.raises(intentlog.LedgerError, match="hard link"):
        led.task("fresh").append("note", {})
    led.close()
    assert twin.exists() and stream.read_bytes() == before


def test_gc_apply(tmp_path: Path) -> None:
    import datetime as dt

    from intentlog.retention import apply_gc, keep

    root = tmp_path / "l"
    led = intentlog.open(root)
    for task, fill in (("old", b"o"), ("kept", b"k")):
        ref = led.artifacts.put(fill * 9000)
        led.task(task).append("ref.noted", {"ref": ref.to_json()})
        led.task(task).close()
    led.artifacts.put(b"an orphan " * 1000)
    keep(led, "kept")
    led.close()
    now = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400)

    def run(rec: Recorder) -> None:
        led = intentlog.open(root)
        result = apply_gc(led, max_age="30d", grace="0s", now=now)
        rec.mark("gc", deleted=list(result.deleted_tasks) if hasattr(result, "deleted_tasks") else [])
        led.close()

    rec = _record(root, run)
    assert any(op[0] == "unlink" and op[1] == "tasks" for op in rec.ops), "the recording holds the stream's deletion"
    assert any(op[0] == "rename" and op[1].startswith("objects") for op in rec.ops), "and the blobs'"
    _clean(_explore(rec, "gc apply", _check(_kept_task_whole), points=_sampled(rec, 2)))


def _kept_task_whole(root: Path) -> list[str]:
    led = intentlog.open(root)
    try:
        evs = list(led.task("kept").events())
        if [e.kind for e in evs] != ["task.created", "ref.noted"]:
            return [f"the kept task holds {[e.kind for e in evs]}"]
        led.artifacts.get(evs[1].data["ref"]["digest"])
        return []
    except intentlog.IntentlogError as exc:
        return [f"gc deleted what the kept task references: {exc}"]
    finally:
        led.close()


def test_a_torn_tail_of_the_gc_log_is_a_crash_not_an_untrusted_log(tmp_path: Path) -> None:
    """Found by the explorer (gc apply): a cut while gc.started was written left garbage after the
    last synced line; verify called the whole gc log untrusted. A torn tail -- garbage with nothing
    event-like after it, as for a task stream -- is what a crash leaves, and the next gc repairs it."""
    import datetime as dt

    from intentlog.retention import apply_gc, keep

    root = tmp_path / "l"
    led = intentlog.open(root)
    for task in ("old", "kept"):
        led.task(task).append("note", {})
        led.task(task).close()
    keep(led, "kept")
    apply_gc(led, max_age="30d", grace="0s", now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400))
    led.close()
    with open(root / "gc.jsonl", "ab") as f:
        f.write(b"\x9c\xff\x00garbage\n\x00\x17 more\x8e")  # a garbled last page: a newline inside, no event
    report = verify_path(root)
    assert [p.code for p in report.problems if p.severity in ("error", "changed")] == [], report.summary()
    with open(root / "gc.jsonl", "ab") as f:
        f.write(b'\n{"seq":9}\n' + (root / "tasks" / "kept.jsonl").read_bytes().splitlines()[0] + b"\n")
    assert any(p.code == "gc_log" for p in verify_path(root).problems), "an event after the bad line: damage"


def test_export_to_a_tar(tmp_path: Path) -> None:
    """The tar appears whole (and checks) or not at all; the ledger it was read from is untouched."""
    import tarfile

    from intentlog.bundle import check_bundle, export_bundle

    top = tmp_path / "top"
    _ledger(top / "l").close()
    _effect_run(top / "l")(Recorder(top))  # a record worth exporting (not recorded)

    def run(rec: Recorder) -> None:
        export_bundle(top / "l", tar=top / "out.tar", check=False)
        rec.mark("exported")

    rec = _record(top, run)
    assert any(op[0] == "link" and op[2] == "out.tar" for op in rec.ops)

    def check(where: Path, marks: list[Mark]) -> list[str]:
        broken = _recover(where / "l")
        tar = where / "out.tar"
        if any(m.kind == "exported" for m in marks) and not tar.exists():
            broken.append("export returned but its tar is gone")
        if tar.exists():
            with tarfile.open(tar) as tf:
                safe: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tf.extractall(where / "x", **safe)
            report = check_bundle(where / "x" / "intentlog-bundle")
            broken += [f"the tar's bundle: {p.render()}" for p in report.problems if p.severity in ("error", "changed")]
        return broken

    _clean(_explore(rec, "export (tar)", check, points=_sampled(rec, 3)))
