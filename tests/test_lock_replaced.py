"""A writer whose lock file was removed or replaced makes nothing durable, so it never sends.

An ``flock`` excludes only holders of the same file: once ``tasks/ID.jsonl.lock`` is
deleted (a cleanup of "stale" lock files, a restore), a second process creates a new
one and locks it while the first still believes it holds the task. The writer compares
the lock file at its path with the one it locked before every sync; the effect protocol
sends only after a sync, so the provider (its own receipt log is the ground truth) is
asked at most once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog.errors import IntentlogError

CHILD = """
import sys, intentlog
t = intentlog.open(sys.argv[1]).task("t")
t.append("note.second_writer", {})
t.close()
"""


def _provider(receipts: Path) -> Any:
    def send(req: Any) -> bytes:
        with open(receipts, "ab") as f:
            f.write(b"sent\n")
            f.flush()
            os.fsync(f.fileno())
        return b"ok"

    return send


def _second_writer(root: Path) -> None:
    subprocess.run([sys.executable, "-c", CHILD, str(root)], check=True, timeout=60)


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_writer_whose_lock_file_went_away_never_sends(tmp_path: Path, how: str) -> None:
    root, receipts = tmp_path / "l", tmp_path / "receipts"
    t = intentlog.open(root).task("t")
    t.append("note.first", {})  # the writer is open: the lock is held
    lock = root / "tasks" / "t.jsonl.lock"
    os.unlink(lock)
    if how == "replaced":
        lock.write_text("0\n")
    _second_writer(root)  # it locks a new lock file and appends: it now owns the task
    with pytest.raises(IntentlogError, match="lock file was removed or replaced"):
        t.effect("pay", {"amount": 1}, _provider(receipts))
    assert not receipts.exists()  # the provider was never asked
    with pytest.raises(IntentlogError):  # and nothing more is made durable through that writer
        t.append("note.after", {})
    events = [e.kind for e in intentlog.open(root).task("t").events()]
    assert "attempt.started" not in events[-1:]  # no durable attempt of the first writer after the second's


def test_the_item_guard_treats_a_missing_lock_file_as_a_lost_lease(tmp_path: Path) -> None:
    from multiprocessing import Pipe

    from intentlog.backlog.worker import LeaseLost, _Guard

    t = intentlog.open(tmp_path / "l").task("job")
    t.append("note.first", {})
    a, _b = Pipe()
    guard = _Guard(t, a, 1, "job")
    guard.check_lease()  # held: the kernel names this process
    os.unlink(tmp_path / "l" / "tasks" / "job.jsonl.lock")
    with pytest.raises(LeaseLost):
        guard.check_lease()
