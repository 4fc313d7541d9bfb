"""Credentials never reach the record, whatever the caller configures (docs/effects.md, "Redaction").

Every placement a credential can take — a field name (any case, any separator, nested,
camelCase), a header pair, a header line or a bare ``Bearer`` token inside a string, a URL's
user-info or query, the same value repeated elsewhere, heartbeat info, a request builder's
exception, a send's exception, a provider's failure reason and body, an interpreter's
exception, reconciliation evidence, a session's messages, and ``intentlog.http`` with a
real ``httpx`` client against a loopback server — is driven through the public API, and
the distinctive secret is then searched for in **every byte** of the ledger folder
(streams, objects, quarantine, heads, everything) and of an exported bundle (folder and
tar). The other side is pinned too: fields that merely mention tokens (``max_tokens``,
``token_count``, ``tokenizer``, ``page_token``, ``author`` …) keep their values, and a
request without credentials hashes exactly as its plain canonical JSON.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import intentlog
from intentlog.bundle import export_bundle
from intentlog.eventlog.canonical import CANON_V1, MAX_DEPTH

SECRET = "zq-SEKRET-7f3a91c2e8d4"  # distinctive: found nowhere by chance
OTHER = "yk-OTHER-0b5c6d7e8f9a"  # a second credential, for placements with two


def _every_file(root: Path) -> Iterator[Path]:
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            yield p


def _leaks(root: Path, needles: tuple[str, ...]) -> list[str]:
    """Every file under ``root`` holding one of ``needles`` (raw, or base64 as in a Basic header)."""
    forms = [n.encode() for n in needles]
    forms += [base64.b64encode(f"user:{n}".encode()) for n in needles]
    return [str(p.relative_to(root)) for p in _every_file(root) if any(f in p.read_bytes() for f in forms)]


def _assert_clean(ledger: intentlog.Ledger, tmp_path: Path, *needles: str) -> None:
    """No byte of the ledger, nor of its exported bundle (folder and tar), holds a needle."""
    needles = needles or (SECRET,)
    root = Path(ledger.root)
    assert any(p.suffix == ".jsonl" for p in _every_file(root)), "the scenario recorded nothing"
    assert _leaks(root, needles) == []
    out, tar = tmp_path / "bundle", tmp_path / "bundle.tar"
    export_bundle(root, out=out, tar=tar, check=False)
    assert _leaks(out, needles) == []
    assert not any(n.encode() in tar.read_bytes() for n in needles)


def _record(task: intentlog.Task) -> str:
    """The stream and every stored object of ``task``, as text (to assert what *is* recorded)."""
    root = Path(task.ledger.root)
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in _every_file(root))


def _ok(_request: Any) -> bytes:
    return b'{"ok": true}'


def _effect(request: Any, send: Callable[[Any], Any] = _ok, **kw: Any) -> Callable[[intentlog.Task], Any]:
    def run(task: intentlog.Task) -> Any:
        return task.effect("k", request, send, **kw)

    return run


def _raises(exc: type[BaseException], run: Callable[[intentlog.Task], Any]) -> Callable[[intentlog.Task], Any]:
    def wrapped(task: intentlog.Task) -> Any:
        with pytest.raises(exc):
            run(task)

    return wrapped


# -- names -----------------------------------------------------------------------------------

CREDENTIAL_NAMES = [
    "api_key",
    "OPENAI_API_KEY",
    "access-token",
    "client-secret",
    "private-key",
    "secret_key",
    "aws_secret_access_key",
    "passwd",
    "pwd",
    "password",
    "bearer",
    "credentials",
    "api_token",
    "apiKey",
    "X-Api-Key",
    "accessToken",
    "Authorization",
    "proxy-authorization",
    "auth",
    "Cookie",
    "set-cookie",
    "db.password",
    "github token",
    "clientSecret",
    "ACCESS_TOKEN",
    "id_token",
    "x-auth-token",
    "ocp-apim-subscription-key",
    "accesstoken",
]

NOT_CREDENTIALS = [
    "max_tokens",
    "max_completion_tokens",
    "token_count",
    "prompt_tokens",
    "tokens",
    "tokenizer",
    "token_type",
    "page_token",
    "next_page_token",
    "eos_token",
    "author",
    "authority",
    "cache_key",
    "idempotency_key",
    "public_key",
    "key",
    "session_id",
    "model",
    "keyboard",
    "secretary_name_len",  # a part is matched whole: "secretary" is not "secret"
]


def _send_receiving(seen: list[Any]) -> Callable[[Any], bytes]:
    def send(request: Any) -> bytes:
        seen.append(request)
        return b"{}"

    return send


@pytest.mark.parametrize("name", CREDENTIAL_NAMES)
def test_credential_names_are_redacted_at_any_depth(ledger: intentlog.Ledger, tmp_path: Path, name: str) -> None:
    """A credential name (any case, separator, camelCase) is redacted top-level and nested; send gets the value."""
    seen: list[Any] = []
    task = ledger.task("names")
    request = {"model": "m", name: SECRET, "cfg": {"deep": [{"auth_config": {name: OTHER}}]}}
    task.effect("k", request, _send_receiving(seen))
    assert seen == [request]  # the provider gets the credential; only the record does not
    manifest = next(e for e in task.events() if e.kind == "call.manifest")
    assert f"$.{name}" in manifest.data["redacted"]
    _assert_clean(ledger, tmp_path, SECRET, OTHER)


@pytest.mark.parametrize("name", NOT_CREDENTIALS)
def test_fields_that_only_mention_tokens_keep_their_values(name: str) -> None:
    """Not a credential: kept as given, so it hashes (changing it changes the request hash)."""
    a = intentlog.canonicalize({name: "value-1", "n": 1})
    b = intentlog.canonicalize({name: "value-2", "n": 1})
    assert a.redacted == ()
    assert orjson.loads(a.data) == {name: "value-1", "n": 1}
    assert a.digest != b.digest


def test_a_plain_request_hashes_as_its_canonical_json() -> None:
    """Legitimate fields and prose are untouched: the canonical bytes are the sorted JSON of the request."""
    request = {
        "model": "gpt",
        "max_tokens": 256,
        "token_count": 12,
        "prompt_tokens": 10,
        "tokenizer": "cl100k",
        "author": "ann",
        "page_token": "p-2",
        "messages": [
            {"role": "user", "content": "The bearer of this letter is my friend. Ratio 1:2, x=3."},
            {"role": "user", "content": "See https://example.com/a?page=2&q=tokens and mailto:ann@example.com"},
        ],
        "headers": [["Accept", "application/json"], ["X-Trace", "t-1"]],
    }
    c = intentlog.canonicalize(request)
    assert c.redacted == ()
    assert c.data == orjson.dumps(request, option=orjson.OPT_SORT_KEYS)
    assert intentlog.request_hash(request) == intentlog.request_hash(dict(reversed(list(request.items()))))


# -- caller rules are added to the defaults --------------------------------------------------


def test_caller_names_add_to_the_defaults(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    """redact=["customer_ref"] still redacts api_key, a Bearer token and a password; the manifest names the rule."""
    task = ledger.task("extra")
    request = {
        "customer_ref": OTHER,
        "api_key": SECRET,
        "headers": {"Authorization": f"Bearer {SECRET}x"},
        "password": SECRET[::-1],
    }
    task.effect("k", request, _ok, redact=["customer_ref"])
    _assert_clean(ledger, tmp_path, SECRET, OTHER, SECRET[::-1])
    manifest = next(e for e in task.events() if e.kind == "call.manifest")
    assert manifest.data["redaction"] == {"defaults": True, "names": ["customer_ref"], "hook": None}
    assert sorted(manifest.data["redacted"]) == [
        "$.api_key",
        "$.customer_ref",
        "$.headers.Authorization",
        "$.password",
    ]


def test_a_hook_adds_to_the_defaults_too() -> None:
    c = intentlog.canonicalize({"api_key": SECRET, "ref": "r-1"}, redact=lambda path, key, value: key == "ref")
    assert orjson.loads(c.data) == {"api_key": "[REDACTED]", "ref": "[REDACTED]"}


def test_turning_the_defaults_off_is_explicit_and_recorded(ledger: intentlog.Ledger) -> None:
    """Redact(defaults=False) hashes a field named token as given; the manifest records that the defaults were off."""
    task = ledger.task("off")
    rule = intentlog.Redact(["customer_ref"], defaults=False)
    task.effect("k", {"token": "t-123456789", "customer_ref": OTHER}, _ok, redact=rule)
    manifest = next(e for e in task.events() if e.kind == "call.manifest")
    assert manifest.data["redaction"] == {"defaults": False, "names": ["customer_ref"], "hook": None}
    assert manifest.data["redacted"] == ["$.customer_ref"]
    record = _record(task)
    assert "t-123456789" in record and OTHER not in record
    # the default rule is the absence of the field: old and new manifests read the same
    task.effect("k2", {"token": "x"}, _ok)
    plain = [e for e in task.events() if e.kind == "call.manifest"][-1]
    assert "redaction" not in plain.data


@pytest.mark.parametrize("bad", ["api_key", b"api_key", 5, [1]])
def test_a_malformed_rule_is_refused_before_anything_is_written(ledger: intentlog.Ledger, bad: Any) -> None:
    task = ledger.task("bad-rule")
    with pytest.raises((intentlog.UsageError, TypeError)):
        task.effect("k", {"a": 1}, _ok, redact=bad)
    assert not task.exists()


def test_redact_defaults_flag_is_checked() -> None:
    with pytest.raises(intentlog.UsageError, match="True or False"):
        intentlog.Redact(defaults="no")  # type: ignore[arg-type]
    with pytest.raises(intentlog.UsageError, match="single string"):
        intentlog.Redact("token")


# -- values no name marks, and every text a call records -------------------------------------


class _Boom(Exception):
    pass


def _heartbeat_send(info: dict[str, Any]) -> Callable[[Any], bytes]:
    def send(_request: Any) -> bytes:
        intentlog.heartbeat(info)
        return b"{}"

    return send


def _raising(exc: BaseException) -> Callable[[Any], Any]:
    def send(_request: Any) -> Any:
        raise exc

    return send


def _builder(exc: BaseException) -> Callable[[], Any]:
    def build() -> Any:
        raise exc

    return build


def _interpreter_raising(text: str) -> Callable[[bytes], Any]:
    def interpret(_raw: bytes) -> Any:
        raise ValueError(text)

    return interpret


def _reconciled(task: intentlog.Task) -> None:
    with pytest.raises(intentlog.EffectUnknown):
        task.effect("k", {"api_key": OTHER}, _raising(OSError("connection reset")))
    call = next(iter(task.work_state().calls))
    task.reconcile(
        call,
        "served",
        evidence=f'{{"echo": "Authorization: Bearer {SECRET}"}}'.encode(),
        note=f"provider log said password={SECRET}",
    )


def _provider_failure_echo(task: intentlog.Task) -> None:
    body = f'{{"error": "invalid api key {SECRET}", "hint": "Authorization: Bearer {OTHER}"}}'
    send = _raising(intentlog.ProviderFailure(f"401 for key {SECRET}", body=body))
    with pytest.raises(intentlog.CallFailed):
        task.effect("k", {"api_key": SECRET}, send)


def _session(task: intentlog.Task) -> None:
    session = task.ledger.session("chat")
    request = {
        "model": "m",
        "apiKey": SECRET,
        "messages": [
            {"role": "system", "content": f"use header Authorization: Bearer {OTHER}"},
            {"role": "user", "content": f"my key is {SECRET}"},  # known from apiKey above
            {"role": "user", "content": "the db is postgres://app:pg-pass-55aa66bb@db/x"},
        ],
    }
    session.turn(request, lambda r: f"you said {SECRET}".encode())
    assert "pg-pass-55aa66bb" not in _record(task)


def _prepared(task: intentlog.Task) -> None:
    call = task.prepare("k", {"clientSecret": SECRET, "note": f"then send {SECRET}"})
    with pytest.raises(intentlog.CallFailed):
        call.run(_raising(intentlog.NotSent(f"refused locally: token {SECRET} expired")))


PLACEMENTS: dict[str, Callable[[intentlog.Task], Any]] = {
    "header pair list": _effect({"headers": [["Authorization", f"Bearer {SECRET}"], ["Accept", "*/*"]]}),
    "header pair tuple": _effect({"headers": (("X-Api-Key", SECRET),)}),
    "header line in a string": _effect({"raw": f"POST /v1\r\nAuthorization: Bearer {SECRET}\r\nAccept: */*"}),
    "bare bearer in prose": _effect({"note": f"curl -H 'Bearer {SECRET}' https://api"}),
    "env assignment in a string": _effect({"script": f"export OPENAI_API_KEY={SECRET} && run"}),
    "json inside a string": _effect({"body": f'{{"password": "{SECRET}", "user": "ann"}}'}),
    "url user-info": _effect({"url": f"https://bob:{SECRET}@example.com/x"}),
    "url token as user": _effect({"url": f"https://{SECRET}@github.com/org/repo.git"}),
    "url ?key=": _effect({"url": f"https://maps.example.com/api?key={SECRET}&q=x"}),
    "url &token=": _effect({"url": f"https://example.com/?a=1&token={SECRET}"}),
    "url api_key=": _effect({"url": f"https://example.com/?api_key={SECRET}"}),
    "url access_token=": _effect({"url": f"https://example.com/cb#x?access_token={SECRET}"}),
    "repeated value": _effect({"api_key": SECRET, "debug": f"calling with {SECRET}", "copy": SECRET}),
    "repeated in the response": _effect({"api_key": SECRET}, lambda r: f'{{"echo": "{SECRET}"}}'.encode()),
    "repeated bearer token alone": _effect({"headers": {"Authorization": f"Bearer {SECRET}"}, "log": f"t={SECRET}"}),
    "heartbeat info by name": _effect({"a": 1}, _heartbeat_send({"token": SECRET, "done": 3})),
    "heartbeat info repeating the request's key": _effect(
        {"api_key": SECRET}, _heartbeat_send({"phase": f"sending with {SECRET}"})
    ),
    "heartbeat info with a bearer": _effect({"a": 1}, _heartbeat_send({"log": f"Authorization: Bearer {SECRET}"})),
    "builder error": _raises(
        intentlog.PreparationFailed, _effect(_builder(ValueError(f"cannot build: api_key={SECRET} rejected")))
    ),
    "builder error with a bearer": _raises(
        intentlog.PreparationFailed, _effect(_builder(RuntimeError(f"headers were Bearer {SECRET}")))
    ),
    "unserializable request with a credential": _raises(
        intentlog.PreparationFailed, _effect({"api_key": SECRET, "when": {1, 2}})
    ),
    "send error quoting the key": _raises(
        intentlog.EffectUnknown, _effect({"api_key": SECRET}, _raising(_Boom(f"socket closed sending {SECRET}")))
    ),
    "send error with a url": _raises(
        intentlog.EffectUnknown, _effect({"a": 1}, _raising(_Boom(f"GET https://u:{SECRET}@h/x failed")))
    ),
    "provider failure reason and body": _provider_failure_echo,
    "not sent reason": _prepared,
    "interpreter error": _raises(
        intentlog.CallFailed,
        _effect({"password": SECRET}, _ok, interpret=_interpreter_raising(f"bad answer for {SECRET}")),
    ),
    "reconciliation evidence and note": _reconciled,
    "session messages and answer": _session,
}


@pytest.mark.parametrize("placement", list(PLACEMENTS))
def test_no_placement_reaches_the_record(ledger: intentlog.Ledger, tmp_path: Path, placement: str) -> None:
    """The secret appears in no byte of the ledger or of its bundle; a [REDACTED] marker stands in its place."""
    task = ledger.task("placement")
    PLACEMENTS[placement](task)
    _assert_clean(ledger, tmp_path, SECRET, OTHER)
    if placement not in _NOTHING_TO_MARK:
        assert "[REDACTED]" in _record(task)


# the error names the bad path, never the value: there is nothing to replace
_NOTHING_TO_MARK = {"unserializable request with a credential"}


def test_the_request_send_receives_is_never_scrubbed(ledger: intentlog.Ledger) -> None:
    seen: list[Any] = []
    request = {"url": f"https://bob:{SECRET}@example.com/x", "note": f"Bearer {SECRET}"}
    ledger.task("t").effect("k", request, _send_receiving(seen))
    assert seen == [request]


# -- deep values are refused by name, not by RecursionError ----------------------------------


def _nested(depth: int) -> Any:
    """``depth`` containers, lists and objects alternating."""
    value: Any = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1_000, 10_000])
def test_data_nested_deep_is_refused_naming_the_depth(ledger: intentlog.Ledger, depth: int) -> None:
    deep = _nested(depth)
    with pytest.raises(intentlog.NotSerializable, match=f"more than {MAX_DEPTH} levels deep"):
        intentlog.request_hash(deep)
    with pytest.raises(intentlog.NotSerializable, match=f"more than {MAX_DEPTH} levels deep"):
        intentlog.canonicalize({"x": deep})
    task = ledger.task("deep")
    task.append("note.made", {"ok": 1})
    before = {p: p.read_bytes() for p in _every_file(Path(ledger.root))}
    with pytest.raises(intentlog.NotSerializable, match="levels deep"):
        task.append("note.made", {"x": deep})
    assert {p: p.read_bytes() for p in _every_file(Path(ledger.root))} == before
    with pytest.raises(intentlog.PreparationFailed, match="levels deep"):
        task.effect("k", {"x": deep}, _ok)


def test_data_nested_to_the_limit_is_recorded() -> None:
    value = _nested(MAX_DEPTH - 1)
    data = intentlog.canonicalize({"x": value}).data
    assert data.count(b"[") + data.count(b"{") == MAX_DEPTH


# -- records made by the first canonicalisation ----------------------------------------------


def test_a_call_recorded_under_the_first_rules_replays_without_drift(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose hash the new rules change (a newly matched name) still maps to its old record: no send."""
    import intentlog.effects.intent as effects

    request = {"model": "m", "client-secret": "cs-123456789", "note": f"Bearer {SECRET}"}
    old = effects.canonicalize
    with monkeypatch.context() as m:
        m.setattr(effects, "canonicalize", lambda value, **kw: old(value, **{**kw, "version": CANON_V1}))
        ledger.task("old").effect("k", request, _ok)
    manifest = next(e for e in ledger.task("old").events() if e.kind == "call.manifest")
    assert manifest.data["canon"] == CANON_V1
    assert manifest.data["request_hash"] != intentlog.request_hash(request)
    sends: list[Any] = []
    assert ledger.task("old").effect("k", request, _send_receiving(sends)) == b'{"ok": true}'
    assert sends == []
    changed = {**request, "model": "other"}
    with pytest.raises(intentlog.ResumeRefused) as refused:
        ledger.task("old").effect("k", changed, _send_receiving(sends))
    assert refused.value.reason == "DRIFT"
    assert sends == []


