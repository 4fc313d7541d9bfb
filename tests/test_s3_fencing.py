"""One writer per stream on a real S3-compatible store (SeaweedFS), kept by the store itself.

Each test runs real processes where a second machine is meant, and ends by reading the
stream back from the store and checking its hash chain line by line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import orjson
import pytest
import s3_server

from intentlog._internal.digest import digest_bytes
from intentlog.errors import TaskBusy
from intentlog.eventlog.format import encode_line, parse_line
from intentlog.s3 import ObjectStreams, S3Location

TS = "2026-01-01T00:00:00.000000Z"


def chained(prev: bytes | None, seq: int, data: dict[str, object]) -> bytes:
    """The event line (without its newline) that follows ``prev`` in a hash chain."""
    parent = None if prev is None else digest_bytes(prev + b"\n")
    return encode_line("note", orjson.dumps(data), parent, seq, TS)[:-1]


def chain_of(data: bytes) -> list[dict[str, object]]:
    """Every event's data, checking each line's seq and prev against the line before."""
    prev: str | None = None
    out = []
    for seq, line in enumerate(data.splitlines(keepends=True)):
        event = parse_line(line, seq, prev)
        prev = event.digest
        out.append(event.data)
    return out


def _child_env(location: S3Location) -> dict[str, str]:
    server = s3_server.seaweed()
    return {**os.environ, **server.env(), "LOC_BUCKET": location.bucket, "LOC_PREFIX": location.prefix}


CHILD_PRELUDE = """
import os, sys, time
import orjson
sys.path.insert(0, {tests!r})
from test_s3_fencing import chained
from intentlog.errors import LeaseLost, TaskBusy
from intentlog.s3 import ObjectStreams, S3Client, S3Location
streams = ObjectStreams(S3Client(S3Location(os.environ["LOC_BUCKET"], os.environ["LOC_PREFIX"])))
def report(line):
    with open(sys.argv[1], "a") as f:
        f.write(line + "\\n"); f.flush(); os.fsync(f.fileno())
"""


def _child(code: str) -> str:
    return textwrap.dedent(CHILD_PRELUDE).format(tests=str(Path(__file__).parent)) + textwrap.dedent(code)


def _spawn(code: str, out: Path, name: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code, str(out), name], env=env)


def _wait_ready(outs: list[Path], procs: list[subprocess.Popen[bytes]]) -> None:
    """Until every child is connected and waiting on the go file."""
    deadline = time.monotonic() + 60
    while not all(Path(f"{o}.ready").exists() for o in outs):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a writer did not start"
        time.sleep(0.01)


def test_32_racing_conditional_creates_on_one_key_have_exactly_one_winner() -> None:
    """Of 32 threads creating one key at once, one wins; 31 are refused and the key holds the winner's bytes."""
    client = s3_server.fresh_client()
    barrier = threading.Barrier(32)
    results: dict[int, bool] = {}

    def racer(i: int) -> None:
        barrier.wait()
        results[i] = client.create("race/key", b"racer %d" % i)

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, won in results.items() if won]
    assert len(results) == 32 and len(winners) == 1, results
    assert client.get("race/key") == b"racer %d" % winners[0]


def test_32_racing_leases_of_one_stream_have_one_holder() -> None:
    """32 threads leasing one stream at once: one lease is granted, 31 get TaskBusy; the stream holds one epoch."""
    location = s3_server.fresh_location()
    ObjectStreams(s3_server.fresh_client(location)).create("t")
    barrier = threading.Barrier(32)
    granted, busy = [], []

    def racer() -> None:
        streams = ObjectStreams(s3_server.fresh_client(location))
        barrier.wait()
        try:
            granted.append(streams.lease("t"))
        except TaskBusy:
            busy.append(1)

    threads = [threading.Thread(target=racer) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(granted), len(busy)) == (1, 31)
    tail = ObjectStreams(s3_server.fresh_client(location)).tail("t")
    assert (tail.kind, tail.seg, tail.epoch) == ("lease", 1, 1)
    granted[0].release()


def test_two_processes_writing_one_stream_one_wins_the_other_is_refused(tmp_path: Path) -> None:
    """Two processes lease one stream at the same moment and append 20 chained events each if they can.

    Exactly one gets the lease and appends all of its events; the other is refused
    (TaskBusy) having written nothing; the stream reads back as one intact chain of the
    winner's events, exactly those it reported appended.
    """
    location = s3_server.fresh_location()
    ObjectStreams(s3_server.fresh_client(location)).create("t")
    go = tmp_path / "go"
    code = _child(f"""
        streams.tail("t")  # connected: the client is made and the server answered
        open(sys.argv[1] + ".ready", "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.001)
        try:
            lease = streams.lease("t")
        except TaskBusy:
            report("busy"); sys.exit(0)
        prev = None
        for i in range(20):
            line = chained(prev, i, {{"writer": sys.argv[2], "i": i}})
            lease.append([line], expected_seq=i)
            report(f"appended {{i}}")
            prev = line
        lease.release()
    """)
    outs = [tmp_path / "a.out", tmp_path / "b.out"]
    env = _child_env(location)
    procs = [_spawn(code, out, n, env) for out, n in zip(outs, "ab", strict=True)]
    _wait_ready(outs, procs)
    go.write_text("go")
    assert [p.wait(60) for p in procs] == [0, 0]
    reports = {n: o.read_text().split("\n")[:-1] for o, n in zip(outs, "ab", strict=True)}
    winners = [n for n, r in reports.items() if r and r[0] != "busy"]
    assert len(winners) == 1, reports
    loser = "b" if winners == ["a"] else "a"
    assert reports[loser] == ["busy"]
    assert reports[winners[0]] == [f"appended {i}" for i in range(20)]
    events = chain_of(ObjectStreams(s3_server.fresh_client(location)).read("t"))
    assert events == [{"writer": winners[0], "i": i} for i in range(20)]


