"""Recorded values: task.value / task.avalue / @task.step run a function once and return the record after.

The ground truth of "ran once" is a marker file outside the ledger; a crash between the
function and its record is a real SIGKILL of a child process.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import s3_server

import intentlog
from intentlog.errors import NotSerializable, UsageError
from intentlog.projections.idioms import VALUE_RECORDED


def _kinds(task: intentlog.Task) -> list[str]:
    return [ev.kind for ev in task.events()]


def _snapshot(root: Path) -> dict[str, bytes]:
    files = (p for p in sorted(root.rglob("*")) if p.is_file() and "lock" not in p.name)
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def test_a_value_runs_once_and_every_later_ask_returns_the_record(ledger_root: Path) -> None:
    """fn runs on the first ask only: the same process and a reopened ledger get the recorded value."""
    calls: list[int] = []

    def roll() -> float:
        calls.append(1)
        return random.random()

    with intentlog.open(ledger_root) as ledger:
        first = ledger.task("t").value("roll", roll)
        assert ledger.task("t").value("roll", roll) == first
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        assert task.value("roll", lambda: pytest.fail("a recorded value must not run again")) == first
        assert _kinds(task).count(VALUE_RECORDED) == 1
    assert calls == [1]


def test_the_first_run_returns_what_every_re_run_reads(ledger_root: Path) -> None:
    """A tuple comes back as the list the record holds, on the first run too: runs never differ."""
    with intentlog.open(ledger_root) as ledger:
        got = ledger.task("t").value("pair", lambda: (1, {"b": (2.5, None)}))
    assert got == [1, {"b": [2.5, None]}]
    with intentlog.open(ledger_root) as ledger:
        assert ledger.task("t").value("pair", lambda: None) == got


def test_a_result_that_is_not_json_is_refused_and_nothing_is_recorded(ledger_root: Path) -> None:
    """A set, NaN, bytes: NotSerializable naming the value and where; the folder's bytes are unchanged."""
    with intentlog.open(ledger_root) as ledger:
        ledger.task("t").value("ok", lambda: 1)
    before = _snapshot(ledger_root)
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        for bad in ({1, 2}, float("nan"), b"bytes", {"x": object()}):
            with pytest.raises(NotSerializable, match=r"value 'bad'.*nothing was recorded"):
                task.value("bad", lambda bad=bad: bad)  # type: ignore[misc]
        with pytest.raises(UsageError, match="invalid value name"):
            task.value("../x", lambda: 1)
        with pytest.raises(UsageError, match="async"):
            task.value("a", _async_one)
    assert _snapshot(ledger_root) == before


async def _async_one() -> int:
    return 1


def test_avalue_awaits_once_and_returns_the_record_after(ledger_root: Path) -> None:
    """The async form awaits fn once; a second ask returns the record without awaiting."""
    awaited: list[int] = []

    async def fetch() -> dict[str, Any]:
        awaited.append(1)
        return {"n": len(awaited)}

    async def main() -> tuple[Any, Any]:
        with intentlog.open(ledger_root) as ledger:
            task = ledger.task("t")
            return await task.avalue("fetch", fetch), await task.avalue("fetch", fetch)

    assert asyncio.run(main()) == ({"n": 1}, {"n": 1})
    assert awaited == [1]


def test_a_step_is_recorded_under_its_name_and_its_arguments(ledger_root: Path) -> None:
    """Same arguments: the recorded result (in this run and the next); other arguments: a run of their own."""
    ran: list[tuple[int, str]] = []

    def make(ledger: intentlog.Ledger) -> Any:
        task = ledger.task("t")

        @task.step
        def summarise(n: int, *, how: str = "short") -> str:
            ran.append((n, how))
            return f"{how}-{n}-{random.random()}"

        return task, summarise

    with intentlog.open(ledger_root) as ledger:
        task, summarise = make(ledger)
        a, b, c = summarise(1), summarise(1), summarise(1, how="long")
        assert a == b != c
        with pytest.raises(NotSerializable, match=r"arguments are not exact JSON.*nothing was run"):
            summarise({1})
    with intentlog.open(ledger_root) as ledger:
        task, summarise = make(ledger)
        assert (summarise(1), summarise(1, how="long")) == (a, c)
        names = [ev.data["name"] for ev in task.events() if ev.kind == VALUE_RECORDED]
    assert ran == [(1, "short"), (1, "long")]
    assert len(names) == 2 and all(n.startswith("step:") and ".summarise:" in n for n in names)


