"""A stream's stamp names its stored bytes without reading them; a writer vouches for the stamp it left.

``StreamStorage.stamps`` is what a derived cache (a backlog's item lines) is matched against:
equal stamps must mean the stream is as it was, on a folder (file facts) and on an object store
(segments' numbers, sizes and ETags, one LIST). ``TaskStream.take_left`` is what a backlog worker makes
its item's line from as its writer closes: every event and the stamp, no read. Whatever it gives
must be exactly what a read and a fresh ``stamps`` give from another handle.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import s3_server
from s3_server import MemoryClient, TaggedMemoryClient

import intentlog
from intentlog.eventlog.storage import NO_STREAM
from intentlog.ledger import Ledger
from intentlog.s3 import on_client
from intentlog.stream import RESUME_FROM

Opener = Callable[[], intentlog.Ledger]


@pytest.fixture(params=["folder", "memory-store", "seaweedfs"])
def opener(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Opener]:
    """Opens a ledger handle on one backing place (two handles: two processes sharing it)."""
    if request.param == "folder":
        yield lambda: intentlog.open(tmp_path / "ledger")
    elif request.param == "memory-store":
        client, where = TaggedMemoryClient(), f"mem://stamps-{secrets.token_hex(4)}"  # handles are per location
        yield lambda: Ledger(Path("mem"), storage=on_client(client, write=False), location=where)
    else:
        url = s3_server.ledger_url(monkeypatch)
        yield lambda: intentlog.open(url)


def _stamp(ledger: intentlog.Ledger, name: str) -> str | None:
    return ledger.backend.streams.stamps([name])[name]


def test_a_stamp_is_the_same_from_every_handle_until_the_stream_changes(opener: Opener) -> None:
    a, b = opener(), opener()
    assert _stamp(a, "t") == NO_STREAM, "no stream: the stamp that says so"
    task = a.task("t")
    task.append("note", {"n": 1})
    task.close()
    first = _stamp(a, "t")
    assert first is not None and _stamp(b, "t") == first
    assert list(b.task("t").events()) and _stamp(b, "t") == first, "a read changes nothing"
    other = b.task("t")
    other.append("note", {"n": 2})
    other.close()
    assert _stamp(a, "t") not in (None, first), "an append by another handle changes it"
    assert a.backend.streams.stamps([]) == {}


def test_a_writer_leaves_the_stamp_and_events_a_fresh_look_gives(opener: Opener) -> None:
    a, b = opener(), opener()
    task = a.task("t")
    task.stream.open_writer(keep_events=True)
    task.append("note", {"n": 1})
    with task.batch():
        task.append("note", {"n": 2})
        task.append("note", {"n": 3})
    assert task.stream.take_left() is None, "nothing left while the writer is open"
    task.close()
    left = task.stream.take_left()
    assert left is not None
    events, stamp = left
    assert events == list(b.task("t").events())
    assert stamp == _stamp(b, "t"), "the stamp it vouches for is what another handle sees"
    assert task.stream.take_left() is None, "given once: the events are not kept past it"
    task.stream.open_writer(keep_events=True)
    task.close()
    task.stream.open_writer()
    assert task.stream.take_left() is None, "gone once a writer opens again"
    task.append("note", {"n": 4})
    task.close()
    assert task.stream.take_left() is None, "a writer that did not keep its events leaves nothing"
    assert stamp != _stamp(b, "t")


def test_a_resumed_writer_leaves_nothing(opener: Opener) -> None:
    """A handle re-opening a stream it checked before replays only what was added: no whole list to vouch for."""
    a = opener()
    task = a.task("t")
    with task.batch():
        for n in range(RESUME_FROM + 1):
            task.append("note", {"n": n})
    task.close()
    w = task.stream.open_writer(keep_events=True)
    task.append("note", {"n": "more"})
    task.close()
    assert w.resumed and task.stream.take_left() is None


def test_a_folder_stream_rewritten_in_place_has_another_stamp(tmp_path: Path) -> None:
    """Same size, same mtime put back: the change time (which nothing can set back) changes the stamp."""
    with intentlog.open(tmp_path) as ledger:
        task = ledger.task("t")
        task.append("note", {"n": 1})
        task.close()
        before = _stamp(ledger, "t")
        path = task.stream.path
        st = os.stat(path)
        raw = bytearray(path.read_bytes())
        raw[-5] = ord("9") if raw[-5] != ord("9") else ord("8")
        path.write_bytes(bytes(raw))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(path).st_size == st.st_size
        assert _stamp(ledger, "t") != before
        os.symlink(path, tmp_path / "tasks" / "linked.jsonl")
        assert _stamp(ledger, "linked") is None, "a link is no stream of the folder's"


def test_a_store_segment_replaced_by_other_bytes_of_its_size_has_another_stamp() -> None:
    client = TaggedMemoryClient()
    ledger = Ledger(Path("mem"), storage=on_client(client, write=False), location=f"mem://replaced-{secrets.token_hex(4)}")
    task = ledger.task("t")
    task.append("note", {"n": 1})
    task.close()
    before = _stamp(ledger, "t")
    key = next(k for k in sorted(client.objects) if k.startswith("tasks/t/s/") and b'"n":1' in client.objects[k])
    body = client.objects[key].replace(b'"n":1', b'"n":2')
    client.delete(key)
    assert client.create(key, body) and len(body) == len(client.objects[key])
    assert _stamp(ledger, "t") not in (None, before)


def test_a_store_without_etags_gives_no_stamp_and_its_writer_leaves_none() -> None:
    """Without ETags a listing cannot tell a segment replaced by other bytes of its size: nothing is vouched."""
    ledger = Ledger(Path("mem"), storage=on_client(MemoryClient(), write=False), location=f"mem://untagged-{secrets.token_hex(4)}")
    task = ledger.task("t")
    task.stream.open_writer(keep_events=True)
    task.append("note", {"n": 1})
    task.close()
    assert _stamp(ledger, "t") is None and task.stream.take_left() is None
