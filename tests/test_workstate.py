"""The work-state projection of DESIGN §6: every row of its table, from streams recorded on disk.

Each row's stream is made through the public API, with an in-process kill at an event
boundary where the row needs one (the seed experiment does the same with real SIGKILLs);
the state is then projected twice from disk: by this process, and by a separate one.
"""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from effect_child import Killed, kill_before, snapshot
from hypothesis import given
from hypothesis import strategies as st

import intentlog
from intentlog import NotSent, ProviderFailure, RetryPolicy
from intentlog.eventlog import Event
from intentlog.projections.workstate import WorkStateFold, work_state

try:  # the independent checker, when it exists
    from intentlog.projections.verify import verify_ledger
except ImportError:  # pragma: no cover - written by someone else
    verify_ledger = None  # type: ignore[assignment]


def no_sleep(_: float) -> None:
    return None


FAST = RetryPolicy(max_attempts=2, sleep=no_sleep)
REQ = {"model": "m", "prompt": "p"}


def ok(request: Any) -> bytes:
    return b'{"verdict": "accept"}'


def parse(raw: bytes) -> Any:
    return orjson.loads(raw)


def send_dies(request: Any) -> bytes:
    raise Killed("the process died while the provider held the request")


def interpret_dies(raw: bytes) -> Any:
    raise Killed("the process died after the observation")


def bad_interpret(raw: bytes) -> Any:
    raise ValueError("no verdict")


def _unknown(task: intentlog.Task) -> None:
    with pytest.raises(Killed):
        task.effect("k", REQ, send_dies)
    task.close()


# -- the rows ------------------------------------------------------------------------
# each builder records one call in its own task, leaving it in the row's stage