def test_an_async_step_and_a_named_step(ledger_root: Path) -> None:
    """@task.step(name=...) records under the given name; an async function gives an async step."""
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")

        @task.step(name="double")
        async def double(x: int) -> int:
            return 2 * x

        assert asyncio.run(double(21)) == 42
        names = [ev.data["name"] for ev in task.events() if ev.kind == VALUE_RECORDED]
    assert len(names) == 1 and names[0].startswith("step:double:")


SCRIPT = textwrap.dedent(
    """
    import random, sys
    import intentlog
    root, receipts = sys.argv[1], sys.argv[2]

    def send(request):
        with open(receipts, "a") as f:
            f.write(repr(request) + "\\n")
        return b"ok"

    with intentlog.open(root) as ledger:
        task = ledger.task("t")
        seed = task.value("seed", random.random) if sys.argv[3] == "value" else random.random()
        task.effect("use", {"seed": seed}, send)
    """
)


def test_a_value_feeding_the_next_request_re_runs_without_drift(ledger_root: Path, tmp_path: Path) -> None:
    """Run twice in two processes: the recorded random seed rebuilds the same request, nothing sent twice.

    The same script with a bare random.random() is refused on its re-run (the control).
    """
    receipts = tmp_path / "receipts"
    for _ in range(2):
        subprocess.run([sys.executable, "-c", SCRIPT, ledger_root, receipts, "value"], check=True, timeout=60)
    assert len(receipts.read_text().splitlines()) == 1
    other = tmp_path / "other"
    subprocess.run([sys.executable, "-c", SCRIPT, other, tmp_path / "r2", "bare"], check=True, timeout=60)
    second = subprocess.run(
        [sys.executable, "-c", SCRIPT, other, tmp_path / "r2", "bare"], capture_output=True, text=True, timeout=60
    )
    assert second.returncode != 0 and "DRIFT" in second.stderr


KILLED = textwrap.dedent(
    """
    import sys
    import intentlog
    root, marker, mode = sys.argv[1], sys.argv[2], sys.argv[3]

    def compute():
        with open(marker, "a") as f:
            f.write("ran\\n")
            f.flush()
            import os
            os.fsync(f.fileno())
        if mode == "hang":
            print("ran", flush=True)
            sys.stdin.read()  # never answered: the parent kills this process here
        return {"answer": 42, "mode": mode}

    with intentlog.open(root) as ledger:
        print(ledger.task("t").value("answer", compute), flush=True)
    """
)


def test_a_kill_between_the_function_and_its_record_runs_it_again_and_records_once(
    ledger_root: Path, tmp_path: Path
) -> None:
    """SIGKILL after fn ran, before the record: the re-run runs fn again (no unknown state), one record."""
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, ledger_root, marker, "hang"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ran\n"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert marker.read_text() == "ran\n"
    with intentlog.open(ledger_root) as ledger:
        assert VALUE_RECORDED not in _kinds(ledger.task("t"))
    go = [sys.executable, "-c", KILLED, ledger_root, marker, "go"]
    again = subprocess.run(go, capture_output=True, text=True, timeout=60, check=True)
    assert "'mode': 'go'" in again.stdout
    third = subprocess.run(go, capture_output=True, text=True, timeout=60, check=True)
    assert third.stdout == again.stdout
    assert marker.read_text() == "ran\nran\n"
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        assert _kinds(task).count(VALUE_RECORDED) == 1
    from intentlog.checker import verify_path

    report = verify_path(ledger_root)
    assert report.ok, report.render()


def test_values_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an s3:// ledger (a real SeaweedFS) a value is recorded once and read back by a reopened ledger."""
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        first = ledger.task("t").value("roll", random.random)
    with intentlog.open(url, create=False) as ledger:
        task = ledger.task("t")
        assert task.value("roll", lambda: pytest.fail("recorded: never run again")) == first
        assert _kinds(task).count(VALUE_RECORDED) == 1
