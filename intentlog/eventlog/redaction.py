"""What counts as a credential: names, values that no name marks, and how texts are scrubbed.

One rule serves every place the library records something a caller handed it (the
canonical request, heartbeat info, error texts, provider bodies, session messages, HTTP
headers and URLs). docs/effects.md ("Redaction") states it exactly; in short:

- **Names** are split into parts on ``_ - . /``, spaces and camelCase boundaries and
  lowercased (``X-Api-Key`` → ``x api key``, ``apiKey`` → ``api key``). A name is a
  credential name when it is one of :data:`DEFAULT_NAMES`, or any part is a *strong* part
  (:data:`STRONG_PARTS`: ``secret``, ``password``, ``passwd``, ``credential(s)``,
  ``bearer``, ``cookie`` …), or two adjacent parts form a *key pair* (``api key``,
  ``private key``, ``access key`` … :data:`KEY_QUALIFIERS`), or its **last** part is a
  *noun* (:data:`LAST_PARTS`: ``token``, ``auth``, ``authorization``, ``pwd``) not preceded
  by a non-credential qualifier (:data:`TOKEN_EXCEPTIONS`: ``page_token``, ``eos_token``,
  ``max_token`` …). A run-together part ending in ``token``/``secret``/``password``/
  ``apikey`` counts too (``accesstoken``). So ``max_tokens``, ``prompt_tokens``,
  ``token_count``, ``tokenizer``, ``author`` and ``cache_key`` are *not* credentials.
- **Values**: a two-string list or tuple whose first item is a credential name (a header
  pair) has its second item redacted; inside any string, ``Bearer <token>``,
  ``<credential name>: <value>`` / ``<credential name>=<value>`` (a value that opens a JSON
  object or array -- a JSON body kept as a string -- is redacted through its closing
  bracket), URL user-info (``scheme://user:pass@``) and ``?key=`` / ``&sig=`` /
  ``&…Signature=`` query values are redacted.
- **Shapes**: a value is a credential by its look alone, wherever it stands and whatever
  names it (:data:`SHAPES`): a private key block, a JWT, a provider key by its prefix
  (``sk-…``, ``sk_live_…``, ``ghp_…``, ``xoxb-…``, ``AKIA…``, ``AIza…`` …, after the rule sets
  of gitleaks and detect-secrets), a bot token in a URL path (``/bot<token>/``), a webhook
  URL's secret path (Slack, Discord, Teams), ``<scheme> <value>`` with a space (``Bearer``,
  ``Basic``, ``token``, ``jwt``, ``apikey``; 8 or more token characters with a digit), and a
  high-entropy value right after a credential word (``api key is <value>``, ``secret
  <value>``: 16 or more token characters, letters and digits). Shapes are context-free: the
  stream core applies them to every string of every record (:func:`redact_shapes`), so no
  recorder can forget them.
- **Known values**: once a value is known to be a credential, it is scrubbed wherever
  it appears in what that call records.

The walk over structured values (:class:`Walk`) is here too: the canonical request, a
caller's own events, heartbeat info and a backlog payload's check all go through it.
Rules have generations: :data:`GENERATION` is today's (4: a boolean or null under a
credential name is kept, :func:`holds_no_secret`); generation 3 (which redacted those too)
and generation 2 (names before ``otp``/``cvv``/``creds``/``card number``… and no shapes) are
kept so a request recorded under ``intentlog-canon/3`` or ``/2`` can still be recognised.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

__all__ = [
    "GENERATION",
    "LAST_PARTS_V3",
    "NAMES_V3",
    "NAME_PAIRS",
    "SHAPES",
    "STRONG_PARTS_V3",
    "Shape",
    "Walk",
    "leaves",
    "may_hold_shape",
    "redact_shapes",
    "shape_spans",
    "surely_clean",
    "DEFAULT_NAMES",
    "apply_spans",
    "find_spans",
    "FIELD_NAMES_V4",
    "KEY_QUALIFIERS",
    "KEY_QUALIFIERS_V4",
    "LAST_PARTS_V4",
    "PASS_EXCEPTIONS",
    "NAME_PAIRS_V4",
    "LAST_PARTS",
    "MIN_SCRUB",
    "MIN_TEXT_SCRUB",
    "REDACTED",
    "STRONG_PARTS",
    "TOKEN_EXCEPTIONS",
    "holds_no_secret",
    "is_credential_name",
    "is_field_credential",
    "name_parts",
    "GIVEN_TEXT_FIELDS",
    "scrub_bytes",
    "scrub_given_fields",
    "scrub_known",
    "scrub_note",
    "scrub_string_value",
    "scrub_text",
    "text_secrets",
]

REDACTED: Final = "[REDACTED]"

#: Names matched exactly (case-insensitively) besides the part rules; they all match those too.
DEFAULT_NAMES: Final = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "x-api-key",
        "authorization",
        "proxy-authorization",
        "password",
        "secret",
        "access_token",
        "refresh_token",
        "client_secret",
        "cookie",
        "set-cookie",
        "token",
        "auth_token",
        "x-auth-token",
        "session_token",
        "private_key",
        "x-goog-api-key",
    }
)

#: Names matched exactly by today's rules besides :data:`DEFAULT_NAMES` (generation 3 on).
NAMES_V3: Final = frozenset(
    {"refresh", "creds", "otp", "cvv", "cvc", "pin", "cardnumber", "ccnumber", "client_assertion", "card_number"}
)

#: A name with any of these parts is a credential name.
STRONG_PARTS: Final = frozenset(
    {
        "secret",
        "secrets",
        "password",
        "passwords",
        "passwd",
        "passphrase",
        "credential",
        "credentials",
        "bearer",
        "cookie",
        "cookies",
        "apikey",
        "privatekey",
    }
)

#: Parts that make a name a credential name wherever they stand, from generation 3 on.
STRONG_PARTS_V3: Final = frozenset({"creds", "passcode", "cvv", "cvc", "cvv2", "cvc2", "otp", "totp", "hotp"})

#: Adjacent parts that make a name a credential name (``card_number``, ``client-assertion``), from generation 3 on.
NAME_PAIRS: Final = frozenset(
    {
        ("card", "number"),
        ("card", "num"),
        ("card", "no"),
        ("cc", "number"),
        ("client", "assertion"),
        ("saml", "assertion"),
        ("jwt", "assertion"),
        ("security", "code"),
        ("auth", "code"),
        ("authorization", "code"),
        ("recovery", "code"),
        ("backup", "code"),
        ("verification", "code"),
        ("refresh", "token"),
    }
)

#: Adjacent parts that make a name a credential name from generation 4 on: a PKCE ``code_verifier`` (it
#: redeems an authorization code), a device flow's ``device_code`` (polled for tokens), ``mfa_code``, ``2fa_code``.
NAME_PAIRS_V4: Final = frozenset({("code", "verifier"), ("device", "code"), ("mfa", "code"), ("2fa", "code")})

#: Names that mark a credential only where OAuth puts one, from generation 4 on: a query parameter or
#: form field (``?code=`` in a redirect, ``code=`` in the token request), or a field beside ``grant_type``
#: in a JSON token request. ``code`` elsewhere (an error code, a country code) is kept. ``state``,
#: ``nonce``, ``code_challenge``, ``client_id`` and ``redirect_uri`` are not credentials: each is sent
#: in the open by design and redeems nothing.
FIELD_NAMES_V4: Final = frozenset({"code"})

#: ``<qualifier> key`` (adjacent parts, anywhere in the name) is a credential name.
KEY_QUALIFIERS: Final = frozenset(
    {"api", "private", "secret", "access", "signing", "encryption", "master", "client", "subscription", "functions"}
)

#: ``<qualifier> key`` from generation 4 on: an Azure ``AccountKey``, ``auth_key``, ``hmac_key``,
#: ``session_key``, ``webhook_key``, ``service_key``, ``storage_key``, ``admin_key``, ``deploy_key``,
#: ``shared_key``, ``app_key`` / ``application_key`` (Datadog's, Algolia's).
KEY_QUALIFIERS_V4: Final = frozenset(
    {"account", "auth", "hmac", "session", "webhook", "service", "storage", "admin", "deploy", "shared", "app",
     "application"}
)  # fmt: skip

#: A name whose last part is one of these is a credential name from generation 4 on (``DB_PASS``,
#: ``smtp_pass``, ``user_pw``), unless one of :data:`PASS_EXCEPTIONS` precedes ``pass``.
LAST_PARTS_V4: Final = frozenset({"pass", "pw"})
#: ``<qualifier> pass`` names something other than a password (a ticket, a round of a loop).
PASS_EXCEPTIONS: Final = frozenset(
    {"boarding", "first", "second", "third", "last", "next", "single", "multi", "one", "two", "dry", "test",
     "day", "season", "render", "shadow"}
)  # fmt: skip

#: A name whose last part is one of these is a credential name (unless an exception precedes ``token``).
LAST_PARTS: Final = frozenset({"token", "auth", "authorization", "pwd"})
#: Last parts added in generation 3 (``user_pin``, ``card-pin``).
LAST_PARTS_V3: Final = frozenset({"pin"})

#: Today's rules; 3 is the rule set of ``intentlog-canon/3`` (a boolean or null under a credential name
#: redacted too), 2 that of ``intentlog-canon/2`` (no shapes, fewer names).
GENERATION: Final = 4

#: the bare values of ``name: value`` / ``name=value`` kept under a credential name from generation 4 on:
#: a boolean or null (JSON's or Python's) says whether, never what (``otp_enabled: true``)
_NOT_SECRET_WORDS: Final = frozenset({"true", "false", "null", "none"})


def holds_no_secret(value: Any) -> bool:
    """Whether ``value`` cannot be a credential whatever names it: a boolean or None (generation 4 on).

    ``{"otp_enabled": true}`` records that a second factor is on, not the factor; redacting
    it would make ``true`` and ``false`` one request (a changed flag no ``DRIFT``).
    """
    return value is None or type(value) is bool

#: ``<qualifier> token`` names something other than a credential (a cursor, a tokenizer's symbol, a count).
TOKEN_EXCEPTIONS: Final = frozenset(
    {
        "page",
        "next",
        "prev",
        "continuation",
        "pagination",
        "cursor",
        "sync",
        "start",
        "stop",
        "end",
        "eos",
        "bos",
        "pad",
        "sep",
        "unk",
        "mask",
        "cls",
        "special",
        "max",
        "min",
        "num",
        "first",
        "last",
    }
)

_RUN_TOGETHER: Final = ("token", "secret", "password", "passwd", "apikey")

#: Known secret values at least this long are scrubbed inside requests and stored bytes.
MIN_SCRUB: Final = 8
#: Known secret values at least this long are scrubbed inside recorded error and progress texts.
MIN_TEXT_SCRUB: Final = 4

_SPLIT = re.compile(r"[_\-./\s:]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def name_parts(name: str) -> tuple[str, ...]:
    """``name`` split on separators and camelCase boundaries, lowercased: ``X-Api-Key`` → ``("x", "api", "key")``."""
    out: list[str] = []
    for chunk in _SPLIT.split(name):
        out.extend(p.lower() for p in _CAMEL.split(chunk) if p)
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def is_credential_name(name: str, generation: int = GENERATION) -> bool:
    """Whether a field, header, parameter or variable called ``name`` holds a credential (see the module docstring).

    ``generation`` 2 gives the answer of the rules ``intentlog-canon/2`` was made with.
    """
    lowered = name.lower()
    if lowered in DEFAULT_NAMES or (generation >= 3 and lowered in NAMES_V3):
        return True
    parts = name_parts(name)
    if not parts:
        return False
    for i, part in enumerate(parts):
        if part in STRONG_PARTS or (generation >= 3 and part in STRONG_PARTS_V3):
            return True
        if part in ("key", "keys") and i > 0:
            qualifier = parts[i - 1]
            if qualifier in KEY_QUALIFIERS or (generation >= 4 and qualifier in KEY_QUALIFIERS_V4):
                return True
        if generation >= 3 and i > 0 and (parts[i - 1], part) in NAME_PAIRS:
            return True
        if generation >= 4 and i > 0 and (parts[i - 1], part) in NAME_PAIRS_V4:
            return True
    last = parts[-1]
    if generation >= 3 and last in LAST_PARTS_V3:
        return True
    if generation >= 4 and last in LAST_PARTS_V4:
        return not (last == "pass" and len(parts) > 1 and parts[-2] in PASS_EXCEPTIONS)
    if last in LAST_PARTS:
        return not (last == "token" and len(parts) > 1 and parts[-2] in TOKEN_EXCEPTIONS)
    for part in parts:
        for suffix in _RUN_TOGETHER:
            if part.endswith(suffix) and len(part) > len(suffix):
                head = part[: -len(suffix)]
                if not (suffix == "token" and head in TOKEN_EXCEPTIONS):
                    return True
    return False


def is_field_credential(name: str, generation: int = GENERATION) -> bool:
    """Whether a query parameter or form field called ``name`` holds a credential: a credential name,
    or (generation 4 on) one of :data:`FIELD_NAMES_V4` (``code``: an OAuth authorization code)."""
    return (generation >= 4 and name.lower() in FIELD_NAMES_V4) or is_credential_name(name, generation)


def _grant_field(container: dict[Any, Any], key: str) -> bool:
    """A field of :data:`FIELD_NAMES_V4` in a JSON token request (a dict that also holds ``grant_type``)."""
    return key.lower() in FIELD_NAMES_V4 and type(container.get("grant_type")) is str


# -- values inside strings ------------------------------------------------------------------

# "Bearer <token>": RFC 6750 token characters, at least 8, with a digit (prose rarely has one)
_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9])bearer\s+([A-Za-z0-9._~+/=\-]{8,})")
# name: value / name=value / "name": "value" / name='value'. The search is for the separator;
# the name is read backwards from it and the value forwards, so a long value never hides a
# later assignment, and prose without ':' or '=' costs one scan.
_SEPARATOR = re.compile(r"[:=]")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_VALUE = re.compile(
    r"[ \t]*(?:\"(?P<dq>[^\"\r\n]*)\"|'(?P<sq>[^'\r\n]*)'|(?P<bare>[^\s\"'&;,)}\]]+(?:[ \t]+[^\s\"'&;,)}\]]+)*))"
)
_URL_USER = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://(?P<user>[^\s/?#@:\"']*)(?::(?P<pw>[^\s/?#@\"']*))?@")
# ?key= / &sig= / &code=, and any parameter whose name ends in "signature" (X-Amz-Signature, X-Goog-Signature)
_QUERY = re.compile(r"(?i)[?&;](?:key|sig|code|[a-z0-9_.\-]*signature)=(?P<v>[^&#\s\"']+)")



# -- values that are credentials by their shape ---------------------------------------------------

_TOKEN_CHARS = r"A-Za-z0-9._~+/=\-"


def _has_digit(value: str) -> bool:
    return any(c.isdigit() for c in value)


def _mixed(value: str) -> bool:
    """Letters and digits both: a generated value, not a word (``correct-horse`` is not one)."""
    return _has_digit(value) and any(c.isalpha() for c in value)


class Shape:
    """One credential shape: ``pattern``'s group ``v`` (or the whole match) is the secret when ``check`` agrees."""

    __slots__ = ("check", "name", "pattern")

    def __init__(self, name: str, pattern: str, check: Callable[[str], bool] | None = None) -> None:
        self.name = name
        self.pattern = re.compile(pattern)
        self.check = check

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        for m in self.pattern.finditer(text):
            group = "v" if "v" in self.pattern.groupindex else 0
            value = m.group(group)
            if value and (self.check is None or self.check(value)):
                yield m.span(group)