# -- intentlog.http: a real httpx client against a loopback server ---------------------------

httpx = pytest.importorskip("httpx")
sys.path.insert(0, str(Path(__file__).parent))
from fake_llm_server import FakeLLMServer, read_receipts  # noqa: E402

import intentlog.http  # noqa: E402

SERVER_COOKIE = "s3cr3t-cookie-value"  # the Set-Cookie value the loopback server answers /echo with


def _chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-fake", "messages": [{"role": "user", "content": content}], **extra}


def _http_bearer(task: intentlog.Task, url: str) -> None:
    headers = {"Authorization": f"Bearer {SECRET}", "X-Custom-Access-Token": OTHER}
    with intentlog.http.client(task, base_url=url, headers=headers) as c:
        c.post("/v1/chat/completions", json=_chat(f"header was Authorization: Bearer {SECRET}"))
        c.post("/echo", json={"credentials": {"password": SECRET}, "note": f"my key {OTHER}"})


def _http_query(task: intentlog.Task, url: str) -> None:
    with intentlog.http.client(task, base_url=url) as c:  # /echo answers with the query it got
        r = c.post(f"/echo?api_key={SECRET}&access_token={OTHER}&page=2", json={"x": 1})
        # the caller gets what the record holds, live as on replay: the echoed credentials scrubbed
        assert r.json()["query"] == "api_key=[REDACTED]&access_token=[REDACTED]&page=2"


