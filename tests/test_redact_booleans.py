"""A boolean or null is never a credential, whatever names it (``intentlog-canon/4``).

``{"otp_enabled": true}`` says a second factor is on, not what it is. Redacted like a
secret (as ``intentlog-canon/3`` did), ``true`` and ``false`` were one request: a changed
flag was no ``DRIFT``. Today they are kept, in requests, in recorded events and in texts;
a call recorded under ``intentlog-canon/3`` (or earlier) still resumes and is never sent again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog.eventlog.canonical import CANON_V3, CANON_VERSION, canonicalize
from intentlog.eventlog.redaction import REDACTED, scrub_note, scrub_text

PASSWORD = "hunter2-Pa55word-x9"


def _ok(_request: Any) -> bytes:
    return b'{"ok": 1}'


def _bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["otp_enabled", "password", "api_key", "cvv", "refresh_token", "x-api-key"])
@pytest.mark.parametrize("value", [True, False, None])
def test_a_boolean_or_null_under_a_credential_name_is_kept_and_hashed(name: str, value: Any) -> None:
    c = canonicalize({name: value, "q": 1})
    assert json.loads(c.data) == {name: value, "q": 1}
    assert c.redacted == () and c.kept == (f"$.{name}",)
    others = {canonicalize({name: v, "q": 1}).digest for v in (True, False, None) if v is not value}
    assert c.digest not in others  # each flag its own request
    old = canonicalize({name: value, "q": 1}, version=CANON_V3)
    assert json.loads(old.data)[name] == REDACTED  # what canon/3 recorded (and still recognises)


@pytest.mark.parametrize("value", ["551903", 551903, 0.5, "true", ["a"], {"v": True}, ""])
def test_anything_else_under_a_credential_name_is_still_redacted(value: Any) -> None:
    c = canonicalize({"otp": value})
    assert json.loads(c.data) == {"otp": REDACTED}
    assert c.kept == ()


def test_a_changed_flag_under_a_credential_name_is_drift(ledger: intentlog.Ledger) -> None:
    with ledger.task("t") as task:
        task.effect("k", {"otp_enabled": True, "q": 1}, _ok)
    before = _bytes(ledger.root)
    with ledger.task("t") as task, pytest.raises(intentlog.ResumeRefused) as err:
        task.effect("k", {"otp_enabled": False, "q": 1}, _ok)
    assert "DRIFT" in str(err.value)
    assert _bytes(ledger.root) == before


def test_a_flag_in_a_text_is_kept_and_a_value_beside_it_is_not() -> None:
    text = f"otp_enabled=true, mfa_secret: null, api_key=False and password={PASSWORD}"
    for scrub in (scrub_text, scrub_note):
        got = scrub(text)
        assert got is not None
        assert "otp_enabled=true" in got and "mfa_secret: null" in got and "api_key=False" in got
        assert PASSWORD not in got and f"password={REDACTED}" in got


def test_a_recorded_event_keeps_its_flags(ledger: intentlog.Ledger) -> None:
    task = ledger.task("t")
    ev = task.append("note", {"otp_enabled": False, "api_key": None, "password": PASSWORD})
    assert ev.data == {"otp_enabled": False, "api_key": None, "password": REDACTED}
    data = (ledger.root / "tasks" / "t.jsonl").read_bytes()
    assert b'"otp_enabled":false' in data and PASSWORD.encode() not in data


# -- calls recorded under canon/3: still recognised, never sent again ----------------------------


def test_a_call_recorded_under_canon_3_resumes_without_drift(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    import intentlog.effects.intent as effects

    request = {"q": 1, "otp_enabled": True, "cvc_check": None}
    assert canonicalize(request).digest != canonicalize(request, version=CANON_V3).digest
    t = ledger.task("old")
    canon = effects.canonicalize
    with monkeypatch.context() as m:
        m.setattr(effects, "canonicalize", lambda value, **kw: canon(value, **{**kw, "version": CANON_V3}))
        t.prepare("k", request)
    manifest = next(e for e in t.events() if e.kind == "call.manifest")
    assert manifest.data["canon"] == CANON_V3
    sent: list[Any] = []
    assert t.effect("k", request, lambda r: sent.append(r) or b'{"ok": 1}') == b'{"ok": 1}'
    assert t.effect("k", request, lambda r: sent.append(r) or b'{"ok": 2}') == b'{"ok": 1}'
    assert len(sent) == 1
    assert CANON_VERSION == "intentlog-canon/4"


def test_an_http_call_recorded_under_canon_3_is_not_sent_again(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing in the request is redacted today, only kept: the older key is still looked for."""
    from fake_llm_server import FakeLLMServer, read_receipts

    import intentlog.effects.intent as effects
    import intentlog.http
    import intentlog.http._transport as transport

    task = ledger.task("old-http")
    chat = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}], "otp_enabled": True}
    with FakeLLMServer(tmp_path / "receipts.jsonl") as server:
        canon, plan = effects.canonicalize, transport.plan_for
        with monkeypatch.context() as m:
            m.setattr(effects, "canonicalize", lambda value, **kw: canon(value, **{**kw, "version": CANON_V3}))
            m.setattr(transport, "plan_for", lambda request, o, version=CANON_V3: plan(request, o, CANON_V3))
            with intentlog.http.client(task, base_url=server.url) as c:
                first = c.post("/v1/chat/completions", json=chat)
        intentlog.http.restart(task)
        with intentlog.http.client(task, base_url=server.url) as c:
            assert c.post("/v1/chat/completions", json=chat).content == first.content
        assert len(read_receipts(tmp_path / "receipts.jsonl")) == 1
        rp = intentlog.http.replay(task)
        with rp.client(base_url=server.url) as c:
            assert c.post("/v1/chat/completions", json=chat).content == first.content
        assert rp.misses == []
