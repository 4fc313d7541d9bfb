"""verify through the seams: a ledger on the store gets the findings a folder holding the same bytes gets.

A folder ledger is written (effects with inline and object responses, an orphan object),
merged to a real SeaweedFS, and then the *same* damage is done to both -- a segment
carrying another stream's records spliced in, an edited event (a broken chain), an object
whose bytes are wrong, a missing object. :func:`verify_path` on the folder and
:func:`verify_storage` on the store must give the same problems, field for field.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import s3_server
from effect_child import request, review

import intentlog
from intentlog.checker import VerifyReport, verify_ledger, verify_path, verify_storage
from intentlog.demo.provider import SyntheticProvider
from intentlog.errors import CorruptStream
from intentlog.merge import merge
from intentlog.s3 import ObjectArtifacts, ObjectStreams, S3Client, Segment, connect, parse_s3_url

TASKS = ("alpha", "beta")


@pytest.fixture
def url(monkeypatch: pytest.MonkeyPatch) -> str:
    return s3_server.ledger_url(monkeypatch)


def build(folder: Path, url: str, receipts: Path) -> None:
    """A folder ledger with inline and object responses and an orphan, copied to the store by merge."""
    provider = SyntheticProvider(receipts)
    with intentlog.open(folder) as ledger:
        for name in TASKS:
            t = ledger.task(name)
            t.append("note", {"about": name})
            t.effect(f"{name}-small", request("model-a"), provider.send, interpret=review)
            t.effect(f"{name}-big", request("model-a") | {"pad": "p" * 30_000}, provider.send, interpret=review)
            t.append("note", {"done": True})
        ledger.artifacts.put(b"referenced by nothing")
    merge(folder, url)


def problems(report: VerifyReport) -> list[dict[str, object]]:
    return [p.to_json() for p in report.problems]


def both(folder: Path, url: str) -> tuple[VerifyReport, VerifyReport]:
    storage = connect(url, write=False)
    on_folder = verify_path(folder, workspace=folder / "no-workspace")
    on_store = verify_storage(storage.streams, storage.objects, where=url)
    return on_folder, on_store


def seams(url: str) -> tuple[ObjectStreams, ObjectArtifacts]:
    storage = connect(url, write=False)
    return storage.streams, storage.objects


def client_of(url: str) -> S3Client:
    return S3Client(parse_s3_url(url))


def stored_chunks(url: str, name: str) -> list[list[bytes]]:
    """The records of each record-carrying segment of a stored stream, in order."""
    streams = ObjectStreams(client_of(url))
    out = []
    for n in range(streams.tail(name).seg + 1):
        _, payload = streams.segment(name, n)
        if payload:
            out.append(payload.splitlines())
    return out


def restream(url: str, name: str, chunks: list[list[bytes]]) -> None:
    """Replace a stored stream by segments holding ``chunks`` with consistent headers (as a forger would)."""
    client = client_of(url)
    for key, _ in list(client.scan(f"tasks/{name}")):
        client.delete(key)
    seq = off = 0
    segs: list[tuple[Segment, list[bytes]]] = []
    for i, recs in enumerate(chunks):
        kind = "create" if i == 0 else "data"
        epoch, holder = (0, "") if i == 0 else (1, "forger")
        size = sum(len(r) + 1 for r in recs)
        segs.append((Segment(kind, len(segs), seq, off, epoch, holder, len(recs), size), recs))
        if i == 0:
            segs.append((Segment("lease", 1, seq + len(recs), off + size, 1, "forger"), []))
        seq, off = seq + len(recs), off + size
    segs.append((Segment("release", len(segs), seq, off, 1, "forger"), []))
    for seg, recs in segs:
        assert client.create(f"tasks/{name}/s/{seg.seg:012d}", seg.encode(recs))


def write_folder_stream(folder: Path, name: str, lines: list[bytes]) -> None:
    path = folder / "tasks" / f"{name}.jsonl"
    os.chmod(path, 0o644)
    path.write_bytes(b"".join(x + b"\n" for x in lines))


def response_digest(folder: Path, name: str) -> str:
    """The digest of the first object (not inline) an event of task ``name`` refers to."""
    for line in (folder / "tasks" / f"{name}.jsonl").read_bytes().splitlines():
        stack: list[object] = [orjson.loads(line)["data"]]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                d = v.get("digest")
                if isinstance(d, str) and "size" in v and object_path(folder, d).is_file():
                    return d
                stack.extend(v.values())
            elif isinstance(v, list):
                stack.extend(v)
    raise AssertionError("no object referenced")


def object_path(folder: Path, digest: str) -> Path:
    hexd = digest.split(":", 1)[1]
    return folder / "objects" / hexd[:2] / hexd[2:]


def splice(folder: Path, url: str) -> None:
    """alpha's second data segment replaced by beta's (headers made to fit): same bytes in the folder."""
    def segmented(name: str) -> list[list[bytes]]:  # as a writer leaves it: a first record, then groups
        lines = [r for chunk in stored_chunks(url, name) for r in chunk]
        return [lines[:1]] + [lines[i : i + 3] for i in range(1, len(lines), 3)]

    mine, theirs = segmented("alpha"), segmented("beta")
    restream(url, "beta", theirs)
    same = problems(verify_storage(*seams(url), where=url)) == problems(verify_path(folder))
    assert same, "re-segmenting changes no finding"
    mine[2] = theirs[2]
    restream(url, "alpha", mine)
    write_folder_stream(folder, "alpha", [r for chunk in mine for r in chunk])


def edit_event(folder: Path, url: str) -> None:
    """One event's data edited in place (same length): its chain breaks at the next line."""
    client = client_of(url)
    key = sorted(k for k, _ in client.scan("tasks/beta/s"))[0]
    body = client.get(key)
    assert body is not None and b'"about":"beta"' in body
    client.delete(key)
    client.create(key, body.replace(b'"about":"beta"', b'"about":"BETA"'))
    path = folder / "tasks" / "beta.jsonl"
    os.chmod(path, 0o644)
    path.write_bytes(path.read_bytes().replace(b'"about":"beta"', b'"about":"BETA"'))


