"""The redaction rule on a ledger in an object store (a real SeaweedFS): no planted credential in any stored byte.

The rule applies where records are made (the stream core, the recorders), before the
storage is chosen, so a store ledger holds exactly what a folder ledger holds: the same
scenario as ``test_redaction_shapes``, every object under the prefix, the report and an
exported bundle searched for every credential.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import s3_server
from test_redaction_shapes import KEPT, _files, _leaks, _leaks_in, _leaky_payloads, _record_everything, _run_backlog

import intentlog
from intentlog.bundle import export_bundle
from intentlog.errors import UsageError
from intentlog.report import render


def test_no_credential_reaches_the_store_the_report_or_a_bundle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        _record_everything(ledger)
        for i, payload in enumerate(_leaky_payloads()):
            with pytest.raises(UsageError, match="credential"):
                ledger.backlog("jobs").add(f"leaky-{i}", payload)
        _run_backlog(ledger)
        view = ledger.backlog("jobs").view().to_json()
        assert {i["item"]: i["state"] for i in view["items"]} == {"ok": "done", "bad": "failed"}
        page = render(ledger)
    stored = s3_server.snapshot(url)
    assert stored, "the scenario stored nothing"
    assert {key: got for key, data in stored.items() if (got := _leaks(data))} == {}
    assert _leaks(page) == []
    out, tar = tmp_path / "bundle", tmp_path / "bundle.tar"
    export_bundle(url, out=out, tar=tar, check=False)
    assert any(p.suffix == ".jsonl" for p in _files(out))
    assert _leaks_in(out) == {}
    assert _leaks(tar.read_bytes()) == []
    everything = b"".join(stored.values())
    for kept in KEPT:
        assert kept.encode() in everything, kept
