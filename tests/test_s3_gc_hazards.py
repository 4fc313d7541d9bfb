"""gc on the store against what can go wrong: a fenced holder's late put, a writer re-putting a blob, SIGKILL.

* A **fenced holder** (a real process whose lease was taken while it waited or was
  stopped) resumes after gc retired its stream: its next put is refused (``LeaseLost``;
  nothing stored, no second payment), since gc keeps segment 0 and every take-over lease;
  readers, seal and merge skip what is left, and a new task under the id is a new stream
  after it.
* A **stalled gc** whose gc log was taken over deletes no new task (there is none) and no
  object stored again since (its heartbeat is fenced); a **killed gc** excuses no swap
  (``gc.started`` alone is no deletion), and one killed between a lease and its record is
  finished by the next; a wrong-shaped gc log event is a ``gc_log`` problem.
* A **writer re-putting a blob** gc is about to delete touches it (the store cannot
  refresh an mtime): gc spares it; a writer meeting gc's dying marker waits, then finds
  the object gone and stores it again. A put that returned leaves the object stored.
* **SIGKILL mid-apply** (a real process, killed at its N-th delete): the store verifies,
  and a rerun (taking over the killed gc's lease) finishes the job.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import s3_server
from click.testing import CliRunner

import intentlog
from intentlog import retention
from intentlog.checker import verify_ledger
from intentlog.cli import main
from intentlog.errors import LeaseLost, LedgerError
from intentlog.eventlog.remote import events_in
from intentlog.heads.codec import decode_heads
from intentlog.merge import merge
from intentlog.retention import GcRefused, apply_gc, keep, plan_gc
from intentlog.s3 import ObjectArtifacts, ObjectStreams, S3Client, parse_s3_url
from intentlog.s3 import gcsource as storeapply
from intentlog.s3.retire import dying_key, read_log
from intentlog.s3.seals import create_seal

LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=60)
BLOB = b"bytes nothing refers to " * 300


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


def client_of(url: str) -> S3Client:
    return S3Client(parse_s3_url(url))


def keys(url: str, folder: str) -> list[str]:
    return [k for k, _ in client_of(url).scan(folder)]


def log_kinds(url: str) -> list[str]:
    data = read_log(client_of(url))
    return [] if data is None else [ev.kind for ev in events_in(data, "gc log")]


def child(script: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(intentlog.__file__).parent.parent))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


HOLDER = """
    import sys
    import intentlog
    ledger = intentlog.open(sys.argv[1])
    task = ledger.task("t")
    task.append("note", {"holder": 1})
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        task.append("note", {"late": 1})
        print("stored", flush=True)
    except Exception as exc:
        print("refused", type(exc).__name__, flush=True)
