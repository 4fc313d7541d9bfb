"""Credentials handed to the library in every place it records something, searched for in every byte afterwards.

A credential is found by its name (``api_key``, ``password``, ``cvv``, ``creds`` … at any
depth) or by its shape (a JWT, a provider key prefix, a bot token in a URL path, a Slack
webhook path, ``token <value>``), and the ledger's files, the report and an exported
bundle (folder and tar) are searched byte for byte. A backlog payload is the item's input,
read back from the record to run it: one holding a credential is refused, nothing written.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redaction_steps import (
    DB_PASSWORD,
    JWT,
    PROVIDER_KEY,
    RESULT_TOKEN,
    SPACE_TOKEN,
    TELEGRAM,
    leaky_failure,
    leaky_result,
)

import intentlog
from intentlog.bundle import export_bundle
from intentlog.errors import UsageError
from intentlog.report import render

API_KEY = "zq-apikey-4f8e2a91c7"
PASSWORD = "hunter2-Pa55word-x9"
URL_TOKEN = "qk7f93hd82jd01xm"
SLACK_PATH = "T0A1B2C3D/B4E5F6G7H/Zx9Yq8Wv7Ut6Sr5Qp4On3Ml2"
CVV = "8317"
CARD = "4111111111111111"
OTP = "551903"
REFRESH = "rf-Qw8Er7Ty6Ui5Op4"
ASSERTION = "as-Zm9vYmFyYmF6cXV4MTIz"
CREDS = "cr-Lm3Nb4Vc5Xz6"
GITHUB = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"
AWS_ID = "AKIAIOSFODNN7EXAMPL3"
ANTHROPIC = "sk-ant-api03-Xy7Wv6Ut5Sr4Qp3On2Ml1Kj0Ih9"
BEARER = "abc123def456ghi789jkl"

SECRETS = [
    API_KEY, PASSWORD, URL_TOKEN, SLACK_PATH.rsplit("/", 1)[1], CARD, REFRESH, ASSERTION, CREDS, GITHUB,
    AWS_ID, ANTHROPIC, BEARER, JWT, RESULT_TOKEN, PROVIDER_KEY, SPACE_TOKEN, TELEGRAM.split(":", 1)[1], DB_PASSWORD,
]  # fmt: skip
#: short values: only searched for where nothing else of the record could hold them by chance
SHORT = [CVV, OTP]
KEPT = ["blake3:" + "ab" * 32, "order-1001", "https://api.example.com/v1/charges", "12345"]


def _files(root: Path) -> Iterator[Path]:
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            yield p


def _leaks(data: bytes) -> list[str]:
    found = [s for s in SECRETS if s.encode() in data]
    found += [s for s in SHORT if f'"{s}"'.encode() in data or f" {s}".encode() in data]
    return found


def _leaks_in(root: Path) -> dict[str, list[str]]:
    out = {}
    for p in _files(root):
        got = _leaks(p.read_bytes())
        if got:
            out[str(p.relative_to(root))] = got
    return out


def _send(request: Any) -> bytes:
    return b'{"ok": true}'


def _send_fails(request: Any) -> bytes:
    raise ConnectionError(f"provider said: {GITHUB} is not valid (sent as Bearer {BEARER})")


def _record_everything(ledger: intentlog.Ledger) -> None:
    """Every place the library records what a caller or a person hands it, each given credentials."""
    t = ledger.task("leaky")
    request = {
        "model": "m-1",
        "order": "order-1001",
        "digest": KEPT[0],
        "url": KEPT[2],
        "notify": f"https://api.telegram.org/bot{TELEGRAM}/sendMessage",
        "webhook": f"https://hooks.slack.com/services/{SLACK_PATH}",
        "messages": [{"role": "user", "content": f"my session is {JWT}, key {ANTHROPIC}"}],
        "card": {"card_number": CARD, "cvv": CVV, "otp": OTP},
        "oauth": {"refresh": REFRESH, "client_assertion": ASSERTION, "creds": CREDS},
        "amount": 12345,
    }
    t.effect("charge", request, _send)
    with pytest.raises(intentlog.errors.EffectUnknown):
        t.effect("ping", {"q": 1}, _send_fails)
    t.append("signal.received", {"headers": {"X-Api-Key": API_KEY}, "text": f"aws {AWS_ID}", "n": 12345})
    call = t.prepare("approve-me", {"q": 2})
    t.request_approval("a", f"send with password={PASSWORD}?", binds=call)
    t.decide("a", "approve", by="ops", note=f"ok, used {GITHUB} and {PROVIDER_KEY}")
    t.checkpoint(
        "deploy",
        note=f"posted to https://hooks.slack.com/services/{SLACK_PATH}",
        revision=f"https://ci.example.com/build?token={URL_TOKEN}",
    )
    t.fail_task(f"gave up: token {SPACE_TOKEN} refused")
    b = ledger.backlog("jobs")
    b.add("ok", {"n": 1})
    b.add("bad", {"n": 2}, max_attempts=1)
    ledger.close()


def _run_backlog(ledger: intentlog.Ledger) -> None:
    b = ledger.backlog("jobs")
    b.run(_dispatch, until_idle=True, backoff=0.01)
    ledger.close()


def _dispatch(task: intentlog.Task, payload: Any) -> Any:
    return leaky_result(task, payload) if payload["n"] == 1 else leaky_failure(task, payload)


def _leaky_payloads() -> list[Any]:
    return [
        {"to": "a@example.com", "api_key": API_KEY},
        {"db": {"user": "app", "password": PASSWORD}},
        {"callback": f"https://example.com/hook?token={URL_TOKEN}"},
        {"text": f"deliver via https://api.telegram.org/bot{TELEGRAM}/sendMessage"},
        {"note": f"carry {JWT}"},
    ]


def _assert_clean(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    root = Path(ledger.root)
    assert _leaks_in(root) == {}
    assert _leaks(render(ledger)) == []
    out, tar = tmp_path / "bundle", tmp_path / "bundle.tar"
    export_bundle(root, out=out, tar=tar, check=False)
    assert _leaks_in(out) == {}
    assert _leaks(tar.read_bytes()) == []


def test_a_payload_holding_a_credential_is_refused_and_nothing_is_written(ledger: intentlog.Ledger) -> None:
    b = ledger.backlog("jobs")
    b.add("first", {"n": 0})
    ledger.close()
    before = {str(p): p.read_bytes() for p in _files(Path(ledger.root))}
    for i, payload in enumerate(_leaky_payloads()):
        with pytest.raises(UsageError, match=r"credential.*payload|payload.*credential"):
            b.add(f"leaky-{i}", payload)
        with pytest.raises(UsageError, match="credential"):
            b.add_many([{"item": f"many-{i}", "payload": payload}])
    ledger.close()
    assert {str(p): p.read_bytes() for p in _files(Path(ledger.root))} == before


def test_no_credential_reaches_the_ledger_the_report_or_a_bundle(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    _record_everything(ledger)
    _run_backlog(ledger)
    view = ledger.backlog("jobs").view()
    assert {i["item"]: i["state"] for i in view.to_json()["items"]} == {"ok": "done", "bad": "failed"}
    _assert_clean(ledger, tmp_path)
    # what is not a credential is kept as given
    data = b"".join(p.read_bytes() for p in _files(Path(ledger.root)))
    for kept in KEPT:
        assert kept.encode() in data, kept


# -- requests recorded before the shapes: still recognised, never sent again -------------------


def test_a_call_recorded_under_canon_2_resumes_without_drift(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request only today's rule redacts (a JWT in a text, a ``cvv``) hashes differently under
    ``intentlog-canon/3``; the call recorded under ``intentlog-canon/2`` still resumes."""
    import intentlog.effects.intent as effects
    from intentlog.eventlog.canonical import CANON_V1, CANON_V2, CANON_VERSION, canonicalize

    # a Bearer token only the second rule redacts, a JWT and a cvv only the third
    request = {"q": 1, "card": {"cvv": CVV}, "text": f"use {JWT}", "note": "sent with Bearer tk-0987654321abc"}
    digests = {canonicalize(request, version=v).digest for v in (CANON_V1, CANON_V2, CANON_VERSION)}
    assert len(digests) == 3
    t = ledger.task("old")
    canon = effects.canonicalize
    with monkeypatch.context() as m:
        m.setattr(effects, "canonicalize", lambda value, **kw: canon(value, **{**kw, "version": CANON_V2}))
        t.prepare("k", request)
    sent: list[Any] = []
    assert t.effect("k", request, lambda r: sent.append(r) or b'{"ok": 1}') == b'{"ok": 1}'
    assert len(sent) == 1
    assert t.effect("k", request, lambda r: sent.append(r) or b'{"ok": 2}') == b'{"ok": 1}'
    assert len(sent) == 1


