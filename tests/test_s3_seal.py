"""seal on a ledger on the store (a real SeaweedFS): numbered seal objects, created only if absent.

A seal is never a replacement: each ``intentlog seal`` creates the next ``heads/N.json``
with ``If-None-Match: *``. verify then sees a truncated tail exactly as it sees one in a
folder sealed with the same bytes (the same findings, field for field), and export
refuses a stream its seal contradicts.
"""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
import pytest
import s3_server
from click.testing import CliRunner

import intentlog
from intentlog.bundle import export_bundle
from intentlog.checker import verify_path
from intentlog.cli import main
from intentlog.errors import LedgerError
from intentlog.merge import merge
from intentlog.s3 import S3Client, connect, parse_s3_url
from intentlog.s3.seals import latest_seal, seal_store, stored_heads


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        for name in ("alpha", "beta"):
            for n in range(4):
                ledger.task(name).append("note", {"task": name, "n": n})
    monkeypatch.chdir(tmp_path)
    return url


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def client_of(url: str) -> S3Client:
    return S3Client(parse_s3_url(url))


def keys(url: str, folder: str = "") -> list[str]:
    return sorted(k for k, _ in client_of(url).scan(folder))


def test_seal_creates_the_next_seal_object_and_never_replaces_one(store: str) -> None:
    streams_before = keys(store, "tasks")
    code, out = run("--root", store, "seal", "--json")
    assert code == 0, out
    first = orjson.loads(out)
    assert first["sealed"].endswith("/heads/000000000001.json")
    assert {t: (h["seq"], h["events"]) for t, h in first["heads"]["tasks"].items()} == {
        "alpha": (4, 5), "beta": (4, 5)
    }
    body = client_of(store).get("heads/000000000001.json")
    with intentlog.open(store) as ledger:
        ledger.task("alpha").append("note", {"after": "the seal"})
    code, out = run("--root", store, "seal")
    assert code == 0 and out.strip().endswith("/heads/000000000002.json"), out
    assert client_of(store).get("heads/000000000001.json") == body, "the first seal is kept as it was"
    heads = stored_heads(client_of(store))
    assert heads is not None and heads["alpha"].seq == 5 and heads["beta"].seq == 4
    assert keys(store, "heads") == ["heads/000000000001.json", "heads/000000000002.json"]
    added = [k for k in keys(store, "tasks") if k not in streams_before]
    assert added and all(k.startswith("tasks/alpha/s/") for k in added), "the seals wrote nothing to the streams"


def test_racing_sealers_each_create_their_own_number(store: str) -> None:
    client = client_of(store)
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(seal_store(client_of(store)))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 4
    assert keys(store, "heads") == [f"heads/{n:012d}.json" for n in range(1, 5)]
    assert latest_seal(client) is not None


def test_a_truncated_tail_is_seen_as_in_a_folder_sealed_with_the_same_bytes(store: str, tmp_path: Path) -> None:
    code, out = run("--root", store, "seal")
    assert code == 0, out
    code, out = run("--root", store, "verify", "--json")
    assert code == 0 and not [p for p in orjson.loads(out)["problems"] if p["code"] == "heads"], out
    folder = tmp_path / "copy"
    merge(store, folder)
    found = latest_seal(client_of(store))
    assert found is not None
    (folder / "heads.json").write_bytes(found[1])
    client = client_of(store)
    for key in keys(store, "tasks/beta/s")[-2:]:  # the release and the last append: the tail cut off
        client.delete(key)
    cut = connect(store, write=False).streams.read("beta")
    assert cut.count(b"\n") == 4
    (folder / "tasks" / "beta.jsonl").write_bytes(cut)
    code, out = run("--root", store, "verify", "--json")
    on_store = orjson.loads(out)
    assert code == 1 and [p["code"] for p in on_store["problems"] if p["severity"] == "error"] == ["truncated"]
    on_folder = verify_path(folder, workspace=tmp_path / "none")
    assert on_store["problems"] == [p.to_json() for p in on_folder.problems]
    with pytest.raises(LedgerError, match="sealed seq 4"):
        export_bundle(store, out=tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()
