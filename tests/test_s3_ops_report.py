"""``report`` on a ledger on the store (a real SeaweedFS): the folder's page, byte for byte, read through the seams.

The report ledger every report test uses (every stage, an unknown effect, a session, a
hostile payload) is written to a folder and merged to the store; the page rendered from
the store must equal the folder's byte for byte (so the browser test of the folder's page
covers it), with nothing written to the store and no probe run. The same damage done to
both sides (an edited event, an object with wrong bytes, a missing object) gives the same
page again; what only a store can hold (a hole in a stream's segments) shows the task
unreadable and the ``segments`` finding, the other tasks drawn as ever; and the one
difference on purpose: a bad last line is a torn tail on a folder, damage on a store.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import s3_server
from click.testing import CliRunner
from report_ledger import build
from s3_server import client_of, snapshot

import intentlog.s3
from intentlog._internal.digest import digest_bytes
from intentlog.cli import main
from intentlog.merge import merge
from intentlog.report import render, render_report


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("ops-report") / "ledger")


@pytest.fixture
def pair(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A private copy of the report ledger and the same streams and objects on a fresh prefix."""
    copy = tmp_path / "ledger"
    shutil.copytree(folder, copy, symlinks=True)
    with intentlog.open(copy) as ledger:  # two small objects a task refers to (the report shows them in place)
        refs = {}
        for name in ("first", "second"):
            data = f"the {name} object's bytes".encode()
            refs[name] = {"digest": ledger.artifacts.put(data).digest, "size": len(data), "media_type": "text/plain"}
        big = ledger.artifacts.put(b"z" * 5000).digest  # named by a bare digest: no size in the record
        ledger.task("objects").append("note", refs | {"big": big})
    url = s3_server.ledger_url(monkeypatch)
    merge(copy, url)
    monkeypatch.chdir(tmp_path)
    return copy, url


