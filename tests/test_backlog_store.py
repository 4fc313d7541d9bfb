"""Backlogs whose ledger is on the object store (a real SeaweedFS), on the local engine and on Dask.

On a store an item's lease is its stream's lease epoch and the store is the fence: a
holder whose lease was taken cannot append, so cannot start an attempt, so cannot send.
The receipt log the synthetic provider keeps (fsync'd, ``backlog_steps.serve``) is the
ground truth for what was sent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import s3_server
from backlog_chaos import receipt_counts
from backlog_steps import step as effects_step

import intentlog
from intentlog.errors import TaskBusy
from intentlog.s3 import S3Client, parse_s3_url

TESTS = Path(__file__).parent

#: a foreign holder of item i0: its first effect, "ready", a pause (SECONDS, or until a line on stdin), its second
HOLDER = """
import sys, time, intentlog
from backlog_steps import serve
ledger = intentlog.open(sys.argv[1])
task = ledger.task("f.item.i0")
task.effect("e0", {"pkey": "i0:0"}, serve)
print("ready", flush=True)
if sys.argv[2] == "stdin":
    sys.stdin.readline()  # held here (and SIGSTOPped) until the test says go: never a race with the stop
else:
    time.sleep(float(sys.argv[2]))
try:
    task.effect("e1", {"pkey": "i0:1"}, serve)
except Exception as exc:
    print("refused", type(exc).__name__, exc, flush=True)
    sys.exit(3)
ledger.close()  # the release segment: a process that exits without it leaves the lease held until fenced
print("sent", flush=True)
"""


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A fresh ``s3://`` prefix; the AWS variables and the receipt log in the environment every child inherits."""
    server = s3_server.seaweed()
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("BACKLOG_RECEIPTS", str(tmp_path / "receipts.jsonl"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    loc = s3_server.fresh_location()
    return f"s3://{loc.bucket}/{loc.prefix}"


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", url, *args], capture_output=True, text=True, timeout=120
    )


def _keys(url: str) -> list[str]:
    client = S3Client(parse_s3_url(url))
    return sorted(k for k, _ in client.scan("tasks"))


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_a_backlog_on_the_store_runs_every_item_once_on_either_engine(url: str, tmp_path: Path, engine: str) -> None:
    """4 items x 2 effects: all done, one receipt per key, one lease per item, segments on the store, verify clean."""
    if engine == "dask":
        pytest.importorskip("distributed", reason="the Dask engine tests need: pip install 'intentlog[dask]'")
    ledger = intentlog.open(url)
    bl = ledger.backlog("jobs")
    bl.add_many([{"item": f"i{n}", "payload": {"item": f"i{n}", "effects": 2}} for n in range(4)])
    view = bl.run(effects_step, workers=2, engine=engine, until_idle=True)
    assert view.counts["done"] == 4, view.to_json()
    receipts = tmp_path / "receipts.jsonl"
    assert receipt_counts(receipts) == {f"i{n}:{j}": 1 for n in range(4) for j in range(2)}
    for n in range(4):
        evs = list(ledger.task(f"jobs.item.i{n}").events())
        leases = [e for e in evs if e.kind == "lease.acquired"]
        assert len(leases) == 1 and evs[-1].kind == "lease.released"
        assert leases[0].data["pid"] != os.getpid()  # run in a worker process, not here
    keys = _keys(url)
    assert "tasks/jobs.item.i0/s/000000000000" in keys and "tasks/jobs.backlog/s/000000000000" in keys
    ledger.close()
    shown = _cli(url, "backlog", "jobs", "--json")  # the operator view runs on a store now
    assert shown.returncode == 0, shown.stderr
    assert orjson.loads(shown.stdout)["counts"]["done"] == 4
    v = _cli(url, "verify")
    assert v.returncode == 0, v.stdout + v.stderr


def test_two_processes_on_one_item_task_one_wins_the_other_is_refused_and_waited_for(url: str, tmp_path: Path) -> None:
    """A foreign process holds item i0's lease: a second writer is refused (nothing stored); the runner waits
    for the holder (its stream still moves within ``inactivity``) and takes the item once it is released."""
    ledger = intentlog.open(url)
    bl = ledger.backlog("f")
    bl.add("i0", {"item": "i0", "effects": 2})
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, "2.0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        before = _keys(url)
        with pytest.raises(TaskBusy):
            ledger.task("f.item.i0").append("note", {"second": "writer"})
        assert _keys(url) == before  # the refused writer stored nothing
        view = bl.run(effects_step, workers=1, until_idle=True, inactivity=30)
        out, err = holder.communicate(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert holder.returncode == 0 and "sent" in out, (out, err)
    assert view.counts["done"] == 1, view.to_json()
    assert receipt_counts(tmp_path / "receipts.jsonl") == {"i0:0": 1, "i0:1": 1}
    evs = list(ledger.task("f.item.i0").events())
    kinds = [e.kind for e in evs]
    assert kinds.index("lease.acquired") > max(i for i, k in enumerate(kinds) if k == "call.completed")
    assert not any(e.kind == "backlog.holder_ended" for e in bl.task.events())  # a live holder is never taken
    ledger.close()
    assert _cli(url, "verify").returncode == 0


def test_a_fenced_holder_stopped_then_continued_cannot_append_or_send(url: str, tmp_path: Path) -> None:
    """A holder SIGSTOPped mid-item on "another host" (nothing to kill it by): the runner sees its stream stand
    still for ``inactivity`` on its own clock, takes its lease (fenced), resumes the item and finishes it;
    continued, the old holder's next append is refused by the store (LeaseLost): nothing written, nothing sent."""
    ledger = intentlog.open(url)
    bl = ledger.backlog("f")
    bl.add("i0", {"item": "i0", "effects": 2})
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, "stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        os.kill(holder.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        view = bl.run(effects_step, workers=1, until_idle=True, inactivity=2.0)
        assert time.monotonic() - t0 >= 2.0  # taken only after standing still for `inactivity`
        after_run = _keys(url)
        os.kill(holder.pid, signal.SIGCONT)
        out, err = holder.communicate("go\n", timeout=30)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()
    assert holder.returncode == 3 and "refused LeaseLost" in out, (
        out, err, view.to_json(), receipt_counts(tmp_path / "receipts.jsonl"), _keys(url), after_run
    )
    assert _keys(url) == after_run  # the fenced holder stored nothing
    assert receipt_counts(tmp_path / "receipts.jsonl") == {"i0:0": 1, "i0:1": 1}  # and sent nothing
    assert view.counts["done"] == 1, view.to_json()
    ended = [e.data for e in bl.task.events() if e.kind == "backlog.holder_ended"]
    fenced = [e for e in ended if e.get("fenced")]
    assert len(fenced) == 1 and "lease taken" in fenced[0]["reason"], ended
    # on a loaded machine the run's own worker may also stand still past `inactivity` (a spawned process
    # starting): it is ended too, by pid and start time, and resumed -- never a second receipt (above)
    assert all(e["reason"].startswith("stalled") for e in ended), ended
    evs = list(ledger.task("f.item.i0").events())
    assert [e.data["key"] for e in evs if e.kind == "call.requested"] == ["e0", "e1"]  # e0 replayed, not resent
    assert evs[-1].kind == "lease.released"
    ledger.close()
    v = _cli(url, "verify")
    assert v.returncode == 0, v.stdout + v.stderr