"""


def assert_retired(url: str, name: str) -> list[str]:
    """What gc leaves of a stream on a store: segment 0 and lease segments only, no task for a reader; its keys."""
    left = keys(url, f"tasks/{name}")
    streams = ObjectStreams(client_of(url))
    assert left and left[0].endswith("/s/000000000000"), left
    assert all(streams.segment(name, int(k[-12:]))[0].kind == "lease" for k in left[1:]), left
    assert name not in intentlog.open(url, create=False).task_ids()
    return left


def test_a_fenced_holders_put_after_gc_is_refused_and_the_id_is_a_new_stream_after_it(url: str, tmp_path: Path) -> None:
    with intentlog.open(url) as ledger:
        ledger.task("t").append("note", {"first": 1})
        ledger.task("stays").append("note", {})
    keep(intentlog.open(url), "stays")
    holder = child(HOLDER, url)
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "ready"
    # the holder's lease is taken while it waits (fenced), and given back
    ObjectStreams(client_of(url)).lease("t", take_over_after=0).release()
    assert apply_gc(intentlog.open(url), now=LATER).deleted == ("t",)
    left = assert_retired(url, "t")
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.stdout.readline().split() == ["refused", "LeaseLost"]  # its number is still taken
    assert holder.wait(30) == 0
    assert keys(url, "tasks/t") == left  # nothing stored
    report = verify_ledger(intentlog.open(url, create=False))
    assert report.ok and report.tasks == 1, [p.to_json() for p in report.problems]
    listed = CliRunner().invoke(main, ["--root", url, "tasks", "--json"])
    assert [t["task"] for t in json.loads(listed.stdout)] == ["stays"]
    # a writer cannot take gc's lease over
    with pytest.raises(LedgerError, match="gc holds this stream's lease"):
        ObjectStreams(client_of(url)).lease("t", take_over_after=0)
    assert keys(url, "tasks/t") == left  # refused: nothing written
    # seal and merge skip it; the next gc has nothing to do with it
    assert "t" not in decode_heads(create_seal(client_of(url))[1])
    merge(url, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy" / "tasks").iterdir()) == ["stays.jsonl"]
    assert plan_gc(intentlog.open(url), now=LATER).expired == ()
    apply_gc(intentlog.open(url), now=LATER)
    assert keys(url, "tasks/t") == left
    assert verify_ledger(intentlog.open(url, create=False)).ok
    # a new task under the id is a new stream after what gc left, as on a folder; the numbers gc kept stay taken
    intentlog.open(url).task("t").append("note", {"new": 1})
    assert set(left) <= set(keys(url, "tasks/t"))
    assert [ev.kind for ev in intentlog.open(url, create=False).task("t").events()] == ["task.created", "note"]
    assert verify_ledger(intentlog.open(url, create=False)).ok


PAYER = r"""
    import sys
    import intentlog
    url, receipts = sys.argv[1], sys.argv[2]

    def pay(request):
        with open(receipts, "a") as f:
            f.write("paid by the holder\n")
            f.flush()
            import os
            os.fsync(f.fileno())
        return b"ok"

    task = intentlog.open(url).task("t")
    task.append("note", {"worker": "H"})
    print("ready", flush=True)
    sys.stdin.readline()  # stopped here (SIGSTOP) while its lease is taken over and gc runs
    try:
        task.effect("pay", {"to": "ana", "amount": 100}, send=pay)
        print("paid", flush=True)
    except Exception as exc:
        print("refused", type(exc).__name__, flush=True)
