"""The awaitable protocol: many calls in flight in one task, shared syncs, honest cancellation, a free event loop.

Every test asserts on the record on disk and on the provider's own fsync'd receipt log.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import intentlog
import intentlog.eventlog.writer as writer
from intentlog.errors import EffectUnknown, UsageError

sys.path.insert(0, str(Path(__file__).parent))
from async_provider import AsyncProvider

HERE = Path(__file__).parent
N = 50


def kinds(task: intentlog.Task, key: str | None = None) -> list[str]:
    """The kinds recorded (for ``key``'s calls only, when given), read back from the file."""
    calls: set[str] = set()
    out: list[str] = []
    for ev in intentlog.open(task.stream.root).task(task.id).events():
        if key is not None:
            if ev.kind == "call.requested" and ev.data.get("key") == key:
                calls.add(ev.data["call"])
            if ev.data.get("call") not in calls:
                continue
        out.append(ev.kind)
    return out


def stage(task: intentlog.Task, key: str) -> str:
    ws = task.work_state()
    return ws.calls[ws.keys[key]].stage


def started_end(path: Path, key: str) -> int | None:
    """The byte offset just past the ``attempt.started`` line of ``key``'s call, or None."""
    offset, call = 0, None
    for line in path.read_bytes().splitlines(keepends=True):
        offset += len(line)
        ev = json.loads(line)
        data = ev.get("data") or {}
        if ev.get("kind") == "call.requested" and data.get("key") == key:
            call = data.get("call")
        elif ev.get("kind") == "attempt.started" and call is not None and data.get("call") == call:
            return offset
    return None


class Syncs:
    """Counts the stream's fdatasyncs (optionally slowed, optionally held at the n-th) and their durations."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, slow: float = 0.0) -> None:
        self.real = writer._fdatasync
        self.slow = slow
        self.durations: list[float] = []
        self.sizes: list[int] = []
        self.hold_at: int | None = None
        self.reached = threading.Event()
        self.release = threading.Event()
        monkeypatch.setattr(writer, "_fdatasync", self)

    def __call__(self, fd: int) -> None:
        if self.hold_at is not None and len(self.sizes) + 1 == self.hold_at:
            self.reached.set()
            self.release.wait(10)
        t = time.perf_counter()
        self.real(fd)
        if self.slow:
            time.sleep(self.slow)
        self.durations.append(time.perf_counter() - t)
        self.sizes.append(os.fstat(fd).st_size)

    @property
    def count(self) -> int:
        return len(self.sizes)


# -- many calls in flight, shared syncs ----------------------------------------------


def test_gather_of_50_aeffects_completes_each_once_with_fewer_syncs_than_effects(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = ledger.task("fanout")
    task.append("note.opened")  # the stream exists and its writer is open: count the effects' syncs alone
    syncs = Syncs(monkeypatch)
    provider = AsyncProvider(tmp_path / "receipts.jsonl", latency=0.02)
    durable_at_send: list[bool] = []
    send_inner = provider.send

    async def send(request: Any) -> bytes:
        # when the request leaves, its attempt.started line is inside what a sync made durable
        end = started_end(task.stream.path, request["key"])
        durable_at_send.append(bool(syncs.sizes) and end is not None and end <= syncs.sizes[-1])
        return await send_inner(request)

    async def main() -> list[Any]:
        return await asyncio.gather(
            *(task.aeffect(f"k{i}", {"key": f"k{i}"}, send, interpret=json.loads) for i in range(N))
        )

    results = asyncio.run(main())
    assert results == [{"echo": f"k{i}"} for i in range(N)]
    assert provider.counts() == {f"k{i}": 1 for i in range(N)}
    task.close()
    for i in range(N):
        assert kinds(task, f"k{i}") == [
            "call.requested",
            "call.manifest",
            "attempt.started",
            "attempt.observed",
            "attempt.interpreted",
            "call.completed",
        ]
    assert durable_at_send == [True] * N  # each attempt.started durable before its send
    # calls started together: their attempt.started lines made durable by one sync (a few at most, when the
    # disk thread ran dry while the loop was still starting the others)
    ends = [started_end(task.stream.path, f"k{i}") or 0 for i in range(N)]
    covering = {min(size for size in syncs.sizes if size >= end) for end in ends}
    assert len(covering) <= 3, f"{len(covering)} syncs made the {N} attempt.started lines durable"
    # the synchronous form pays three syncs an effect; gathered, they are shared
    assert syncs.count < N, f"{syncs.count} syncs for {N} gathered effects"

    # a re-run replays every one from the record: no receipt, no sync
    before = syncs.count
    again = asyncio.run(main())
    assert again == results
    assert provider.counts() == {f"k{i}": 1 for i in range(N)}
    assert syncs.count == before


def test_one_key_in_flight_twice_is_refused_and_the_refused_one_writes_nothing(
    ledger: intentlog.Ledger, tmp_path: Path
) -> None:
    task = ledger.task("twice")
    provider = AsyncProvider(tmp_path / "receipts.jsonl", latency=0.05)

    async def main() -> list[Any]:
        return await asyncio.gather(
            task.aeffect("same", {"key": "same"}, provider.send),
            task.aeffect("same", {"key": "same"}, provider.send),
            return_exceptions=True,
        )

    outcomes = asyncio.run(main())
    refused = [o for o in outcomes if isinstance(o, UsageError)]
    assert len(refused) == 1 and "already running" in str(refused[0])
    assert provider.counts() == {"same": 1}
    task.close()
    assert kinds(task, "same").count("attempt.started") == 1
    assert kinds(task, "same").count("call.requested") == 1


def test_the_synchronous_form_refuses_an_async_send_before_writing(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    task = ledger.task("wrong-form")
    task.append("note.opened")
    size = task.stream.path.stat().st_size
    provider = AsyncProvider(tmp_path / "receipts.jsonl")
    with pytest.raises(UsageError, match="aeffect"):
        task.effect("k", {"key": "k"}, provider.send)
    assert task.stream.path.stat().st_size == size
    assert provider.counts() == {}


# -- crash: SIGKILL in the middle of a gather ---------------------------------------


def test_sigkill_in_the_middle_then_a_rerun_never_pays_twice(ledger_root: Path, tmp_path: Path) -> None:
    receipts = tmp_path / "receipts.jsonl"
    intentlog.open(ledger_root)  # the ledger exists before the child opens it
    child = subprocess.Popen(
        [sys.executable, str(HERE / "async_effect_child.py"), str(ledger_root), str(receipts)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    provider = AsyncProvider(receipts)
    deadline = time.monotonic() + 30
    while sum(provider.counts().values()) < 20:  # well into the gather, far from its end
        assert time.monotonic() < deadline and child.poll() is None, "the child ended before the kill"
        time.sleep(0.002)
    child.send_signal(signal.SIGKILL)
    child.wait()

    task = intentlog.open(ledger_root).task("fanout")
    stages = {f"k{i}": stage(task, f"k{i}") for i in range(N)}
    paid = provider.counts()
    done = {k for k, s in stages.items() if s == "completed"}
    unknown = {k for k, s in stages.items() if s == "effect_unknown"}
    intent_only = {k for k, s in stages.items() if s in ("requested", "manifest_recorded")}
    answered = {k for k, s in stages.items() if s in ("observed", "interpreted")}  # killed before completion
    assert done and unknown and intent_only, stages  # the kill landed in the middle
    assert done | unknown | intent_only | answered == set(stages)
    assert set(paid) <= done | unknown | answered  # nothing was sent without a durable attempt.started
    assert all(paid[k] == 1 for k in done | answered)

    async def rerun(key: str) -> Any:
        return await task.aeffect(key, {"key": key}, provider.send, interpret=json.loads)

    async def main() -> list[Any]:
        return await asyncio.gather(*(rerun(f"k{i}") for i in range(N)), return_exceptions=True)

    outcomes = dict(zip([f"k{i}" for i in range(N)], asyncio.run(main()), strict=True))
    after = provider.counts()
    for k in done:
        assert outcomes[k] == {"echo": k} and after[k] == 1  # replayed: no new receipt
    for k in unknown:
        assert isinstance(outcomes[k], EffectUnknown), outcomes[k]  # refused, never resent
        assert after[k] == paid[k]
    for k in intent_only:
        assert outcomes[k] == {"echo": k} and after[k] == 1  # resumed: sent once
    for k in answered:
        assert outcomes[k] == {"echo": k} and after[k] == 1  # finished from the stored response: not resent
    assert max(after.values()) == 1  # never a key with two receipts


# -- cancellation at every await point ----------------------------------------------

POINTS = ["preparing", "started_sync", "sending", "observed_sync", "interpreting", "completed_sync"]


@pytest.mark.parametrize("point", POINTS)
def test_cancellation_at_every_await_point_leaves_an_honest_record(
    point: str, ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = ledger.task("cancelled")
    task.append("note.opened")
    syncs = Syncs(monkeypatch)
    provider = AsyncProvider(tmp_path / "receipts.jsonl")
    building = threading.Event()
    go_on = threading.Event()

    def request() -> dict[str, str]:  # user code building the request: runs while the intent is prepared
        if point == "preparing":
            building.set()
            go_on.wait(10)
        return {"key": "k"}

    async def send(req: Any) -> bytes:
        answer = await provider.send(req)  # the receipt is written: the effect happened
        if point == "sending":
            reached.set()
            await asyncio.sleep(10)
        return answer

    async def interpret(raw: bytes) -> Any:
        if point == "interpreting":
            reached.set()
            await asyncio.sleep(10)
        return json.loads(raw)

    syncs.hold_at = {"started_sync": 1, "observed_sync": 2, "completed_sync": 3}.get(point)

    async def main() -> None:
        nonlocal reached
        reached = asyncio.Event()
        loop = asyncio.get_running_loop()
        run = asyncio.ensure_future(task.aeffect("k", request, send, interpret=interpret))
        if point == "preparing":
            await loop.run_in_executor(None, building.wait, 10)
        elif syncs.hold_at is not None:
            await loop.run_in_executor(None, syncs.reached.wait, 10)
        else:
            await asyncio.wait_for(reached.wait(), 10)
        run.cancel()
        go_on.set()
        syncs.release.set()
        with pytest.raises(asyncio.CancelledError):
            await run

    reached: asyncio.Event
    asyncio.run(main())
    syncs.hold_at = None
    task.close()
    recorded = kinds(task, "k")
    receipts = provider.counts()["k"]
    expected = {
        "preparing": (["call.requested", "call.manifest"], 0),  # the intent only: never sent
        "started_sync": (["call.requested", "call.manifest", "attempt.started"], 0),
        "sending": (["call.requested", "call.manifest", "attempt.started"], 1),
        "observed_sync": (["call.requested", "call.manifest", "attempt.started", "attempt.observed"], 1),
        "interpreting": (["call.requested", "call.manifest", "attempt.started", "attempt.observed"], 1),
        "completed_sync": (
            ["call.requested", "call.manifest", "attempt.started", "attempt.observed", "attempt.interpreted",
             "call.completed"],
            1,
        ),
    }[point]
    assert (recorded, receipts) == expected
    assert "attempt.not_sent" not in recorded

    # the re-run: the key is free again; resumes, refuses or replays as the record says
    async def rerun() -> Any:
        return await task.aeffect("k", {"key": "k"}, provider.send, interpret=json.loads)

    if point in ("started_sync", "sending"):
        with pytest.raises(EffectUnknown):
            asyncio.run(rerun())
        assert provider.counts()["k"] == receipts  # an unknown effect is never resent blind
    else:
        assert asyncio.run(rerun()) == {"echo": "k"}
        assert provider.counts()["k"] == 1  # sent once in all


# -- the event loop never waits on the disk ------------------------------------------


def test_the_loop_stays_responsive_while_50_effects_sync(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = ledger.task("ticker")
    task.append("note.opened")
    syncs = Syncs(monkeypatch, slow=0.1)  # a slow disk: each sync takes 100 ms
    provider = AsyncProvider(tmp_path / "receipts.jsonl", latency=0.005)

    async def ticker(delays: list[float], stop: asyncio.Event) -> None:
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            delays.append(time.perf_counter() - t - 0.001)

    async def measured(work: Any) -> float:
        delays: list[float] = []
        stop = asyncio.Event()
        tick = asyncio.ensure_future(ticker(delays, stop))
        await asyncio.sleep(0.01)
        await work()
        stop.set()
        await tick
        return max(delays)

    async def gathered() -> None:
        await asyncio.gather(*(task.aeffect(f"a{i}", {"key": f"a{i}"}, provider.send) for i in range(N)))

    async def blocking() -> None:  # the control: the synchronous form called on the loop waits on every sync
        for i in range(3):
            task.effect(f"s{i}", {"key": f"s{i}"}, lambda r: b"{}")

    worst = asyncio.run(measured(gathered))
    median = statistics.median(syncs.durations)
    total = sum(syncs.durations)
    assert provider.counts() == {f"a{i}": 1 for i in range(N)}
    assert worst < 10 * median, (worst, median)
    assert worst < median, f"the loop waited {worst * 1000:.1f} ms, a sync takes {median * 1000:.1f} ms"
    assert worst < total
    control = asyncio.run(measured(blocking))
    assert control >= median * 0.9  # the measurement sees a loop blocked by a sync


# -- long effects, sessions, approvals -------------------------------------------------


def test_heartbeats_and_max_duration_awaited(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    task = ledger.task("long")
    provider = AsyncProvider(tmp_path / "receipts.jsonl")

    async def slow(req: Any) -> bytes:
        await provider.send(req)
        for _ in range(3):
            intentlog.heartbeat({"phase": "working"})
            await asyncio.sleep(0.05)
        await asyncio.sleep(10)
        return b"late"

    with pytest.raises(EffectUnknown, match="timed out"):
        asyncio.run(task.aeffect("slow", {"key": "slow"}, slow, max_duration=0.4, progress_interval=0))
    task.close()
    recorded = kinds(task, "slow")
    assert recorded[:3] == ["call.requested", "call.manifest", "attempt.started"]
    assert recorded.count("attempt.progress") == 3
    assert recorded[-1] == "attempt.timed_out"
    assert provider.counts()["slow"] == 1


def test_aturn_asks_then_replays_and_accepts(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    session = ledger.session("chat")
    provider = AsyncProvider(tmp_path / "receipts.jsonl")
    request = {"key": "turn-1", "messages": [{"role": "user", "content": "hi"}]}

    first = asyncio.run(session.aturn(request, provider.send))
    assert first.completed and not first.replayed and first.accepted
    again = asyncio.run(ledger.session("chat").aturn(request, provider.send))
    assert again.replayed and again.response == first.response
    assert provider.counts() == {"turn-1": 1}
    task = ledger.task("chat")
    task.close()
    assert kinds(task).count("task.checkpoint") == 1


def test_await_for_approval_keeps_the_loop_free_and_returns_the_decision(
    ledger: intentlog.Ledger, ledger_root: Path
) -> None:
    from intentlog.approvals import await_for_approval

    task = ledger.task("gated")
    task.request_approval("ship", "ship it?")
    ticks = [0]

    async def ticking(stop: asyncio.Event) -> None:
        while not stop.is_set():
            ticks[0] += 1
            await asyncio.sleep(0.01)

    async def main() -> Any:
        stop = asyncio.Event()
        tick = asyncio.ensure_future(ticking(stop))
        decider = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "intentlog.cli", "--root", str(ledger_root), "approve", "gated", "ship",
            stdout=asyncio.subprocess.DEVNULL,
        )
        st = await await_for_approval(task, "ship", timeout=20, poll=0.05)
        await decider.wait()
        stop.set()
        await tick
        return st

    st = asyncio.run(main())
    assert st.status == "approved"
    assert ticks[0] > 3  # the loop ran while the decision was awaited
    assert ledger.task("gated").approval("ship").status == "approved"


# -- the documented examples run ---------------------------------------------------------


def _block(doc: str, marker: str) -> str:
    import re

    blocks = re.findall(r"```python\n(.*?)```", (HERE.parent / "docs" / doc).read_text(), re.S)
    return next(b for b in blocks if marker in b)


@pytest.mark.parametrize(
    ("doc", "marker", "task_id", "calls", "out"),
    [
        ("effects.md", "task.aeffect", "fan-out", 10, "10 short version of 0"),
        ("sessions.md", "session.aturn", "chat-async", 1, None),
    ],
)
def test_the_async_examples_run_twice_and_the_second_run_sends_nothing(
    tmp_path: Path, doc: str, marker: str, task_id: str, calls: int, out: str | None
) -> None:
    script = tmp_path / "example.py"
    script.write_text(_block(doc, marker))
    outputs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, check=True)
        outputs.append(p.stdout.strip())
    if out is not None:
        assert outputs == [out, out]
    else:
        assert outputs[0].replace("sent", "replayed") == outputs[1] and "sent" in outputs[0]
    ws = intentlog.open(tmp_path / "evidence", create=False).task(task_id).work_state()
    assert len(ws.calls) == calls
    assert all(c.attempts == 1 and c.stage == "completed" for c in ws.calls.values())


# -- bad input and a busy task ---------------------------------------------------------


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("args", "options", "match"),
    [
        (("", {"key": "x"}), {}, "key"),
        (("k", {"key": "k"}), {"retry": 3}, "RetryPolicy"),
        (("k", {"key": "k"}), {"max_duration": -1}, "max_duration"),
        (("k", {"key": "k"}), {"interpret": "json"}, "callables"),
        (("k", {"key": "k"}), {"lookup": "x"}, "lookup must be a callable"),
    ],
)
def test_aeffect_refuses_bad_arguments_before_anything_is_written(
    ledger: intentlog.Ledger, ledger_root: Path, tmp_path: Path, args: tuple[Any, ...], options: dict[str, Any],
    match: str,
) -> None:
    task = ledger.task("bad-input")
    task.append("note.opened")
    task.close()
    before = _snapshot(ledger_root)
    provider = AsyncProvider(tmp_path / "receipts.jsonl")
    with pytest.raises((UsageError, TypeError, ValueError), match=match):
        asyncio.run(task.aeffect(*args, provider.send, **options))
    assert _snapshot(ledger_root) == before
    assert provider.counts() == {}


HOLDER = (
    "import sys, intentlog, time\n"
    "t = intentlog.open(sys.argv[1]).task('busy'); t.append('note.held'); print('held', flush=True); time.sleep(30)"
)


def test_aeffect_on_a_task_another_process_writes_is_refused_unsent(
    ledger_root: Path, tmp_path: Path, run_child: Any
) -> None:
    intentlog.open(ledger_root).task("busy").append("note.opened")
    intentlog.open(ledger_root).task("busy").close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(ledger_root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        provider = AsyncProvider(tmp_path / "receipts.jsonl")
        task = intentlog.open(ledger_root).task("busy")
        with pytest.raises(intentlog.TaskBusy):
            asyncio.run(task.aeffect("k", {"key": "k"}, provider.send))
        assert provider.counts() == {}
    finally:
        holder.kill()
        holder.wait()
    assert "call.requested" not in kinds(intentlog.open(ledger_root).task("busy"))


def test_session_turn_refuses_an_async_send_before_storing_its_messages(
    ledger: intentlog.Ledger, ledger_root: Path, tmp_path: Path
) -> None:
    session = ledger.session("chat-wrong-form")
    ledger.task("chat-wrong-form").append("note.opened")
    ledger.task("chat-wrong-form").close()
    before = _snapshot(ledger_root)
    provider = AsyncProvider(tmp_path / "receipts.jsonl")
    big = {"key": "turn-1", "messages": [{"role": "user", "content": "x" * 10_000}]}  # a message blob's worth
    with pytest.raises(UsageError, match="aturn"):
        session.turn(big, provider.send)
    assert _snapshot(ledger_root) == before


# -- the other instructions, awaited: retries, pauses, lookups --------------------------


def test_awaited_retries_pause_on_the_loop_and_record_each_attempt(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    task = ledger.task("retries")
    provider = AsyncProvider(tmp_path / "receipts.jsonl")
    tries = [0]

    async def flaky(req: Any) -> bytes:
        tries[0] += 1
        if tries[0] == 1:
            raise intentlog.NotSent("connection refused before the request left")
        if tries[0] == 2:
            await provider.send(req)
            raise intentlog.ProviderFailure("overloaded", retryable=True)
        return await provider.send(req)

    ticks = [0]

    async def main() -> Any:
        async def tick() -> None:
            while True:
                ticks[0] += 1
                await asyncio.sleep(0.005)

        ticker = asyncio.ensure_future(tick())
        try:
            return await task.aeffect(
                "k", {"key": "k"}, flaky, interpret=json.loads, retry=intentlog.RetryPolicy(backoff=0.1, factor=1)
            )
        finally:
            ticker.cancel()

    assert asyncio.run(main()) == {"echo": "k"}
    assert ticks[0] >= 20  # two 0.1 s pauses, awaited: the loop ran meanwhile
    task.close()
    recorded = kinds(task, "k")
    assert recorded.count("attempt.started") == 3
    assert recorded.count("attempt.not_sent") == 1
    assert recorded.count("attempt.retry_decided") == 2
    assert recorded[-1] == "call.completed"
    assert provider.counts() == {"k": 2}  # the failure was served too; the not-sent one never left


def test_an_async_lookup_resolves_an_unknown_effect_without_a_resend(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    task = ledger.task("lookup")
    provider = AsyncProvider(tmp_path / "receipts.jsonl")

    async def lost(req: Any) -> bytes:
        await provider.send(req)
        raise ConnectionResetError("the answer was lost")

    with pytest.raises(EffectUnknown):
        asyncio.run(task.aeffect("k", {"key": "k"}, lost))

    async def lookup(key: str, call_id: str, attempt: int) -> Any:
        await asyncio.sleep(0)
        return intentlog.Served(json.dumps({"echo": key}).encode())

    answer = asyncio.run(task.aeffect("k", {"key": "k"}, provider.send, interpret=json.loads, lookup=lookup))
    assert answer == {"echo": "k"}
    assert provider.counts() == {"k": 1}
    task.close()
    recorded = kinds(task, "k")
    assert "effect.reconciled" in recorded and recorded[-1] == "call.completed"