#: Credentials by their look alone, context-free (docs/effects.md, "Redaction", lists them).
#: Provider prefixes follow the rule sets of gitleaks and detect-secrets.
SHAPES: Final[tuple[Shape, ...]] = (
    Shape(
        "private key block",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----"
        r"(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|[\s\S]*)",  # unended: to the end
    ),
    Shape("JWT", r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"),
    Shape(
        "provider key",
        r"(?<![A-Za-z0-9])(?:"
        r"(?:sk|rk)[-_](?:live|test)[-_][A-Za-z0-9]{8,}"  # Stripe (and the like)
        r"|sk-(?:ant|proj|svcacct|admin|or)-[A-Za-z0-9_\-]{12,}"  # Anthropic, OpenAI, OpenRouter
        r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"  # GitHub
        r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
        r"|xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-[0-9]-[A-Za-z0-9\-]{10,}"  # Slack
        r"|(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])"  # AWS access key id
        r"|AIza[0-9A-Za-z_\-]{35}"  # Google API key
        r"|whsec_[A-Za-z0-9+/=]{20,}"  # webhook signing secret
        r"|npm_[A-Za-z0-9]{36}|pypi-AgE[A-Za-z0-9_\-]{40,}"  # npm, PyPI
        r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
        r"|SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"  # SendGrid
        r"|shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"  # Shopify
        r"|dop_v1_[a-f0-9]{64}"  # DigitalOcean
        r")",
    ),
    Shape("secret key", r"(?<![A-Za-z0-9])sk[-_][A-Za-z0-9][A-Za-z0-9_\-]{14,}", _has_digit),
    # a Telegram bot token: the bot's id, a colon, "A" and 30 or more more (gitleaks: 34)
    Shape("bot token", r"(?<![A-Za-z0-9])(?:bot)?(?P<v>[0-9]{5,16}:A[A-Za-z0-9_\-]{30,})"),
    Shape("Slack webhook", r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9_/\-]+)"),
    Shape("Discord webhook", r"discord(?:app)?\.com/api/webhooks/[0-9]+/(?P<v>[A-Za-z0-9_\-]+)"),
    Shape("Teams webhook", r"\.webhook\.office\.com/(?P<v>[^\s\"'<>]+)"),
    Shape(
        "scheme and value",
        r"(?i)(?<![A-Za-z0-9])(?:bearer|basic|token|jwt|apikey|api-key)\s+(?P<v>[" + _TOKEN_CHARS + r"]{8,})",
        _has_digit,
    ),
    Shape(
        "value after a credential word",
        r"(?i)(?<![A-Za-z0-9])(?:api[ _\-]?key|secret(?:[ _\-]key)?|password|passwd|passphrase|credentials?"
        r"|access[ _\-]key|private[ _\-]key|client[ _\-]secret|refresh[ _\-]token|access[ _\-]token)"
        r"(?:\s+(?:is|was|of|for\s+\S+\s+is))?\s+(?P<v>[" + _TOKEN_CHARS + r"]{16,})",
        _mixed,
    ),
)

