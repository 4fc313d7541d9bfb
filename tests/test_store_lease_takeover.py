"""A store lease whose holder died is taken over without a person; a live holder never is.

The taker's clock is injected (``ObjectStreams.clock`` / ``.sleep``): "time passing" is the
fake clock moving, never a sleep. Holders are real processes; one killed with SIGKILL
leaves its lease held on the store. The record is what is checked: the stream's segments
(a take-over is a ``lease`` of the next epoch right after the dead holder's segments) and
what :class:`~intentlog.errors.TaskBusy` says.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import s3_server
from conftest import child_code

import intentlog
from intentlog.errors import TaskBusy
from intentlog.eventlog.storage import DEFAULT_TAKE_OVER_AFTER
from intentlog.s3 import ObjectStreams
from intentlog.s3.lease import beats_folder


#: the children import the very intentlog this test does, whatever the working folder
def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(intentlog.__file__).parent.parent)}


HOLDER = """
import os, sys, intentlog
import intentlog.s3.holder as holder
import intentlog.s3.lease as lease_mod
if sys.argv[2] != "here":  # a holder on another machine: this one cannot tell whether it runs
    holder._ME = (os.getpid(), holder.Holder(os.getpid(), sys.argv[2]))
lease_mod.HEARTBEAT_EVERY = float(sys.argv[3])
ledger = intentlog.open(sys.argv[1])
t = ledger.task("t")
t.append("note", {"by": "holder"})
lease = ledger.storage.streams._held["t"]
print("ready", os.getpid(), flush=True)
for line in sys.stdin:
    if line.strip() == "beat":
        lease.beat()
        print("beaten", flush=True)
    elif line.strip() == "append":
        try:
            t.append("note", {"by": "holder", "late": True})
            print("appended", flush=True)
        except Exception as exc:
            print("refused", type(exc).__name__, flush=True)
"""


class FakeClock:
    """A monotonic clock that moves only when slept on; ``on_sleep`` runs at every sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.on_sleep: Callable[[], None] | None = None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep()


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