def wrong_object(folder: Path, url: str) -> None:
    digest = response_digest(folder, "alpha")
    client = client_of(url)
    key = ObjectArtifacts.key_for(digest)
    client.delete(key)
    client.create(key, b"not the response")
    path = object_path(folder, digest)
    os.chmod(path, 0o644)
    path.write_bytes(b"not the response")


def missing_object(folder: Path, url: str) -> None:
    digest = response_digest(folder, "beta")
    client_of(url).delete(ObjectArtifacts.key_for(digest))
    object_path(folder, digest).unlink()


DAMAGE: dict[str, Callable[[Path, str], None]] = {
    "spliced segment": splice,
    "broken chain": edit_event,
    "wrong object": wrong_object,
    "missing object": missing_object,
}


def test_an_intact_ledger_verifies_the_same_on_the_store_and_in_a_folder(url: str, tmp_path: Path) -> None:
    build(tmp_path / "ledger", url, tmp_path / "receipts.jsonl")
    on_folder, on_store = both(tmp_path / "ledger", url)
    assert on_folder.ok and on_store.ok, on_store.render()
    assert problems(on_store) == problems(on_folder)
    assert {p["code"] for p in problems(on_store)} == {"heads", "orphan_blob"}, "the seal note and the orphan"
    counts = ("tasks", "events", "artifacts", "bytes_hashed")
    assert [getattr(on_store, c) for c in counts] == [getattr(on_folder, c) for c in counts]
    with intentlog.open(url, create=False) as ledger:  # the library's entry takes the same path
        assert problems(verify_ledger(ledger)) == problems(on_store)
        assert problems(verify_ledger(ledger, ["beta"])) == problems(verify_path(tmp_path / "ledger", ["beta"]))


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_the_same_damage_gives_the_same_findings_both_ways(url: str, tmp_path: Path, damage: str) -> None:
    folder = tmp_path / "ledger"
    build(folder, url, tmp_path / "receipts.jsonl")
    DAMAGE[damage](folder, url)
    on_folder, on_store = both(folder, url)
    assert not on_store.ok and not on_folder.ok, on_store.render()
    assert problems(on_store) == problems(on_folder)
    assert on_store.exit_code == on_folder.exit_code == 1
    assert (on_store.tasks, on_store.events) == (on_folder.tasks, on_folder.events)


def test_segments_that_do_not_make_one_stream_are_a_finding_not_a_crash(url: str, tmp_path: Path) -> None:
    build(tmp_path / "ledger", url, tmp_path / "receipts.jsonl")
    with intentlog.open(url) as ledger:  # appended on the store: one segment per append
        for n in range(3):
            ledger.task("alpha").append("note", {"n": n})
    client = client_of(url)
    keys = sorted(k for k, _ in client.scan("tasks/alpha/s"))
    client.delete(keys[-3])  # a hole in the middle of the stream
    storage = connect(url, write=False)
    report = verify_storage(storage.streams, storage.objects, where=url)
    found = [p for p in report.problems if p.code == "segments"]
    assert len(found) == 1 and found[0].task == "alpha" and "hole" in found[0].message, report.render()
    assert report.exit_code == 1
    assert not [p for p in report.problems if p.severity == "error" and p.task == "beta"], "beta is checked as ever"
    with pytest.raises(CorruptStream):  # what a local copy made by merge could not even show
        merge(url, tmp_path / "copy")
