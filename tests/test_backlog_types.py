"""The backlog's types are the library's: one LeaseLost, one /proc/locks parser, typed messages, a gate."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import pytest
from s3_server import MemoryClient

import intentlog
import intentlog.backlog
import intentlog.errors
from intentlog.s3 import ObjectStreams


def test_the_backlogs_lease_lost_catches_a_fenced_store_lease() -> None:
    s = ObjectStreams(MemoryClient())
    s.create("t")
    old = s.lease("t")
    old.append([b"a"], expected_seq=0)
    s.lease("t", take_over_after=0)  # another writer takes the lease: the old holder is fenced
    caught: list[BaseException] = []
    try:
        old.append([b"late"], expected_seq=1)
    except intentlog.backlog.LeaseLost as exc:
        caught.append(exc)
    assert len(caught) == 1 and isinstance(caught[0], intentlog.errors.LeaseLost)
    assert s.read("t") == b"a\n"  # the fenced append wrote nothing


def test_a_lost_folder_lock_is_the_same_lease_lost(tmp_path: Path) -> None:
    from intentlog.backlog.worker import _Guard

    t = intentlog.open(tmp_path / "l").task("job")
    t.append("note.first", {})
    a, _b = Pipe()
    guard = _Guard(t, a, 7, "job")
    os.unlink(tmp_path / "l" / "tasks" / "job.jsonl.lock")
    with pytest.raises(intentlog.errors.LeaseLost) as info:
        guard.check_lease()
    assert info.value.task_id == "job" and info.value.epoch == 7
    assert info.value.where.endswith("job.jsonl.lock") and "item 'job'" in str(info.value)
    t.close()


def test_one_proc_locks_parser_answers_for_the_backlog_and_the_writer(tmp_path: Path) -> None:
    from intentlog._internal import procs as _procs
    from intentlog.backlog import procs

    f = tmp_path / "f"
    f.write_text("")
    st = os.stat(f)
    key = _procs.lock_key(st)
    table = tmp_path / "locks"
    table.write_text(
        f"1: FLOCK  ADVISORY  READ  11 {key} 0 EOF\n"
        f"2: FLOCK  ADVISORY  WRITE 12 {key} 0 EOF\n"
        f"2: -> FLOCK  ADVISORY  WRITE 13 {key} 0 EOF\n"
        "3: POSIX  ADVISORY  WRITE 14 00:00:1 0 EOF\n"
        "4: FLOCK  ADVISORY  WRITE ? 00:00:2 0 EOF\n"
    )
    assert _procs.flock_holders(str(table)) == {key: 12, "00:00:2": -1}
    assert procs.flock_holders(str(table)) == {key: 12, "00:00:2": -1}
    assert _procs.flock_writer(st, str(table)) == 12
    assert procs.lock_key is _procs.lock_key
    assert procs.flock_holders(str(tmp_path / "none")) is None
    with pytest.raises(OSError):
        _procs.flock_writer(st, str(tmp_path / "none"))


def _backlog_imports() -> dict[str, set[str]]:
    """Each backlog module to the backlog modules it imports (module level, in functions, for typing alike)."""
    import ast

    pkg = Path(intentlog.backlog.__file__).parent
    names = {p.stem for p in pkg.glob("*.py")} - {"__init__"}
    out: dict[str, set[str]] = {}
    for name in names:
        found: set[str] = set()
        for node in ast.walk(ast.parse((pkg / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("intentlog.backlog."):
                found.add((node.module or "").split(".")[2])
        out[name] = found & names
    return out


def test_the_backlog_modules_import_each_other_without_a_cycle() -> None:
    graph = _backlog_imports()
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(m: str, path: tuple[str, ...]) -> None:
        if state.get(m) == 2:
            return
        assert state.get(m) != 1, f"import cycle: {' -> '.join((*path, m))}"
        state[m] = 1
        for d in sorted(graph[m]):
            visit(d, (*path, m))
        state[m] = 2
        order.append(m)

    for m in sorted(graph):
        visit(m, ())
    assert order.index("supervisor") < order.index("core") and order.index("engines") < order.index("dask_engine")


def test_the_messages_are_typed_records_that_read_as_their_wire_tuples() -> None:
    import pickle

    from intentlog.backlog import messages as m

    done = m.Done("done", "x", {"n": 1})
    # its optional last field (a view-cache line, display only) defaults to None: a plain 3-tuple reads as a Done
    assert done == ("done", "x", {"n": 1}, None) and done.item == "x" and done.result == {"n": 1}
    assert m.from_slot(("done", "x", {"n": 1})) == done
    assert pickle.loads(pickle.dumps(done)) == done and type(pickle.loads(pickle.dumps(done))) is m.Done
    # a plain tuple from an engine written against the tuples becomes its typed message
    assert type(m.from_slot(("blocked", "x", "awaiting_approval", "why", "cmd"))) is m.Blocked
    assert m.from_slot(("reserve", "x", {"calls": 1.0})).units == {"calls": 1.0}
    assert type(m.from_slot(("exhausted", "x", "spent"))) is m.Exhausted
    assert m.from_slot(done) is done
    with pytest.raises(ValueError, match="no message of the worker protocol"):
        m.from_slot(("grant", 1.0))  # a reply, never sent by a slot


def test_a_worker_answers_the_supervisor_with_typed_messages(tmp_path: Path) -> None:
    from intentlog.backlog import messages as m
    from intentlog.backlog.worker import run_item

    led = intentlog.open(tmp_path / "l")
    sup, worker = Pipe()

    def step(task: intentlog.Task, payload: object) -> object:
        return task.effect("e", {"p": 1}, lambda req: b'"ok"', interpret=lambda b: b.decode())

    sup.send(m.Grant("grant", 1.0))  # the reply to the one reservation the step's effect asks for
    answer = run_item(led.task("b.item.x"), worker, "x", "b", {}, step)
    assert type(answer) is m.Done and answer[:3] == ("done", "x", '"ok"')
    assert answer.entry is not None and answer.entry[0] == "b.item.x"  # the task's view-cache line, as written
    asked = sup.recv()
    assert type(asked) is m.Reserve and asked.item == "x" and asked.units == {"calls": 1.0}
    kinds = [e.kind for e in led.task("b.item.x").events()]
    assert kinds.index("quota.reserved") == kinds.index("attempt.started") - 1
    assert not sup.poll()


class _Counting:
    """A gate that records what it was asked and asks for one record before "step.started"."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def admit(self, kind: str, data: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
        self.asked.append(kind)
        if kind == "step.refused":
            raise intentlog.errors.UsageError("refused by the gate")
        return [("step.reserved", {"for": data.get("n")})] if kind == "step.started" else []


