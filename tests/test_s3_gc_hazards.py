"""gc on the store against what can go wrong: a fenced holder's late put, a writer re-putting a blob, SIGKILL.

* A **fenced holder** (a real process whose lease was taken while it waited) puts after
  gc deleted its stream: the key is free again, so the put succeeds. What it leaves has no
  segment 0: no reader takes it for a stream, ``verify`` passes, a new task under the id
  is refused naming gc, and the next apply removes it; then the id starts cleanly.
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
from intentlog.checker import verify_ledger
from intentlog.cli import main
from intentlog.errors import LeaseLost, LedgerError
from intentlog.eventlog.remote import events_in
from intentlog.heads.codec import decode_heads
from intentlog.merge import merge
from intentlog.retention import GcRefused, apply_gc, keep, plan_gc, storeapply
from intentlog.s3 import ObjectArtifacts, ObjectStreams, S3Client, parse_s3_url
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


def test_a_fenced_holders_put_after_gc_is_refused_and_the_id_is_not_used_again(url: str, tmp_path: Path) -> None:
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
    # a new task under the id is refused, naming gc; a writer cannot take gc's lease over either
    with pytest.raises(LedgerError, match="gc deleted on a store is never used again"):
        intentlog.open(url).task("t").append("note", {"new": 1})
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
    real = storeapply.plan_from

    def then_a_writer(*args: object, **kwargs: object) -> object:
        plan = real(*args, **kwargs)  # type: ignore[arg-type]
        w = intentlog.open(url)
        w.task("a").append("note", {"late": True})
        if writer == "appended":
            w.close()
        opened.append(w)
        return plan

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(storeapply, "plan_from", then_a_writer)
        result = apply_gc(intentlog.open(url), now=LATER)
    why = "a writer opened it after the plan" if writer == "holds" else "it changed after the plan"
    assert [t for t, _ in result.skipped] == ["a"] and why in result.skipped[0][1]
    assert result.deleted == () and result.blobs_deleted == ()  # the blob it names is spared too
    assert [ev.kind for ev in intentlog.open(url, create=False).task("a").events()][-1] == "note"
    assert ObjectArtifacts(client_of(url)).get(digest) == BLOB
    for w in opened:
        w.close()
    assert verify_ledger(intentlog.open(url, create=False)).ok