# Whether any shape can match is decided by substring tests (C speed; a regex alternation
# tries each branch at each position, ten times slower): a prefix or marker of each shape,
# and each word the two word-led shapes need followed by whitespace (or, in JSON bytes, by
# the backslash of an escaped one). Tested lowercased: a superset of the case-sensitive shapes.
_HINT_MARKS: Final = (
    "eyj", "sk-", "sk_", "rk-", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "xapp-",
    "akia", "asia", "abia", "acca", "aiza", "whsec_", "npm_", "pypi-", "hf_", "sg.", "shp", "dop_v1_", "private key",
    "hooks.slack", "discord", "webhook.office",
)  # fmt: skip
#: the last word of each word-led shape's lead (``bearer``, ``api key``, ``client secret``, ``access token`` …)
_HINT_WORDS: Final = (
    "bearer", "basic", "token", "jwt", "apikey", "api-key", "key", "secret", "password", "passwd", "passphrase",
    "credential", "credentials",
)  # fmt: skip
_BOT = re.compile(r"[0-9]{5}:A")
_WORD_ENDS: Final = (" ", "\t", "\n", "\r", "\f", "\v")


#: no shape is shorter (``jwt `` and 8 token characters)
_SHORTEST_SHAPE: Final = 12


def _hinted(lowered: str) -> bool:
    for mark in _HINT_MARKS:
        if mark in lowered:
            return True
    for word in _HINT_WORDS:
        if word in lowered:
            for end in _WORD_ENDS:
                if word + end in lowered:
                    return True
    return False


