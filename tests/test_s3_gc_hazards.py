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
from intentlog.errors import CorruptStream
from intentlog.eventlog.remote import events_in
from intentlog.retention import GcRefused, apply_gc, keep, plan_gc, storeapply
from intentlog.s3 import ObjectArtifacts, ObjectStreams, S3Client, parse_s3_url
from intentlog.s3.retire import dying_key, read_log

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


def test_a_fenced_holders_put_after_gc_is_no_stream_and_the_next_gc_removes_it(url: str) -> None:
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
    assert keys(url, "tasks/t") == []
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.stdout.readline().split()[0] == "stored"  # the hazard is real: its key was free again
    assert holder.wait(30) == 0
    left = keys(url, "tasks/t")
    assert len(left) == 1 and not left[0].endswith("/000000000000")
    # no reader takes it for a stream
    with pytest.raises(CorruptStream, match="segment 0 is missing"):
        ObjectStreams(client_of(url)).read("t")
    report = verify_ledger(intentlog.open(url, create=False))
    assert report.ok and report.tasks == 1, [p.to_json() for p in report.problems]
    listed = CliRunner().invoke(main, ["--root", url, "tasks", "--json"])
    assert {t["task"]: t["stream"] for t in json.loads(listed.stdout)}.get("t") == "unreadable"
    # a new task under the id is refused, naming what to do
    with pytest.raises(CorruptStream, match="gc --apply"):
        intentlog.open(url).task("t").append("note", {"new": 1})
    assert keys(url, "tasks/t") == left  # refused: nothing written
    # the next gc removes it (recorded), and then the id starts cleanly
    assert plan_gc(intentlog.open(url), now=LATER).expired == ()
    apply_gc(intentlog.open(url), now=LATER)
    assert keys(url, "tasks/t") == [] and log_kinds(url)[-1] == "gc.swept"
    with intentlog.open(url) as ledger:
        ledger.task("t").append("note", {"new": 1})
        assert [ev.kind for ev in ledger.task("t").events()] == ["task.created", "note"]
    assert verify_ledger(intentlog.open(url, create=False)).ok


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

    def writer_first(client: S3Client, d: str, key: str, touches: int, token: str) -> str:
        ObjectArtifacts(client_of(url)).put(BLOB)  # a writer stores the same bytes: refused create, a touch
        return real(client, d, key, touches, token)

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


@pytest.mark.parametrize("at", [1, 3, 6, 10, 14, 19, 23, 26, 29, 1000])
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
        assert keys(url, f"tasks/{name}") == []
    assert keys(url, "objects") == [] and keys(url, "gc/dying") == []
    assert sorted(ObjectStreams(client_of(url)).names()) == ["stays"]
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