def test_a_gate_given_at_open_is_asked_once_per_append_and_its_records_go_first(tmp_path: Path) -> None:
    led = intentlog.open(tmp_path / "l")
    t = led.task("g")
    gate = _Counting()
    t.stream.open_writer(gate=gate)
    t.append("step.started", {"n": 1})
    t.append("note.after", {})
    with pytest.raises(intentlog.errors.UsageError):
        t.append("step.refused", {})
    assert gate.asked == ["step.started", "note.after", "step.refused"]  # its own record is never asked about
    t.close()  # the gate goes with the writer
    t.append("note.later", {})
    assert gate.asked == ["step.started", "note.after", "step.refused"]
    events = [(e.kind, e.data) for e in led.task("g").events()][1:]
    assert events == [
        ("step.reserved", {"for": 1}),
        ("step.started", {"n": 1}),
        ("note.after", {}),
        ("note.later", {}),
    ]
    t.close()


def test_a_gate_is_kept_only_once_its_writer_is_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import intentlog.stream

    t = intentlog.open(tmp_path / "l").task("g")

    def refuse(self: object, **kw: object) -> None:
        raise OSError("the lock cannot be taken")

    monkeypatch.setattr(intentlog.stream.StreamWriter, "open", refuse)
    with pytest.raises(OSError):
        t.stream.open_writer(gate=_Counting())
    assert t.stream.gate is None


class _Record:
    """Stands in for the run's journal: keeps what would be recorded."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def record(self, kind: str, data: dict[str, Any]) -> None:
        self.records.append((kind, data))


def test_the_quota_broker_grants_then_waits_once_recorded_then_refuses_a_spent_budget() -> None:
    from intentlog.backlog import messages as m
    from intentlog.backlog.broker import QuotaBroker
    from intentlog.backlog.quota import parse_quota

    journal = _Record()
    window = QuotaBroker(journal, (parse_quota("calls=1/1h"),))  # type: ignore[arg-type]
    assert type(window.answer("a", {"calls": 1.0})) is m.Grant
    assert window.answer("b", {"calls": 1.0}) is None and window.answer("b", {"calls": 1.0}) is None
    assert [k for k, _ in journal.records] == ["backlog.quota_waiting"]  # one record per quota that fills
    assert window.exhausted is None

    journal = _Record()
    budget = QuotaBroker(journal, (parse_quota("calls=1"),))  # type: ignore[arg-type]
    budget.load([(0.0, {"calls": 1.0})])  # spent by an earlier run, per the record
    reply = budget.answer("c", {"calls": 1.0})
    assert type(reply) is m.Spent and budget.exhausted == reply.reason
    assert [k for k, _ in journal.records] == ["backlog.quota_exhausted", "backlog.quota_waiting"]


def test_the_watchdog_judges_on_the_clock_it_is_given() -> None:
    from intentlog.backlog.model import ItemRecord
    from intentlog.backlog.watchdog import Watchdog

    dog = Watchdog(_Record(), inactivity=10.0, max_duration=100.0)  # type: ignore[arg-type]
    rec = ItemRecord("x", "b.item.x", "h", {}, priority=0, not_before=None, max_attempts=None, added_seq=1)
    assert dog.overdue(rec, since=0.0, progress=5.0, now=14.0) is None
    assert dog.overdue(rec, since=0.0, progress=5.0, now=15.5) == (
        "backlog.holder_ended",
        "stalled: its stream did not grow for 10 s",
    )
    assert dog.overdue(rec, since=0.0, progress=100.5, now=101.0)[0] == "backlog.item_timed_out"  # type: ignore[index]
    rec.inactivity, rec.max_duration = 60.0, 200.0  # the item's own limits win over the run's
    assert dog.overdue(rec, since=0.0, progress=5.0, now=64.0) is None
    assert dog.overdue(rec, since=0.0, progress=100.5, now=101.0) is None