@pytest.fixture
def no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A report only reads: running the fencing probe (a write) is a failure."""

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("the report ran the fencing probe")

    monkeypatch.setattr(intentlog.s3, "require_fencing", refuse)


def test_the_store_gives_the_folder_page_byte_for_byte(pair: tuple[Path, str], no_probe: None) -> None:
    folder, url = pair
    before = snapshot(url)
    on_store = render_report(url)
    on_folder = render_report(folder)
    assert on_store.html == on_folder.html, "the same streams and objects give the same bytes"
    assert on_store.tasks == on_folder.tasks and len(on_store.tasks) >= 4
    assert on_store.verify_ok and on_store.counts == on_folder.counts
    assert "<td>4.9 KiB</td>" in on_store.html.decode(), "an object too large to show: its real size, both sides"
    with intentlog.open(url, create=False) as ledger:  # a Ledger opened on the store renders the same
        assert render(ledger, ["unknown"]) == render(folder, ["unknown"])
    assert snapshot(url) == before, "nothing was written to the store"


def test_the_command_on_the_store_writes_the_folder_page(pair: tuple[Path, str], no_probe: None) -> None:
    folder, url = pair
    before = snapshot(url)
    r = CliRunner().invoke(main, ["--root", url, "report", "--out", "store.html", "--backlog", "nope"])
    assert r.exit_code == 1 and "no backlog 'nope'" in r.output and not Path("store.html").exists()
    r = CliRunner().invoke(main, ["--root", url, "report", "--out", "store.html"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["--root", str(folder), "report", "--out", "folder.html"])
    assert r.exit_code == 0, r.output
    store_page = Path("store.html").read_bytes()
    folder_page = Path("folder.html").read_bytes()
    assert f"--root {url} ".encode() in store_page, "the page's commands run as printed against the store"
    # the only difference: the --root the commands on the page carry
    assert store_page.replace(url.encode(), str(folder).encode()) == folder_page
    assert snapshot(url) == before


def _damage_both(folder: Path, url: str) -> None:
    """The same damage on both sides: an edited event in 'chat', wrong bytes for one object, another missing."""
    client = client_of(url)
    hexes = [digest_bytes(f"the {n} object's bytes".encode()).split(":")[1] for n in ("first", "second")]
    wrong, missing = (folder / "objects" / h[:2] / h[2:] for h in hexes)
    for path, replace in ((wrong, b"not the bytes of this digest"), (missing, None)):
        key = "objects/" + path.parent.name + "/" + path.name
        client.delete(key)
        os.chmod(path, 0o644)
        path.unlink()
        if replace is not None:
            path.write_bytes(replace)
            assert client.create(key, replace)
    # an edited event in the middle of a stream: the chain breaks there (on the store: the same record bytes)
    streams = intentlog.s3.connect(url, write=False).streams
    _, payload = streams.segment("chat", 0)  # merge created the stream as one segment
    lines = payload.splitlines(keepends=True)
    assert len(lines) >= 4
    mid = len(lines) // 2
    lines[mid] = lines[mid].replace(b'"ts":"2', b'"ts":"3', 1)
    body = client.get("tasks/chat/s/000000000000")
    assert body is not None
    client.delete("tasks/chat/s/000000000000")
    assert client.create("tasks/chat/s/000000000000", body.replace(payload, b"".join(lines)))
    path = folder / "tasks" / "chat.jsonl"
    os.chmod(path, 0o644)
    path.write_bytes(streams.read("chat"))


def test_the_same_damage_gives_the_same_page(pair: tuple[Path, str], no_probe: None) -> None:
    folder, url = pair
    _damage_both(folder, url)
    before = snapshot(url)
    on_store, on_folder = render_report(url), render_report(folder)
    assert not on_store.verify_ok and on_store.counts.get("unreadable") == 1
    page = on_store.html.decode()
    assert "its bytes do not hash to its digest" in page and "not in objects/" in page
    assert on_store.html == on_folder.html
    assert snapshot(url) == before


def test_a_hole_in_the_segments_shows_the_task_unreadable_and_the_others(pair: tuple[Path, str]) -> None:
    _, url = pair
    client = client_of(url)
    streams = intentlog.s3.connect(url, write=False).streams
    with intentlog.open(url) as ledger:  # three appends through the store's writer: three data segments
        for i in range(3):
            ledger.task("objects").append("note", {"i": i})
    data = [n for n in range(streams.tail("objects").seg + 1) if streams.segment("objects", n)[1]]
    hole = data[-2]
    client.delete(f"tasks/objects/s/{hole:012d}")
    before = snapshot(url)
    result = render_report(url)
    page = result.html.decode()
    assert result.counts.get("unreadable") == 1 and len(result.tasks) >= 4
    assert "segments" in page and f"segment {hole} is missing" in page
    assert 'id="task-every-stage"' in page, "the other tasks are drawn as ever"
    assert snapshot(url) == before


def test_a_bad_last_line_is_damage_on_the_store_a_torn_tail_on_a_folder(pair: tuple[Path, str]) -> None:
    """The one difference on purpose: a store has no torn tails (a segment is whole or absent)."""
    folder, url = pair
    client = client_of(url)
    streams = intentlog.s3.connect(url, write=False).streams
    last = streams.tail("chat")
    n = last.seg
    while not streams.segment("chat", n)[1]:
        n -= 1
    key = f"tasks/chat/s/{n:012d}"
    body = client.get(key)
    assert body is not None
    _, payload = streams.segment("chat", n)
    lines = payload.splitlines(keepends=True)
    edited = b"".join(lines[:-1]) + lines[-1].replace(b'"seq"', b'"sEq"', 1)
    client.delete(key)
    assert client.create(key, body.replace(payload, edited))
    path = folder / "tasks" / "chat.jsonl"
    os.chmod(path, 0o644)
    path.write_bytes(streams.read("chat"))
    on_store, on_folder = render_report(url, ["chat"]), render_report(folder, ["chat"])
    row = b'data-task="chat" data-state="unreadable"'
    assert on_folder.counts.get("unreadable") is None and row not in on_folder.html
    assert on_store.counts == {"unreadable": 1} and row in on_store.html
