"""A writer whose stream file was removed or replaced under it appends nothing more, so it never sends.

The writer appends through the descriptor it opened. Once ``tasks/ID.jsonl`` is renamed
over (a restore, a ``git checkout`` of an evidence folder, an editor's save) or removed,
that descriptor names a file no reader will ever open: every later append would be made
"durable" where nobody finds it, and an effect would send with its intent recorded
nowhere. The writer compares the file at its path with its own before each group's first
write and before each sync, as it does its lock file; the provider's own receipt log is
the ground truth, and the file at the path keeps exactly the bytes it was given.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_lock_replaced import _provider  # the provider's own receipt log: the ground truth of what was sent

import intentlog
from intentlog.errors import IntentlogError


@pytest.mark.parametrize("how", ["replaced", "removed"])
def test_a_writer_whose_stream_file_went_away_never_sends_and_leaves_the_new_file_alone(
    tmp_path: Path, how: str
) -> None:
    root, receipts = tmp_path / "l", tmp_path / "receipts"
    t = intentlog.open(root).task("t")
    t.append("note.first", {})
    t.append("note.second", {})  # the writer is open: its lock held, its descriptor on tasks/t.jsonl
    path = root / "tasks" / "t.jsonl"
    if how == "replaced":  # a restore of the stream as it was (a copy renamed over it)
        shutil.copyfile(path, tmp_path / "copy")
        os.replace(tmp_path / "copy", path)
        before: bytes | None = path.read_bytes()
    else:
        os.unlink(path)
        before = None
    with pytest.raises(IntentlogError, match="stream file was removed or replaced"):
        t.effect("pay", {"amount": 1}, _provider(receipts))
    assert not receipts.exists()  # the provider was never asked
    with pytest.raises(IntentlogError, match="removed or replaced"):  # nor is anything more written
        t.append("note.after", {})
    t.close()
    assert (path.read_bytes() if path.exists() else None) == before  # the file at the path: its bytes unchanged
    if before is not None:  # and the next writer opens it as it is and goes on from it
        again = intentlog.open(root).task("t")
        assert [e.kind for e in again.events()][-2:] == ["note.first", "note.second"]
        again.append("note.third", {})
        again.close()


def test_a_batch_whose_stream_file_is_replaced_before_its_sync_makes_nothing_durable_there(tmp_path: Path) -> None:
    root = tmp_path / "l"
    t = intentlog.open(root).task("t")
    t.append("note.first", {})
    path = root / "tasks" / "t.jsonl"
    with pytest.raises(IntentlogError, match="stream file was removed or replaced"), t.batch():
        t.append("note.in_batch", {})  # written to the descriptor, not yet synced
        shutil.copyfile(path, tmp_path / "copy")
        os.replace(tmp_path / "copy", path)  # replaced before the batch's sync
    t.close()
    kinds = [e.kind for e in intentlog.open(root).task("t").events()]
    assert kinds[-1] == "note.in_batch"  # the copy holds what was written before it was made, nothing after


def test_a_stream_file_replaced_while_the_intent_syncs_is_never_sent(tmp_path: Path, monkeypatch: Any) -> None:
    """The replace lands inside the intent's ``fdatasync``: the check after the sync refuses the send."""
    import intentlog.eventlog.writer as writer

    root, receipts = tmp_path / "l", tmp_path / "receipts"
    t = intentlog.open(root).task("t")
    t.append("note.first", {})
    path = root / "tasks" / "t.jsonl"
    shutil.copyfile(path, tmp_path / "backup")  # a backup taken earlier: what a restore puts back
    before = path.read_bytes()
    real = writer._fdatasync

    def replaced_while_syncing(fd: int) -> None:
        if (tmp_path / "backup").exists():
            os.replace(tmp_path / "backup", path)
        real(fd)

    monkeypatch.setattr(writer, "_fdatasync", replaced_while_syncing)
    with pytest.raises(IntentlogError, match="removed or replaced"):
        t.effect("pay", {"amount": 1}, _provider(receipts))
    assert not receipts.exists()
    t.close()
    assert path.read_bytes() == before
    again = intentlog.open(root).task("t")
    again.effect("pay", {"amount": 1}, _provider(receipts))  # what the message says to do: sent once in all
    again.close()
    assert receipts.read_bytes().count(b"sent") == 1


def test_a_tasks_folder_moved_aside_and_restored_stops_the_writer(tmp_path: Path) -> None:
    root, receipts = tmp_path / "l", tmp_path / "receipts"
    t = intentlog.open(root).task("t")
    t.append("note.first", {})
    shutil.copytree(root / "tasks", tmp_path / "backup")
    os.rename(root / "tasks", root / "tasks.old")  # a restore of the whole folder of streams
    shutil.copytree(tmp_path / "backup", root / "tasks")
    before = (root / "tasks" / "t.jsonl").read_bytes()
    with pytest.raises(IntentlogError, match="removed or replaced"):
        t.effect("pay", {"amount": 1}, _provider(receipts))
    assert not receipts.exists()
    t.close()
    assert (root / "tasks" / "t.jsonl").read_bytes() == before
