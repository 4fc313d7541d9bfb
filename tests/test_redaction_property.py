"""Generated credentials planted in every place the library records something, searched for in every byte.

Each credential has a random core (what must never be recorded) and is planted the way
users hand them over: under a credential name at any depth, or by its shape inside a
longer string or a URL (a JWT, a provider key, a bot token in a URL path, a Slack webhook
path, ``token <v>``, ``Bearer <v>``, ``password=<v>``, ``?token=<v>``). Every file under
the ledger, the report and an exported bundle are searched for every core. Ordinary data
(ids, digests, numbers, words) planted beside them must come back verbatim: the rule may
not eat what is not a credential.
"""

from __future__ import annotations

import base64
import string
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import intentlog
from intentlog.bundle import export_bundle
from intentlog.errors import EffectUnknown, UsageError
from intentlog.eventlog.canonical import redact_value
from intentlog.eventlog.redaction import REDACTED, redact_shapes, scrub_note, scrub_text
from intentlog.report import render

ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"

#: names a caller uses for credentials (the rule's own and the ones issue reports name)
NAMES = [
    "api_key", "apiKey", "X-Api-Key", "password", "db_password", "secret", "client_secret", "access_token",
    "refresh_token", "refresh", "id_token", "token", "auth", "Authorization", "otp", "cvv", "card_number",
    "cardNumber", "client_assertion", "creds", "private_key", "session_token", "pin", "passcode",
]  # fmt: skip


def _core(min_size: int = 16) -> st.SearchStrategy[str]:
    """A random credential core with letters and digits (what is searched for afterwards)."""
    return st.builds(
        lambda head, body, tail: f"{head}{body}{tail}",
        st.sampled_from("QZXJ"),
        st.text(ALNUM, min_size=min_size, max_size=min_size + 12),
        st.sampled_from("0123456789"),
    )


@st.composite
def shaped(draw: st.DrawFn) -> tuple[str, str]:
    """``(text holding a credential by its shape, its core)``."""
    core = draw(_core())
    kind = draw(st.sampled_from(["jwt", "sk", "sk-live", "anthropic", "github", "slack-token", "aws", "google",
                                 "telegram", "slack-hook", "discord", "token", "bearer", "basic", "assign",
                                 "query", "userinfo", "after-word"]))  # fmt: skip
    if kind == "jwt":
        text = f"eyJhbGciOiJIUzI1NiJ9.eyJ{core}.{draw(st.text(B64URL, min_size=8, max_size=30))}"
    elif kind == "sk":
        text = f"sk-{core}"
    elif kind == "sk-live":
        text = f"sk_live_{core}"
    elif kind == "anthropic":
        text = f"sk-ant-api03-{core}"
    elif kind == "github":
        text = f"ghp_{core}{'a' * 20}"
    elif kind == "slack-token":
        text = f"xoxb-1234567890-{core}"
    elif kind == "aws":
        core = draw(st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16))
        text = f"AKIA{core}"
    elif kind == "google":
        core = draw(st.text(B64URL, min_size=35, max_size=35))
        text = f"AIza{core}"
    elif kind == "telegram":
        bot = f"{draw(st.integers(100_000_000, 9_999_999_999))}:AA{core}{'x' * 20}"
        text = f"https://api.telegram.org/bot{bot}/sendMessage?chat_id=42"
    elif kind == "slack-hook":
        text = f"https://hooks.slack.com/services/T0AB12CD3/B0EF45GH6/{core}"
    elif kind == "discord":
        text = f"https://discord.com/api/webhooks/123456789012/{core}"
    elif kind == "token":
        text = f"token {core}"
    elif kind == "bearer":
        text = f"Authorization Bearer {core}"
    elif kind == "basic":
        text = f"Basic {core}"
    elif kind == "assign":
        text = f"{draw(st.sampled_from(NAMES))}={core}"
    elif kind == "query":
        text = f"https://example.com/callback?order=7&token={core}"
    elif kind == "userinfo":
        text = f"postgres://app:{core}@db.internal:5432/orders"
    else:
        text = f"the {draw(st.sampled_from(['api key is', 'secret', 'password', 'access token']))} {core}"
    words = draw(st.lists(st.sampled_from(["sent", "to", "the", "order", "failed", "with", "at"]), max_size=4))
    return " ".join([*words, text, *words[:2]]), core


@st.composite
def named(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """``({... name: credential ...} at some depth, its core)``."""
    core = draw(_core(10))
    value: Any = {draw(st.sampled_from(NAMES)): draw(st.sampled_from([core, [core], {"value": core}]))}
    for key in draw(st.lists(st.sampled_from(["outer", "cfg", "items", "meta"]), max_size=3)):
        value = {key: value} if key != "items" else {key: [value]}
    return value, core


def planted() -> st.SearchStrategy[tuple[Any, str]]:
    """A credential by name (a dict) or by shape (a string), with its core."""
    return st.one_of(named(), shaped())


#: ordinary data: must be recorded verbatim
ORDINARY = st.one_of(
    st.from_regex(r"blake3:[0-9a-f]{64}", fullmatch=True),
    st.from_regex(r"(order|item|call|user)-[0-9]{1,9}", fullmatch=True),
    st.uuids().map(str),
    st.integers(-(2**53), 2**53),
    st.from_regex(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]Z", fullmatch=True),
    st.lists(
        st.sampled_from(["hello", "world", "order", "shipped", "max_tokens", "page", "42"]), min_size=1, max_size=5
    ).map(" ".join),
    st.from_regex(r"https://api\.example\.com/v1/(orders|items)/[0-9]{1,6}", fullmatch=True),
    st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True),
    st.from_regex(r"[0-9]{10}:[a-z\-]{5,40}", fullmatch=True),  # a time and a label, not a bot token
    st.binary(min_size=3, max_size=24).map(lambda b: base64.b64encode(b).decode().rstrip("=")),
)
ORDINARY_KEYS = st.sampled_from(["order", "model", "max_tokens", "page_token", "digest", "id", "ts_ref", "count"])


