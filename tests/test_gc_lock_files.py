"""gc deletes an expired task's lock file with its stream, and a writer waiting on it still excludes others.

The lock file is unlinked after the stream, while gc holds it. A writer that opened the
file before that and waits on its ``flock`` gets the lock on a file no longer at the path;
it must then lock the file at the path instead, so that a third process can never lock a
fresh file of the same name beside it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from test_retention import _age_stream

import intentlog
from intentlog import TaskBusy
from intentlog.eventlog import lock as lock_module
from intentlog.eventlog.lock import WriterLock
from intentlog.retention import apply_gc
from intentlog.retention import folder as folder_gc


def _lock(root: Path, task: str) -> Path:
    return root / "tasks" / f"{task}.jsonl.lock"


def test_gc_deletes_the_lock_file_of_each_task_it_deletes(ledger: intentlog.Ledger) -> None:
    """The expired task's stream and lock file go; the kept task's stay; the deleted task can be written again."""
    ledger.task("old").append("note", {})
    ledger.task("new").append("note", {})
    ledger.close()
    _age_stream(ledger.stream_path("old"), 60)
    assert _lock(ledger.root, "old").exists()
    result = apply_gc(ledger)
    assert list(result.deleted) == ["old"]
    assert sorted(p.name for p in (ledger.root / "tasks").iterdir()) == ["new.jsonl", "new.jsonl.lock"]
    ledger.task("old").append("note", {"again": True})
    ledger.close()
    assert [e.kind for e in ledger.task("old").events()] == ["task.created", "note"]


def test_a_writer_waiting_on_the_deleted_lock_file_locks_the_one_at_the_path(
    ledger: intentlog.Ledger, monkeypatch: Any
) -> None:
    """A writer opens the expired task's lock file while gc holds it and waits; gc deletes stream and lock
    file. The writer ends up holding the lock file at the path, its pid in it, and a third one is refused."""
    ledger.task("old").append("note", {})
    ledger.task("new").append("note", {})
    ledger.close()
    _age_stream(ledger.stream_path("old"), 60)
    lock_path = _lock(ledger.root, "old")
    opened = threading.Event()
    writer_opens: list[int] = []
    real_open = lock_module.open_nofollow

    def open_and_say(*args: Any, **kwargs: Any) -> int:
        fd = real_open(*args, **kwargs)
        if threading.current_thread().name == "writer":
            writer_opens.append(fd)
            opened.set()
        return fd

    writer_lock = WriterLock(lock_path, "old")
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            writer_lock.acquire(60.0)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    thread = threading.Thread(target=writer, name="writer")
    real_unlink = folder_gc.fsops.unlink

    def unlink_once_the_writer_waits(name: Any, *args: Any, **kwargs: Any) -> None:
        if name == "old.jsonl" and not thread.is_alive() and not opened.is_set():
            thread.start()  # gc holds the lock: the writer opens the file and waits on its flock
            assert opened.wait(30), "the writer never opened the lock file"
        real_unlink(name, *args, **kwargs)

    monkeypatch.setattr(lock_module, "open_nofollow", open_and_say)
    monkeypatch.setattr(folder_gc.fsops, "unlink", unlink_once_the_writer_waits)
    result = apply_gc(ledger)
    thread.join(60)
    assert not thread.is_alive() and failures == []
    assert list(result.deleted) == ["old"] and not ledger.stream_path("old").exists()
    assert len(writer_opens) == 2, "the writer locked the deleted file, then the one gc's deletion left the path to"
    assert writer_lock.held and writer_lock.is_current()
    assert lock_path.read_bytes().strip().isdigit()
    with pytest.raises(TaskBusy):
        WriterLock(lock_path, "old").acquire(0)
    writer_lock.release()