def _http_userinfo(task: intentlog.Task, url: str) -> None:
    base = url.replace("http://", f"http://user:{SECRET}@")  # httpx turns it into a Basic header
    with intentlog.http.client(task, base_url=base) as c:
        c.post("/echo", json={"x": 1})


def _http_caller_names(task: intentlog.Task, url: str) -> None:
    headers = {"x-api-key": SECRET}
    with intentlog.http.client(task, base_url=url, headers=headers, redact=["customer_ref"]) as c:
        c.post("/echo", json={"customer_ref": OTHER, "api_key": SECRET, "apiKey": SECRET})


def _http_cookie(task: intentlog.Task, url: str) -> None:
    with intentlog.http.client(task, base_url=url, cookies={"sid": OTHER}) as c:
        assert c.get("/echo").headers["set-cookie"] == "[REDACTED]"


def _http_async(task: intentlog.Task, url: str) -> None:
    import asyncio

    async def main() -> None:
        headers = {"Authorization": f"Bearer {SECRET}"}
        async with intentlog.http.async_client(task, base_url=url, headers=headers) as c:
            await c.post(f"/echo?key={OTHER}", json={"client_secret": SECRET})

    asyncio.run(main())


HTTP_PLACEMENTS: dict[str, Callable[[intentlog.Task, str], None]] = {
    "bearer header, credentials in the body and in a message": _http_bearer,
    "query parameters echoed in the answer": _http_query,
    "url user-info (a Basic header)": _http_userinfo,
    "caller names added to the defaults": _http_caller_names,
    "cookies sent and Set-Cookie answered": _http_cookie,
    "async client": _http_async,
}


