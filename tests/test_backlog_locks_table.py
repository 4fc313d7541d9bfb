"""A worker's lease check reads /proc/locks, which the kernel prints in pieces: a torn read is read again."""

from __future__ import annotations

import os
from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import pytest

import intentlog
import intentlog.backlog.worker as worker
from intentlog._internal.procs import flock_writer


def _gate(tmp_path: Path) -> tuple[intentlog.Task, worker.ItemGate]:
    t = intentlog.open(tmp_path / "l").task("job")
    t.append("note.first", {})  # the writer is open: this process holds the lock
    a, _b = Pipe()
    return t, worker.ItemGate(t, a, 1, "job")


def test_a_lock_the_table_skipped_once_is_read_again_and_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t, gate = _gate(tmp_path)
    reads: list[int | None] = []

    def torn(st: os.stat_result, table: str) -> int | None:
        got = None if not reads else flock_writer(st, table)  # the first read skipped the entry
        reads.append(got)
        return got

    monkeypatch.setattr(worker, "flock_writer", torn)
    gate.check_lease()  # no LeaseLost: the second read lists this process
    assert reads == [None, os.getpid()]
    t.append("note.second", {})  # the writer goes on
    t.close()
    assert [e.kind for e in intentlog.open(tmp_path / "l").task("job").events()][-1] == "note.second"


def test_a_replaced_lock_file_is_still_lost_after_the_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t, gate = _gate(tmp_path)
    stream = tmp_path / "l" / "tasks" / "job.jsonl"
    before = stream.read_bytes()
    reads: list[Any] = []

    def counted(st: os.stat_result, table: str) -> int | None:
        got = flock_writer(st, table)
        reads.append(got)
        return got

    monkeypatch.setattr(worker, "flock_writer", counted)
    lock = tmp_path / "l" / "tasks" / "job.jsonl.lock"
    os.unlink(lock)
    lock.write_text("")  # another file under the lock's name: nobody holds it
    with pytest.raises(intentlog.errors.LeaseLost) as info:
        gate.check_lease()
    assert "the lock's holder is None" in str(info.value)
    assert reads == [None] * worker.LOCKS_READS
    assert stream.read_bytes() == before  # nothing written
    t.close()
