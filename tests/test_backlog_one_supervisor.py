"""One supervisor per backlog, quota windows on a clock that cannot jump, runs that end when nothing can progress.

Real ``intentlog run`` processes on one folder backlog (the second refused naming the
holder; a SIGKILLed one taken over, recorded), the run's ownership protocol and the quota
broker on injected clocks (no sleeping), a run that returns although another process's
item was settled meanwhile, workers that die at start, a spent budget on the command line.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from backlog_steps import open_gate, read_receipts, wait_at_gate

import intentlog
from intentlog.backlog import messages as m
from intentlog.backlog.broker import QuotaBroker
from intentlog.backlog.journal import Journal
from intentlog.backlog.quota import parse_quota
from intentlog.backlog.runlease import STALE, BacklogBusy, RunOwner

TESTS = Path(__file__).parent


def _env(tmp: Path, sleep: str = "0") -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["BACKLOG_RECEIPTS"] = str(tmp / "receipts.jsonl")
    env["BACKLOG_SLEEP"] = sleep
    return env


def _run(root: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "intentlog.cli", "--root", str(root), "run", "g", "--step", "backlog_steps:step",
        "--workers", "1", "--until-idle", *extra,
    ]  # fmt: skip


def _wait_for(pred: Any, what: str, limit: float = 60.0) -> None:
    """Wait for a record (polling the ledger): a bound on a hang, never a step of the test."""
    deadline = time.monotonic() + limit
    while not pred():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.02)


def _started(root: Path) -> list[dict[str, Any]]:
    with intentlog.open(root) as led:
        return [e.data for e in led.backlog("g").task.events() if e.kind == "backlog.run_started"]


def _add(root: Path, n: int) -> None:
    with intentlog.open(root) as led:
        led.backlog("g").add_many([{"item": f"i{k}", "payload": {"item": f"i{k}", "effects": 1}} for k in range(n)])


def test_a_second_run_is_refused_naming_the_holder_and_the_first_runs_alone(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _add(root, 4)
    gate = tmp_path / "gate"
    gate.mkdir()
    env = _env(tmp_path) | {"BACKLOG_GATE": str(gate), "BACKLOG_GATE_KEYS": "i0:0"}
    first = subprocess.Popen(_run(root), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the first run is held inside its first send while the second starts: never a race with its end
        wait_at_gate(str(gate), "i0:0")
        second = subprocess.run(_run(root), env=env, capture_output=True, text=True, timeout=120)
        open_gate(str(gate))
        assert second.returncode == 1
        assert f"process {first.pid} on host {socket.gethostname()!r}" in second.stderr
        assert "one supervisor per backlog" in second.stderr
        _out, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert [d["pid"] for d in _started(root)] == [first.pid]  # the refused run wrote nothing
    keys = sorted(r["key"] for r in read_receipts(str(tmp_path / "receipts.jsonl")))
    assert keys == [f"i{k}:0" for k in range(4)]


def test_a_sigkilled_supervisor_is_taken_over_and_the_take_over_recorded(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _add(root, 3)
    env = _env(tmp_path, sleep="0.4")
    first = subprocess.Popen(_run(root), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: len(_started(root)) == 1, "the first run's start")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = subprocess.run(_run(root), env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    runs = _started(root)
    assert len(runs) == 2 and runs[1]["took_over"]["pid"] == first.pid
    assert runs[1]["took_over"]["run"] == runs[0]["run"]
    keys = [r["key"] for r in read_receipts(str(tmp_path / "receipts.jsonl"))]
    assert len(keys) == len(set(keys)) and set(keys) <= {f"i{k}:0" for k in range(3)}


# -- the ownership protocol on an injected clock ---------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _open_run_elsewhere(b: Any) -> None:
    """A run started on another host (its pid means nothing here) that never recorded its end."""
    t = b.task
    t.stream.append("backlog.run_started", {"pid": 4242, "host": "elsewhere", "boot_id": "b", "run": "r0"})
    t.close()


def test_adds_are_no_sign_of_life_of_a_run_elsewhere_its_heartbeat_is(ledger: Any, monkeypatch: Any) -> None:
    """A parent's run watching another backlog whose open run is another machine's judges it live by that run's
    own records within STALE s: items others add (a producer adding every second) are no sign of life."""
    import types

    from intentlog.backlog import wake

    clock = [time.monotonic()]
    monkeypatch.setattr(wake, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    b = ledger.backlog("sums")
    b.add("x", 1)
    _open_run_elsewhere(b)
    watch = wake.ChildrenWatch(ledger)
    assert watch.item("sums", "x") is not None and watch.running("sums")
    for n in range(3):  # STALE s and more pass, with an add every second or so
        clock[0] += STALE / 2
        b.add(f"y{n}", n)
        watch.look()
    assert not watch.running("sums")
    t = b.task
    t.stream.append("backlog.run_alive", {"run": "r0"})  # the holder's heartbeat
    t.close()
    clock[0] += 1.0
    watch.look()
    assert watch.running("sums")


def test_a_look_at_another_backlog_that_fails_to_read_reads_again_at_the_next(ledger: Any, monkeypatch: Any) -> None:
    """A read of the other backlog that fails (a store's segment retired under the listing, a damaged line) is
    tried again a beat later, though the stream did not move since: a child settled there is never missed, and a
    damaged stream is not read at every look."""
    import types

    from intentlog.backlog import wake
    from intentlog.backlog.runlease import BEAT
    from intentlog.errors import CorruptStream

    clock = [time.monotonic()]
    monkeypatch.setattr(wake, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    b = ledger.backlog("sums")
    b.add("x", 1)
    watch = wake.ChildrenWatch(ledger)
    assert not watch.item("sums", "x").done
    t = b.task
    t.stream.append("backlog.item_done", {"item": "x"})  # the child settles there, the run's last record
    t.close()
    w = watch.backlogs["sums"]
    real, reads = w.task.events, []

    def once_broken(*a: Any, **k: Any) -> Any:
        reads.append(1)
        if len(reads) == 1:
            raise CorruptStream("sums", 3, "a listed segment is missing")
        return real(*a, **k)

    monkeypatch.setattr(w.task, "events", once_broken)
    seen = []
    for step in (0.0, BEAT / 2, BEAT / 2):  # the failed read, half a beat later nothing read, a beat later read
        clock[0] += step
        watch.looked = -1e9
        watch.look()
        seen.append((len(reads), watch.item("sums", "x").done))
    assert seen == [(1, False), (1, False), (2, True)], seen


def test_a_run_with_a_long_poll_still_beats_within_its_beat(ledger: Any, monkeypatch: Any) -> None:
    """``run(poll=30)``: the supervisor never waits longer than a beat between heartbeats, or a parent's run on
    another machine (and a new run's start) would judge it gone after STALE s while it runs."""
    from intentlog.backlog.runlease import BEAT
    from intentlog.backlog.supervisor import Supervisor

    waits: list[float] = []
    real = Supervisor.ready
    monkeypatch.setattr(Supervisor, "ready", lambda self, timeout: waits.append(timeout) or real(self, timeout))
    b = ledger.backlog("slow")
    b.add("x", 1)
    assert b.run(_one, workers=1, until_idle=True, poll=30.0).counts["done"] == 1
    assert waits and max(waits) <= BEAT < STALE, waits


def _one(task: intentlog.Task, payload: Any) -> int:
    return 1


def test_an_open_run_elsewhere_that_stands_still_is_taken_over_after_the_stale_time(ledger: Any) -> None:
    b = ledger.backlog("g")
    b.add("a", {"item": "a"})
    _open_run_elsewhere(b)
    clock = _Clock()
    owner = RunOwner(Journal(b), clock=clock)

    def sleep(s: float) -> None:
        clock.t += s

    owner.start({"pid": os.getpid(), "host": socket.gethostname()}, sleep=sleep)
    assert clock.t - 1000.0 >= STALE  # watched for the stale time on its own clock, not less
    runs = [e.data for e in b.task.events() if e.kind == "backlog.run_started"]
    assert runs[-1]["took_over"] == {"pid": 4242, "host": "elsewhere", "start_time": None, "run": "r0"}
    b.task.close()


def test_an_open_run_elsewhere_that_writes_refuses_the_start_and_nothing_is_written(ledger: Any) -> None:
    b = ledger.backlog("g")
    b.add("a", {"item": "a"})
    _open_run_elsewhere(b)
    clock = _Clock()
    owner = RunOwner(Journal(b), clock=clock)

    def sleep(s: float) -> None:  # meanwhile the holder's heartbeat lands; an add does not count as one
        clock.t += s
        b.add(f"x{clock.t}", {"item": "x"})
        if clock.t > 1001.0:
            b.task.stream.append("backlog.run_alive", {"run": "r0"})
            b.task.close()

    seq = max(e.seq for e in b.task.events())
    with pytest.raises(BacklogBusy, match="process 4242 on host 'elsewhere'"):
        owner.start({"pid": os.getpid()}, sleep=sleep)
    assert not any(e.kind == "backlog.run_started" for e in b.task.events(since=seq + 1))
    assert clock.t - 1000.0 < STALE


def test_a_run_taken_over_grants_nothing_more_and_records_no_end(ledger: Any) -> None:
    b = ledger.backlog("g")
    b.add("a", {"item": "a"})
    clock = _Clock()
    owner = RunOwner(Journal(b), clock=clock)
    owner.start({"pid": os.getpid()})
    assert owner.fresh()
    clock.t += 2.0
    owner.beat()
    assert owner.fresh() and owner.lost is None
    b.task.close()
    b.task.stream.append("backlog.run_started", {"pid": 4242, "host": "elsewhere", "run": "r1"})  # the take-over
    b.task.close()
    clock.t += 2.0
    owner.beat()
    assert owner.lost is not None and not owner.fresh() and not owner.mine()
    b.task.close()
    assert [e.kind for e in b.task.events()][-1] == "backlog.run_started"  # no heartbeat after the take-over


# -- quota windows on the supervisor's monotonic clock ---------------------------------------------------


class _Rec:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def record(self, kind: str, data: dict[str, Any]) -> None:
        self.records.append((kind, data))


def _granted(broker: QuotaBroker, n: int) -> int:
    return sum(type(broker.answer(f"i{k}", {"calls": 1.0})) is m.Grant for k in range(n))


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_a_wall_clock_step_neither_opens_nor_holds_a_window(step: float) -> None:
    mono, wall = _Clock(), _Clock()
    broker = QuotaBroker(_Rec(), (parse_quota("calls=3/10s"),), clock=mono, wall=wall)  # type: ignore[arg-type]
    assert _granted(broker, 5) == 3
    wall.t += step  # NTP, a VM resume, date -s
    mono.t += 1.0
    assert _granted(broker, 5) == 0  # a forward step opens nothing
    mono.t += 10.0  # the window (and its margin) passed on the monotonic clock
    assert _granted(broker, 5) == 3  # a backward step holds nothing


def test_grants_of_an_earlier_run_count_as_made_at_the_start_whatever_their_wall_time() -> None:
    mono, wall = _Clock(), _Clock()
    broker = QuotaBroker(_Rec(), (parse_quota("calls=3/10s"),), clock=mono, wall=wall)  # type: ignore[arg-type]
    # recorded by a run whose wall clock ran an hour behind, and one an hour ahead
    broker.load([(wall.t - 3600.0, {"calls": 1.0}), (wall.t - 3600.0, {"calls": 1.0}), (wall.t + 3600, {"calls": 1.0})])
    assert _granted(broker, 3) == 0  # never counted short: all three in this window
    mono.t += 11.0
    assert _granted(broker, 5) == 3  # and held at most one window (plus its margin), never the hour


def test_the_window_s_reopening_is_shown_on_the_wall_clock_from_the_monotonic_wait() -> None:
    mono, wall = _Clock(), _Clock()
    wall.t = 5_000_000.0
    rec = _Rec()
    broker = QuotaBroker(rec, (parse_quota("calls=1/10s"),), clock=mono, wall=wall)  # type: ignore[arg-type]
    assert _granted(broker, 2) == 1
    ((kind, data),) = rec.records
    assert kind == "backlog.quota_waiting" and data["until"] == pytest.approx(wall.t + 11.0)


# -- until_idle, start deaths, a spent budget -------------------------------------------------------------


def test_until_idle_returns_when_an_item_another_process_held_was_settled_meanwhile(ledger: Any) -> None:
    from backlog_steps import step

    from intentlog.backlog.engines import LocalEngine
    from intentlog.backlog.supervisor import Supervisor
    from intentlog.backlog.watchdog import _Foreign

    b = ledger.backlog("g")
    b.add("x", {"item": "x"})
    sup = Supervisor(
        b, step, workers=1, quotas=(), until_idle=True, inactivity=300, max_duration=None, grace=1, backoff=1,
        max_backoff=1, poll=0.05, engine=LocalEngine(),
    )  # fmt: skip
    sup.journal.refresh()
    sup.watchdog.foreign["x"] = _Foreign(10, time.monotonic())  # another run's worker held it when this one looked
    assert not sup.idle()  # still held as far as this run knows... but it is not held any more:
    assert "x" not in sup.watchdog.foreign  # let go, to be handed out (it resumes) on the next turn
    b.task.stream.append("backlog.item_done", {"item": "x", "task": "g.item.x"})  # the other run settled it
    b.task.close()
    sup.journal.refresh()
    sup.watchdog.foreign["x"] = _Foreign(10, time.monotonic())
    assert sup.idle() and not sup.watchdog.foreign

    b.add("y", {"item": "y"})
    sup.journal.refresh()
    held = ledger.task("g.item.y")
    held.stream.open_writer()  # a holder this run cannot end (as one on another host would be)
    try:
        sup.watchdog.foreign["y"] = _Foreign(10, time.monotonic())
        assert not sup.idle()  # its stream grew within the inactivity: it progresses
        sup.watchdog.foreign["y"] = _Foreign(10, time.monotonic() - 301.0)
        assert sup.idle()  # stalled past the inactivity where nothing can end it: nothing can progress
    finally:
        held.close()


def test_workers_that_die_at_start_stop_the_run_with_a_message_naming_why(ledger: Any, tmp_path: Path) -> None:
    from intentlog.backlog.supervisor import START_DEATHS, WorkersDie

    (tmp_path / "dies_at_start.py").write_text("import os\nos._exit(3)\n", encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        b = ledger.backlog("g")
        b.add("a", {"item": "a"})
        with pytest.raises(WorkersDie, match=r"workers in a row .* exited with status 3") as info:
            b.run("dies_at_start:step", workers=2, until_idle=True, poll=0.02)
        assert int(str(info.value).split()[2]) >= START_DEATHS
    finally:
        sys.path.remove(str(tmp_path))
    stopped = [e.data for e in b.task.events() if e.kind == "backlog.run_stopped"]
    assert stopped[-1]["reason"] == "workers die at start"
    assert b.view().counts["queued"] == 1


def test_a_spent_budget_exits_1_and_says_so_and_json_commands_name_the_root(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _add(root, 3)
    env = _env(tmp_path)
    r = subprocess.run([*_run(root, "--quota", "calls=1")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "quota calls=1 is spent" in r.stderr and "2 item(s) still queued" in r.stderr
    assert len(read_receipts(str(tmp_path / "receipts.jsonl"))) == 1
    cli = [sys.executable, "-m", "intentlog.cli", "--root", str(root)]
    view = json.loads(subprocess.run([*cli, "backlog", "g", "--json"], env=env, capture_output=True, text=True).stdout)
    queued = [i for i in view["items"] if i["state"] == "queued"]
    assert len(queued) == 2
    for row in queued:
        assert "budget" in row["next_step"] and f"--root {root}" in row["next_step"]


def test_a_run_of_this_process_that_ended_without_its_record_is_taken_over_at_once(ledger: Any) -> None:
    from intentlog.backlog.procs import boot_id, host_name, start_time

    b = ledger.backlog("g")
    b.add("a", {"item": "a"})
    me = {"pid": os.getpid(), "host": host_name(), "boot_id": boot_id(), "start_time": start_time(os.getpid())}
    live = RunOwner(Journal(b))
    live.start(me)  # going on in this process: a second start is refused
    with pytest.raises(BacklogBusy, match=f"process {os.getpid()}"):
        RunOwner(Journal(b)).start(me, sleep=lambda s: pytest.fail("a run here is judged at once"))
    live.end()  # ended without recording run_stopped (its storage failed at the end, say)
    b.task.close()
    nxt = RunOwner(Journal(b))
    nxt.start(me, sleep=lambda s: pytest.fail("a run here is judged at once"))
    nxt.end()
    runs = [e.data for e in b.task.events() if e.kind == "backlog.run_started"]
    assert len(runs) == 2 and runs[1]["took_over"]["run"] == live.token
    b.task.close()


def test_an_open_runs_holder_is_judged_gone_alive_or_unknown_from_its_record(tmp_path: Path) -> None:
    """``holder_gone``: this machine's pid and start time say gone or alive; another machine, or a record whose
    pid is not a positive int (edited), is unknown (None: only the stream's movement can tell), never an error."""
    import os

    from intentlog.backlog.procs import boot_id, host_name, start_time
    from intentlog.backlog.runlease import holder_gone

    here = {"boot_id": boot_id(), "host": host_name()}
    parent = os.getppid()
    assert holder_gone({**here, "pid": parent, "start_time": start_time(parent), "run": "x"}) is False
    assert holder_gone({**here, "pid": parent, "start_time": -1, "run": "x"}) is True  # the pid was reused
    assert holder_gone({**here, "pid": os.getpid(), "start_time": 0, "run": "not-this-process's"}) is True
    assert holder_gone({**here, "boot_id": "another-boot", "pid": parent, "start_time": 1}) is None
    assert holder_gone({**here, "host": "elsewhere", "pid": parent, "start_time": 1}) is None
    for pid in ("12", None, 0, -5, 1.5, True):
        assert holder_gone({**here, "pid": pid, "start_time": 1}) is None, pid
    assert holder_gone({**here, "pid": parent, "start_time": None, "run": "x"}) is None  # which process: unknown
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()  # reaped: its pid is free
    assert holder_gone({**here, "pid": done.pid, "start_time": None, "run": "x"}) is True
    # a supervisor SIGKILLed and not reaped yet (a zombie: its parent has not waited, or a container's pid 1
    # never does) has ended: /proc still shows its start time
    z = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    started = start_time(z.pid)
    os.kill(z.pid, signal.SIGKILL)

    def state() -> bytes:
        raw = Path(f"/proc/{z.pid}/stat").read_bytes()
        return raw[raw.rfind(b")") + 2 : raw.rfind(b")") + 3]

    _wait_for(lambda: state() == b"Z", "the killed process to be a zombie")
    assert start_time(z.pid) == started
    assert holder_gone({**here, "pid": z.pid, "start_time": started, "run": "x"}) is True
    z.wait()
    # a live process whose main thread exited (its other threads run) shows 'Z' for its leader too: not gone
    beat = tmp_path / "beat"
    code = (
        "import ctypes, sys, threading, time\n"
        "def work():\n"
        "    while True:\n"
        "        open(sys.argv[1], 'a').write('.'); time.sleep(0.01)\n"
        "threading.Thread(target=work).start()\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"
    )
    z = subprocess.Popen([sys.executable, "-c", code, str(beat)])
    try:
        _wait_for(lambda: state() == b"Z" and beat.exists(), "the main thread to exit, the other to write")
        size = beat.stat().st_size
        _wait_for(lambda: beat.stat().st_size > size, "its other thread to write on")
        assert holder_gone({**here, "pid": z.pid, "start_time": start_time(z.pid), "run": "x"}) is False
    finally:
        z.kill()
        z.wait()


_FORKS_THEN_WAITS = """
import multiprocessing, sys, time
from pathlib import Path

def worker(go):
    while not Path(go).exists():
        time.sleep(0.01)
    from intentlog.backlog.procs import die_with_parent
    die_with_parent()
    Path(go + ".alive").write_text("")  # only a worker that outlived its supervisor gets here
    time.sleep(600)

if __name__ == "__main__":
    p = multiprocessing.get_context("fork").Process(target=worker, args=(sys.argv[1],), daemon=True)
    p.start()
    print(p.pid, flush=True)
    time.sleep(600)
"""


def test_a_worker_whose_supervisor_died_before_it_asked_to_die_with_it_ends_itself(tmp_path: Path) -> None:
    """The supervisor SIGKILLed between a worker's fork and its ``die_with_parent``: no death signal comes, and the
    worker, holding both ends of its own pipe, would wait forever; it ends itself instead."""
    from intentlog.backlog.procs import zombie

    go = tmp_path / "go"
    sup = subprocess.Popen([sys.executable, "-c", _FORKS_THEN_WAITS, str(go)], stdout=subprocess.PIPE, text=True)
    assert sup.stdout is not None
    pid = int(sup.stdout.readline())
    sup.kill()
    sup.wait()
    go.write_text("")
    _wait_for(lambda: zombie(pid), "the orphaned worker to end")
    assert not (tmp_path / "go.alive").exists()


def test_a_run_is_never_judged_gone_by_its_own_process_once_its_start_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The moment ``backlog.run_started`` is durable, a reader in the same process (another backlog's parent run
    asking whether this one may still settle children) sees its holder alive, not gone."""
    import intentlog
    from intentlog.backlog.journal import Journal
    from intentlog.backlog.runlease import holder_gone

    seen: list[bool | None] = []
    record = Journal.record

    def record_and_ask(self: Journal, kind: str, data: dict[str, Any]) -> Any:
        ev = record(self, kind, data)
        if kind == "backlog.run_started":
            seen.append(holder_gone(ev.data))
        return ev

    monkeypatch.setattr(Journal, "record", record_and_ask)
    with intentlog.open(tmp_path / "l") as led:
        b = led.backlog("solo")
        b.add("a", {"n": 1})
        assert b.run(lambda task, payload: payload, workers=1, until_idle=True, poll=0.02).counts["done"] == 1
    assert seen == [False]


def test_a_stopping_run_keeps_beating_through_its_grace(tmp_path: Path) -> None:
    """SIGTERM with ``--grace 120`` while an effect is in flight: while the run waits for it, it still shows it
    holds the backlog (``backlog.run_alive`` after ``backlog.run_stopping``), or a run started on another machine
    would judge it gone after STALE s and take the backlog while its worker still sends."""
    root = tmp_path / "ledger"
    _add(root, 1)
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**_env(tmp_path), "BACKLOG_GATE": str(gate)}  # the send is held after its receipt until the gate opens
    sup = subprocess.Popen([*_run(root, "--grace", "120")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stream = root / "tasks" / "g.backlog.jsonl"

    def beat_after_stopping() -> bool:
        with intentlog.open(root) as led:
            kinds = [e.kind for e in led.backlog("g").task.events()]
        return "backlog.run_stopping" in kinds and "backlog.run_alive" in kinds[kinds.index("backlog.run_stopping") :]

    try:
        wait_at_gate(str(gate), "i0:0")
        sup.send_signal(signal.SIGTERM)
        _wait_for(lambda: b"backlog.run_stopping" in stream.read_bytes(), "the run stopping")
        _wait_for(beat_after_stopping, "a heartbeat during the grace", limit=4 * STALE)
        open_gate(str(gate))
        sup.communicate(timeout=60)
        assert sup.returncode == 0
    finally:
        open_gate(str(gate))
        sup.kill()
        sup.wait()
    assert [r["key"] for r in read_receipts(str(tmp_path / "receipts.jsonl"))] == ["i0:0"]
    with intentlog.open(root) as led:
        b = led.backlog("g")
        assert [e.kind for e in b.task.events()][-1] == "backlog.run_stopped"
        assert b.view().items[0].state == "done"


def test_a_run_taken_over_writes_nothing_more_in_the_backlog(ledger: Any) -> None:
    """Whatever the run taken over goes on deciding (an item done, a holder ended, a retry) is not recorded: the
    backlog is the new run's from its start, and the new run finds it all again in the item tasks."""
    b = ledger.backlog("g")
    b.add("a", {"item": "a"})
    journal = Journal(b)
    owner = RunOwner(journal)
    owner.start({"pid": os.getpid()})
    assert journal.record("backlog.item_blocked", {"item": "a", "task": "g.item.a", "reason": "r"}) is not None
    b.task.close()
    b.task.stream.append("backlog.run_started", {"pid": 4242, "host": "elsewhere", "run": "r1"})  # the take-over
    b.task.stream.append("backlog.run_stopped", {"reason": "idle", "ended": [], "quota": None})
    b.task.close()
    before = b.task.stream.path.read_bytes()
    assert journal.record("backlog.item_done", {"item": "a", "task": "g.item.a"}) is None
    journal.close()
    assert b.task.stream.path.read_bytes() == before
    owner.end()


def test_no_grant_outlives_the_run_s_hold_on_its_backlog() -> None:
    """A grant is given only while the run stays fresh for the grant's whole validity: a run that stood still
    between its freshness check and the grant (a VM paused, a debugger) grants nothing, reserves nothing."""
    from intentlog.backlog.quota import GRANT_VALID
    from intentlog.backlog.runlease import FRESH

    mono, wall = _Clock(), _Clock()
    broker = QuotaBroker(_Rec(), (parse_quota("calls=3/10s"),), clock=mono, wall=wall)  # type: ignore[arg-type]
    until = mono.t + FRESH  # the last heartbeat landed now
    broker.asked("i0")
    mono.t += FRESH - GRANT_VALID / 2  # stood still after the check: fresh for less than a grant's validity
    assert broker.answer("i0", {"calls": 1.0}, until=until) is None
    assert broker.book.used(broker.quotas[0], mono.t) == 0
    broker.asked("i1")
    got = broker.answer("i1", {"calls": 1.0}, until=mono.t + GRANT_VALID + 1.0)
    assert type(got) is m.Grant and got.valid <= GRANT_VALID + 1e-9


def _sup_with_full_disk(root: Path, flag: Path) -> list[str]:
    code = (
        "import errno, os, sys\n"
        "from intentlog.stream import TaskStream\n"
        "real, flag = TaskStream.append, sys.argv[1]\n"
        "def append(self, kind, *a, **kw):\n"
        "    if str(self.path).endswith('.backlog.jsonl') and os.path.exists(flag):\n"
        "        raise OSError(errno.ENOSPC, 'No space left on device', str(self.path))\n"
        "    return real(self, kind, *a, **kw)\n"
        "TaskStream.append = append\n"
        "from intentlog.cli import main\n"
        "sys.argv = ['intentlog'] + sys.argv[2:]\n"
        "main()\n"
    )
    return [sys.executable, "-c", code, str(flag), *_run(root, "--grace", "120")[3:]]


@pytest.mark.parametrize("how", ["INT_INT", "INT_TERM", "TERM_TERM", "full_disk"])
def test_a_stop_that_cannot_wait_ends_its_workers_and_the_process(tmp_path: Path, how: str) -> None:
    """A second signal during the grace ends the grace now; a stop whose record cannot be written (disk full)
    still ends its workers. Either way the process exits (it hung at exit joining a worker that ignores
    SIGTERM, holding the backlog's lock) and the effect in flight is paid once."""
    root = tmp_path / "ledger"
    _add(root, 1)
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**_env(tmp_path), "BACKLOG_GATE": str(gate)}  # the send is held after its receipt until the gate opens
    flag = tmp_path / "full"
    cmd = _sup_with_full_disk(root, flag) if how == "full_disk" else [*_run(root, "--grace", "120")]
    sup = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stream = root / "tasks" / "g.backlog.jsonl"
    try:
        wait_at_gate(str(gate), "i0:0")
        if how == "full_disk":
            flag.touch()
            sup.send_signal(signal.SIGTERM)
        else:
            first, second = (getattr(signal, "SIG" + s) for s in how.split("_"))
            sup.send_signal(first)
            _wait_for(lambda: b"backlog.run_stopping" in stream.read_bytes(), "the run stopping")
            sup.send_signal(second)
        _, err = sup.communicate(timeout=90)  # the gate stays closed: only the stop itself can end the run
    finally:
        open_gate(str(gate))
        sup.kill()
        sup.wait()
    assert sup.returncode >= 0, f"killed by its own signal ({sup.returncode}): {err[-400:]}"
    with intentlog.open(root) as led:
        b = led.backlog("g")
        kinds = [e.kind for e in b.task.events()]
        if how == "full_disk":
            assert "No space left on device" in err
            assert "backlog.run_stopped" not in kinds
        else:
            stopped = [e.data for e in b.task.events() if e.kind == "backlog.run_stopped"]
            assert kinds[-1] == "backlog.run_stopped" and [x["item"] for x in stopped[-1]["ended"]] == ["i0"]
        assert b.view().items[0].state == "blocked"  # its send's outcome unknown: a person decides, never a resend
    assert [r["key"] for r in read_receipts(str(tmp_path / "receipts.jsonl"))] == ["i0:0"]
    r = subprocess.run(_run(root), env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert "being written by process" not in r.stderr  # the backlog's lock went with the process


def test_a_run_found_taken_over_only_as_it_ends_fails_saying_so(ledger: Any, monkeypatch: Any) -> None:
    """Taken over while it stood still past its grace, a run learns it only at its end: it records no end and
    fails with BacklogTakenOver (it returned its view as if it had run the backlog to its end)."""
    from intentlog.backlog.supervisor import BacklogTakenOver, Supervisor

    b = ledger.backlog("late")
    b.add("x", 1)
    real = Supervisor.shutdown

    def taken_then_shutdown(self: Any) -> None:
        self.journal.close()
        b.task.stream.append("backlog.run_started", {"pid": 4242, "host": "elsewhere", "run": "r9"})
        b.task.close()
        real(self)

    monkeypatch.setattr(Supervisor, "shutdown", taken_then_shutdown)
    with pytest.raises(BacklogTakenOver, match="taken over by process 4242 on host 'elsewhere'"):
        b.run(_one, workers=1, until_idle=True)
    assert [e.kind for e in b.task.events()][-1] == "backlog.run_started"  # the other run's start, nothing after


_LATE_ADD = """
import sys
import intentlog
from intentlog.errors import TaskBusy
root, item = sys.argv[1], sys.argv[2]
with intentlog.open(root) as led:
    b = led.backlog("g")
    try:
        led.task(b.stream_id, wait=0).stream.open_writer()  # does the run hold the backlog's lock now?
    except TaskBusy:
        print("busy")
    else:
        led.task(b.stream_id).close()
        b.add(item, {"item": item})  # the run is stopped in its end here: this add cannot race it
        print("added")
"""


def test_an_idle_end_holds_the_backlog_from_its_last_look_to_its_record(
    ledger_root: Path, monkeypatch: Any, tmp_path: Path
) -> None:
    """An item added after an until-idle run judged itself idle, before it recorded its end, was left queued.

    The add is made from another process at the one point between the two (the run ending
    its workers). The run now holds the backlog's lock from its last look to its
    ``run_stopped``: the add waits for the end, so every item added before the end was run.
    Every turn lets the lock go here, as a run's turns do once a second.
    """
    from backlog_steps import noop

    from intentlog.backlog.supervisor import Supervisor

    env = _env(tmp_path)
    tried: list[str] = []
    end_workers = Supervisor.end_workers

    def late_add(self: Supervisor) -> list[dict[str, Any]]:
        if not tried:
            out = subprocess.run(
                [sys.executable, "-c", _LATE_ADD, str(ledger_root), "late"], env=env, capture_output=True,
                text=True, timeout=120,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
            tried.append(out.stdout.strip())
        return end_workers(self)

    monkeypatch.setattr(Supervisor, "end_workers", late_add)
    release = Journal.release
    # every turn lets the lock go, as a turn does once a second: a run's last look can follow a release
    monkeypatch.setattr(Journal, "release", lambda self, now=False: release(self, now=True))
    with intentlog.open(ledger_root) as led:
        led.backlog("g").add("first", {"item": "first"})
        led.backlog("g").run(noop, workers=1, until_idle=True, poll=0.02)
    assert tried == ["busy"]  # the run held the backlog through its end
    _add_late = subprocess.run(
        [sys.executable, "-c", _LATE_ADD, str(ledger_root), "late"], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert _add_late.stdout.strip() == "added"
    with intentlog.open(ledger_root) as led:
        evs = list(led.backlog("g").task.events())
    stopped = [e.seq for e in evs if e.kind == "backlog.run_stopped"]
    settled = {e.data["item"] for e in evs if e.kind == "backlog.item_done" and e.seq < stopped[-1]}
    added_before = {e.data["item"] for e in evs if e.kind == "backlog.item_added" and e.seq < stopped[-1]}
    assert added_before == settled == {"first"}


def test_the_end_waits_for_its_workers_to_quit_together_not_one_after_another(ledger: Any, monkeypatch: Any) -> None:
    """Idle workers are told to quit at once and waited for against one deadline: the end (under the backlog's
    lock when the run ends idle) waits ``QUIT_WAIT`` in all, not that much per worker process."""
    from itertools import pairwise
    from multiprocessing.process import BaseProcess

    from backlog_steps import noop

    from intentlog.backlog import supervisor

    asked: list[float] = []
    join = BaseProcess.join

    def counted(self: BaseProcess, timeout: float | None = None) -> None:
        if timeout is not None:
            asked.append(timeout)
        join(self, timeout)

    monkeypatch.setattr(BaseProcess, "join", counted)
    b = ledger.backlog("g")
    b.add_many([{"item": f"i{k}", "payload": {"item": f"i{k}"}} for k in range(4)])
    b.run(noop, workers=4, until_idle=True, poll=0.02)
    assert len(asked) >= 4  # each worker process was waited for
    assert max(asked) <= supervisor.QUIT_WAIT
    assert all(a > b for a, b in pairwise(asked))  # against one deadline: each waits only what is left
