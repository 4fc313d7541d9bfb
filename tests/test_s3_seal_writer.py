"""The writer on a store checks the store's seals before it appends (a real SeaweedFS).

A folder's writer refuses a stream that contradicts ``heads.json``; on a store every seal
``heads/N.json`` is a lower bound, and a stream behind the furthest one (its tail cut, its
event at the sealed seq edited, or gone) is refused with the folder's error class and
message shape, nothing stored: not an event, not even a lease segment. The seals are
listed once per lease, never per append.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s3_server

import intentlog
from intentlog.errors import CorruptStream
from intentlog.heads import seal as seal_folder
from intentlog.heads.codec import decode_heads, encode_heads
from intentlog.ledger import Ledger
from intentlog.s3 import S3Client, on_client, parse_s3_url
from intentlog.s3.seals import seal_store


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> str:
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        for n in range(4):
            ledger.task("alpha").append("note", {"n": n})
    return url


def client_of(url: str) -> S3Client:
    return S3Client(parse_s3_url(url))


def everything(client: S3Client) -> dict[str, bytes | None]:
    """Every object under the ledger's prefix and its bytes."""
    out: dict[str, bytes | None] = {}
    for folder in ("tasks", "heads", "objects"):
        for key, _ in client.scan(folder):
            out[key] = client.get(key)
    return out


def segments(client: S3Client, name: str = "alpha") -> list[str]:
    return sorted(k for k, _ in client.scan(f"tasks/{name}/s"))


def append(url: str, *values: int) -> None:
    with intentlog.open(url) as ledger:
        for v in values:
            ledger.task("alpha").append("note", {"more": v})


def refused_append(url: str) -> CorruptStream:
    with intentlog.open(url) as ledger, pytest.raises(CorruptStream) as info:
        ledger.task("alpha").append("note", {"after": "damage"})
    return info.value


def folder_refusal(tmp_path: Path) -> str:
    """The folder's message for a stream cut behind heads.json, for the shape to compare."""
    root = tmp_path / "folder"
    with intentlog.open(root) as ledger:
        for n in range(4):
            ledger.task("alpha").append("note", {"n": n})
        seal_folder(ledger)
    path = root / "tasks" / "alpha.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3]))
    with intentlog.open(root) as ledger, pytest.raises(CorruptStream) as info:
        ledger.task("alpha").append("note", {"after": "cut"})
    return info.value.reason


def test_a_stream_cut_behind_its_seal_refuses_appends_like_a_folder_nothing_stored(store: str, tmp_path: Path) -> None:
    client = client_of(store)
    seal = seal_store(client)  # alpha: 5 events, seq 4
    keep = segments(client)
    append(store, 1, 2)  # within the bound: appends go on
    assert len(segments(client)) > len(keep)
    for key in segments(client)[len(keep) - 2 :]:  # cut: the last sealed segments and what followed
        client.delete(key)
    for key, _ in list(client.scan("tasks/alpha/c")):
        client.delete(key)
    before = everything(client)
    exc = refused_append(store)
    assert everything(client) == before, "nothing stored: no event, no lease segment"
    assert exc.path == client.describe("tasks/alpha/")
    assert f"but {seal} seals seq 4 with head blake3:" in exc.reason and "events were cut from its end" in exc.reason
    held = int(exc.reason.split("holds ")[1].split(" ")[0])
    assert held < 5 and exc.line == held + 1
    folder = folder_refusal(tmp_path)
    shape = exc.reason.replace(seal, "heads.json").split("holds ")[1].split(" ", 1)[1]
    assert folder.split("holds ")[1].split(" ", 1)[1].split("blake3:")[0] == shape.split("blake3:")[0]


def test_a_stream_edited_at_the_sealed_seq_is_refused_and_a_weaker_later_seal_does_not_hide_it(store: str) -> None:
    client = client_of(store)
    first = seal_store(client)
    body = client.get("heads/000000000001.json")
    assert body is not None
    weak = decode_heads(body)["alpha"]
    other = f"{store}-other"  # another history of alpha, of more events, copied over alpha's segments
    with intentlog.open(other) as ledger:
        for n in range(6):
            ledger.task("alpha").append("note", {"other": n})
    for key in segments(client):
        client.delete(key)
    source = client_of(other)
    for key in segments(source):
        assert client.create(key, source.get(key) or b"")
    assert client.create("heads/000000000002.json", encode_heads({}))  # a later seal that says nothing of alpha
    before = everything(client)
    exc = refused_append(store)
    assert everything(client) == before
    assert exc.line == weak.seq + 1
    assert f"but {first} seals seq {weak.seq} with head {weak.head}: the stream was rewritten" in exc.reason


def test_a_sealed_stream_that_is_gone_is_not_created_again(store: str) -> None:
    client = client_of(store)
    seal_store(client)
    for key in segments(client):
        client.delete(key)
    for key, _ in list(client.scan("tasks/alpha/c")):
        client.delete(key)
    before = everything(client)
    exc = refused_append(store)
    assert "the stream is gone but" in exc.reason and "re-creating it would repeat its effects" in exc.reason
    assert everything(client) == before and segments(client) == []


class Counting:
    """An ObjectClient counting LISTs by folder."""

    def __init__(self, inner: S3Client) -> None:
        self.inner, self.lists = inner, Counter[str]()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def scan(self, folder: str, start_after: str | None = None) -> Iterator[tuple[str, int]]:
        self.lists[folder] += 1
        return iter(list(self.inner.scan(folder, start_after)))


def test_the_seals_are_listed_once_per_lease_not_per_append(store: str) -> None:
    counting = Counting(client_of(store))
    ledger = Ledger(Path(store), storage=on_client(counting), location=store)
    ledger.task("beta").append("note", {"before": "seal"})
    ledger.close()
    seal_store(client_of(store))
    counting.lists.clear()
    task = ledger.task("beta")
    for n in range(5):
        task.append("note", {"within": n})
    ledger.close()
    assert counting.lists["heads"] == 1, counting.lists
    assert [e.data for e in task.events()][-1] == {"within": 4}


def test_the_accepted_repairs_are_the_folders() -> None:
    from intentlog.eventlog.damage import ACCEPTED as FOLDER
    from intentlog.s3.bounds import ACCEPTED as STORE

    assert STORE == FOLDER