def _ordinary_dict(draw: st.DrawFn) -> dict[str, Any]:
    return draw(st.dictionaries(ORDINARY_KEYS, ORDINARY, min_size=1, max_size=4))


def _text(value: Any) -> str:
    """A planted value as text (a dict's credential inside ``name=value`` form)."""
    if isinstance(value, str):
        return value
    inner = value
    while isinstance(inner, dict) and len(inner) == 1:
        (k, v), = inner.items()
        if isinstance(v, (dict, list)) and k in ("outer", "cfg", "items", "meta"):
            inner = v[0] if isinstance(v, list) else v
            continue
        leaf = v if isinstance(v, str) else v[0] if isinstance(v, list) else v["value"]
        return f"{k}={leaf}"
    return str(value)


def _files(root: Path) -> Iterator[Path]:
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            yield p


def _all_bytes(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in _files(root))


def _ok(_request: Any) -> bytes:
    return b'{"ok": true}'


# -- the rule alone: every shape and name in any string or structure, nothing else touched -------


@settings(max_examples=300)
@given(planted(), st.data())
def test_the_rule_removes_every_planted_core_and_keeps_ordinary_data(
    plant: tuple[Any, str], data: st.DataObject
) -> None:
    value, core = plant
    ordinary = _ordinary_dict(data.draw)
    structured = {**ordinary, "planted": value}
    cleaned, where = redact_value(structured)
    assert core not in repr(cleaned)
    assert where
    for k, v in ordinary.items():
        assert cleaned[k] == v, (k, v)
    text = _text(value)
    assert core not in scrub_text(text)
    assert core not in (scrub_note(text) or "")


@settings(max_examples=300)
@given(st.lists(ORDINARY, min_size=1, max_size=6), st.dictionaries(ORDINARY_KEYS, ORDINARY, max_size=4))
def test_ordinary_data_is_never_redacted(values: list[Any], mapping: dict[str, Any]) -> None:
    for v in values:
        if isinstance(v, str):
            assert scrub_text(v) == v
            assert scrub_note(v) == v
            assert redact_shapes(v) == v
    assert redact_value(mapping) == (mapping, ())
    assert redact_value(values) == (values, ())
    assert redact_shapes(mapping) is mapping


# -- through the library: every place it records, the ledger, the report, a bundle ---------------


def _record(ledger: intentlog.Ledger, plants: list[tuple[Any, str]], ordinary: dict[str, Any]) -> None:
    t = ledger.task("planted")
    it = iter(plants)

    def nxt() -> Any:
        return next(it)[0]

    t.effect("request", {**ordinary, "planted": nxt(), "more": [nxt()]}, _ok)
    t.append("signal.received", {**ordinary, "planted": nxt()})
    t.append("item.returned", {"result": {"planted": nxt(), **ordinary}})

    def failing(_request: Any) -> bytes:
        raise ConnectionError(f"provider said: {_text(nxt())}")

    try:
        t.effect("failing", {"q": 1}, failing)
    except EffectUnknown:
        pass

    def refused(_request: Any) -> bytes:
        raise intentlog.ProviderFailure(f"refused: {_text(nxt())}", retryable=False)

    try:
        t.effect("refused", {"q": 2}, refused)
    except intentlog.errors.IntentlogError:
        pass
    call = t.prepare("bound", {"q": 3})
    t.request_approval("a", f"send it? {_text(nxt())}", binds=call)
    t.decide("a", "approve", by="ops", note=f"checked: {_text(nxt())}")
    t.checkpoint("build", note=_text(nxt()), revision=_text(nxt()), changed_files=[_text(nxt())])
    t.accept(note=_text(nxt()))
    t.fail_task(f"given up: {_text(nxt())}")
    b = ledger.backlog("jobs")
    b.add("plain", ordinary)
    try:
        b.add("leaky", {**ordinary, "planted": nxt()})
        raise AssertionError("a payload holding a credential was accepted")
    except UsageError:
        pass
    ledger.close()


PLACES = 15


@settings(max_examples=12, deadline=None)
@given(st.lists(planted(), min_size=PLACES, max_size=PLACES), st.data())
def test_no_planted_credential_reaches_any_byte(plants: list[tuple[Any, str]], data: st.DataObject) -> None:
    ordinary = _ordinary_dict(data.draw)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ledger"
        with intentlog.open(root, create=True) as ledger:
            _record(ledger, plants, ordinary)
            page = render(ledger)
        stored = _all_bytes(root)
        out = Path(tmp) / "bundle"
        export_bundle(root, out=out, tar=Path(tmp) / "bundle.tar", check=False)
        everything = {"ledger": stored, "report": page, "bundle": _all_bytes(out),
                      "tar": (Path(tmp) / "bundle.tar").read_bytes()}  # fmt: skip
        for where, blob in everything.items():
            leaked = [core for _, core in plants if core.encode() in blob]
            assert leaked == [], f"{where} holds {leaked}"
        assert REDACTED.encode() in stored
        for v in ordinary.values():
            shown = v if isinstance(v, str) else str(v)
            assert shown.encode() in stored, shown
