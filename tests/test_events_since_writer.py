"""``events(since=N)`` while this process writes the stream reads only what follows its writer's nearest mark.

A follower of its own stream (the LangGraph saver after a tool's effects, a step reading
what it just recorded) used to read and check the whole stream at every call. Whatever the
writer's read answers must be exactly what a whole read gives (hypothesis, every
interleaving of appends, batches, closes and re-opens, on a folder and on the in-process
store; once on the real SeaweedFS); bytes it did not write itself -- another process's
edit, cut or append -- are judged by the whole read, exactly as before.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import s3_server
from hypothesis import given, settings
from hypothesis import strategies as st

import intentlog
from intentlog.errors import CorruptStream, IntentlogError
from intentlog.eventlog.writer import MARK_EVERY, MAX_SPAN
from intentlog.ledger import Ledger
from intentlog.s3 import on_client

Opener = Callable[[], intentlog.Ledger]

OPS = st.lists(st.sampled_from(["append", "batch", "grow", "close", "reopen_handle", "big"]), max_size=12)


def _whole(task: intentlog.Task, since: int) -> list[Any]:
    """The stream read whole through the ledger's storage, as a reader with no writer reads it."""
    return [(e.seq, e.digest) for e in task.stream.storage.task_events(task.id, since)]


def _check(task: intentlog.Task, n: int) -> None:
    for since in sorted({1, 2, n // 2, n - MARK_EVERY - 1, n - MARK_EVERY, n - 3, n - 1, n, n + 1, n + 5}):
        if since < 1:
            continue
        got = [(e.seq, e.digest) for e in task.events(since=since)]
        assert got == _whole(task, since), f"events(since={since}) of a stream of {n} events"


def _play(open_ledger: Opener, ops: list[str]) -> None:
    ledger = open_ledger()
    task = ledger.task("t")
    task.append("note", {"n": -1})
    count = 2  # task.created and the first note
    for op in ops:
        if op == "append":
            task.append("note", {"n": count})
            count += 1
        elif op == "batch":
            with task.batch():
                for _ in range(3):
                    task.append("note", {"n": count})
                    count += 1
                    _check(task, count)  # appended, not yet synced: a whole read sees it, and so must this
        elif op == "grow":  # past a few marks
            with task.batch():
                for _ in range(2 * MARK_EVERY + 5):
                    task.append("note", {"n": count})
                    count += 1
        elif op == "big":
            task.append("note", {"n": count, "blob": "x" * 5000})
            count += 1
        elif op == "close":
            task.close()
        elif op == "reopen_handle":
            task.close()
            ledger.close()
            ledger = open_ledger()
            task = ledger.task("t")
            task.stream.open_writer()
        _check(task, count)
    ledger.close()


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_a_writers_read_from_since_is_the_whole_reads_on_a_folder(
    ops: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("since")
    _play(lambda: intentlog.open(root), ops)


@settings(max_examples=25, deadline=None)
@given(ops=OPS)
def test_a_writers_read_from_since_is_the_whole_reads_on_an_object_store(ops: list[str]) -> None:
    client, where = s3_server.MemoryClient(), f"mem://since-{secrets.token_hex(4)}"
    _play(lambda: Ledger(Path("mem"), storage=on_client(client, write=False), location=where), ops)


def test_a_writers_read_from_since_on_seaweedfs(monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3_server.ledger_url(monkeypatch)
    _play(lambda: intentlog.open(url), ["append", "grow", "batch", "close", "reopen_handle", "big", "grow"])


def _grown(ledger: intentlog.Ledger, n: int) -> intentlog.Task:
    task = ledger.task("t")
    with task.batch():
        for i in range(n):
            task.append("note", {"n": i, "pad": "y" * 200})
    return task


def test_a_writer_reads_only_what_follows_its_mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the writer open the whole read is never made, and at most MARK_EVERY events before ``since`` are
    parsed; with the writer closed, the whole read is made again."""
    import intentlog.eventlog.writer as writer_mod

    with intentlog.open(tmp_path) as ledger:
        task = _grown(ledger, 3000)
        whole = _whole(task, 2990)
        parsed: list[int] = []
        real = writer_mod.events_in

        def counting(data: bytes, where: str, since: int = 0, **kw: Any) -> Any:
            parsed.append(data.count(b"\n"))
            return real(data, where, since, **kw)

        monkeypatch.setattr(writer_mod, "events_in", counting)
        monkeypatch.setattr(task.stream.storage, "task_events", lambda *a: pytest.fail("the whole stream was read"))
        assert [(e.seq, e.digest) for e in task.events(since=2990)] == whole
        assert parsed and parsed[-1] <= MARK_EVERY + 11, parsed  # 11 events from 2990, at most MARK_EVERY before
        monkeypatch.undo()
        task.close()
        calls: list[int] = []
        real_whole = task.stream.storage.task_events
        monkeypatch.setattr(
            task.stream.storage, "task_events", lambda tid, since: calls.append(since) or real_whole(tid, since)
        )
        assert [(e.seq, e.digest) for e in task.events(since=2990)] == whole
        assert calls == [2990], "with no writer open the stream is read whole"


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("events", [(e.seq, e.digest) for e in fn()])
    except CorruptStream as exc:
        return ("corrupt", exc.line)
    except IntentlogError as exc:
        return (type(exc).__name__,)


HOWS = [
    "flip_tail_byte", "append_line", "append_torn", "cut_last_line", "flip_prefix_mark", "append_chained",
    "replace_by_rename", "remove", "tasks_link",
]  # fmt: skip


@pytest.mark.parametrize("how", HOWS)
def test_bytes_the_writer_did_not_write_are_judged_by_the_whole_read(tmp_path: Path, how: str) -> None:
    """Another process edits, appends to or cuts the stream behind the open writer's back: ``events(since)``
    answers exactly what the whole read answers (the same events, or the same CorruptStream line)."""
    with intentlog.open(tmp_path) as ledger:
        task = _grown(ledger, 200)
        path = task.stream.path
        data = bytearray(path.read_bytes())
        last = data.rstrip(b"\n").rfind(b"\n") + 1  # the last line's start
        if how == "flip_tail_byte":
            i = data.index(b'"pad"', last)
            data[i + 9] = ord("z")
            path.write_bytes(bytes(data))
        elif how == "append_line":
            with open(path, "ab") as f:
                f.write(b'{"kind":"note","seq":201}\n')
        elif how == "append_torn":
            with open(path, "ab") as f:
                f.write(b'{"kind":"no')
        elif how == "cut_last_line":
            with open(path, "r+b") as f:
                f.truncate(last + 10)
        elif how == "append_chained":  # a whole event another process chained onto the writer's head
            head = _whole(task, 200)[-1][1]
            line = b'{"data":{},"kind":"note","prev":"%s","seq":201,"ts":"2026-12-04T00:00:00Z"}\n' % head.encode()
            with open(path, "ab") as f:
                f.write(line)
        elif how == "replace_by_rename":  # an older copy put back over the stream (a restore)
            old = bytes(data[: data.index(b"\n", data.index(b'"seq":150')) + 1])
            (path.parent / "copy").write_bytes(old)
            (path.parent / "copy").rename(path)
        elif how == "remove":
            path.unlink()
        elif how == "tasks_link":  # tasks/ swapped for a link to a copy of it
            tasks = path.parent
            copy = tasks.with_name("tasks-copy")
            tasks.rename(copy)
            tasks.symlink_to(copy, target_is_directory=True)
        else:  # the line at a mark the writer reads from, and the events after it, all untouched but the mark's own
            lines = bytes(data).split(b"\n")
            k = 192  # a mark (a multiple of MARK_EVERY) after the open: the batch appended it
            assert k % MARK_EVERY == 0
            lines[k] = lines[k].replace(b'"pad":"y', b'"pad":"q', 1)
            path.write_bytes(b"\n".join(lines))
        # an edit in place before the point read from is the documented exception (found by the next open,
        # any other reader, verify): past the writer's end nothing is read, so it is left out there
        for since in (150, 192, 195, 200) if how == "flip_prefix_mark" else (150, 192, 195, 200, 201, 202):
            assert _outcome(lambda s=since: task.events(since=s)) == _outcome(  # type: ignore[misc]
                lambda s=since: task.stream.storage.task_events(task.id, s)
            ), (how, since)


def test_a_span_longer_than_max_span_is_read_whole_in_constant_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More than MAX_SPAN bytes after the nearest mark: the whole read (a stream, constant memory), not a list."""
    with intentlog.open(tmp_path) as ledger:
        task = ledger.task("t")
        task.append("note", {"n": 0})
        task.close()
        task.stream.open_writer()  # the open's mark: where the stream ends now
        with task.batch():
            for i in range(MARK_EVERY - 1):  # no mark of its own before the span is past MAX_SPAN
                task.append("note", {"n": i, "pad": "z" * (MAX_SPAN // (MARK_EVERY - 2))})
        calls: list[int] = []
        real = task.stream.storage.task_events
        monkeypatch.setattr(task.stream.storage, "task_events", lambda tid, s: calls.append(s) or real(tid, s))
        got = [e.seq for e in task.events(since=3)]
        assert got == list(range(3, task.stream.next_seq)) and calls == [3]


def test_a_long_open_writer_keeps_only_the_marks_it_can_read_from(tmp_path: Path) -> None:
    """20,000 events appended in one open: the marks kept stay bounded, and reads near the end and far behind it
    still answer exactly what the whole read does."""
    from intentlog.eventlog.writer import _MARKS_KEPT

    with intentlog.open(tmp_path) as ledger:
        task = ledger.task("t")
        with task.batch():
            for i in range(20_000):
                task.append("note", {"n": i})
        writer = task.stream._writer
        assert writer is not None and len(writer._marks) <= _MARKS_KEPT + 1
        n = task.stream.next_seq
        for since in (n - 5, n - 3 * MARK_EVERY, 10, n // 2):
            assert [(e.seq, e.digest) for e in task.events(since=since)] == _whole(task, since), since
