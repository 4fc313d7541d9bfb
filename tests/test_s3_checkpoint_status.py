"""On a ledger on the store (a real SeaweedFS), status() names the checkpoint latest_checkpoint() counts.

The newest checkpoint's evidence object is replaced by other bytes: both pass it over for
the one before, as they do in a folder.
"""

from __future__ import annotations

import pytest
import s3_server

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.artifacts.inline import INLINE_MAX
from intentlog.s3 import S3Client, parse_s3_url

BIG = b"z" * (INLINE_MAX + 100)


def test_status_and_latest_checkpoint_skip_a_checkpoint_whose_stored_evidence_is_corrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        task = ledger.task("t")
        task.checkpoint("draft", evidence=[b"draft"])
        task.checkpoint("review", evidence=[BIG + b"r"], status="failed")
    client = S3Client(parse_s3_url(url))
    hexd = digest_bytes(BIG + b"r").split(":", 1)[1]
    key = f"objects/{hexd[:2]}/{hexd[2:]}"
    assert client.get(key) is not None
    client.delete(key)
    assert client.create(key, BIG + b"X")
    with intentlog.open(url, create=False) as ledger:
        t = ledger.task("t")
        cp = t.latest_checkpoint()
        st = t.status()
        assert cp is not None and cp.phase == "draft" and [s[1] for s in cp.skipped] == ["review"]
        assert st.phase == "draft" and st.checkpoint is not None and st.checkpoint.seq == cp.seq
        assert st.state != "paused for review"
