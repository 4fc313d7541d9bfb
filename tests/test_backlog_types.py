"""The backlog's types are the library's: one LeaseLost, one /proc/locks parser, typed messages, a gate."""

from __future__ import annotations

import os
from multiprocessing import Pipe
from pathlib import Path

import pytest
from s3_server import MemoryClient

import intentlog
import intentlog.backlog
import intentlog.errors
from intentlog.s3 import ObjectStreams


def test_the_backlogs_lease_lost_catches_a_fenced_store_lease() -> None:
    s = ObjectStreams(MemoryClient())
    s.create("t")
    old = s.lease("t")
    old.append([b"a"], expected_seq=0)
    s.lease("t", take_over_after=0)  # another writer takes the lease: the old holder is fenced
    caught: list[BaseException] = []
    try:
        old.append([b"late"], expected_seq=1)
    except intentlog.backlog.LeaseLost as exc:
        caught.append(exc)
    assert len(caught) == 1 and isinstance(caught[0], intentlog.errors.LeaseLost)
    assert s.read("t") == b"a\n"  # the fenced append wrote nothing


def test_a_lost_folder_lock_is_the_same_lease_lost(tmp_path: Path) -> None:
    from intentlog.backlog.worker import _Guard

    t = intentlog.open(tmp_path / "l").task("job")
    t.append("note.first", {})
    a, _b = Pipe()
    guard = _Guard(t, a, 7, "job")
    os.unlink(tmp_path / "l" / "tasks" / "job.jsonl.lock")
    with pytest.raises(intentlog.errors.LeaseLost) as info:
        guard.check_lease()
    assert info.value.task_id == "job" and info.value.epoch == 7
    assert info.value.where.endswith("job.jsonl.lock") and "item 'job'" in str(info.value)
    t.close()
