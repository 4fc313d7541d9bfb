"""A writer opened with ``keep_events`` answers its stream's events from memory, and only when they are the stream.

:meth:`TaskStream.held_events` is what a backlog worker looks at instead of reading an
item's stream again (its lease and its result). Whatever it answers must be exactly what
a read of the stream gives; where it cannot vouch (no writer, a writer that did not keep,
a resumed open that replayed only what was added) it answers None. Checked on a folder
(hypothesis, every interleaving of appends, batches, closes and re-opens) and on the
object store (the in-process store, and the real SeaweedFS).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import pytest
import s3_server
from hypothesis import given, settings
from hypothesis import strategies as st

import intentlog
from intentlog.ledger import Ledger
from intentlog.s3 import on_client
from intentlog.stream import RESUME_FROM

Opener = Callable[[], intentlog.Ledger]

OPS = st.lists(
    st.sampled_from(["append", "batch", "grow", "close", "open_keep", "open_plain", "reopen_handle"]), max_size=14
)


def _check(task: intentlog.Task, *, expect_held: bool = False) -> None:
    held = task.stream.held_events()
    if expect_held:
        assert held is not None, "a writer just opened with keep_events holds the whole stream"
    if held is not None:
        assert held == list(task.events()), "what the writer holds is exactly what a read gives"


def _play(open_ledger: Opener, ops: list[str]) -> None:
    ledgers = [open_ledger()]
    task = ledgers[0].task("t")
    task.append("note", {"n": -1})  # the stream exists, its writer open without keeping
    assert task.stream.held_events() is None, "a writer opened without keep_events holds nothing"
    n = 0
    for op in ops:
        if op == "append":
            task.append("note", {"n": n})
            n += 1
        elif op == "batch":
            with task.batch():
                for _ in range(2):
                    task.append("note", {"n": n})
                    n += 1
                    _check(task)  # appended, not yet synced: a read of a folder sees it, and so must this
        elif op == "grow":  # past RESUME_FROM: a close and an open on this handle then resume
            with task.batch():
                for _ in range(RESUME_FROM):
                    task.append("note", {"n": n})
                    n += 1
        elif op == "close":
            task.close()
            assert task.stream.held_events() is None, "no writer, nothing held"
        elif op == "open_keep":
            fresh = not task.stream.writing
            w = task.stream.open_writer(keep_events=True)
            # a writer already open keeps nothing new; a resumed open (it replayed only what was added) cannot vouch
            _check(task, expect_held=fresh and not w.resumed)
        elif op == "open_plain":
            task.stream.open_writer()
        elif op == "reopen_handle":  # another ledger's handle, as a new process would: no resume
            task.close()
            ledgers.append(open_ledger())
            task = ledgers[-1].task("t")  # the process's handle of the stream: it may resume
            w = task.stream.open_writer(keep_events=True)
            _check(task, expect_held=not w.resumed)
        _check(task)
    task.close()
    for ledger in ledgers:
        ledger.close()


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_held_events_on_a_folder_are_the_stream_or_nothing(
    tmp_path_factory: pytest.TempPathFactory, ops: list[str]
) -> None:
    root = tmp_path_factory.mktemp("held")
    _play(lambda: intentlog.open(root), ops)


@settings(max_examples=30, deadline=None)
@given(ops=OPS)
def test_held_events_on_an_object_store_are_the_stream_or_nothing(ops: list[str]) -> None:
    client, where = s3_server.MemoryClient(), f"mem://held-{secrets.token_hex(4)}"  # task handles are per location
    _play(lambda: Ledger(Path("mem"), storage=on_client(client, write=False), location=where), ops)


def test_held_events_on_seaweedfs(monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3_server.ledger_url(monkeypatch)
    _play(lambda: intentlog.open(url), ["append", "batch", "close", "reopen_handle", "append", "grow", "open_keep"])


def test_a_repaired_stream_is_held_as_a_read_gives_it(tmp_path: Path) -> None:
    """A torn tail cut at open: what the writer holds includes the ``stream.repaired`` record it wrote."""
    with intentlog.open(tmp_path) as ledger:
        task = ledger.task("t")
        task.append("note", {"n": 1})
        task.close()
        path = task.stream.path
        with open(path, "ab") as f:
            f.write(b'{"torn')
        task = ledger.task("t")
        task.stream.open_writer(keep_events=True)
        held = task.stream.held_events()
        assert held is not None and held[-1].kind == "stream.repaired"
        assert held == list(task.events())
        task.close()


def test_a_resumed_open_holds_nothing(tmp_path: Path) -> None:
    """A handle re-opening a stream it checked before replays only what was added: it cannot vouch, so None."""
    with intentlog.open(tmp_path) as ledger:
        task = ledger.task("t")
        with task.batch():
            for n in range(RESUME_FROM + 1):
                task.append("note", {"n": n})
        task.close()
        task.append("note", {"n": "by another writer of this handle"})
        task.close()
        w = task.stream.open_writer(keep_events=True)
        assert w.resumed, "the open checked only what was added since this handle's last writer"
        assert task.stream.held_events() is None
        task.close()
        task.stream._checked = None  # what a new process has: no check to resume from, the stream read whole
        w = task.stream.open_writer(keep_events=True)
        assert not w.resumed and task.stream.held_events() == list(task.events())
        task.close()
