"""``append(..., defer=True)``: written at once, made durable by the writer's next sync."""

from __future__ import annotations

from pathlib import Path

import pytest

import intentlog
import intentlog._internal.fsops as fsops


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = fsops.fdatasync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(fsops, "fdatasync", counted)
    return calls


def test_a_deferred_record_is_read_at_once_and_synced_with_the_next(tmp_path: Path, syncs: list[int]) -> None:
    led = intentlog.open(tmp_path / "l")
    t = led.task("t")
    t.append("note", {"first": True})
    before = len(syncs)
    ev = t.stream.append("note", {"deferred": True}, defer=True)
    assert len(syncs) == before  # not synced on return
    other = intentlog.open(tmp_path / "l", create=False)
    assert [e.digest for e in other.task("t").events()][-1] == ev.digest  # another reader sees it at once
    t.append("note", {"after": True})
    assert len(syncs) == before + 1  # one sync made both durable
    led.close()
    other.close()


def test_a_deferred_record_is_synced_by_the_close(tmp_path: Path, syncs: list[int]) -> None:
    led = intentlog.open(tmp_path / "l")
    t = led.task("t")
    t.append("note", {})
    t.stream.append("note", {"deferred": True}, defer=True)
    before = len(syncs)
    t.close()
    assert len(syncs) == before + 1
    assert [e.data for e in led.task("t").events()][-1] == {"deferred": True}
    led.close()


def test_sync_and_defer_together_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    led = intentlog.open(tmp_path / "l")
    t = led.task("t")
    t.append("note", {})
    path = tmp_path / "l" / "tasks" / "t.jsonl"
    data = path.read_bytes()
    with pytest.raises(ValueError, match="not both"):
        t.stream.append("note", {}, sync=True, defer=True)
    assert path.read_bytes() == data
    led.close()
