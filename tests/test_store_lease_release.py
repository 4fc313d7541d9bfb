"""A store lease behaves like a folder's lock for a user: a process that ends gives it up.

A script that opens a task on an ``s3://`` root and ends without closing it (normally, or
by Ctrl-C) must not block its own next run: the lease is released as the process ends, as
a folder's flock dies with its process. The record says so: the stream's tail on the store
is a ``release`` segment of the run's own epoch, and the next run appends after it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import s3_server
from conftest import child_code

import intentlog
from intentlog.eventlog.format import parse_line
from intentlog.s3 import ObjectStreams


#: the children import the very intentlog this test does, whatever the working folder
def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(intentlog.__file__).parent.parent)}


ChildRunner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_child() -> ChildRunner:
    def run(code: str, *argv: Any, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-c", child_code(code), *map(str, argv)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env(),
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run


SCRIPT = """
import sys, intentlog
ledger = intentlog.open(sys.argv[1])
t = ledger.task("t")
t.append("note", {"run": sys.argv[2]})
"""

INTERRUPTED = """
import os, signal, sys, threading, intentlog
ledger = intentlog.open(sys.argv[1])
t = ledger.task("t")
t.append("note", {"run": sys.argv[2]})
signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's Python, whatever the test runner ignores
signal.raise_signal(signal.SIGINT)  # Ctrl-C, to this very thread (os.kill may hand it to a library thread)
threading.Event().wait(60)  # KeyboardInterrupt unwinds the script here at the latest
raise SystemExit("the interrupt was not delivered")
"""

BUFFERED = """
import sys, intentlog
ledger = intentlog.open(sys.argv[1])
t = ledger.task("t")
with t.batch():
    t.append("note", {"run": sys.argv[2]})
    t.append("note", {"run": sys.argv[2], "second": True})
t.stream.open_writer().append("note", {"run": sys.argv[2], "unsynced": True}, sync=False)
"""


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


def notes(url: str) -> list[dict[str, object]]:
    data = ObjectStreams(s3_server.client_of(url)).read("t")
    out: list[dict[str, object]] = []
    prev = None
    for seq, line in enumerate(data.splitlines(keepends=True)):
        ev = parse_line(line, seq, prev)
        prev = ev.digest
        if ev.kind == "note":
            out.append(dict(ev.data))
    return out


def tail_kind(url: str) -> tuple[str, int]:
    tail = ObjectStreams(s3_server.client_of(url)).tail("t")
    return tail.kind, tail.epoch


def test_a_script_that_ends_without_closing_its_task_does_not_block_its_next_run(
    url: str, run_child: ChildRunner
) -> None:
    run_child(SCRIPT, url, "1")
    assert tail_kind(url) == ("release", 1)  # released by the ending process, not left held
    run_child(SCRIPT, url, "2")  # was: TaskBusy, though no process was alive
    assert notes(url) == [{"run": "1"}, {"run": "2"}]
    assert tail_kind(url) == ("release", 2)  # the second run leased after the release: no take-over


def test_ctrl_c_releases_the_lease(url: str, run_child: ChildRunner) -> None:
    proc = run_child(INTERRUPTED, url, "1", check=False)
    assert proc.returncode == -signal.SIGINT or "KeyboardInterrupt" in proc.stderr, proc.stderr
    assert "not delivered" not in proc.stderr
    assert tail_kind(url) == ("release", 1)
    run_child(SCRIPT, url, "2")
    assert notes(url) == [{"run": "1"}, {"run": "2"}]


def test_records_appended_unsynced_are_stored_by_the_release_at_exit(url: str, run_child: ChildRunner) -> None:
    run_child(BUFFERED, url, "1")
    assert notes(url) == [{"run": "1"}, {"run": "1", "second": True}, {"run": "1", "unsynced": True}]
    assert tail_kind(url) == ("release", 1)


def test_a_forked_child_that_exits_does_not_release_its_parents_lease(
    url: str, run_child: ChildRunner, tmp_path: Path
) -> None:
    code = """
import os, sys, intentlog
from intentlog.s3 import ObjectStreams
ledger = intentlog.open(sys.argv[1])
t = ledger.task("t")
t.append("note", {"run": "parent"})
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit of the child: its atexit hooks run
os.waitpid(pid, 0)
tail = ObjectStreams(ledger.storage.client).tail("t")
print(tail.held, tail.epoch)
"""
    proc = run_child(code, url)
    assert proc.stdout.split() == ["True", "1"]  # still the parent's, after the child ended
    assert tail_kind(url) == ("release", 1)  # then released by the parent's own end