"""


def test_a_holder_stopped_while_taken_over_and_gcd_never_pays_twice(url: str, tmp_path: Path) -> None:
    receipts = tmp_path / "receipts"
    receipts.touch()

    def pay(request: object) -> bytes:
        with open(receipts, "a") as f:
            f.write("paid by the new worker\n")
        return b"ok"

    with intentlog.open(url) as ledger:
        ledger.task("stays").append("note", {})
    keep(intentlog.open(url), "stays")
    holder = child(PAYER, url, str(receipts))
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "ready"
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        # another worker takes the lease over and pays (the one payment); gc then retires the task
        ObjectStreams(client_of(url)).lease("t", take_over_after=0).release()
        with intentlog.open(url) as ledger:
            ledger.task("t").effect("pay", {"to": "ana", "amount": 100}, send=pay)
        assert apply_gc(intentlog.open(url), now=LATER).deleted == ("t",)
        left = assert_retired(url, "t")
        assert len(left) >= 2  # the take-over lease the holder was fenced by is kept
        holder.stdin.write("go\n")
        holder.stdin.flush()
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    assert holder.stdout.readline().split() == ["refused", "LeaseLost"]
    assert holder.wait(30) == 0
    assert receipts.read_text().splitlines() == ["paid by the new worker"]  # no second payment
    assert keys(url, "tasks/t") == left  # no segment stored
    assert verify_ledger(intentlog.open(url, create=False)).ok


def test_a_fenced_handle_in_the_same_process_cannot_append_after_gc(url: str) -> None:
    with intentlog.open(url) as ledger:
        ledger.task("t").append("note", {"first": 1})
        ledger.task("stays").append("note", {})
    keep(intentlog.open(url), "stays")
    held = intentlog.open(url)
    held.task("t").append("note", {"holder": 1})
    ObjectStreams(client_of(url)).lease("t", take_over_after=0).release()  # fenced
    apply_gc(intentlog.open(url), now=LATER)
    left = assert_retired(url, "t")
    for ledger in (held, intentlog.open(url)):
        with pytest.raises((LeaseLost, LedgerError)):
            ledger.task("t").append("note", {"again": 1})
    assert keys(url, "tasks/t") == left


def blob_ledger(url: str) -> str:
    with intentlog.open(url) as ledger:
        ledger.task("a").append("note", {})
        digest = ledger.artifacts.put(BLOB).digest
    keep(intentlog.open(url), "a")
    return digest


def test_a_blob_a_writer_puts_again_after_the_plan_is_spared(url: str) -> None:
    digest = blob_ledger(url)
    plan = plan_gc(intentlog.open(url), now=LATER)
    assert [b.digest for b in plan.blobs] == [digest]
    real = storeapply.retire_object

    def writer_first(client: S3Client, d: str, key: str, touches: int, token: str, *more: object) -> str:
        ObjectArtifacts(client_of(url)).put(BLOB)  # a writer stores the same bytes: refused create, a touch
        return real(client, d, key, touches, token, *more)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(storeapply, "retire_object", writer_first)
        result = apply_gc(intentlog.open(url), plan)
    assert result.restored == (digest,) and result.blobs_deleted == ()
    assert ObjectArtifacts(client_of(url)).get(digest) == BLOB
    # untouched since this plan: now it goes, with its touches
    assert apply_gc(intentlog.open(url), now=LATER).blobs_deleted == (digest,)
    assert keys(url, "objects") == [] and keys(url, "gc/touch") == []


def test_a_writer_meeting_a_dying_marker_waits_and_stores_the_bytes_again(url: str) -> None:
    digest = blob_ledger(url)
    client = client_of(url)
    objects = ObjectArtifacts(client)
    assert client.create(dying_key(digest), b"a gc")  # a gc is deleting it right now
    done = threading.Event()
    thread = threading.Thread(target=lambda: (objects.put(BLOB), done.set()))
    thread.start()
    time.sleep(0.5)
    assert not done.is_set()  # the put waits for the gc's verdict
    client.delete(ObjectArtifacts.key_for(digest))  # the gc deletes it ...
    client.delete(dying_key(digest))  # ... and takes its marker away
    thread.join(10)
    assert done.is_set()
    assert objects.get(digest) == BLOB  # the put that returned left the bytes stored


KILLED = """
    import datetime as dt, os, signal, sys
    import intentlog
    from intentlog.retention import apply_gc
    from intentlog.s3.client import S3Client
    url, at, later = sys.argv[1], int(sys.argv[2]), dt.datetime.fromisoformat(sys.argv[3])
    ledger = intentlog.open(url)  # the probe's own deletes are not counted
    count = [0]
    real = S3Client.delete
    def delete(self, key):
        count[0] += 1
        if count[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)
        real(self, key)
    S3Client.delete = delete
    apply_gc(ledger, now=later)
    print("finished", flush=True)
