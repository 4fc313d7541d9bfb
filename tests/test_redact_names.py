"""Credential names the rules missed before ``intentlog-canon/4``, and who acted (``by``) as a person gave it.

``DB_PASS``, ``user_pw``, an Azure ``AccountKey``, ``auth_key``, ``hmac_key``, ``session_key``,
``webhook_key``, ``app_key`` were recorded in clear (a connection string in an error, a field
of an event); an approval's, a failure's or a checkpoint's ``by`` too (``--by "pw=…"``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import intentlog
from intentlog.eventlog.canonical import CANON_V3, canonicalize
from intentlog.eventlog.redaction import REDACTED, is_credential_name, scrub_note

SECRET = "Qs3cr3tVa1ue84hf"

NEW_NAMES = [
    "DB_PASS", "smtp_pass", "pass", "user_pw", "pw", "AccountKey", "auth_key", "hmac_key", "session_key",
    "webhook_key", "service_key", "storage_key", "admin_key", "deploy_key", "SharedKey", "DD_APP_KEY",
    "application_key", "code_verifier", "device_code", "mfa_code",
]  # fmt: skip
NOT_NAMES = ["boarding_pass", "first_pass", "bypass", "compass", "primary_key", "public_key", "cache_key", "code"]


@pytest.mark.parametrize("name", NEW_NAMES)
def test_a_name_added_in_generation_4_is_a_credential_name_and_canon_3_is_unchanged(name: str) -> None:
    assert is_credential_name(name)
    assert not is_credential_name(name, 3)  # canon/3's requests hash as they did
    assert canonicalize({name: SECRET}).data == b'{"%s":"[REDACTED]"}' % name.encode()
    assert SECRET.encode() in canonicalize({name: SECRET}, version=CANON_V3).data


@pytest.mark.parametrize("name", NOT_NAMES)
def test_names_that_only_look_alike_are_kept(name: str) -> None:
    assert not is_credential_name(name)


@pytest.mark.parametrize(
    "text",
    [
        f"DefaultEndpointsProtocol=https;AccountName=acc;AccountKey={SECRET}==;EndpointSuffix=core.windows.net",
        f"connect failed: DB_PASS={SECRET}",
        f"auth_key: {SECRET}",
    ],
)
def test_a_text_naming_them_is_scrubbed(text: str) -> None:
    got = scrub_note(text)
    assert got is not None and SECRET not in got and REDACTED in got


def test_who_acted_is_scrubbed_like_a_note_wherever_it_is_recorded(ledger: intentlog.Ledger) -> None:
    by = f"ops pw={SECRET}"
    t = ledger.task("t")
    t.request_approval("a", "pay?")
    decided = t.decide("a", "approve", by=by)
    assert decided.data["by"] == f"ops pw={REDACTED}"  # the event returned holds what was recorded
    t.checkpoint("p", by=by)
    call = t.prepare("k", {"q": 1})
    t.fail(call.call_id, "given up", by=by)
    t.fail_task("stop", by=by)
    data = b"".join(p.read_bytes() for p in Path(ledger.root).rglob("*.jsonl"))
    assert SECRET.encode() not in data
    assert data.count(b"ops pw=[REDACTED]") == 4
