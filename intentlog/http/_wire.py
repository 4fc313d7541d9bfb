"""What an HTTP exchange looks like in the record: the request envelope and the response artifact.

Pure functions over bytes and strings; no HTTP library is imported here, so the rules
can be tested and reasoned about without a network.

**The request envelope** is the value handed to :func:`intentlog.effects.effect`, whose
canonical form is hashed and stored in ``call.manifest``::

    {"format": "intentlog-http-request/1", "method": "POST",
     "url": "https://api.openai.com/v1/chat/completions",
     "headers": {"accept": "application/json", "content-type": "application/json"},
     "body": {"json": {...}}}

- ``headers`` holds only the headers that change what the server does
  (:data:`HASHED_HEADERS` plus any the caller names), lowercased. Everything that varies
  per run or per try — ``user-agent``, ``x-stainless-*`` (retry count, timeouts, OS and
  runtime versions), SDK-generated ``idempotency-key``, ``content-length``, ``host``,
  ``accept-encoding``, tracing headers — is left out, so one logical call hashes the same
  on every run and every try. A ``multipart/form-data`` boundary (random per request) is
  replaced by a fixed token in both the content type and the body.
- ``body`` is ``null`` (empty), ``{"json": value}`` (parsed, so key order and whitespace
  do not matter; the canonicaliser drops timestamp keys and redacts credential keys at any
  depth), ``{"form": [[name, value], …]}`` (urlencoded forms), ``{"text": …}`` (``text/*``
  in UTF-8) or ``{"base64": …}`` (anything else, multipart included).
- Credentials never enter it: credential headers are not hashed headers (and are redacted
  by name if a caller adds one), URL user-info is removed, credential query parameters
  and form fields are replaced by ``[REDACTED]``, and any credential *value* seen in the
  request's headers or URL is scrubbed from every string and byte of the envelope.

**The response artifact** is one blob, so one digest covers status, headers and body::

    intentlog-http-response/1\\n
    {"headers":[["content-type","application/json"],…],"http_version":"HTTP/1.1","reason":"OK","status":200}\\n
    <the body bytes exactly as they came off the wire>

A small JSON head line and then the raw body, rather than a JSON envelope with the body in
base64: the body stays byte-for-byte what the server sent (compressed if it was
compressed), costs nothing extra to store, and stays readable with ``intentlog show``
(a server-sent event stream is its own text). Header pairs keep their order and case;
credential response headers (``set-cookie`` …) and credential values echoed anywhere are
redacted, and the head lists what was. Bytes that do not start with the magic line are
*evidence* an operator supplied (DESIGN §6): the body alone, taken as a 200 with no headers.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

import orjson

from ..errors import IntentlogError, NotSerializable, UsageError
from ..eventlog.canonical import (
    CANON_VERSION,
    DEFAULT_REDACT,
    REDACTED,
    Canonical,
    canon_generation,
    canonicalize,
    dumps,
)
from ..eventlog.redaction import GENERATION, is_credential_name, is_field_credential

__all__ = [
    "HASHED_HEADERS",
    "REDACT_HEADERS",
    "REDACT_QUERY",
    "REQUEST_FORMAT",
    "RESPONSE_MAGIC",
    "RequestPlan",
    "ResponseParts",
    "decode_response",
    "encode_response",
    "evidence",
    "plan_request",
]

REQUEST_FORMAT: Final = "intentlog-http-request/1"
RESPONSE_MAGIC: Final = b"intentlog-http-response/1\n"

#: Request headers that change what a server does; only these (and the caller's) are hashed.
HASHED_HEADERS: Final = frozenset(
    {
        "content-type",
        "accept",
        "anthropic-version",
        "anthropic-beta",
        "openai-organization",
        "openai-project",
        "openai-beta",
    }
)

#: Header names whose values are credentials: redacted in the record, wherever they appear.
REDACT_HEADERS: Final = frozenset(
    {
        *DEFAULT_REDACT,
        "authorization",
        "proxy-authorization",
        "api-key",
        "x-api-key",
        "cookie",
        "set-cookie",
        "x-goog-api-key",
        "x-auth-token",
        "x-amz-security-token",
        "ocp-apim-subscription-key",
        "x-functions-key",
    }
)

#: Query-string parameter and form-field names whose values are credentials.
REDACT_QUERY: Final = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "key",
        "access_token",
        "refresh_token",
        "token",
        "client_secret",
        "password",
        "secret",
        "signature",
        "sig",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
    }
)

# any request header whose name looks like this carries a value we treat as secret when
# scrubbing (only exact values are scrubbed, so a false positive costs nothing)
_SECRET_NAME = re.compile(r"auth|key|token|secret|cookie|passw|signature|credential", re.I)
_MIN_SECRET = 8  # shorter values are too likely to occur by chance to be scrubbed
_BOUNDARY = "intentlog-boundary"


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """One request as the record will know it."""

    envelope: dict[str, Any]  # handed to effect(); canonicalised there with the same rules
    canonical: Canonical  # its canonical form: ``canonical.digest`` is the request hash
    label: str  # "POST https://host/path" (no query: it may hold credentials)
    secrets: frozenset[str]  # credential values seen in the request, scrubbed from what is stored
    # the same request planned as the canonicalisation before did (to find a call an older intentlog
    # recorded); that plan has its own ``legacy``, down to the first canonicalisation
    legacy: Callable[[], RequestPlan] | None = field(default=None, compare=False)

    def older(self) -> Iterator[RequestPlan]:
        """The plans of earlier canonicalisations, newest first; none when nothing is redacted (all hash alike)."""
        plan = self
        if not (plan.secrets or plan.canonical.earlier_may_differ):
            return
        while plan.legacy is not None:
            plan = plan.legacy()
            yield plan

    def as_recorded(self, recorded_hash: str | None) -> RequestPlan:
        """This plan, or its form under an earlier canonicalisation when that is the one ``recorded_hash`` names."""
        if recorded_hash is None or recorded_hash == self.canonical.digest:
            return self
        for old in self.older():
            if old.canonical.digest == recorded_hash:
                return replace(old, secrets=old.secrets | self.secrets)
        return self


@dataclass(frozen=True, slots=True)
class ResponseParts:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    http_version: str
    reason: str
    evidence_only: bool  # bytes an operator supplied without the head line


# -- request ------------------------------------------------------------------------------


def _collect_secret(value: str, out: set[str]) -> None:
    value = value.strip()
    if len(value) >= _MIN_SECRET:
        out.add(value)
    scheme, _, token = value.partition(" ")
    token = token.strip()
    if token and len(token) >= _MIN_SECRET:
        out.add(token)
        if scheme.lower() == "basic":
            try:
                userpass = base64.b64decode(token, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return
            _collect_secret(userpass, out)
            _collect_secret(userpass.partition(":")[2], out)
    for part in value.split(";"):  # cookies: name=value; name=value
        _name, eq, val = part.strip().partition("=")
        if eq and len(val) >= _MIN_SECRET:
            out.add(val)


def _scrub_text(text: str, secrets: Iterable[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _scrub_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    for secret in sorted(secrets, key=len, reverse=True):
        raw = secret.encode("utf-8", "surrogateescape")
        if raw in data:
            data = data.replace(raw, REDACTED.encode())
    return data


def _scrub_value(value: Any, secrets: frozenset[str]) -> Any:
    if isinstance(value, str):
        return _scrub_text(value, secrets)
    if isinstance(value, dict):
        return {k: _scrub_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_value(v, secrets) for v in value]
    return value


def _is_secret_field(name: str, names: frozenset[str], parts: int) -> bool:
    """A query parameter or form field holding a credential: one of ``names``, or (today's rule) a credential name
    or an OAuth authorization ``code`` (:func:`~intentlog.eventlog.redaction.is_field_credential`)."""
    return name.lower() in names or (parts > 0 and is_field_credential(name, parts))


def _redact_url(
    url: str, query_names: frozenset[str], secrets: set[str], generation: int = GENERATION
) -> tuple[str, str]:
    """The URL without user-info and with credential query values redacted; and its label form."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        for piece in (unquote(user), unquote(password), unquote(userinfo)):
            if len(piece) >= _MIN_SECRET:
                secrets.add(piece)
    query = parts.query
    if query:
        out = []
        for item in query.split("&"):
            name, eq, value = item.partition("=")
            if eq and _is_secret_field(unquote(name), query_names, generation):
                if len(unquote(value)) >= _MIN_SECRET:
                    secrets.add(unquote(value))
                    secrets.add(value)
                item = f"{name}={quote(REDACTED)}"
            out.append(item)
        query = "&".join(out)
    clean = urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    label = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return clean, label


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _boundary(content_type: str) -> str | None:
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "boundary" and value:
            return value.strip().strip('"')
    return None


def _body_value(
    body: bytes, content_type: str, field_names: frozenset[str], secrets: set[str], parts: int = GENERATION
) -> Any:
    if not body:
        return None
    media = _media_type(content_type)
    if media == "application/json" or media.endswith("+json"):
        try:
            value = orjson.loads(body)
            dumps(value)  # exact JSON only (no NaN, no > 64-bit integers): else keep the bytes
        except (orjson.JSONDecodeError, NotSerializable):
            pass
        else:
            return {"json": value}
    elif media == "application/x-www-form-urlencoded":
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            form = []
            for name, value in parse_qsl(text, keep_blank_values=True):
                if _is_secret_field(name, field_names, parts):
                    if len(value) >= _MIN_SECRET:
                        secrets.add(value)
                    value = REDACTED
                form.append([name, value])
            return {"form": form}
    elif media.startswith("text/"):
        try:
            return {"text": body.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {"base64": body}  # encoded after scrubbing


def plan_request(
    method: str,
    url: str,
    headers: Iterable[tuple[bytes, bytes]],
    body: bytes,
    *,
    hash_headers: frozenset[str] = HASHED_HEADERS,
    redact: frozenset[str] = REDACT_HEADERS,
    redact_query: frozenset[str] = REDACT_QUERY,
    drop: Iterable[str] | None = None,
    version: str = CANON_VERSION,
    public: frozenset[str] = frozenset(),
) -> RequestPlan:
    """Build the envelope of one request, its canonical form and hash (see the module docstring).

    ``version`` :data:`~intentlog.eventlog.canonical.CANON_V1` builds the envelope and hash
    as the first canonicalisation did (exact names only), an earlier one of
    :data:`~intentlog.eventlog.canonical.CANON_EARLIER` as it did, to find a call recorded by them.
    ``public``: header names whose values are not credentials even though the name looks
    like one (a declared idempotency-key header: its value is the recorded call key).

    Raises :class:`~intentlog.errors.NotSerializable` only if the canonicaliser refuses
    the envelope, which the fallbacks above make unreachable for any bytes.
    """
    # the name rules' generation the canonicalisation used (0: the first, exact names only)
    parts = canon_generation(version)
    secrets: set[str] = set()
    selected: dict[str, str] = {}
    content_type = ""
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        if name not in public and (
            name in redact or _SECRET_NAME.search(name) or (parts > 0 and is_credential_name(name, parts))
        ):
            _collect_secret(value, secrets)
        if name == "content-type":
            content_type = value
        if name in hash_headers:
            selected[name] = f"{selected[name]}, {value}" if name in selected else value
    clean_url, label_url = _redact_url(url, redact_query, secrets, parts)
    field_names = redact_query | redact
    boundary = _boundary(content_type) if _media_type(content_type).startswith("multipart/") else None
    if boundary:
        body = body.replace(boundary.encode("latin-1"), _BOUNDARY.encode())
        if "content-type" in selected:
            selected["content-type"] = selected["content-type"].replace(boundary, _BOUNDARY)
    body_value = _body_value(body, content_type, field_names, secrets, parts)
    frozen = frozenset(secrets)
    if isinstance(body_value, dict) and "base64" in body_value:
        raw = _scrub_bytes(body_value["base64"], frozen)
        body_value = {"base64": base64.b64encode(raw).decode("ascii")}
    else:
        body_value = _scrub_value(body_value, frozen)
    envelope: dict[str, Any] = {
        "format": REQUEST_FORMAT,
        "method": method.upper(),
        "url": _scrub_text(clean_url, frozen),
        "headers": _scrub_value(selected, frozen),
        "body": body_value,
    }
    canonical = canonicalize(envelope, drop=drop, redact=redact, version=version)
    frozen = frozen | canonical.secrets  # values the canonical rules found in the body: scrubbed from the response too
    return RequestPlan(envelope, canonical, f"{method.upper()} {_scrub_text(label_url, frozen)}", frozen)


# -- response -----------------------------------------------------------------------------


def encode_response(
    status: int,
    headers: Iterable[tuple[bytes, bytes]],
    body: bytes,
    *,
    http_version: str = "HTTP/1.1",
    reason: str = "",
    redact: frozenset[str] = REDACT_HEADERS,
    secrets: frozenset[str] = frozenset(),
) -> bytes:
    """The response artifact: magic line, JSON head line, raw body (see the module docstring)."""
    pairs: list[list[str]] = []
    redacted: list[str] = []
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1")
        value = raw_value.decode("latin-1")
        if name.lower() in redact or is_credential_name(name):
            value = REDACTED
            redacted.append(name.lower())
        else:
            scrubbed = _scrub_text(value, secrets)
            if scrubbed != value:
                value = scrubbed
                redacted.append(name.lower())
        pairs.append([name, value])
    clean = _scrub_bytes(body, secrets)
    if clean != body:
        redacted.append("body")
    head: dict[str, Any] = {"status": status, "http_version": http_version, "reason": reason, "headers": pairs}
    if redacted:
        head["redacted"] = sorted(set(redacted))
    return RESPONSE_MAGIC + dumps(head) + b"\n" + clean


def _malformed(detail: str) -> IntentlogError:
    return IntentlogError(f"a recorded HTTP response is malformed: {detail}; run 'intentlog verify'")


def decode_response(data: bytes) -> ResponseParts:
    """Split a response artifact (or an operator's body-only evidence) into its parts."""
    if not data.startswith(RESPONSE_MAGIC):
        return ResponseParts(200, [], data, "HTTP/1.1", "OK", True)
    head_line, sep, body = data[len(RESPONSE_MAGIC) :].partition(b"\n")
    if not sep:
        raise _malformed("the head line is not terminated")
    try:
        head = orjson.loads(head_line)
    except orjson.JSONDecodeError as exc:
        raise _malformed(f"the head line is not JSON ({exc})") from exc
    if not isinstance(head, dict):
        raise _malformed("the head line is not an object")
    status = head.get("status")
    pairs = head.get("headers", [])
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 999:
        raise _malformed(f"status {status!r}")
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in pairs
    ):
        raise _malformed("headers must be a list of [name, value] string pairs")
    version = head.get("http_version") or "HTTP/1.1"
    reason = head.get("reason") or ""
    return ResponseParts(
        status,
        [(n.encode("latin-1"), v.encode("latin-1")) for n, v in pairs],
        body,
        str(version),
        str(reason),
        False,
    )


def evidence(
    body: bytes,
    *,
    status: int = 200,
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    http_version: str = "HTTP/1.1",
    reason: str = "",
) -> bytes:
    """Response bytes for ``task.reconcile(call, "served", evidence=...)`` of an HTTP call.

    Use it when the operator learned the full answer (from the provider's dashboard, a
    log, a support ticket): the next run replays exactly this status, these headers and
    this body. Passing the body alone to ``reconcile`` also works: it is replayed as a 200
    with no headers.
    """
    if not isinstance(body, (bytes, bytearray)):
        raise UsageError(f"evidence body must be bytes, not {type(body).__name__}")
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 999:
        raise UsageError(f"status must be an HTTP status code, not {status!r}")
    items = headers.items() if isinstance(headers, Mapping) else headers
    pairs = [(str(k).encode("latin-1"), str(v).encode("latin-1")) for k, v in items]
    return encode_response(status, pairs, bytes(body), http_version=http_version, reason=reason)
