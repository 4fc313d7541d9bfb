"""Every seal on the store is a lower bound (a real SeaweedFS): the furthest head any seal recorded is checked.

Seals are numbered objects, created only if absent, never replaced: two sealers racing can
leave a later number holding shorter heads than an earlier one. verify and export therefore
check each stream against the furthest head *any* seal recorded for it, and seals that
contradict each other (another stream id, or another digest at the same seq) are a finding.
:func:`seal_store` lists the seals before it reads the streams and reads them again after
losing a number, so the seals it creates only grow. Seal numbers are 12 ASCII digits;
the last one refuses to seal rather than create a seal nothing would read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import s3_server
from click.testing import CliRunner

import intentlog
from intentlog.bundle import export_bundle
from intentlog.checker import verify_ledger, verify_storage
from intentlog.cli import main
from intentlog.errors import LedgerError
from intentlog.heads.codec import decode_heads, encode_heads
from intentlog.s3 import S3Client, connect, parse_s3_url
from intentlog.s3 import seals as seals_module
from intentlog.s3.seals import all_seals, seal_store


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        for n in range(4):
            ledger.task("alpha").append("note", {"n": n})
    monkeypatch.chdir(tmp_path)
    return url


def client_of(url: str) -> S3Client:
    return S3Client(parse_s3_url(url))


def keys(client: S3Client, folder: str) -> list[str]:
    return sorted(k for k, _ in client.scan(folder))


def append(url: str, *values: int) -> None:
    with intentlog.open(url) as ledger:
        for v in values:
            ledger.task("alpha").append("note", {"more": v})


def cut_alpha_after(client: S3Client, keep: int) -> None:
    """Delete alpha's segments after number ``keep`` (and its checkpoints): its tail cut off."""
    for key in keys(client, "tasks/alpha/s"):
        if int(key.rsplit("/", 1)[1]) > keep:
            client.delete(key)
    for key in keys(client, "tasks/alpha/c"):
        client.delete(key)


def verify_codes(url: str) -> list[tuple[str, str]]:
    storage = connect(url, write=False)
    report = verify_storage(storage.streams, storage.objects, where=url, seals=all_seals(storage.client))
    return [(p.severity, p.code) for p in report.problems if p.severity == "error"]


def test_a_weaker_later_seal_does_not_hide_a_cut_an_earlier_seal_anchored(store: str, tmp_path: Path) -> None:
    client = client_of(store)
    first = seal_store(client)
    weak = client.get("heads/000000000001.json")
    assert first.endswith("heads/000000000001.json") and weak is not None
    keep = max(int(k.rsplit("/", 1)[1]) for k in keys(client, "tasks/alpha/s"))
    append(store, 1, 2)
    seal_store(client)  # heads/2: alpha at seq 6
    assert client.create("heads/000000000003.json", weak)  # a racing sealer's stale read, numbered last
    assert verify_codes(store) == []
    cut_alpha_after(client, keep)  # alpha ends at seq 4 again: what heads/1 and heads/3 anchor
    assert connect(store, write=False).streams.read("alpha").count(b"\n") == 5
    assert verify_codes(store) == [("error", "truncated")]
    r = CliRunner().invoke(main, ["--root", store, "verify", "--json"])
    assert r.exit_code == 1 and [p["code"] for p in orjson.loads(r.output)["problems"]].count("truncated") == 1
    with intentlog.open(store) as ledger:
        found = verify_ledger(ledger)
    assert [p.code for p in found.problems if p.severity == "error"] == ["truncated"]
    assert "sealed seq 6" in next(p.message for p in found.problems if p.code == "truncated")
    with pytest.raises(LedgerError, match="sealed seq 6"):
        export_bundle(store, out=tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()


def test_seals_that_contradict_each_other_are_a_finding_and_export_refuses(store: str, tmp_path: Path) -> None:
    client = client_of(store)
    seal_store(client)
    body = client.get("heads/000000000001.json")
    assert body is not None
    heads = decode_heads(body)
    forged = dataclasses.replace(heads["alpha"], head="blake3:" + "0" * 64)
    assert client.create("heads/000000000002.json", encode_heads({"alpha": forged}))
    before = {k: client.get(k) for k in keys(client, "tasks")}
    found = verify_codes(store)
    assert ("error", "heads") in found
    storage = connect(store, write=False)
    report = verify_storage(storage.streams, storage.objects, where=store, seals=all_seals(storage.client))
    msg = next(p.message for p in report.problems if p.code == "heads" and "000000000002" in p.message)
    assert "000000000001" in msg and "seq 4" in msg
    with pytest.raises(LedgerError, match="contradict"):
        export_bundle(store, out=tmp_path / "bundle")
    assert {k: client.get(k) for k in keys(client, "tasks")} == before


def test_a_sealer_that_loses_its_number_reads_the_streams_again(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client_a, client_b = client_of(store), client_of(store)
    real_scan = client_a.scan
    fired: list[str] = []

    def scan(folder: str, start_after: str | None = None) -> Iterator[tuple[str, int]]:
        if folder == seals_module.SEALS and not fired:  # another sealer, after more events, while A seals
            append(store, 1, 2)
            fired.append(seal_store(client_b))
        return real_scan(folder, start_after)

    monkeypatch.setattr(client_a, "scan", scan)
    mine = seal_store(client_a)
    assert fired and fired[0].endswith("heads/000000000001.json") and mine.endswith("heads/000000000002.json")
    got = [decode_heads(data)["alpha"].seq for _, data in all_seals(client_b)]
    assert got == [6, 6], "the seal numbered last holds heads at least as far as every seal before it"


def test_seal_numbers_are_twelve_ascii_digits_and_the_last_refuses(store: str) -> None:
    client = client_of(store)
    empty = encode_heads({})
    assert client.create("heads/\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0669.json", empty)
    assert seal_store(client).endswith("heads/000000000001.json"), "non-ASCII digits are not a seal number"
    assert client.create("heads/999999999999.json", empty)
    before = keys(client, "heads")
    with pytest.raises(LedgerError, match="999999999999"):
        seal_store(client)
    assert keys(client, "heads") == before, "nothing was created past the width"


def test_seal_json_reports_the_bytes_of_the_seal_it_created(store: str) -> None:
    client = client_of(store)
    r = CliRunner().invoke(main, ["--root", store, "seal", "--json"])
    assert r.exit_code == 0, r.output
    out = orjson.loads(r.output)
    key = "heads/" + out["sealed"].rsplit("/heads/", 1)[1]
    body = client.get(key)
    assert body is not None and orjson.loads(body) == out["heads"]
