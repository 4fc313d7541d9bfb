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
- **Known values**: once a value is known to be a credential, it is scrubbed wherever
  it appears in what that call records.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from typing import Final

__all__ = [
    "DEFAULT_NAMES",
    "apply_spans",
    "find_spans",
    "KEY_QUALIFIERS",
    "LAST_PARTS",
    "MIN_SCRUB",
    "MIN_TEXT_SCRUB",
    "REDACTED",
    "STRONG_PARTS",
    "TOKEN_EXCEPTIONS",
    "is_credential_name",
    "name_parts",
    "scrub_bytes",
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

#: ``<qualifier> key`` (adjacent parts, anywhere in the name) is a credential name.
KEY_QUALIFIERS: Final = frozenset(
    {"api", "private", "secret", "access", "signing", "encryption", "master", "client", "subscription", "functions"}
)

#: A name whose last part is one of these is a credential name (unless an exception precedes ``token``).
LAST_PARTS: Final = frozenset({"token", "auth", "authorization", "pwd"})

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
def is_credential_name(name: str) -> bool:
    """Whether a field, header, parameter or variable called ``name`` holds a credential (see the module docstring)."""
    if name.lower() in DEFAULT_NAMES:
        return True
    parts = name_parts(name)
    if not parts:
        return False
    for i, part in enumerate(parts):
        if part in STRONG_PARTS:
            return True
        if part in ("key", "keys") and i > 0 and parts[i - 1] in KEY_QUALIFIERS:
            return True
    last = parts[-1]
    if last in LAST_PARTS:
        return not (last == "token" and len(parts) > 1 and parts[-2] in TOKEN_EXCEPTIONS)
    for part in parts:
        for suffix in _RUN_TOGETHER:
            if part.endswith(suffix) and len(part) > len(suffix):
                head = part[: -len(suffix)]
                if not (suffix == "token" and head in TOKEN_EXCEPTIONS):
                    return True
    return False


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


def _assignments(text: str) -> Iterator[tuple[int, int]]:
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
        if k == j or not is_credential_name(text[k:j]):
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
                if end > start:
                    yield start, end
                break


def _spans(text: str) -> list[tuple[int, int]]:
    """The character ranges of ``text`` that hold credentials by their look (see the module docstring)."""
    has_sep = ":" in text or "=" in text
    has_bearer = "bearer" in text.lower()
    if not has_sep and not has_bearer:
        return []
    spans: list[tuple[int, int]] = []
    if has_bearer:
        for m in _BEARER.finditer(text):
            if any(c.isdigit() for c in m.group(1)):
                spans.append(m.span(1))
    if has_sep:
        spans.extend(_assignments(text))
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


def find_spans(text: str) -> list[tuple[int, int]]:
    """The merged, ordered character ranges of ``text`` that hold credentials by their look."""
    return _merged(_spans(text))


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

