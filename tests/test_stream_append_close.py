"""An append and a close from another thread: the append lands whole, or the close came first and the append reopens.

The close must never end the writer between an append opening it and writing through it
("the writer is closed" was raised to the appender, nothing written, although the task
was never closed by it).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog.stream import TaskStream


def test_a_close_between_opening_the_writer_and_appending_waits_for_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = intentlog.open(tmp_path / "l").task("t")
    t.append("note.first", {})
    real_open = TaskStream.open_writer
    closers: list[threading.Thread] = []

    def open_then_close_elsewhere(self: TaskStream, **kw: Any) -> Any:
        w = real_open(self, **kw)
        if not closers:  # the first time only: another thread closes the task right now
            c = threading.Thread(target=self.close)
            closers.append(c)
            c.start()
            c.join(0.3)  # without the handle's mutex held across the append this close finishes here
        return w

    monkeypatch.setattr(TaskStream, "open_writer", open_then_close_elsewhere)
    t.append("note.second", {"n": 2})
    closers[0].join(10)
    monkeypatch.undo()
    assert [e.kind for e in t.events()][-1] == "note.second"
    t.append("note.third", {})  # the close that waited ran after: the next append opens the writer again
    assert [e.kind for e in t.events()][-2:] == ["note.second", "note.third"]
