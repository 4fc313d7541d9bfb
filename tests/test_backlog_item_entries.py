"""A backlog's item entries (the view cache matched by stream stamps) never show what the record does not say.

Found by an adversarial pass over the stamps: a view taken in a process whose writer holds a
store batch not yet put must not keep what it read (the put may fail, the listing then never
changes); an item that ends without a result keeps nothing of its task in its worker's memory;
and a writer's lease never turns segments left without a segment 0 into a stream.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import secrets
from pathlib import Path
from typing import Any

import pytest
import s3_server

import intentlog
from intentlog.backlog.itemcache import remember
from intentlog.backlog.worker import run_item
from intentlog.errors import CorruptStream, LedgerError
from intentlog.ledger import Ledger
from intentlog.s3 import on_client


class _Flaky(s3_server.TaggedMemoryClient):
    """The in-process store, which can go away (every create and get refused) and come back."""

    down = False

    def create(self, key: str, data: bytes) -> bool:
        if self.down:
            raise LedgerError(f"{self.describe(key)}: the store is unreachable")
        return super().create(key, data)

    def get(self, key: str) -> bytes | None:
        if self.down:
            raise LedgerError(f"{self.describe(key)}: the store is unreachable")
        return super().get(key)


def _store(client: Any) -> Ledger:
    return Ledger(Path("mem"), storage=on_client(client, write=False), location=f"mem://e-{secrets.token_hex(4)}")


def _rows(ledger: Ledger) -> list[tuple[str, str | None, str | None]]:
    return [(r["item"], r["task_state"], r["last_progress"]) for r in ledger.backlog("bl").view().to_json()["items"]]


def test_a_view_inside_a_store_batch_keeps_nothing_the_store_may_never_hold() -> None:
    client = _Flaky()
    ledger = _store(client)
    b = ledger.backlog("bl")
    b.add_many([{"item": "i0", "payload": {}}, {"item": "i1", "payload": {}}])
    done = ledger.task(b.task_id("i1"))
    _, conn = mp.Pipe()
    answer = run_item(done, conn, "i1", "bl", {}, lambda task, payload: {"ok": 1}, asks=False)
    assert type(answer).__name__ == "Done" and answer.entry is not None
    remember(ledger, "bl", [answer.entry], {done.id, b.task_id("i0")})  # this process's entries: a worker's
    t = ledger.task(b.task_id("i0"))
    t.append("note", {"n": 0})
    with pytest.raises(LedgerError), t.batch():
        t.fail_task("never stored", by="test")  # buffered until the batch ends
        assert _rows(ledger)[0][1] == "failed"  # this process reads its own buffered records
        client.down = True  # the store goes away: the batch's put is lost, and the release with it
    with contextlib.suppress(intentlog.IntentlogError):
        t.close()
    client.down = False
    fresh = _store(client)
    assert _rows(ledger) == _rows(fresh), "this process shows what the store holds, as another does"
    assert _rows(fresh)[0][1] != "failed"


def test_an_item_that_ends_without_a_result_leaves_nothing_in_its_task_handle(tmp_path: Path) -> None:
    def failing(task: intentlog.Task, payload: Any) -> Any:
        task.append("note.work", {"big": "x" * 1000})
        raise RuntimeError("the step failed")

    def ok(task: intentlog.Task, payload: Any) -> Any:
        return {"ok": 1}

    with intentlog.open(tmp_path / "l") as ledger:
        b = ledger.backlog("bl")
        b.add_many([{"item": f"i{i}", "payload": {"i": i}} for i in range(2)])
        _, conn = mp.Pipe()
        t = ledger.task(b.task_id("i0"))
        answer = run_item(t, conn, "i0", "bl", {"i": 0}, failing, asks=False)
        assert type(answer).__name__ == "Failed" and t.stream.take_left() is None
        t = ledger.task(b.task_id("i1"))
        answer = run_item(t, conn, "i1", "bl", {"i": 1}, ok, asks=False)
        assert type(answer).__name__ == "Done" and answer.entry is not None  # made from what the writer left
        assert t.stream.take_left() is None, "and given once"


def test_a_lease_never_makes_a_stream_of_segments_without_a_segment_0() -> None:
    """What an older gc left, or a fenced writer's put after a deletion: refused, the store unchanged."""
    client = s3_server.TaggedMemoryClient()
    t = _store(client).task("t")
    for i in range(3):
        t.append("note", {"n": i})
        t.close()
    segments = sorted(k for k in client.objects if k.startswith("tasks/t/s/"))
    for key in [k for k in client.objects if k.startswith("tasks/t/")]:
        if key != segments[-1]:
            client.delete(key)
    with pytest.raises(CorruptStream, match="segment 0 is missing"):
        _store(client).task("t").append("note", {"n": "new"})
    kept = {k: v for k, v in client.objects.items() if k.startswith("tasks/t/s/")}
    assert segments[0] not in kept, "no segment 0 made for them"
    assert not any(b'"new"' in v for v in kept.values()), "the record was never stored"
