"""A close from one thread while others write: no self-lockout, and no send on a sync that failed.

Found by trying the async protocol and the stream core with threads closing the task under
them: a closing thread released the handle's mutex before the writer lock, so an appending
thread of the same process got ``TaskBusy`` naming its own pid; and a close whose final
sync failed left the async disk thread's next sync a no-op, so a send ran on an
``attempt.started`` no sync had made durable.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog._internal import fsops


def test_a_close_racing_appends_never_locks_the_process_out(tmp_path: Path) -> None:
    with intentlog.open(tmp_path / "l") as led:
        t = led.task("t")
        t.append("user.x", {})
        errors: list[BaseException] = []
        stop = threading.Event()

        def appender() -> None:
            for i in range(1500):
                try:
                    t.append("user.x", {"i": i})
                except BaseException as exc:  # every failure is the finding
                    errors.append(exc)

        def closer() -> None:
            while not stop.is_set():
                t.close()

        a, c = threading.Thread(target=appender), threading.Thread(target=closer)
        a.start()
        c.start()
        a.join()
        stop.set()
        c.join()
        assert errors == []
        assert [e.data["i"] for e in t.events() if "i" in e.data] == list(range(1500))


def test_a_send_never_runs_when_the_close_that_held_its_sync_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = intentlog.open(tmp_path / "l")
    t = led.task("t")
    t.append("user.x", {})
    s = t.stream
    real_append, real_sync = s.append, fsops.fdatasync
    failing = threading.Event()
    receipts: list[str] = []
    closed: list[str] = []

    def fdatasync(fd: int) -> None:
        if failing.is_set():
            raise OSError(errno.EIO, "simulated EIO")
        real_sync(fd)

    def append(kind: str, data: Any, **kw: Any) -> Any:
        ev = real_append(kind, data, **kw)
        if kind == "attempt.started":  # another thread closes the task before the group's sync

            def closer() -> None:
                failing.set()
                try:
                    s.close()
                    closed.append("ok")
                except intentlog.IntentlogError as exc:
                    closed.append(type(exc).__name__)
                finally:
                    failing.clear()

            th = threading.Thread(target=closer)
            th.start()
            th.join()
        return ev

    monkeypatch.setattr(fsops, "fdatasync", fdatasync)
    monkeypatch.setattr(s, "append", append)

    async def send(req: Any) -> bytes:
        receipts.append("SENT")
        return b"ok"

    async def main() -> None:
        with pytest.raises(intentlog.StreamPoisoned):
            await t.aeffect("k", {"x": 1}, send)

    asyncio.run(main())
    assert closed == ["StreamPoisoned"]
    assert receipts == [], "the send ran although no sync made its attempt.started durable"
    monkeypatch.undo()
    led.close()
    with intentlog.open(tmp_path / "l") as again:  # a fresh handle: what the record says is what happened
        kinds = [e.kind for e in again.task("t").events()]
        assert "attempt.observed" not in kinds and "call.completed" not in kinds
    assert os.path.exists(tmp_path / "l" / "tasks" / "t.jsonl")
