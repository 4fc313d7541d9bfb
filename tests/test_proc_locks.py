"""A lock held throughout is never read as not held, however busy the host's lock table.

Linux hands ``/proc/locks`` out a page per ``read`` and walks the list afresh each time:
a table longer than a page is no snapshot, and a lock held throughout was skipped when
locks listed before it were released between two reads. A backlog item then read its own
lease as lost (``LeaseLost: ... the lock's holder is None``) and was run again under a
second lease. Real locks, real churn: threads taking and releasing 160 other locks.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import intentlog
from intentlog._internal.procs import PROC_LOCKS, flock_writer

pytestmark = pytest.mark.skipif(not os.path.exists(PROC_LOCKS), reason="no /proc/locks on this system")


@pytest.fixture
def churn(tmp_path: Path) -> Iterator[None]:
    """Four threads taking and releasing 40 locks each, over and over, until the test ends."""
    stop = threading.Event()

    def run(k: int) -> None:
        fds = [os.open(tmp_path / f"c{k}-{i}.lock", os.O_RDWR | os.O_CREAT) for i in range(40)]
        try:
            while not stop.is_set():
                for fd in fds:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                for fd in fds:
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            for fd in fds:
                os.close(fd)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()


def _table_is_torn() -> bool:
    """Whether the table is longer than one read (a page) at some look: the case that skipped locks."""
    fd = os.open(PROC_LOCKS, os.O_RDONLY)
    try:
        return any(len(os.pread(fd, 1 << 16, 0)) < len(Path(PROC_LOCKS).read_bytes()) for _ in range(50))
    finally:
        os.close(fd)


def test_a_lock_this_process_holds_is_never_missed_in_a_busy_table(tmp_path: Path, churn: None) -> None:
    fd = os.open(tmp_path / "held.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        st = os.fstat(fd)
        assert _table_is_torn(), "the lock table fits one read: this host cannot show the skip"
        missed = sum(flock_writer(st, mine=True) != os.getpid() for _ in range(3000))
        assert missed == 0
    finally:
        os.close(fd)


def test_a_lock_nobody_holds_is_not_held_in_a_busy_table(tmp_path: Path, churn: None) -> None:
    path = tmp_path / "free.lock"
    path.touch()
    st = os.stat(path)
    assert flock_writer(st, mine=True) is None and flock_writer(st) is None


def test_an_item_task_reads_its_own_lease_as_held_in_a_busy_table(ledger_root: Path, churn: None) -> None:
    """The backlog's lease check (the kernel's word, once per lease) on a task whose writer this process holds."""
    from intentlog.backlog.worker import ItemGate

    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        task.append("app.note", {"n": 1})
        assert _table_is_torn()
        for _ in range(300):
            gate = ItemGate(task, None, 1, "i")  # type: ignore[arg-type]  # the check sends nothing
            gate.check_lease()  # LeaseLost when the table skipped the lock
