"""A hard link is not a symbolic link: the writer must not append to or truncate an outside inode.

Before the fix a stream that was a hard link to a file outside the ledger passed every
link check (``lstat`` sees a regular file): a torn tail was "repaired" by truncating the
outside file and JSON lines were appended to it. Now a stream the writer would write
(append, truncate) must have exactly one name; otherwise ``LedgerError`` names it and
nothing is written. Readers (``verify``, ``export``) still read it, because reading a
second name of a file writes nothing.

And the writer scans, quarantines and truncates through the one descriptor it appends
with, so a file swapped in between the check and the open is never the one written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import intentlog
from intentlog.eventlog import writer as writer_mod


def _stream(root: Path) -> tuple[intentlog.Ledger, Path]:
    led = intentlog.open(root)
    t = led.task("t")
    t.append("note", {"n": 1})
    t.close()
    return led, t.path


@pytest.mark.parametrize("tail", [b"", b'{"seq": 2, "kind": "no'])
def test_a_hard_linked_stream_is_refused_for_writing_and_the_outside_file_untouched(
    tmp_path: Path, tail: bytes
) -> None:
    led, path = _stream(tmp_path / "l")
    outside = tmp_path / "victim.txt"
    outside.write_bytes(path.read_bytes() + tail)
    path.unlink()
    os.link(outside, path)
    before = outside.read_bytes()

    with pytest.raises(intentlog.LedgerError) as err:
        led.task("t").append("note", {"n": 2})
    led.task("t").close()
    assert str(path) in str(err.value) and "hard link" in str(err.value)
    with pytest.raises(intentlog.LedgerError):
        led.repair("t", accept_damage=True)
    with pytest.raises(intentlog.LedgerError, match="hard link"):
        led.repair("t", accept_damage=True, dry_run=True)  # the dry run says what the repair would
    assert outside.read_bytes() == before, "the outside inode was written"
    assert os.stat(outside).st_nlink == 2
    assert not any((tmp_path / "l" / "quarantine").iterdir())
    led.close()


def test_a_stream_swapped_between_the_scan_and_the_open_is_not_the_one_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer checks one file and would append to another if it opened the path twice."""
    led, path = _stream(tmp_path / "l")
    outside = tmp_path / "victim.txt"
    outside.write_bytes(b"precious\n")
    real_assess = writer_mod.assess_facts  # the writer's full check of the file it opened
    swapped: list[bool] = []

    def assess_then_swap(*args: object, **kwargs: object) -> object:
        out = real_assess(*args, **kwargs)  # type: ignore[arg-type]
        if not swapped:
            swapped.append(True)
            os.rename(path, tmp_path / "moved.jsonl")
            os.link(outside, path)  # after the checks, before any open by path
        return out

    monkeypatch.setattr(writer_mod, "assess_facts", assess_then_swap)
    try:
        led.task("t").append("note", {"n": 2})
    except intentlog.IntentlogError:
        pass
    led.task("t").close()
    assert swapped
    assert outside.read_bytes() == b"precious\n", "an append went to a file swapped in after the checks"
    led.close()


def test_a_hard_linked_lock_file_is_refused_and_the_outside_file_untouched(tmp_path: Path) -> None:
    """Taking the lock rewrites the lock file (pid, then truncate): through a hard link that cut an outside file."""
    led, path = _stream(tmp_path / "l")
    lock = path.with_name(path.name + ".lock")
    outside = tmp_path / "notes.txt"
    outside.write_bytes(b"a long file that must keep every byte\n" * 10)
    lock.unlink()
    os.link(outside, lock)
    before = path.read_bytes()
    with pytest.raises(intentlog.LedgerError) as err:
        led.task("t").append("note", {"n": 2})
    led.task("t").close()
    assert str(lock) in str(err.value) and "hard link" in str(err.value)
    assert outside.read_bytes() == b"a long file that must keep every byte\n" * 10
    assert path.read_bytes() == before
    led.close()


def test_readers_still_read_a_hard_linked_stream(tmp_path: Path) -> None:
    """Reading a second name writes nothing: verify and the task's reads work."""
    led, path = _stream(tmp_path / "l")
    os.link(path, tmp_path / "backup.jsonl")
    assert [e.kind for e in led.task("t").events()] == ["task.created", "note"]
    from intentlog.projections.verify import verify_path

    assert verify_path(tmp_path / "l").ok
    led.close()


@pytest.mark.parametrize("task", ["t", "new"])
def test_tasks_folder_swapped_for_a_link_after_the_check_is_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str
) -> None:
    """The writer checks tasks/, then opens the lock and stream inside that very folder (a descriptor)."""
    led, path = _stream(tmp_path / "l")
    tasks = path.parent
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("t.jsonl", "t.jsonl.lock"):
        (outside / name).write_bytes((tasks / name).read_bytes())
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    real_check = writer_mod.StreamWriter._check_folders

    def check_then_swap(self: writer_mod.StreamWriter) -> None:
        real_check(self)
        if not os.path.islink(tasks):
            os.rename(tasks, tmp_path / "l" / "tasks.real")
            os.symlink(outside, tasks)

    monkeypatch.setattr(writer_mod.StreamWriter, "_check_folders", check_then_swap)
    try:
        led.task(task).append("note", {"n": 2})
    except intentlog.IntentlogError:
        pass
    led.task(task).close()
    assert os.path.islink(tasks), "the test swapped nothing"
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before, "written through a swapped tasks/ link"
    led.close()