class Holder:
    def __init__(self, url: str, host: str, beat_every: float = 3600.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", child_code(HOLDER), url, host, str(beat_every)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        first = self.readline()
        assert first.startswith("ready"), first
        self.pid = int(first.split()[1])

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def ask(self, what: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return self.readline().strip()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    made: list[Holder] = []
    yield made
    for h in made:
        h.close()


def taker(url: str, clock: FakeClock, **kw: Any) -> intentlog.Ledger:
    ledger = intentlog.open(url, **kw)
    streams = ledger.storage.streams  # type: ignore[union-attr]
    streams.clock, streams.sleep = clock.monotonic, clock.sleep
    return ledger


def segments(url: str) -> list[tuple[str, int]]:
    streams = ObjectStreams(s3_server.client_of(url))
    tail = streams.tail("t")
    return [(h.kind, h.epoch) for h in (streams.segment("t", n)[0] for n in range(tail.seg + 1))]


def test_a_killed_holder_on_this_machine_is_taken_over_at_once(url: str, holders: list[Holder]) -> None:
    """Its process ended (pid gone, or reused with another start time): a re-run does not wait 120 s for it."""
    h = Holder(url, "here")
    holders.append(h)
    h.kill()
    clock = FakeClock()
    with taker(url, clock) as ledger:
        ledger.task("t").append("note", {"by": "taker"})
    assert clock.now - 1000.0 < 1.0  # no watching the stream stand still
    assert segments(url) == [("create", 0), ("lease", 1), ("data", 1), ("lease", 2), ("data", 2), ("release", 2)]


def test_a_killed_holder_on_this_machine_is_not_taken_when_take_over_is_never(
    url: str, holders: list[Holder]
) -> None:
    h = Holder(url, "here")
    holders.append(h)
    h.kill()
    clock = FakeClock()
    with taker(url, clock, take_over_after=math.inf) as ledger, pytest.raises(TaskBusy) as err:
        ledger.task("t", wait=5.0).append("note", {"by": "taker"})
    assert err.value.alive is False and "has ended" in str(err.value)
    assert segments(url) == [("create", 0), ("lease", 1), ("data", 1)]


@pytest.mark.parametrize(("where", "after"), [("default", None), ("task", 30.0), ("open", 45.0)])
def test_a_killed_holder_elsewhere_is_taken_once_its_stream_stood_still_on_the_takers_clock(
    url: str, holders: list[Holder], where: str, after: float | None
) -> None:
    h = Holder(url, "elsewhere")
    holders.append(h)
    h.kill()
    clock = FakeClock()
    taken_at: list[float] = []
    with taker(url, clock, **({"take_over_after": after} if where == "open" else {})) as ledger:
        t = ledger.task("t", take_over_after=after if where == "task" else None)
        t.append("note", {"by": "taker"})
        taken_at.append(clock.now - 1000.0)
    limit = DEFAULT_TAKE_OVER_AFTER if after is None else after
    assert limit <= taken_at[0] < limit + 1.5  # not before the stream stood still that long, on the taker's clock
    assert segments(url)[3:] == [("lease", 2), ("data", 2), ("release", 2)]  # the take-over, recorded


def test_a_live_holder_elsewhere_whose_heartbeat_moves_is_never_taken(url: str, holders: list[Holder]) -> None:
    h = Holder(url, "elsewhere")
    holders.append(h)
    before = segments(url)
    clock = FakeClock()
    clock.on_sleep = lambda: None if h.ask("beat") == "beaten" else pytest.fail("the holder did not beat")
    with taker(url, clock) as ledger, pytest.raises(TaskBusy) as busy:
        ledger.task("t").append("note", {"by": "taker"})
    assert clock.now - 1000.0 < DEFAULT_TAKE_OVER_AFTER
    assert segments(url) == before  # nothing written by the refused taker
    exc = busy.value
    assert (exc.holder_pid, exc.holder_host) == (h.pid, "elsewhere")
    text = str(exc)
    assert f"process {h.pid} on elsewhere" in text
    assert "--take-over-after 0" in text and "take_over_after=0" in text
    assert h.ask("append") == "appended"  # the holder still holds it


def test_take_over_after_zero_takes_a_live_holder_now_and_fences_it(url: str, holders: list[Holder]) -> None:
    h = Holder(url, "here")
    holders.append(h)
    clock = FakeClock()
    with taker(url, clock) as ledger:
        with pytest.raises(TaskBusy) as busy:
            ledger.task("t").append("note", {"by": "taker"})
        assert busy.value.alive is True and clock.now == 1000.0  # known alive here: refused at once
        assert f"process {h.pid} on " in str(busy.value)
        ledger.task("t", take_over_after=0).append("note", {"by": "taker"})
    assert h.ask("append") == "refused LeaseLost"
    assert segments(url)[3:] == [("lease", 2), ("data", 2), ("release", 2)]


def test_a_slow_send_is_not_taken_its_holder_beats_during_the_call(url: str, tmp_path: Any) -> None:
    code = """
import sys, intentlog
import intentlog.s3.lease as lease_mod
import intentlog.s3.holder as holder
import os
holder._ME = (os.getpid(), holder.Holder(os.getpid(), "elsewhere"))
lease_mod.HEARTBEAT_EVERY = 0.05
ledger = intentlog.open(sys.argv[1])
t = ledger.task("t")
def send(request):
    print("in-call", flush=True)
    sys.stdin.readline()  # the call is in flight until the parent says
    return b'{"ok": true}'
t.effect("k", {"q": 1}, send)
print("done", flush=True)
"""
    proc = subprocess.Popen(
        [sys.executable, "-c", child_code(code), url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "in-call"
        client = s3_server.client_of(url)
        last: list[list[str]] = [[k for k, _ in client.scan(beats_folder("t"))]]

        def next_beat() -> None:  # the taker's time passes only once the holder beat again (an event, not a sleep)
            deadline = time.monotonic() + 60
            while (now := [k for k, _ in client.scan(beats_folder("t"))]) == last[0]:
                assert time.monotonic() < deadline, "no heartbeat while the call was in flight"
                threading.Event().wait(0.01)
            last[0] = now

        clock = FakeClock()
        clock.on_sleep = next_beat
        with taker(url, clock) as ledger, pytest.raises(TaskBusy):
            ledger.task("t").append("note", {"by": "taker"})
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    kinds = segments(url)
    assert ("lease", 2) not in kinds and kinds[-1] == ("release", 1)  # never taken; released at its end
    assert [k for k, _ in s3_server.client_of(url).scan(beats_folder("t"))] == []  # its last heartbeat went with it


def test_take_over_after_infinite_never_takes_over(url: str, holders: list[Holder]) -> None:
    h = Holder(url, "elsewhere")
    holders.append(h)
    h.kill()
    before = segments(url)
    clock = FakeClock()
    with taker(url, clock) as ledger, pytest.raises(TaskBusy) as busy:
        ledger.task("t", take_over_after=math.inf).append("note", {"by": "taker"})
    assert clock.now == 1000.0 and segments(url) == before
    assert busy.value.take_over_after is None and "not taken over unless asked" in str(busy.value)


def test_the_command_line_names_the_holder_and_takes_over_with_take_over_after(url: str, holders: list[Holder]) -> None:
    from click.testing import CliRunner

    from intentlog.cli import main

    h = Holder(url, "elsewhere", beat_every=0.05)  # alive, on a machine this one cannot look into
    holders.append(h)
    before = segments(url)
    busy = CliRunner().invoke(main, ["--root", url, "fail", "t", "--reason", "stuck", "--wait", "0"])
    assert busy.exit_code == 1, busy.output
    said = busy.output
    assert f"process {h.pid} on elsewhere" in said and "--take-over-after 0" in said, said
    assert segments(url) == before  # nothing written
    done = CliRunner().invoke(main, ["--root", url, "fail", "t", "--reason", "stuck", "--take-over-after", "0"])
    assert done.exit_code == 0, done.output
    assert h.ask("append") == "refused LeaseLost"
    assert segments(url)[3:] == [("lease", 2), ("data", 2), ("release", 2)]