def row_completed(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    task.effect("k", REQ, ok, interpret=parse)


def row_preparation_failed(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    with pytest.raises(intentlog.PreparationFailed):
        task.effect("k", {"bad": float("inf")}, ok)


def row_requested(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "call.manifest")
    with pytest.raises(Killed):
        task.effect("k", REQ, ok)


def row_manifest_recorded(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    task.prepare("k", REQ)


def row_effect_unknown(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(task)


def row_observed(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    with pytest.raises(Killed):
        task.effect("k", REQ, ok, interpret=interpret_dies)


def row_interpreted(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "call.completed")
    with pytest.raises(Killed):
        task.effect("k", REQ, ok, interpret=parse)


def row_interpreted_with_error(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "attempt.retry_decided")
    with pytest.raises(Killed):
        task.effect("k", REQ, ok, interpret=bad_interpret)


def row_observed_failure(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "attempt.retry_decided")
    with pytest.raises(Killed):
        task.effect("k", REQ, _raises(ProviderFailure("503", retryable=True)), retry=FAST)


def row_retry_decided(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "attempt.started", attempt=2)
    with pytest.raises(Killed):
        task.effect("k", REQ, _raises(ProviderFailure("503", retryable=True)), retry=FAST)


def row_not_sent(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    kill_before(mp, "attempt.retry_decided")
    with pytest.raises(Killed):
        task.effect("k", REQ, _raises(NotSent("offline")), retry=FAST)


def row_reconciled_not_served(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(task)
    task.reconcile("call-1", "not_served", note="provider dashboard shows nothing")


def row_reconciled_served_with_bytes(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(task)
    task.reconcile("call-1", "served", evidence=b'{"verdict": "accept"}')


def row_reconciled_served_without_bytes(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(task)
    task.reconcile("call-1", "served")


def row_risk_accepted(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(task)
    task.reconcile("call-1", "resend", by="ops")


def row_retries_exhausted(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    with pytest.raises(intentlog.CallFailed):
        task.effect("k", REQ, _raises(ProviderFailure("503", retryable=True)), retry=FAST)


def row_failed_by_operator(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    _unknown(task)
    task.fail("call-1", "gave up: provider support cannot say", by="ops")


def row_superseded(task: intentlog.Task, mp: pytest.MonkeyPatch) -> None:
    task.prepare("k", REQ)
    task.close()
    task.effect("k", REQ, ok)


def _raises(exc: BaseException) -> Callable[[Any], bytes]:
    def send(request: Any) -> bytes:
        raise exc

    return send


# row -> (builder, stage, next operation, provider effect, duplicate risk)
ROWS: dict[str, tuple[Callable[[intentlog.Task, pytest.MonkeyPatch], None], str, str, str, bool]] = {
    "completed": (row_completed, "completed", "none", "happened", False),
    "preparation-failed": (row_preparation_failed, "preparation_failed", "fix inputs", "none", False),
    "no-manifest": (row_requested, "requested", "start call", "none", False),
    "manifest-no-attempt": (row_manifest_recorded, "manifest_recorded", "start call", "none", False),
    "started-nothing-after": (row_effect_unknown, "effect_unknown", "reconcile effect", "unknown", True),
    "observed-not-interpreted": (row_observed, "observed", "reinterpret", "happened", False),
    "interpreted-no-completion": (row_interpreted, "interpreted", "finalize", "happened", False),
    "interpretation-failed-no-decision": (row_interpreted_with_error, "interpreted", "redecide", "happened", False),
    "failure-observed-no-decision": (row_observed_failure, "observed", "redecide", "happened", False),
    "retry-decided": (row_retry_decided, "retry_decided", "start next attempt", "happened", False),
    "not-sent-no-decision": (row_not_sent, "not_sent", "start next attempt", "none", False),
    "reconciled-not-served": (row_reconciled_not_served, "reconciled_not_served", "start next attempt", "none", False),
    "reconciled-served-bytes": (row_reconciled_served_with_bytes, "observed", "reinterpret", "happened", False),
    "reconciled-served-no-bytes": (
        row_reconciled_served_without_bytes,
        "reconciled_served",
        "operator decides",
        "happened",
        False,
    ),
    "risk-accepted": (row_risk_accepted, "risk_accepted", "start next attempt", "unknown", True),
    "retries-exhausted": (row_retries_exhausted, "failed", "operator decides", "happened", False),
    "call-failed": (row_failed_by_operator, "failed", "operator decides", "unknown", False),
    "superseded": (row_superseded, "superseded", "none", "none", False),
}

INSPECT = """
import sys, orjson, intentlog
ledger = intentlog.open(sys.argv[1], create=False)
out = {t: ledger.task(t).work_state().to_json() for t in ledger.task_ids()}
sys.stdout.write(orjson.dumps(out).decode())
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Every row recorded in its own task of one ledger, and the states a separate process projects."""
    root = tmp_path_factory.mktemp("rows") / "ledger"
    with intentlog.open(root) as ledger:
        for name, (build, *_rest) in ROWS.items():
            with pytest.MonkeyPatch.context() as mp:
                build(ledger.task(name), mp)
            ledger.task(name).close()
    before = snapshot(root)
    p = subprocess.run([sys.executable, "-c", INSPECT, str(root)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert snapshot(root) == before  # projecting appended nothing
    if verify_ledger is not None:  # every row is a record the independent checker accepts
        assert verify_ledger(intentlog.open(root, create=False)).ok
    return root, orjson.loads(p.stdout)


@pytest.mark.parametrize("row", list(ROWS))
def test_each_row_of_the_table_is_projected_from_the_record(row: str, recorded: tuple[Path, dict[str, Any]]) -> None:
    """Each DESIGN §6 row: the stage, next operation, provider effect and duplicate risk its evidence proves."""
    root, other_process = recorded
    _build, stage, nxt, effect, risk = ROWS[row]
    ledger = intentlog.open(root, create=False)
    ws = work_state(ledger.task(row).events())
    call = ws.calls["call-1"]
    assert (call.stage, call.next_operation, call.provider_effect, call.duplicate_effect_risk) == (
        stage,
        nxt,
        effect,
        risk,
    )
    theirs = other_process[row]["calls"]["call-1"]
    assert (theirs["stage"], theirs["next_operation"], theirs["provider_effect"], theirs["duplicate_effect_risk"]) == (
        stage,
        nxt,
        effect,
        risk,
    )
    assert ws.anomalies == ()
    assert ws.to_json() == other_process[row]


def test_rows_carry_their_evidence(recorded: tuple[Path, dict[str, Any]]) -> None:
    """Reasons, links and recorded facts travel with the rows that need them."""
    root, _ = recorded
    ledger = intentlog.open(root, create=False)

    def call(task: str, cid: str = "call-1") -> intentlog.CallState:
        return ledger.task(task).work_state().calls[cid]

    assert call("superseded").superseded_by == "call-2"
    assert call("superseded", "call-2").resumes == "call-1"
    assert call("superseded", "call-2").stage == "completed"
    assert call("retries-exhausted").reason == "provider failure: 503"
    assert call("retries-exhausted").attempts == 2
    assert call("call-failed").reason == "gave up: provider support cannot say"
    assert call("interpretation-failed-no-decision").reason == "ValueError: no verdict"
    assert call("failure-observed-no-decision").reason == "503"
    assert "Infinity" in str(call("preparation-failed").reason) or "finite" in str(call("preparation-failed").reason)
    assert call("reconciled-served-no-bytes").reason is not None
    completed = call("completed")
    assert completed.result == {"value": {"verdict": "accept"}}
    assert completed.interpreter is not None and completed.interpreter["name"].endswith(".parse")
    assert completed.request_hash == intentlog.request_hash(REQ)
    assert completed.request is not None and completed.request["digest"] == completed.request_hash
    # the next operation of each task is its only call's
    for row, (_b, _s, nxt, _e, _r) in ROWS.items():
        ws = ledger.task(row).work_state()
        expected = "check and accept" if row in ("completed", "superseded") else nxt
        assert ws.next_operation == expected, row


# -- compilations and the task's next operation ---------------------------------------


def test_compilation_rows(ledger: intentlog.Ledger) -> None:
    """A compilation requested and never finished says recompile; a failed one says fix inputs, with the inventory."""
    task = ledger.task("t")
    offered = [{"id": "A", "required": True, "content": "x"}, {"id": "D", "size": 3, "lineage": ["src"]}]

    def dies(items: list[dict[str, Any]]) -> list[str]:
        raise Killed("died while selecting")

    with pytest.raises(Killed):
        task.compile("interrupted", offered, select=dies)
    with pytest.raises(intentlog.RequiredContextMissing):
        task.compile("failed", offered, required=["A", "C"])
    task.compile("done", offered)
    task.close()
    ws = work_state(intentlog.open(ledger.root).task("t").events())
    got = {k: (c.stage, c.next_operation) for k, c in ws.compilations.items()}
    assert got == {
        "interrupted": ("requested", "recompile"),
        "failed": ("failed", "fix inputs"),
        "done": ("compiled", "none"),
    }
    failed = ws.compilations["failed"]
    assert failed.missing == ("C",)
    assert failed.required == ("A", "C")
    assert [dict(o) for o in failed.offered] == [
        {"id": "A", "required": True, "size": 3, "estimated": True, "lineage": None},
        {"id": "D", "required": False, "size": 3, "estimated": False, "lineage": ["src"]},
    ]
    assert ws.unresolved == ("interrupted", "failed")
    assert ws.next_operation == "recompile"


def test_the_task_next_operation_is_the_first_unresolved_then_check_and_accept(ledger: intentlog.Ledger) -> None:
    """First unresolved call's next operation; else 'check and accept' after a success until accepted; else none."""
    task = ledger.task("t")
    assert task.work_state().next_operation == "none"
    task.prepare("a", {"q": "a"})
    with pytest.raises(Killed):
        task.effect("b", {"q": "b"}, send_dies)
    ws = task.work_state()
    assert ws.unresolved == ("call-1", "call-2")
    assert ws.next_operation == "start call"
    task.close()
    task.effect("a", {"q": "a"}, ok)  # resumes call-1 as call-3
    ws = task.work_state()
    assert ws.unresolved == ("call-2",) and ws.next_operation == "reconcile effect"
    task.reconcile("call-2", "served", evidence=b"{}")
    task.effect("b", {"q": "b"}, ok)
    ws = task.work_state()
    assert ws.unresolved == () and ws.next_operation == "check and accept" and not ws.accepted
    task.accept(note="checked")
    ws = task.work_state()
    assert ws.next_operation == "none" and ws.accepted
    task.effect("c", {"q": "c"}, ok)
    assert task.work_state().next_operation == "check and accept"


# -- purity ---------------------------------------------------------------------------

KINDS = [
    "task.created",
    "task.accepted",
    "call.requested",
    "call.manifest",
    "call.preparation_failed",
    "call.resumed",
    "call.completed",
    "call.failed",
    "attempt.started",
    "attempt.not_sent",
    "attempt.errored",
    "attempt.observed",
    "attempt.interpreted",
    "attempt.retry_decided",
    "effect.reconciled",
    "context.compilation_requested",
    "context.compiled",
    "context.compilation_failed",
    "stream.repaired",
    "note",
    "call.from_the_future",
]
_junk = st.one_of(st.none(), st.integers(-2, 3), st.text(max_size=3), st.lists(st.integers(), max_size=2))
DATA = st.fixed_dictionaries(
    {},
    optional={
        "call": st.one_of(st.sampled_from(["call-1", "call-2", "call-3"]), _junk),
        "new_call": st.one_of(st.sampled_from(["call-2", "call-3"]), _junk),
        "key": st.one_of(st.sampled_from(["k1", "k2"]), _junk),
        "attempt": st.one_of(st.integers(0, 3), _junk),
        "decision": st.one_of(st.sampled_from(["retry", "fail"]), _junk),
        "outcome": st.one_of(st.sampled_from(["served", "not_served", "resend"]), _junk),
        "evidence": st.one_of(st.just({"digest": "blake3:" + "0" * 64, "size": 1}), _junk),
        "error": st.one_of(st.just("boom"), _junk),
        "response": st.one_of(st.just({"digest": "blake3:" + "1" * 64, "size": 2}), _junk),
        "result": st.one_of(st.just({"value": 1}), st.just({"raw": True}), _junk),
        "compilation": st.one_of(st.sampled_from(["c1", "c2"]), _junk),
        "offered": st.one_of(st.lists(st.fixed_dictionaries({"id": st.sampled_from(["A", "B"])}), max_size=2), _junk),
        "required": st.one_of(st.lists(st.sampled_from(["A", "B", "C"]), max_size=3), _junk),
        "missing": st.one_of(st.lists(st.sampled_from(["C"]), max_size=1), _junk),
        "selected": _junk,
        "package": st.one_of(st.just({"digest": "blake3:" + "2" * 64, "size": 3}), _junk),
        "inputs": st.one_of(st.just({"ctx": "blake3:" + "3" * 64}), _junk),
        "request_hash": _junk,
        "resumes": _junk,
        "name": _junk,
    },
)
EVENT_PARTS = st.lists(st.tuples(st.sampled_from(KINDS), DATA), max_size=40)


def _events(parts: list[tuple[str, dict[str, Any]]]) -> list[Event]:
    return [
        Event(i, kind, f"2026-01-01T00:00:{i % 60:02d}.000000Z", None, data, "blake3:" + f"{i:064x}")
        for i, (kind, data) in enumerate(parts)
    ]


class _NoWrites:
    """Make every attempt to open a file for writing (or create one) fail loudly."""

    def __init__(self, mp: pytest.MonkeyPatch) -> None:
        real_open, real_os_open = builtins.open, os.open

        def guarded_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if any(c in mode for c in "wax+"):
                raise AssertionError(f"the projection opened {file!r} for writing")
            return real_open(file, mode, *args, **kwargs)

        def guarded_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC):
                raise AssertionError(f"the projection opened {path!r} for writing")
            return real_os_open(path, flags, *args, **kwargs)

        mp.setattr(builtins, "open", guarded_open)
        mp.setattr(os, "open", guarded_os_open)


@given(EVENT_PARTS)
def test_the_projection_is_a_pure_function_of_its_events(parts: list[tuple[str, dict[str, Any]]]) -> None:
    """Same events, same state: folding twice, lazily or eagerly, from a list or a generator; never a write."""
    events = _events(parts)
    with pytest.MonkeyPatch.context() as mp:
        _NoWrites(mp)
        first = work_state(events)
        second = work_state(iter(list(events)))
    assert first.to_json() == second.to_json()
    assert first == second
    live = WorkStateFold()  # the live fold a task handle keeps classifies eagerly: same answer
    for ev in events:
        live.apply(ev)
    assert live.result().to_json() == first.to_json()
    assert all(live.call_state(cid) == first.calls[cid] for cid in first.calls)
    assert first.events == len(events)
    known = set(KINDS) - {"note", "call.from_the_future"}
    assert sum(first.other_kinds.values()) == sum(1 for k, _ in parts if k not in known)


def test_projecting_a_recorded_task_touches_no_file(ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """Projecting a real task, from disk or from a list of its events, writes nothing: the folder is unchanged."""
    task = ledger.task("t")
    task.effect("k", REQ, ok, interpret=parse)
    with pytest.raises(Killed):
        task.effect("k2", REQ, send_dies)
    task.close()
    events = list(task.events())
    before = snapshot(ledger.root)
    _NoWrites(monkeypatch)
    from_list = work_state(events, task_id="t")
    from_disk = intentlog.open(ledger.root, create=False).task("t").work_state()
    monkeypatch.undo()
    assert from_list == from_disk
    assert snapshot(ledger.root) == before


def test_unknown_kinds_are_counted_not_skipped(ledger: intentlog.Ledger) -> None:
    """Events this projection does not interpret are counted by kind in other_kinds."""
    task = ledger.task("t")
    for kind in ("note", "note", "agent.step", "note"):
        task.append(kind, {"x": 1})
    task.effect("k", REQ, ok)
    ws = task.work_state()
    assert dict(ws.other_kinds) == {"note": 3, "agent.step": 1}
    assert ws.events == 1 + 4 + 5
    foreign = _events([("call.from_the_future", {"call": "call-1"}), ("call.completed", {"call": "nope"})])
    ws2 = work_state(foreign)
    assert dict(ws2.other_kinds) == {"call.from_the_future": 1}
    assert len(ws2.anomalies) == 1 and "nope" in ws2.anomalies[0]


def _synthetic(n_calls: int, notes: int) -> Iterator[Event]:
    """A long task made lazily: a few complete calls, then many events of other kinds."""
    seq = 0

    def ev(kind: str, data: dict[str, Any]) -> Event:
        nonlocal seq
        seq += 1
        return Event(seq - 1, kind, "2026-01-01T00:00:00.000000Z", None, data, "blake3:" + "0" * 64)

    yield ev("task.created", {"task": "t"})
    for i in range(n_calls):
        c = f"call-{i + 1}"
        yield ev("call.requested", {"call": c, "key": f"k{i}", "name": None})
        yield ev("call.manifest", {"call": c, "key": f"k{i}", "request_hash": "blake3:" + "1" * 64, "inputs": {}})
        yield ev("attempt.started", {"call": c, "attempt": 1})
        yield ev("attempt.observed", {"call": c, "attempt": 1, "response": {"digest": "d", "size": 1}})
        yield ev("call.completed", {"call": c, "attempt": 1, "result": {"value": i}})
    for i in range(notes):
        yield ev("note", {"i": i})


def _peak(events: Iterator[Event]) -> int:
    tracemalloc.start()
    try:
        fold = WorkStateFold("t")
        for e in events:
            fold.apply(e)
        fold.result()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_grows_with_calls_not_events() -> None:
    """Folding 20x more events of the same calls costs about the same memory: the fold keeps calls, not events."""
    small = _peak(_synthetic(50, 1_000))
    large = _peak(_synthetic(50, 20_000))
    assert large < small * 1.5 + 64_000
    more_calls = _peak(_synthetic(1_000, 1_000))
    assert more_calls > small * 2
