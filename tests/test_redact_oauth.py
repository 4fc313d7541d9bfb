"""An OAuth authorization code is a credential where OAuth puts one; ``code`` elsewhere is not.

It redeems tokens once, so it is redacted in a redirect URL's query (``?code=`` /
``&code=``), in a token request's form (``code=``) and in a JSON token request (beside
``grant_type``); so are a PKCE ``code_verifier`` and a device flow's ``device_code``
(``intentlog-canon/4``). ``state``, ``nonce``, ``code_challenge``, ``client_id`` and
``redirect_uri`` travel in the open by design and redeem nothing: kept, as is an error's
or a country's ``code``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog.eventlog.canonical import CANON_V3, canonicalize
from intentlog.eventlog.redaction import REDACTED, scrub_note
from intentlog.http._wire import plan_request

CODE = "SplxlOBeZQQYbYS6WxSbIA"
VERIFIER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
DEVICE = "GmRhmhcxhwAzkoEqiMEg_DnyEysNkuNhszIySk9eS"
STATE = "af0ifjsldkj"
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def _files(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


@pytest.mark.parametrize(
    "url", [f"https://app.example/cb?code={CODE}&state={STATE}", f"https://app.example/cb?state={STATE}&code={CODE}"]
)
def test_a_code_in_a_redirect_url_is_redacted_everywhere_it_is_recorded(ledger: intentlog.Ledger, url: str) -> None:
    task = ledger.task("t")
    task.append("app.redirect", {"url": url})
    task.checkpoint("back", note=f"returned to {url}")
    task.effect("k", {"callback": url}, lambda r: b"{}")
    with pytest.raises(ValueError):
        task.step(name="s")(lambda: (_ for _ in ()).throw(ValueError(f"bad redirect {url}")))()
    assert scrub_note(url) == url.replace(CODE, REDACTED)
    data = _files(ledger.root)
    assert CODE.encode() not in data
    assert STATE.encode() in data  # the state is kept


def test_a_token_request_form_redacts_the_code_and_the_verifier_and_keeps_the_rest() -> None:
    body = (
        f"grant_type=authorization_code&code={CODE}&code_verifier={VERIFIER}"
        f"&redirect_uri=https%3A%2F%2Fapp%2Fcb&client_id=app-1&state={STATE}"
    ).encode()
    plan = plan_request(
        "POST", "https://idp.example/token", [(b"content-type", b"application/x-www-form-urlencoded")], body
    )
    form = dict(json.loads(plan.canonical.data)["body"]["form"])
    assert form["code"] == REDACTED and form["code_verifier"] == REDACTED
    assert form["state"] == STATE and form["client_id"] == "app-1" and form["redirect_uri"] == "https://app/cb"
    assert CODE in plan.secrets and VERIFIER in plan.secrets  # scrubbed from the stored response too
    old = plan_request(
        "POST",
        "https://idp.example/token",
        [(b"content-type", b"application/x-www-form-urlencoded")],
        body,
        version=CANON_V3,
    )
    assert old.canonical.digest != plan.canonical.digest  # canon/3 recorded them: still recognised, see below


def test_a_json_token_request_redacts_its_code_and_a_code_elsewhere_is_kept() -> None:
    grant = {"grant_type": "authorization_code", "code": CODE, "code_challenge": CHALLENGE, "nonce": "n-0S6_WzA2Mj"}
    device = {"grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": DEVICE}
    assert json.loads(canonicalize(grant).data) == {**grant, "code": REDACTED}
    assert json.loads(canonicalize(device).data) == {**device, "device_code": REDACTED}
    plain = {"code": "US", "error": {"code": "E_TIMEOUT", "status": 504}, "zip": {"code": "75001"}}
    assert json.loads(canonicalize(plain).data) == plain


def test_a_flow_recorded_under_canon_3_resumes_without_drift(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    import intentlog.effects.intent as effects

    request = {"grant_type": "authorization_code", "code": CODE, "mfa_code": "40981234"}
    t = ledger.task("old")
    canon = effects.canonicalize
    with monkeypatch.context() as m:
        m.setattr(effects, "canonicalize", lambda value, **kw: canon(value, **{**kw, "version": CANON_V3}))
        t.prepare("k", request)
    sent: list[Any] = []
    assert t.effect("k", request, lambda r: sent.append(r) or b'{"ok": 1}') == b'{"ok": 1}'
    assert t.effect("k", request, lambda r: sent.append(r) or b'{"ok": 2}') == b'{"ok": 1}'
    assert len(sent) == 1