_DIGEST = re.compile(r"blake3:[0-9a-f]{64}")


def _is_digest(text: str) -> bool:
    """``blake3:<64 lowercase hex>``, the library's digests: the commonest long string of a record."""
    return len(text) == 71 and _DIGEST.fullmatch(text) is not None


def may_hold_shape(text: str) -> bool:
    """Whether ``text`` may hold a credential by its shape; False means surely not (a cheap test first)."""
    if len(text) < _SHORTEST_SHAPE or _is_digest(text):
        return False  # too short for any shape, or a digest (lowercase hex cannot match one)
    if len(text) <= _CACHED_TEXT:
        return _hinted_cached(text)  # records repeat their short strings: answered once
    return _hinted(text.lower()) or _BOT.search(text) is not None


#: strings up to this long have their hint remembered (a bounded cache: no large text is kept)
_CACHED_TEXT: Final = 256


@functools.lru_cache(maxsize=8192)
def _hinted_cached(text: str) -> bool:
    return _hinted(text.lower()) or _BOT.search(text) is not None


def shape_spans(text: str) -> list[tuple[int, int]]:
    """The merged character ranges of ``text`` that are credentials by their shape alone (:data:`SHAPES`)."""
    if not may_hold_shape(text):
        return []
    spans = [span for shape in SHAPES for span in shape.spans(text)]
    return _merged(spans) if spans else []

