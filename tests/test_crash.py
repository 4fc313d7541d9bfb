"""Crash safety with real processes (DESIGN §4 rules 1 and 4).

A child appends in a loop and prints each seq once ``append`` (or a batch) has returned;
the parent SIGKILLs it at a random moment. A fresh process then reads the stream back:
every printed seq must be there with its data, the chain must verify, and the only
damage allowed is a torn tail — which the parent sometimes adds by hand (half a line, as
power loss mid-append would leave) and which the next writer must quarantine.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import child_code
from strategies import b3, check_chain, raw_lines

WRITER = """
import sys, intentlog
root, run, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
task = intentlog.open(root).task("t")
print("ready", task.next_seq, flush=True)  # the writer is open and any torn tail repaired
k = 0
def data(k):
    return {"run": run, "k": k, "pad": "x" * ((k * 37) % 700)}
while True:
    if mode == "batch":
        with task.batch():
            for _ in range(25):
                ev = task.append("note", data(k))
                k += 1
        print(ev.seq, k - 1, flush=True)  # every event up to ev.seq is durable
    else:
        ev = task.append("note", data(k))
        print(ev.seq, k, flush=True)
        k += 1
"""

READER = """
import sys, json, intentlog
task = intentlog.open(sys.argv[1]).task("t")
out = [{"seq": e.seq, "kind": e.kind, "data": e.data, "prev": e.prev, "digest": e.digest} for e in task.events()]
print(json.dumps(out))
"""


def _pad(k: int) -> str:
    return "x" * ((k * 37) % 700)


def _read_in_other_process(root: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-c", child_code(READER), str(root)], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def _kill_writer(root: Path, run: int, mode: str, rnd: random.Random) -> list[tuple[int, int]]:
    """Start a writer, let it run a random while, SIGKILL it; return the (seq, k) pairs it reported durable."""
    proc = subprocess.Popen(
        [sys.executable, "-c", child_code(WRITER), str(root), str(run), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("ready"), ready + (proc.stderr.read() if proc.stderr else "")
        time.sleep(rnd.uniform(0.0, 0.25))
    finally:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    acked = []
    for line in out.splitlines(keepends=True):
        if line.endswith("\n"):  # a line cut by the kill was never fully reported
            seq, k = map(int, line.split())
            acked.append((seq, k))
    return acked


@pytest.mark.parametrize("mode", ["single", "batch"])
def test_sigkill_loses_no_acknowledged_event_and_leaves_at_most_a_torn_tail(tmp_path: Path, mode: str) -> None:
    """After SIGKILL at a random moment, every event whose append returned is on disk with its data, chained.

    A torn tail (half a line added after some kills) is ignored by readers and quarantined
    by the next writer, which records ``stream.repaired`` naming the quarantined bytes.
    """
    rnd = random.Random(f"{mode}-{time.time_ns()}")
    root = tmp_path / "ledger"
    acked: dict[int, tuple[int, int]] = {}  # seq -> (run, k)
    injected: list[bytes] = []
    for run in range(5 if mode == "single" else 4):
        for seq, k in _kill_writer(root, run, mode, rnd):
            acked[seq] = (run, k)
        # Linux checks for a fatal signal between the pages of a write(), so a SIGKILL can
        # tear a line that crosses a page boundary: that tail is the next writer's to repair
        check_chain(root / "tasks" / "t.jsonl", torn_ok=True)
        last = raw_lines(root / "tasks" / "t.jsonl")[-1]
        if not last.endswith(b"\n"):
            injected.append(last)
        elif run % 2 == 1:
            torn = last[: rnd.randrange(1, len(last) - 1)]
            with open(root / "tasks" / "t.jsonl", "ab") as f:
                f.write(torn)
            injected.append(torn)
        events = _read_in_other_process(root)
        by_seq = {e["seq"]: e for e in events}
        assert [e["seq"] for e in events] == list(range(len(events)))
        for seq, (r, k) in acked.items():
            assert by_seq[seq]["data"] == {"run": r, "k": k, "pad": _pad(k)}, f"acknowledged seq {seq} lost"
    assert len(acked) > 0

    # a last writer repairs the outstanding tail; a fresh process checks everything
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, intentlog\nwith intentlog.open(sys.argv[1]) as l: l.task('t').append('note', {'end': 1})",
            str(root),
        ],
        check=True,
        timeout=60,
    )
    events = _read_in_other_process(root)
    on_disk = check_chain(root / "tasks" / "t.jsonl")
    assert [(e["seq"], e["kind"], e["data"]) for e in events] == [(e["seq"], e["kind"], e["data"]) for e in on_disk]
    assert [e["digest"] for e in events] == [b3(line) for line in raw_lines(root / "tasks" / "t.jsonl")]
    repairs = [e["data"] for e in events if e["kind"] == "stream.repaired"]
    assert [(r["quarantined"]["digest"], r["quarantined"]["size"]) for r in repairs] == [
        (b3(t), len(t)) for t in injected
    ]
    for r, torn in zip(repairs, injected, strict=True):
        assert (root / r["quarantined"]["file"]).read_bytes() == torn
        assert "incomplete" in r["reason"]
    runs = [e["data"].get("run") for e in events if e["kind"] == "note" and "run" in e["data"]]
    assert runs == sorted(runs), "each run continued after the previous one"
    for seq, (r, k) in acked.items():
        assert events[seq]["data"] == {"run": r, "k": k, "pad": _pad(k)}
    assert events[-1]["data"] == {"end": 1}


def test_a_killed_batch_keeps_its_whole_lines_and_the_next_writer_continues(tmp_path: Path) -> None:
    """A writer killed inside a batch leaves whole lines only (no sync yet ≠ torn); a new writer continues the chain."""
    root = tmp_path / "ledger"
    code = child_code(
        """
        import sys, os, signal, intentlog
        task = intentlog.open(sys.argv[1]).task("t")
        with task.batch():
            for k in range(100):
                task.append("note", {"k": k})
            print("appended", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # inside the batch: its one sync never ran
        """
    )
    proc = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL and proc.stdout == "appended\n", proc.stderr
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, intentlog\nintentlog.open(sys.argv[1]).task('t').append('note', {'k': 'x'})",
            str(root),
        ],
        check=True,
        timeout=60,
    )
    events = _read_in_other_process(root)
    assert [e["data"].get("k") for e in events[1:]] == [*range(100), "x"]
    assert not any(e["kind"] == "stream.repaired" for e in events)
    assert len(check_chain(root / "tasks" / "t.jsonl")) == 102


def test_a_crash_while_repairing_a_fully_torn_stream_still_starts_at_task_created(tmp_path: Path) -> None:
    """A writer killed after truncating a wholly torn stream (before its new task.created) leaves a stream that
    the next writer still starts with task.created at seq 0."""
    root = tmp_path / "ledger"
    subprocess.run(
        [sys.executable, "-c", "import sys, intentlog\nintentlog.open(sys.argv[1]).close()", str(root)],
        check=True,
        timeout=60,
    )
    stream = root / "tasks" / "t.jsonl"
    stream.write_bytes(b'{"data":{"format":"intent')  # line 0 itself torn
    code = child_code(
        """
        import os, signal, sys, intentlog
        import intentlog.eventlog.writer as w
        w.write_all = lambda fd, data: os.kill(os.getpid(), signal.SIGKILL)  # die at the first write after truncating
        intentlog.open(sys.argv[1]).task("t").append("note", {"n": 1})
        """
    )
    proc = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert stream.read_bytes() == b"", "the crash window: truncated, nothing written yet"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, intentlog\nintentlog.open(sys.argv[1]).task('t').append('note', {'n': 2})",
            str(root),
        ],
        check=True,
        timeout=60,
    )
    events = _read_in_other_process(root)
    assert events[0]["kind"] == "task.created" and events[0]["seq"] == 0
