"""A worker's first lease check asks the kernel about the writer's own lock descriptor (``/proc/self/fdinfo``).

Exact and one small read, where ``/proc/locks`` lists every lock on the host and is
walked in pieces (tests/test_proc_locks.py). The answer is the same fact: this process
holds the ``flock`` on the file at the lock's path through the writer's descriptor.
"""

from __future__ import annotations

import fcntl
import os
from multiprocessing import Pipe
from pathlib import Path

import pytest

import intentlog
import intentlog.backlog.worker as worker
from intentlog._internal.procs import holds_flock

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fdinfo"), reason="no /proc/self/fdinfo here")


def test_holds_flock_is_true_only_for_the_file_locked_through_that_descriptor(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("")
    b.write_text("")
    fd = os.open(a, os.O_RDWR)
    other = os.open(a, os.O_RDWR)
    try:
        assert holds_flock(fd, os.stat(a)) is False  # not locked yet
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert holds_flock(fd, os.stat(a)) is True
        assert holds_flock(fd, os.stat(b)) is False  # another file under the name: not what fd locked
        assert holds_flock(other, os.stat(a)) is False  # the same file, but not locked through this descriptor
        fcntl.flock(fd, fcntl.LOCK_SH)
        assert holds_flock(fd, os.stat(a)) is False  # shared is not the writer's exclusive lock
    finally:
        os.close(fd)
        os.close(other)


def test_a_parents_lock_is_not_held_by_its_forked_child(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("")
    fd = os.open(f, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the descriptor is inherited, the lock was taken by the parent
        os.write(w, repr(holds_flock(fd, os.stat(f))).encode())
        os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 16) == b"False"
        assert holds_flock(fd, os.stat(f)) is True
    finally:
        os.waitpid(pid, 0)
        os.close(r)
        os.close(fd)


def test_the_lease_check_answers_from_the_writers_descriptor_not_the_host_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = intentlog.open(tmp_path / "l").task("job")
    t.append("note.first", {})  # the writer is open: this process holds the lock
    lock = tmp_path / "l" / "tasks" / "job.jsonl.lock"
    # a host table that names someone else: the writer's own descriptor is asked, not this table
    key = f"{os.major(os.stat(lock).st_dev):02x}:{os.minor(os.stat(lock).st_dev):02x}:{os.stat(lock).st_ino}"
    table = tmp_path / "locks"
    table.write_text(f"1: FLOCK  ADVISORY  WRITE 1 {key} 0 EOF\n")
    monkeypatch.setattr(worker, "PROC_LOCKS", str(table))
    a, _b = Pipe()
    worker.ItemGate(t, a, 1, "job").check_lease()  # held
    stream = tmp_path / "l" / "tasks" / "job.jsonl"
    before = stream.read_bytes()
    lock.unlink()
    lock.write_text("")  # another file under the lock's name: the descriptor does not hold it
    with pytest.raises(intentlog.errors.LeaseLost):
        worker.ItemGate(t, a, 1, "job").check_lease()
    assert stream.read_bytes() == before  # nothing written
    t.close()