"""


@pytest.mark.parametrize("at", [1, 2, 5, 8, 12, 13, 14, 17, 20, 1000])
def test_sigkill_mid_apply_leaves_a_store_that_verifies_and_a_rerun_finishes(url: str, at: int) -> None:
    with intentlog.open(url) as ledger:
        for name in ("old-1", "old-2", "old-3"):
            ledger.task(name).effect("fetch", {"n": name}, send=lambda r, n=name: (n * 3000).encode())
        ledger.task("stays").append("note", {})
        ledger.artifacts.put(BLOB)
    keep(intentlog.open(url), "stays")
    plan = plan_gc(intentlog.open(url), now=LATER)
    assert [t.task for t in plan.expired] == ["old-1", "old-2", "old-3"] and len(plan.blobs) == 4
    proc = child(KILLED, url, str(at), LATER.isoformat())
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out.strip()) == ((0, "finished") if at == 1000 else (-9, "")), err
    report = verify_ledger(intentlog.open(url, create=False))
    assert report.ok, [p.to_json() for p in report.problems]
    if at != 1000:
        with pytest.raises(GcRefused, match="take-over-after"):
            apply_gc(intentlog.open(url), now=LATER)  # the killed gc's lease stays recorded as held
    apply_gc(intentlog.open(url), now=LATER, take_over_after=0)
    for name in ("old-1", "old-2", "old-3"):
        assert_retired(url, name)
    assert keys(url, "objects") == [] and keys(url, "gc/dying") == []
    assert intentlog.open(url, create=False).task_ids() == ["stays"]
    final = verify_ledger(intentlog.open(url, create=False))
    assert final.ok and final.tasks == 1, [p.to_json() for p in final.problems]


@pytest.mark.parametrize("writer", ["holds", "appended"])
def test_a_writer_between_the_plan_and_the_delete_keeps_its_stream_and_its_blobs(url: str, writer: str) -> None:
    """The apply's own re-plan said delete; a writer then leases the stream (or appends and releases)."""
    with intentlog.open(url) as ledger:
        digest = ledger.artifacts.put(BLOB).digest
        ledger.task("a").append("note", {"report": digest})
        ledger.task("b").append("note", {})
    keep(intentlog.open(url), "b")
    opened: list[intentlog.Ledger] = []
    real = retention.plan.make_plan

    def then_a_writer(*args: object, **kwargs: object) -> object:
        plan = real(*args, **kwargs)  # type: ignore[arg-type]
        w = intentlog.open(url)
        w.task("a").append("note", {"late": True})
        if writer == "appended":
            w.close()
        opened.append(w)
        return plan

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(retention.apply, "make_plan", then_a_writer)
        result = apply_gc(intentlog.open(url), now=LATER)
    why = "a writer opened it after the plan" if writer == "holds" else "it changed after the plan"
    assert [t for t, _ in result.skipped] == ["a"] and why in result.skipped[0][1]
    assert result.deleted == () and result.blobs_deleted == ()  # the blob it names is spared too
    assert [ev.kind for ev in intentlog.open(url, create=False).task("a").events()][-1] == "note"
    assert ObjectArtifacts(client_of(url)).get(digest) == BLOB
    for w in opened:
        w.close()
    assert verify_ledger(intentlog.open(url, create=False)).ok


STALLED = """
    import datetime as dt, sys
    import intentlog
    from intentlog.retention import apply_gc
    from intentlog.s3 import gcsource as storeapply
    url, at, where = sys.argv[1], dt.datetime.fromisoformat(sys.argv[2]), sys.argv[3]
    real = getattr(storeapply, where)
    def stalled(*args):
        if where == "retire_object" or args[1] == "old-2":
            print("stalled", flush=True)
            sys.stdin.readline()  # this gc stands still here (a long pause) while another takes its lease
        return real(*args)
    setattr(storeapply, where, stalled)
    try:
        apply_gc(intentlog.open(url), now=at)
        print("finished", flush=True)
    except Exception as exc:
        print("stopped", type(exc).__name__, flush=True)
"""