def test_writers_taking_the_lease_from_each_other_never_fork_the_chain(tmp_path: Path) -> None:
    """Two processes that steal the lease from each other (take_over_after=0) append until fenced, then steal again.

    Each goes on until it made 20 appends and one of the two was fenced at least once (an event
    both see in the report files), so a slow start of one never ends the race before it began.

    Every append either lands (and is reported) or is refused with LeaseLost (nothing
    written): the stream is one intact chain holding exactly the reported appends, in order.
    """
    location = s3_server.fresh_location()
    ObjectStreams(s3_server.fresh_client(location)).create("t")
    go = tmp_path / "go"
    code = _child(f"""
        streams.tail("t")  # connected: the client is made and the server answered
        open(sys.argv[1] + ".ready", "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.001)
        outs = [os.path.join(os.path.dirname(sys.argv[1]), n + ".out") for n in "ab"]

        def done():  # at least 20 appends, and the lease taken from one of the two at least once
            return written >= 20 and any(os.path.exists(o) and "fenced" in open(o).read() for o in outs)

        written = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not done():
            lease = streams.lease("t", wait=5, take_over_after=0)
            data = streams.read("t")
            prev = data.splitlines()[-1] if data else None
            try:
                while not done() and time.monotonic() < deadline:
                    line = chained(prev, lease.next_seq, {{"writer": sys.argv[2], "n": written}})
                    lease.append([line], expected_seq=lease.next_seq)
                    report(f"{{sys.argv[2]}} {{written}}")
                    written += 1
                    prev = line
                    time.sleep(0.003)
            except LeaseLost:
                report("fenced")
        lease.release()
    """)
    outs = [tmp_path / "a.out", tmp_path / "b.out"]
    env = _child_env(location)
    procs = [_spawn(code, out, n, env) for out, n in zip(outs, "ab", strict=True)]
    _wait_ready(outs, procs)
    go.write_text("go")
    assert [p.wait(180) for p in procs] == [0, 0]
    events = chain_of(ObjectStreams(s3_server.fresh_client(location)).read("t"))
    fenced = [out.read_text().count("fenced") for out in outs]
    assert sum(fenced) >= 1, "the writers did take the lease from each other"
    for out, n in zip(outs, "ab", strict=True):
        reported = [int(x.split()[1]) for x in out.read_text().split("\n") if x.startswith(f"{n} ")]
        held = [e["n"] for e in events if e["writer"] == n]
        assert held == reported, f"{n}: the stream holds exactly its acknowledged appends"


def test_a_writer_whose_lease_was_taken_while_it_was_stopped_cannot_append(tmp_path: Path) -> None:
    """A writer appending every 50 ms holds its lease against a take-over; SIGSTOPped, it loses it.

    While it runs, a take-over waiting for the tail to stand still for 0.5 s gets TaskBusy.
    Once stopped, the take-over succeeds (epoch 2) and appends; resumed, the old writer's
    next append raises LeaseLost and writes nothing: the stream is the old writer's events
    up to the stop, then the new holder's, one intact chain.
    """
    location = s3_server.fresh_location()
    streams = ObjectStreams(s3_server.fresh_client(location))
    streams.create("t")
    out = tmp_path / "child.out"
    code = _child("""
        lease = streams.lease("t")
        prev = None
        i = 0
        while True:
            line = chained(prev, i, {"writer": "old", "i": i})
            try:
                lease.append([line], expected_seq=i)
            except LeaseLost as exc:
                report(f"fenced epoch={exc.epoch} at={i}"); sys.exit(0)
            report(f"appended {i}")
            prev = line
            i += 1
            time.sleep(0.05)
    """)
    child = subprocess.Popen([sys.executable, "-c", code, str(out)], env=_child_env(location))
    try:
        deadline = time.monotonic() + 30
        while out.read_text().count("appended") < 3 if out.exists() else True:
            assert time.monotonic() < deadline and child.poll() is None, "the writer did not start"
            time.sleep(0.02)
        with pytest.raises(TaskBusy):
            streams.lease("t", wait=1.0, take_over_after=0.5)  # the stream moves: no take-over
        child.send_signal(signal.SIGSTOP)
        time.sleep(0.2)  # an append in flight lands
        with streams.lease("t", wait=5, take_over_after=0.5) as lease:
            assert lease.epoch == 2
            data = streams.read("t")
            old = data.splitlines()
            lease.append([chained(old[-1], len(old), {"writer": "new", "i": 0})], expected_seq=len(old))
            child.send_signal(signal.SIGCONT)
            assert child.wait(30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    lines = out.read_text().split("\n")[:-1]
    appended = [int(x.split()[1]) for x in lines if x.startswith("appended")]
    assert lines[-1] == f"fenced epoch=1 at={len(appended)}"
    events = chain_of(streams.read("t"))
    assert events == [{"writer": "old", "i": i} for i in appended] + [{"writer": "new", "i": 0}]