_JSON_OPEN = re.compile(r"[ \t]*[{\[]")


def _closing(text: str, start: int) -> int:
    """The end of the JSON object or array opening at ``start`` (quotes and escapes respected);
    the end of ``text`` when it never closes, so an unbalanced value is redacted to the end."""
    depth, quoted, escaped = 0, False, False
    for i in range(start, len(text)):
        c = text[i]
        if quoted:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _assignments(text: str, generation: int = GENERATION) -> Iterator[tuple[int, int]]:
    covered = 0  # the end of the last redacted JSON value: separators inside it are already covered
    for sep in _SEPARATOR.finditer(text):
        at = sep.start()
        if at < covered:
            continue
        j = at
        while j > 0 and text[j - 1] in " \t":
            j -= 1
        if j > 0 and text[j - 1] in "\"'":
            j -= 1
        k = j
        while k > 0 and j - k < 64 and text[k - 1] in _NAME_CHARS:
            k -= 1
        if k > 0 and text[k - 1] in _NAME_CHARS:
            continue  # a name longer than 64 characters: not a field name
        while k < j and not text[k].isalpha():
            k += 1  # a name starts with a letter
        if k == j or not is_credential_name(text[k:j], generation):
            continue
        opening = _JSON_OPEN.match(text, at + 1)
        if opening is not None:  # a JSON object or array (a JSON body kept as a string): all of it
            covered = _closing(text, opening.end() - 1)
            yield opening.end() - 1, covered
            continue
        v = _VALUE.match(text, at + 1)
        if v is None:
            continue
        for group in ("dq", "sq", "bare"):
            if v.group(group) is not None:
                start, end = v.span(group)
                if group == "bare" and sep.group() == "=":
                    cut = re.search(r"[ \t]", v.group("bare"))  # name=value stops at whitespace
                    if cut is not None:
                        end = start + cut.start()
                if end > start and not (
                    group == "bare" and generation >= 4 and text[start:end].lower() in _NOT_SECRET_WORDS
                ):
                    yield start, end
                break