def test_a_stalled_gc_taken_over_deletes_no_new_task(url: str) -> None:
    with intentlog.open(url) as ledger:
        for name in ("old-1", "old-2"):
            ledger.task(name).append("note", {"n": name})
        ledger.task("stays").append("note", {})
    keep(intentlog.open(url), "stays")
    stalled = child(STALLED, url, LATER.isoformat(), "delete_stream")
    assert stalled.stdout is not None and stalled.stdin is not None
    assert stalled.stdout.readline().strip() == "stalled"
    time.sleep(1.2)  # longer than BEAT_AFTER: the stalled gc proves its lease before its next delete
    apply_gc(intentlog.open(url), now=LATER, take_over_after=0)  # finishes old-2 (the stalled gc leased it)
    assert "gc.swept" in log_kinds(url)
    left = assert_retired(url, "old-2")
    with pytest.raises(LedgerError, match="never used again"):  # no new task under the id to delete
        intentlog.open(url).task("old-2").append("note", {"new": 1})
    stalled.stdin.write("go\n")
    stalled.stdin.flush()
    # its delete finds nothing more to delete (the id is retired), then its next put is fenced
    assert stalled.stdout.readline().split()[0] == "stopped"
    assert stalled.wait(30) == 0
    assert keys(url, "tasks/old-2") == left and keys(url, "tasks/stays")
    assert verify_ledger(intentlog.open(url, create=False)).ok


def test_a_stalled_gc_taken_over_does_not_delete_an_object_stored_again(url: str) -> None:
    with intentlog.open(url) as ledger:
        ledger.task("stays").append("note", {})
        digest = ledger.artifacts.put(BLOB).digest  # named by nothing: past its grace at LATER
    keep(intentlog.open(url), "stays")
    stalled = child(STALLED, url, LATER.isoformat(), "retire_object")
    assert stalled.stdout is not None and stalled.stdin is not None
    assert stalled.stdout.readline().strip() == "stalled"
    assert len(apply_gc(intentlog.open(url), now=LATER, take_over_after=0).blobs_deleted) == 1
    with intentlog.open(url) as ledger:  # stored again (a fresh create: no touch) and named by a kept task
        ref = ledger.artifacts.put(BLOB)
        assert ref.digest == digest
        ledger.task("stays").append("note", {"receipt": ref.to_json()})
    time.sleep(1.2)  # the stalled gc's last proof of its lease is older than BEAT_AFTER
    stalled.stdin.write("go\n")
    stalled.stdin.flush()
    assert stalled.stdout.readline().split() == ["stopped", "GcRefused"]
    assert stalled.wait(30) == 0
    assert ObjectArtifacts(client_of(url)).get(digest) == BLOB
    assert verify_ledger(intentlog.open(url, create=False)).ok


KILLED_AT = """
    import datetime as dt, os, signal, sys
    import intentlog
    from intentlog.retention import apply_gc
    from intentlog.s3 import gcsource as storeapply
    url, at, when = sys.argv[1], dt.datetime.fromisoformat(sys.argv[2]), sys.argv[3]
    real = storeapply._take
    def take(*args):
        if when == "before":
            os.kill(os.getpid(), signal.SIGKILL)  # gc.started written, the stream not touched
        out = real(*args)
        os.kill(os.getpid(), signal.SIGKILL)  # leased, gc.leased not yet written
    storeapply._take = take
    apply_gc(intentlog.open(url), now=at)
"""


def test_a_gc_killed_before_it_touched_a_stream_excuses_no_swap_of_it(url: str) -> None:
    with intentlog.open(url) as ledger:
        for i in range(3):
            ledger.task("t").append("note", {"amount": 100 + i})
        ledger.task("stays").append("note", {})
    keep(intentlog.open(url), "stays")
    proc = child(KILLED_AT, url, LATER.isoformat(), "before")
    proc.communicate(timeout=60)
    assert proc.returncode == -9
    assert "gc.started" in log_kinds(url)
    client = client_of(url)
    create_seal(client)  # t sealed as it stands
    for key in keys(url, "tasks/t"):  # t's sealed stream swapped for another one, by hand
        client.delete(key)
    for folder in ("tasks/t/s", "tasks/t"):
        client.delete(folder)
    with intentlog.open(url) as ledger, pytest.raises(intentlog.CorruptStream, match="the stream is gone but"):
        ledger.task("t").append("note", {"amount": 999999})  # the writer refuses to create a sealed stream again
    from intentlog.eventlog.canonical import dumps
    from intentlog.eventlog.format import FORMAT, TASK_CREATED, encode_line, utc_now

    other = encode_line(TASK_CREATED, dumps({"format": FORMAT, "stream": "ab" * 16, "task": "t"}), None, 0, utc_now())
    ObjectStreams(client).create("t", [other[:-1]])  # so another stream stands there, put by hand past the writer
    report = verify_ledger(intentlog.open(url, create=False))
    assert not report.ok
    assert "heads" in [p.code for p in report.problems if p.task == "t" and p.severity == "error"]


