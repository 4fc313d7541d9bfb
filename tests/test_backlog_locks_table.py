"""A worker's lease check asks the kernel; a lock file replaced under the holder is lost, however it is read.

A lock missing from a busy ``/proc/locks`` is looked for again, and this process's own in
``/proc/self/fdinfo`` (tests/test_proc_locks.py): neither may turn a lock file that was
replaced -- which nobody holds -- into one this process holds.
"""

from __future__ import annotations

from multiprocessing import Pipe
from pathlib import Path

import pytest

import intentlog
import intentlog.backlog.worker as worker


def test_a_replaced_lock_file_is_lost_and_nothing_is_written(tmp_path: Path) -> None:
    t = intentlog.open(tmp_path / "l").task("job")
    t.append("note.first", {})  # the writer is open: this process holds the lock
    a, _b = Pipe()
    gate = worker.ItemGate(t, a, 1, "job")
    stream = tmp_path / "l" / "tasks" / "job.jsonl"
    before = stream.read_bytes()
    lock = tmp_path / "l" / "tasks" / "job.jsonl.lock"
    lock.unlink()
    lock.write_text("")  # another file under the lock's name: nobody holds it
    with pytest.raises(intentlog.errors.LeaseLost) as info:
        gate.check_lease()
    assert "the lock's holder is None" in str(info.value)
    assert stream.read_bytes() == before  # nothing written