def _spans(text: str, generation: int = GENERATION) -> list[tuple[int, int]]:
    """The character ranges of ``text`` that hold credentials by their look (see the module docstring)."""
    has_sep = ":" in text or "=" in text
    spans: list[tuple[int, int]] = []
    if generation >= 3:
        spans.extend(shape_spans(text))  # the scheme-and-value shape includes the older Bearer rule
    elif "bearer" in text.lower():
        for m in _BEARER.finditer(text):
            if any(c.isdigit() for c in m.group(1)):
                spans.append(m.span(1))
    if not has_sep:
        return spans
    spans.extend(_assignments(text, generation))
    if "://" in text and "@" in text:
        for m in _URL_USER.finditer(text):
            if m.group("pw"):
                spans.append(m.span("pw"))
            elif len(m.group("user")) >= MIN_SCRUB and any(c.isdigit() for c in m.group("user")):
                spans.append(m.span("user"))
    if "=" in text:
        spans.extend(m.span("v") for m in _QUERY.finditer(text))
    return spans


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def find_spans(text: str, generation: int = GENERATION) -> list[tuple[int, int]]:
    """The merged, ordered character ranges of ``text`` that hold credentials by their look."""
    return _merged(_spans(text, generation))


def apply_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each range of ``spans`` (from :func:`find_spans`) replaced by ``[REDACTED]``."""
    out: list[str] = []
    pos = 0
    for a, b in spans:
        out.append(text[pos:a])
        out.append(REDACTED)
        pos = b
    out.append(text[pos:])
    return "".join(out)


def text_secrets(text: str) -> list[str]:
    """The credential values ``text`` holds by their look (a Bearer token, ``password=…``, URL user-info …)."""
    return [text[a:b] for a, b in find_spans(text) if text[a:b] != REDACTED]


def scrub_known(text: str, secrets: Iterable[str], minimum: int = MIN_SCRUB) -> str:
    """``text`` with every known secret of at least ``minimum`` characters replaced by ``[REDACTED]``."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= minimum and secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _scrub_spans(text: str) -> str:
    spans = find_spans(text)
    return apply_spans(text, spans) if spans else text


def scrub_text(text: str, secrets: Iterable[str] = (), *, patterns: bool = True, minimum: int = MIN_TEXT_SCRUB) -> str:
    """A free text (an error, a note) as it may be recorded: known secrets and credential-looking values replaced."""
    text = scrub_known(text, secrets, minimum)
    return _scrub_spans(text) if patterns else text


def scrub_note(text: str | None) -> str | None:
    """A text a person or script gives to be recorded as-is (a note, a reason, a question, a revision):
    credential-looking values replaced, everything else kept. None stays None."""
    return None if text is None else _scrub_spans(text)


#: Fields of a record that hold who acted, as a person or script gave it (``--by``, ``by=``): scrubbed
#: like a note wherever the library records one (an approval's decision, an acceptance, a failure, a
#: checkpoint, a reconciliation, an unblocked item).
GIVEN_TEXT_FIELDS: Final = ("by",)