def test_an_http_call_recorded_under_canon_2_is_not_sent_again(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``intentlog.http`` keys an unnamed request by its hash: the call an older intentlog recorded
    under its ``intentlog-canon/2`` key is continued (replayed), not opened again and re-sent."""
    from fake_llm_server import FakeLLMServer, read_receipts

    import intentlog.effects.intent as effects
    import intentlog.http
    import intentlog.http._transport as transport
    from intentlog.eventlog.canonical import CANON_V2

    task = ledger.task("old-http")
    text = f"my session is {JWT}, sent with Bearer tk-0987654321abc"  # canon/1, /2 and /3 hash it apart
    chat = {"model": "gpt-fake", "messages": [{"role": "user", "content": text}], "cvv": CVV}
    with FakeLLMServer(tmp_path / "receipts.jsonl") as server:
        canon, plan = effects.canonicalize, transport.plan_for
        with monkeypatch.context() as m:
            m.setattr(effects, "canonicalize", lambda value, **kw: canon(value, **{**kw, "version": CANON_V2}))
            m.setattr(transport, "plan_for", lambda request, o, version=CANON_V2: plan(request, o, CANON_V2))
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


# -- identities are recorded as given: one that looks like a credential is refused ----------------


def test_a_key_or_an_item_id_that_looks_like_a_credential_is_refused(ledger: intentlog.Ledger) -> None:
    """A call key finds its call again and an item id names its task: redacted, they would name
    nothing (and a re-run would send again), so one holding a credential shape is refused."""
    t = ledger.task("ids")
    t.append("note", {"n": 1})
    ledger.close()
    before = {str(p): p.read_bytes() for p in _files(Path(ledger.root))}
    for key in (f"notify-{PROVIDER_KEY}", f"hook https://hooks.slack.com/services/{SLACK_PATH}", f"jwt {JWT}"):
        with pytest.raises(UsageError, match="credential") as caught:
            t.effect(key, {"q": 1}, _send)
        assert PROVIDER_KEY not in str(caught.value) and JWT not in str(caught.value)
    with pytest.raises(UsageError, match="credential"):
        ledger.backlog("jobs").add(GITHUB, {"n": 1})
    ledger.close()
    assert {str(p): p.read_bytes() for p in _files(Path(ledger.root))} == before
    assert t.effect("order-1001:charge", {"q": 1}, _send) == b'{"ok": true}'  # ordinary keys are kept
