"""A task id gc deleted is used again the same way on a folder and on a store (a real SeaweedFS).

On a folder gc removes the stream's file and the next writer creates a new stream under
the id. On a store gc keeps segment 0, the leases a fenced holder may still put at and its
own lease at the tail; once the gc log records the deletion finished, the next writer
puts a ``cut`` after gc's lease that voids all before it and begins a new stream. Either
way the new task has a new stream id, verifies, is listed, is sealed, and can be deleted
by gc again; a seal of the deleted stream does not block it (gc deleted exactly that one).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import s3_server

import intentlog
from intentlog.checker import verify_ledger
from intentlog.heads import seal as seal_folder
from intentlog.retention import apply_gc, keep
from intentlog.s3.seals import create_seal

LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=60)
MUCH_LATER = LATER + dt.timedelta(days=60)


@pytest.fixture(params=["folder", "store"])
def root(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    return str(tmp_path / "ledger") if request.param == "folder" else s3_server.ledger_url(monkeypatch)


def seal(root: str) -> None:
    with intentlog.open(root) as ledger:
        if ledger.storage is not None:
            create_seal(ledger.storage.client)
        else:
            seal_folder(ledger)


def stream_ids(root: str, task: str) -> list[str]:
    with intentlog.open(root, create=False) as ledger:
        return [ev.data["stream"] for ev in ledger.task(task).events() if ev.kind == "task.created"]


def problems(root: str) -> list[tuple[str, str, str | None]]:
    with intentlog.open(root, create=False) as ledger:
        report = verify_ledger(ledger)
    return sorted((p.severity, p.code, p.task) for p in report.problems if p.severity != "info")


def test_a_task_id_gc_deleted_is_used_again_as_on_a_folder(root: str) -> None:
    with intentlog.open(root) as ledger:
        ledger.task("t").append("note", {"n": 1})
        ledger.task("stays").append("note", {})
    first = stream_ids(root, "t")
    keep(intentlog.open(root), "stays")
    seal(root)  # the seal binds the stream gc is about to delete
    with intentlog.open(root) as ledger:
        assert apply_gc(ledger, now=LATER).deleted == ("t",)
        assert ledger.task_ids() == ["stays"]
    with intentlog.open(root) as ledger:
        ledger.task("t").append("note", {"again": True})
    again = stream_ids(root, "t")
    assert len(again) == 1 and again != first, "a new task under the id: a new stream"
    with intentlog.open(root, create=False) as ledger:
        assert [ev.kind for ev in ledger.task("t").events()] == ["task.created", "note"]
        assert [ev.data for ev in ledger.task("t").events()][1] == {"again": True}
        assert ledger.task_ids() == ["stays", "t"]
    assert problems(root) == []
    seal(root)
    assert problems(root) == []
    with intentlog.open(root) as ledger:  # and gc deletes the new one in its turn
        assert apply_gc(ledger, now=MUCH_LATER).deleted == ("t",)
        assert ledger.task_ids() == ["stays"]
    assert problems(root) == []
    with intentlog.open(root) as ledger:
        ledger.task("t").append("note", {"third": True})
    assert len(stream_ids(root, "t")) == 1 and stream_ids(root, "t") not in (first, again)
    assert problems(root) == []