def scrub_given_fields(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each :data:`GIVEN_TEXT_FIELDS` string scrubbed by :func:`scrub_note`.

    ``data`` itself when nothing changed (a new dict otherwise: the caller's is never edited).
    """
    out = data
    for name in GIVEN_TEXT_FIELDS:
        value = data.get(name)
        if type(value) is str:
            clean = scrub_note(value)
            if clean != value:
                out = {**out, name: clean}
    return out


def scrub_bytes(data: bytes, secrets: Iterable[str], *, patterns: bool = False) -> bytes:
    """``data`` with known secrets (and, with ``patterns``, credential-looking values) replaced; lossless otherwise."""
    known = [s for s in secrets if len(s) >= MIN_SCRUB]
    if not known and not patterns:
        return data
    for secret in sorted(known, key=len, reverse=True):
        raw = secret.encode("utf-8", "surrogateescape")
        if raw in data:
            data = data.replace(raw, REDACTED.encode())
    if patterns:
        text = data.decode("utf-8", "surrogateescape")
        clean = _scrub_spans(text)
        if clean != text:
            data = clean.encode("utf-8", "surrogateescape")
    return data


def scrub_string_value(text: str, secrets: frozenset[str] | set[str], looked: str | None = None) -> str:
    """A string inside a recorded value: a known secret whole, else ``looked`` (the string with its
    credential-looking parts already replaced, when it has any) with the long known secrets inside replaced."""
    if text in secrets and len(text) >= MIN_TEXT_SCRUB:
        return REDACTED
    if looked is not None:
        text = looked
    return scrub_known(text, secrets) if secrets else text



# -- structured values ------------------------------------------------------------------------------

KeyHit = Callable[[str, str, Any], bool]


def _default_hit(generation: int) -> KeyHit:
    return lambda _path, key, _value: is_credential_name(key, generation)


def _is_pair(value: Any, generation: int) -> bool:
    return (
        type(value) in (list, tuple)
        and len(value) == 2
        and type(value[0]) is str
        and type(value[1]) is str
        and is_credential_name(value[0], generation)
    )


_AUTH_SCHEMES: Final = frozenset({"bearer", "basic", "token", "digest", "apikey", "key"})


def leaves(value: Any, out: set[str], generation: int = GENERATION) -> None:
    """Every string (and long number) under a redacted key: each is a secret, to scrub wherever it recurs.

    ``Bearer <token>`` also yields the token alone, and any credential-looking part.
    """
    if isinstance(value, str):
        if value and value != REDACTED:
            out.add(value)
            scheme, _, rest = value.strip().partition(" ")
            if rest and scheme.lower() in _AUTH_SCHEMES:
                out.add(rest.strip())
            out.update(x for a, b in find_spans(value, generation) if (x := value[a:b]) != REDACTED)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if len(str(value)) >= 4:
            out.add(str(value))
    elif isinstance(value, dict):
        for v in value.values():
            leaves(v, out, generation)
    elif isinstance(value, (list, tuple)):
        for v in value:
            leaves(v, out, generation)


class Walk:
    """One redaction of a structured value: collects the secrets (:meth:`collect`), then cleans (:meth:`clean`).

    ``key_hit(path, key, value)`` says whether the value under ``key`` is redacted whole
    (default: :func:`is_credential_name`); ``values`` turns the value rules (header pairs,
    credential-looking parts of strings) on; ``drop`` names keys left out at any depth.
    From generation 3 on a dict key that is itself a known secret or holds a credential by its look is
    replaced too (``[REDACTED]``, then ``[REDACTED]#2`` … should two collide). What is not
    JSON is left as it is (for the writer to refuse); the caller bounds the depth first.
    """

    def __init__(
        self,
        *,
        key_hit: KeyHit | None = None,
        values: bool = True,
        drop: frozenset[str] = frozenset(),
        generation: int = GENERATION,
    ) -> None:
        self.key_hit = key_hit if key_hit is not None else _default_hit(generation)
        self.values = values
        self.drop = drop
        self.generation = generation
        self.secrets: set[str] = set()
        self.dropped: list[str] = []
        self.redacted: list[str] = []
        #: paths under a credential name whose boolean or null was kept (generation 4 on; earlier ones redacted it)
        self.kept: list[str] = []
        self.looked: dict[str, str] = {}  # strings with credential-looking parts -> those parts replaced

    def _hit(self, container: dict[Any, Any], path: str, key: str, value: Any) -> bool:
        """Whether the value under ``key`` of ``container`` is redacted whole (the rule, or an OAuth grant's code)."""
        if self.key_hit(path, key, value):
            return True
        return self.values and self.generation >= 4 and _grant_field(container, key)

    def run(self, value: Any, known: Iterable[str] = ()) -> Any:
        """Both passes: ``value`` as it may be recorded (``known`` secrets scrubbed too)."""
        self.collect(value, "$")
        self.secrets.update(known)
        return self.clean(value, "$")

    def _look(self, text: str) -> None:
        if self.values and text not in self.looked:
            spans = find_spans(text, self.generation)
            if spans:
                self.secrets.update(x for a, b in spans if (x := text[a:b]) != REDACTED)
                self.looked[text] = apply_spans(text, spans)

    # pass 1: every value the rule marks, wherever it is
    def collect(self, value: Any, path: str) -> None:
        t = type(value)
        if t is str:
            self._look(value)
        elif t is dict:
            for k, v in value.items():
                if not isinstance(k, str) or k in self.drop:
                    continue
                if self.generation >= 3:
                    self._look(k)
                sub = f"{path}.{k}"
                if self._hit(value, sub, k, v):
                    leaves(v, self.secrets, self.generation)
                else:
                    self.collect(v, sub)
        elif t in (list, tuple):
            if self.values and _is_pair(value, self.generation):
                leaves(value[1], self.secrets, self.generation)
                return
            for i, v in enumerate(value):
                self.collect(v, f"{path}[{i}]")

    def _key(self, key: str, taken: dict[Any, Any]) -> str:
        if self.generation < 3:
            return key
        out = scrub_string_value(key, self.secrets, self.looked.get(key))
        if out == key:
            return key
        n, base = 1, out
        while out in taken:
            n += 1
            out = f"{base}#{n}"
        return out

    # pass 2: the value as recorded
    def clean(self, value: Any, path: str) -> Any:
        t = type(value)
        if t is str:
            out = scrub_string_value(value, self.secrets, self.looked.get(value))
            if out != value:
                self.redacted.append(path)
            return out
        if t is dict:
            cleaned: dict[Any, Any] = {}
            for k, v in value.items():
                if isinstance(k, str):
                    if k in self.drop:
                        self.dropped.append(f"{path}.{k}")
                        continue
                    shown = self._key(k, cleaned)
                    sub = f"{path}.{shown}"
                    if shown != k:
                        self.redacted.append(f"{sub} (the key)")
                    if self._hit(value, f"{path}.{k}", k, v):
                        if self.generation >= 4 and holds_no_secret(v):
                            self.kept.append(sub)
                            cleaned[shown] = v
                            continue
                        self.redacted.append(sub)
                        cleaned[shown] = REDACTED
                        continue
                    cleaned[shown] = self.clean(v, sub)
                else:
                    cleaned[k] = self.clean(v, f"{path}.{k}")
            return cleaned
        if t in (list, tuple):
            if self.values and _is_pair(value, self.generation):
                self.redacted.append(f"{path}[1]")
                return [value[0], REDACTED]
            return [self.clean(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value


def _text_clear(text: str, shapes: bool) -> bool:
    if len(text) <= _CACHED_TEXT:
        return _text_clear_cached(text, shapes)
    return _text_clear_now(text, shapes)


@functools.lru_cache(maxsize=8192)
def _text_clear_cached(text: str, shapes: bool) -> bool:
    return _text_clear_now(text, shapes)


def _text_clear_now(text: str, shapes: bool) -> bool:
    if _is_digest(text):
        return True  # no name, no shape
    if "=" in text or ("@" in text and "://" in text) or (shapes and may_hold_shape(text)):
        return False
    return ":" not in text or next(_assignments(text), None) is None


def _names_clear(value: Any, shapes: bool) -> bool:
    """False when a key is a credential name, a list is a header pair, or a string may hold a credential
    (``<credential name>:``, an ``=``, a URL with an ``@``, with ``shapes`` a shape's hint)."""
    t = type(value)
    if t is dict:
        for k, v in value.items():
            if type(k) is not str or is_credential_name(k) or not _text_clear(k, shapes) or _grant_field(value, k):
                return False
            tv = type(v)
            if tv is str:
                if not _text_clear(v, shapes):
                    return False
            elif (tv is dict or tv is list or tv is tuple) and not _names_clear(v, shapes):
                return False
        return True
    if t is list or t is tuple:
        return not _is_pair(value, GENERATION) and all(_names_clear(v, shapes) for v in value)
    if t is str:
        return _text_clear(value, shapes)
    return True


def surely_clean(value: Any, *, shapes: bool = True) -> bool:
    """True when the default rules would change nothing in ``value``, so the walk can be skipped; False
    means: walk it. Conservative (see :func:`_names_clear`); the caller bounds the depth. With
    ``shapes=False`` shapes are not looked for (the stream core replaces them in every record)."""
    return _names_clear(value, shapes)


def redact_shapes(value: Any, opaque: Callable[[dict[Any, Any]], bool] | None = None) -> Any:
    """``value`` with every part of every string (dict keys too) that is a credential by its shape replaced.

    Context-free (:data:`SHAPES` only), so it is safe on any record, the library's own
    included: ids, digests (``blake3:<hex>``), numbers and ordinary text are returned as
    given. A dict ``opaque`` says yes to is returned untouched (a content-addressed blob
    carried inline, whose bytes must match its digest). Returns ``value`` itself when
    nothing changed. The caller bounds the depth.
    """
    t = type(value)
    if t is str:
        if not may_hold_shape(value):
            return value
        spans = shape_spans(value)
        return apply_spans(value, spans) if spans else value
    if t is dict:
        if opaque is not None and opaque(value):
            return value
        out: dict[Any, Any] | None = None
        for i, (k, v) in enumerate(value.items()):
            k2 = redact_shapes(k) if type(k) is str and may_hold_shape(k) else k
            tv = type(v)
            walked = tv is str or tv is dict or tv is list or tv is tuple
            v2 = redact_shapes(v, opaque) if walked else v
            if out is None and (k2 is not k or v2 is not v):
                out = dict(list(value.items())[:i])
            if out is not None:
                while k2 != k and k2 in out:
                    k2 = f"{k2}#"
                out[k2] = v2
        return value if out is None else out
    if t is list or t is tuple:
        items = [redact_shapes(v, opaque) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if t is list else tuple(items)
    return value