def test_a_gc_killed_between_a_lease_and_its_record_is_finished_by_the_next(url: str) -> None:
    with intentlog.open(url) as ledger:
        ledger.task("old-1").append("note", {})
        ledger.task("stays").append("note", {})
    keep(intentlog.open(url), "stays")
    proc = child(KILLED_AT, url, LATER.isoformat(), "after")
    proc.communicate(timeout=60)
    assert proc.returncode == -9
    assert ObjectStreams(client_of(url)).tail("old-1").kind == "lease"  # the dead gc's lease
    assert "gc.leased" not in log_kinds(url)
    apply_gc(intentlog.open(url), now=LATER, take_over_after=0)
    left = assert_retired(url, "old-1")
    assert log_kinds(url).count("gc.swept") == 1
    apply_gc(intentlog.open(url), now=LATER, take_over_after=0)  # nothing more to do: nothing more recorded
    assert keys(url, "tasks/old-1") == left and log_kinds(url).count("gc.swept") == 1
    report = verify_ledger(intentlog.open(url, create=False))
    assert report.ok and report.tasks == 1, [p.to_json() for p in report.problems]


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("gc.started", {"tasks": 5}),
        ("gc.finished", {"started": [], "deleted": 3}),
        ("gc.leased", {"started": {}, "tasks": []}),
    ],
)
def test_a_wrong_shaped_gc_log_event_is_a_gc_log_problem(url: str, kind: str, data: dict[str, object]) -> None:
    with intentlog.open(url) as ledger:
        ledger.task("stays").append("note", {})
    log = storeapply.log_writer(intentlog.open(url).storage, wait=5)  # type: ignore[arg-type]
    log.append(kind, data, sync=True)
    log.close()
    before = keys(url, "")
    report = verify_ledger(intentlog.open(url, create=False))
    assert [p.code for p in report.problems if p.severity == "error"] == ["gc_log"]
    with pytest.raises(GcRefused, match="not what gc writes"):
        apply_gc(intentlog.open(url), now=LATER, take_over_after=0)
    outside_log = [k for k in keys(url, "") if not k.startswith("gc/tasks/log/")]
    assert outside_log == [k for k in before if not k.startswith("gc/tasks/log/")]  # nothing deleted


def test_a_seal_then_gc_then_the_id_again_is_a_new_stream_and_the_seals_verify(url: str) -> None:
    with intentlog.open(url) as ledger:
        ledger.task("t").append("note", {})
        ledger.task("stays").append("note", {})
    keep(intentlog.open(url), "stays")
    client = client_of(url)
    create_seal(client)
    assert apply_gc(intentlog.open(url), now=LATER).deleted == ("t",)
    create_seal(client)
    report = verify_ledger(intentlog.open(url, create=False))
    assert report.ok, [p.to_json() for p in report.problems]
    assert [p.code for p in report.problems if p.task == "t"] == ["deleted_by_gc"]
    intentlog.open(url).task("t").append("note", {"new": 1})  # the id again: a new stream, as on a folder
    create_seal(client)
    report = verify_ledger(intentlog.open(url, create=False))
    assert report.ok, [p.to_json() for p in report.problems]
