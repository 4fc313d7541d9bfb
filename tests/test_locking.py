"""One writer per task, across processes; shared handles inside one (DESIGN §4 rule 5)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ChildRunner, child_code
from strategies import check_chain

import intentlog
import intentlog.eventlog.lock
from intentlog import TaskBusy

HOLDER = """
import sys, intentlog
task = intentlog.open(sys.argv[1]).task("t")
task.append("held", {"by": "holder"})
print("holding", flush=True)
line = sys.stdin.readline()  # hold the lock until told (or killed)
if line.strip() == "append":
    task.append("held", {"by": "holder", "again": True})
task.close()
print("released", flush=True)
"""


class Holder:
    """A child process holding task 't''s writer lock until released or killed."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", child_code(HOLDER), str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line == "holding\n", line + (self.proc.stderr.read() if self.proc.stderr else "")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self, command: str = "") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0 and out == "released\n", err

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()


@pytest.fixture
def holder(ledger_root: Path) -> Iterator[Holder]:
    intentlog.open(ledger_root).close()
    h = Holder(ledger_root)
    yield h
    h.stop()


def test_a_second_process_gets_task_busy_naming_the_holder(ledger_root: Path, holder: Holder) -> None:
    """While one process writes a task, another's append raises TaskBusy naming the holder's pid; nothing written."""
    led = intentlog.open(ledger_root)
    before = (ledger_root / "tasks" / "t.jsonl").read_bytes()
    with pytest.raises(TaskBusy) as info:
        led.task("t").append("note", {"from": "parent"})
    err = info.value
    assert err.holder_pid == holder.pid
    assert err.task_id == "t" and err.path == str(ledger_root / "tasks" / "t.jsonl.lock")
    assert f"process {holder.pid}" in str(err) and "t.jsonl.lock" in str(err)
    assert (ledger_root / "tasks" / "t.jsonl").read_bytes() == before
    holder.release("append")
    led.task("t").append("note", {"from": "parent"})
    led.close()
    assert [(e["kind"], e["data"]) for e in check_chain(ledger_root / "tasks" / "t.jsonl")][1:] == [
        ("held", {"by": "holder"}),
        ("held", {"by": "holder", "again": True}),
        ("note", {"from": "parent"}),
    ]


def test_exactly_one_of_two_racing_processes_gets_the_task(ledger_root: Path, tmp_path: Path) -> None:
    """Two processes that open the same task for writing at once: exactly one wins, the other gets TaskBusy."""
    intentlog.open(ledger_root).close()
    done = tmp_path / "done"
    code = child_code(
        """
        import os, sys, time, intentlog
        task = intentlog.open(sys.argv[1]).task("t")
        while time.time() < float(sys.argv[2]):
            pass
        try:
            task.append("note", {"winner": sys.argv[3]})
        except intentlog.TaskBusy as exc:
            print("busy", exc.holder_pid, flush=True)
            sys.exit(0)
        print("won", flush=True)
        deadline = time.time() + 30
        while not os.path.exists(sys.argv[4]) and time.time() < deadline:
            time.sleep(0.01)  # hold the lock until the parent has heard from both
        """
    )
    start = time.time() + 0.5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(ledger_root), str(start), name, str(done)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    try:
        outs = [p.stdout.readline().split() if p.stdout else [] for p in procs]
    finally:
        done.touch()
        for p in procs:
            p.communicate(timeout=30)
    assert sorted(o[0] for o in outs if o) == ["busy", "won"], outs
    winner = next(i for i, o in enumerate(outs) if o[0] == "won")
    loser = outs[1 - winner]
    # The winner writes its pid just after it wins the flock; a loser refused inside that
    # window cannot name it yet (reported: lock.py could re-read an empty pid file briefly).
    assert loser[1] in (str(procs[winner].pid), "None")
    events = check_chain(ledger_root / "tasks" / "t.jsonl")
    assert [e["data"] for e in events[1:]] == [{"winner": "ab"[winner]}]


def test_sigkill_releases_the_lock(ledger_root: Path, holder: Holder) -> None:
    """A writer killed with SIGKILL leaves no lock behind: the next process writes at once."""
    holder.kill()
    led = intentlog.open(ledger_root)
    led.task("t").append("note", {"after": "kill"})
    led.close()
    events = check_chain(ledger_root / "tasks" / "t.jsonl")
    assert [e["data"] for e in events[1:]] == [{"by": "holder"}, {"after": "kill"}]


def test_wait_waits_for_the_holder_then_times_out(ledger_root: Path, holder: Holder) -> None:
    """task(wait=s) retries the lock for s seconds: it raises TaskBusy after about s, succeeds if released meanwhile."""
    led = intentlog.open(ledger_root)
    t0 = time.monotonic()
    with pytest.raises(TaskBusy):
        led.task("t", wait=0.4).append("note", {})
    assert 0.35 <= time.monotonic() - t0 < 5

    import threading

    timer = threading.Timer(0.3, holder.release)
    timer.start()
    t0 = time.monotonic()
    led.task("t", wait=10).append("note", {"after": "wait"})
    waited = time.monotonic() - t0
    timer.join()
    led.close()
    assert 0.25 <= waited < 10
    assert [e["data"] for e in check_chain(ledger_root / "tasks" / "t.jsonl")][1:] == [
        {"by": "holder"},
        {"after": "wait"},
    ]


def test_readers_take_no_lock(ledger_root: Path, holder: Holder, monkeypatch: pytest.MonkeyPatch) -> None:
    """events() works while another process holds the writer lock, and never touches the lock."""

    def no_lock(self: object, wait: float) -> None:
        raise AssertionError("a reader tried to lock")

    monkeypatch.setattr(intentlog.eventlog.lock.WriterLock, "acquire", no_lock)
    led = intentlog.open(ledger_root)
    events = list(led.task("t").events())
    assert [(e.kind, e.data) for e in events] == [
        ("task.created", events[0].data),
        ("held", {"by": "holder"}),
    ]
    holder.release("append")
    assert [e.data for e in led.task("t").events()][1:] == [{"by": "holder"}, {"by": "holder", "again": True}]


def test_one_process_shares_one_handle_per_task(
    ledger_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """intentlog.open(root).task(id) twice — even via two Ledger objects and two spellings of root — is one handle."""
    a = intentlog.open(ledger_root)
    monkeypatch.chdir(tmp_path)
    b = intentlog.open("ledger")
    c = intentlog.open(ledger_root / "tasks" / "..")
    assert a is not b
    ta = a.task("t")
    assert b.task("t") is ta and c.task("t") is ta and a.task("t") is ta
    assert a.task("u") is not ta
    ta.append("note", {"via": "a"})
    b.task("t").append("note", {"via": "b"})  # would be TaskBusy if it were a second flock
    a.close()
    b.close()
    assert [e["data"] for e in check_chain(ledger_root / "tasks" / "t.jsonl")][1:] == [{"via": "a"}, {"via": "b"}]


def test_a_closed_handle_releases_the_lock_for_another_process(ledger_root: Path, run_child: ChildRunner) -> None:
    """After Task.close() (or leaving a with block) another process can write the task."""
    with intentlog.open(ledger_root) as led, led.task("t") as t:
        t.append("note", {"n": 1})
    run_child("import sys, intentlog\nintentlog.open(sys.argv[1]).task('t').append('note', {'n': 2})", ledger_root)
    assert [e["data"] for e in check_chain(ledger_root / "tasks" / "t.jsonl")][1:] == [{"n": 1}, {"n": 2}]