@pytest.mark.parametrize("placement", list(HTTP_PLACEMENTS))
def test_no_http_placement_reaches_the_record(ledger: intentlog.Ledger, tmp_path: Path, placement: str) -> None:
    """Through intentlog.http and a real server: no byte of the ledger or bundle holds it; a re-run sends nothing."""
    task = ledger.task("http")
    with FakeLLMServer(tmp_path / "receipts.jsonl") as server:
        HTTP_PLACEMENTS[placement](task, server.url)
        sent = len(server.receipts())
        assert sent >= 1
        intentlog.http.restart(task)
        HTTP_PLACEMENTS[placement](task, server.url)  # a re-run replays: the redacted record still maps
        assert len(server.receipts()) == sent
    _assert_clean(ledger, tmp_path, SECRET, OTHER, SERVER_COOKIE)


def test_http_call_keyed_by_its_first_canonicalisation_hash_is_replayed(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger written before the rules grew keyed this request by its old hash: a re-run replays it, 0 sends."""
    import intentlog.effects.intent as effects
    import intentlog.http._transport as transport

    task = ledger.task("old-http")
    body = {"model": "gpt-fake", "client-secret": "cs-123456789", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {SECRET}"}
    with FakeLLMServer(tmp_path / "receipts.jsonl") as server:
        canon, plan = effects.canonicalize, transport.plan_for
        with monkeypatch.context() as m:  # the first canonicalisation, as an older intentlog wrote it
            m.setattr(effects, "canonicalize", lambda value, **kw: canon(value, **{**kw, "version": CANON_V1}))
            m.setattr(transport, "plan_for", lambda request, o, version=CANON_V1: plan(request, o, CANON_V1))
            with intentlog.http.client(task, base_url=server.url, headers=headers) as c:
                first = c.post("/v1/chat/completions", json=body)
        [old_key] = [e.data["key"] for e in task.events() if e.kind == "call.requested"]
        intentlog.http.restart(task)
        with intentlog.http.client(task, base_url=server.url, headers=headers) as c:
            again = c.post("/v1/chat/completions", json=body)
        assert again.content == first.content
        assert again.extensions["intentlog"]["key"] == old_key
        assert len(read_receipts(tmp_path / "receipts.jsonl")) == 1


def test_http_named_key_and_offline_replay_of_a_first_canonicalisation_record(
    ledger: intentlog.Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A named key recorded under the old hash replays with no DRIFT and no send; replay() answers it offline."""
    import intentlog.effects.intent as effects
    import intentlog.http._transport as transport

    task = ledger.task("old-named")
    chat = {"model": "gpt-fake", "messages": [{"role": "user", "content": "token: tk-abcdef123456"}]}
    headers = {"Authorization": f"Bearer {SECRET}"}
    with FakeLLMServer(tmp_path / "receipts.jsonl") as server:
        canon, plan = effects.canonicalize, transport.plan_for
        with monkeypatch.context() as m:
            m.setattr(effects, "canonicalize", lambda value, **kw: canon(value, **{**kw, "version": CANON_V1}))
            m.setattr(transport, "plan_for", lambda request, o, version=CANON_V1: plan(request, o, CANON_V1))
            with intentlog.http.client(task, base_url=server.url, headers=headers) as c:
                first = c.post("/v1/chat/completions", json=_chat("unnamed, with Bearer tk-0987654321abc"))
                with task.key("summary"):
                    named = c.post("/v1/chat/completions", json=chat)
        intentlog.http.restart(task)
        with intentlog.http.client(task, base_url=server.url, headers=headers) as c:
            assert c.post("/v1/chat/completions", json=_chat("unnamed, with Bearer tk-0987654321abc")).content == (
                first.content
            )
            with task.key("summary"):
                assert c.post("/v1/chat/completions", json=chat).content == named.content
        assert len(read_receipts(tmp_path / "receipts.jsonl")) == 2
        rp = intentlog.http.replay(task)
        with rp.client(base_url=server.url, headers=headers) as c:
            assert c.post("/v1/chat/completions", json=_chat("unnamed, with Bearer tk-0987654321abc")).content == (
                first.content
            )
            with task.key("summary"):
                assert c.post("/v1/chat/completions", json=chat).content == named.content
        assert rp.misses == []
