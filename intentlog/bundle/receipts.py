"""How a provider's receipt log line names the send it records, and which sends the record covers.

A provider's log is not intentlog's: each provider names a request in its own way. A
receipt line is one JSON object; it identifies its request by either field, detected per
line (no option to pass: the standalone verifier reads the bundle alone):

- ``body_hash``: a digest of the request body the provider received, ``blake3:<64 hex>``
  or ``sha256:<64 hex>``. It matches a call when it is the call's canonical request hash
  (``call.manifest``'s ``request_hash``), or the BLAKE3 or SHA-256 of the recorded request
  bytes (the ``request`` artifact): the body of a ``send`` that posts
  ``canonicalize(request).data``.
- ``idempotency_key``: the idempotency key the request carried. It matches a call whose
  key it is (``call.manifest``'s ``key``: what ``task.effect(key, ...)`` was given, or what
  the http drop-in derived), or whose recorded HTTP request carries it in the header the
  manifest's provider-deduplication declaration names (``ProviderDedup(header=...)``).

A line with both is matched by the first one a call that started an attempt was sent with
(``body_hash`` first), so a provider that hashes the wire bytes (which an http drop-in
call's canonical envelope does not reproduce) is still matched by its key. Each
``attempt.started`` covers at most one receipt of a log: a receipt is *covered* when its
calls' attempts suffice for it and the receipts before it (:func:`uncovered`); any other
receipt is a send the record does not cover.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Mapping
from typing import Any, Final

import blake3
import orjson

__all__ = [
    "BODY_FIELD",
    "BODY_HASHES",
    "HTTP_REQUEST_FORMAT",
    "KEY_FIELD",
    "body_digests",
    "call_keys",
    "chosen",
    "describe",
    "receipt_identifiers",
    "uncovered",
]

#: The receipt field holding a digest of the body the provider received.
BODY_FIELD: Final = "body_hash"
#: The receipt field holding the idempotency key the request carried.
KEY_FIELD: Final = "idempotency_key"
#: The digest algorithms a ``body_hash`` may use, as its prefix.
BODY_HASHES: Final = ("blake3", "sha256")
#: The http drop-in's request envelope format (``intentlog.http``), read for its idempotency header.
HTTP_REQUEST_FORMAT: Final = "intentlog-http-request/1"

_HEX: Final = frozenset("0123456789abcdef")


def _is_body_hash(value: Any) -> bool:
    if type(value) is not str:
        return False
    algo, sep, hexd = value.partition(":")
    return sep == ":" and algo in BODY_HASHES and len(hexd) == 64 and set(hexd) <= _HEX


def receipt_identifiers(receipt: Any) -> list[tuple[str, str]]:
    """The identifiers a receipt line offers, in the order they are tried: ``("body", digest)``, ``("key", key)``."""
    if type(receipt) is not dict:
        return []
    out: list[tuple[str, str]] = []
    body = receipt.get(BODY_FIELD)
    if type(body) is str and _is_body_hash(body):
        out.append(("body", body))
    key = receipt.get(KEY_FIELD)
    if type(key) is str and key:
        out.append(("key", key))
    return out


def body_digests(request_hash: str | None, request: bytes | None) -> set[str]:
    """Every ``body_hash`` that names this call's request: its canonical hash and the digests of its bytes."""
    out = {request_hash} if request_hash is not None else set()
    if request is not None:
        out.add("blake3:" + blake3.blake3(request).hexdigest())
        out.add("sha256:" + hashlib.sha256(request).hexdigest())
    return out


def call_keys(key: str | None, request: bytes | None, dedup: Any) -> set[str]:
    """Every idempotency key this call was sent with: its call key, and its recorded HTTP idempotency header."""
    out = {key} if key else set()
    header = dedup.get("header") if type(dedup) is dict else None
    if request is not None and type(header) is str and header:
        try:
            envelope = orjson.loads(request)
        except orjson.JSONDecodeError:
            return out
        headers = envelope.get("headers") if type(envelope) is dict else None
        if envelope.get("format") == HTTP_REQUEST_FORMAT and type(headers) is dict:
            value = headers.get(header.lower())
            if type(value) is str and value:
                out.add(value)
    return out


def uncovered(wants: list[list[int]], capacity: list[int]) -> list[int]:
    """The receipts (indexes into ``wants``) no attempt is left to cover, in line order.

    ``wants[r]`` lists the calls receipt ``r`` may be covered by; ``capacity[c]`` is how many
    attempts call ``c`` started. Each attempt covers at most one receipt: receipts are
    matched in line order, an earlier match moved to another of its calls when that frees
    an attempt for a later receipt (breadth-first augmenting paths, no recursion), so a
    receipt is reported only when no assignment at all covers it with the ones before it.
    """
    holders: list[list[int]] = [[] for _ in capacity]
    dead: set[int] = set()  # full calls from which no augmenting path leads to a free attempt: they stay so

    def augment(r: int) -> bool:
        for c in wants[r]:
            if len(holders[c]) < capacity[c]:
                holders[c].append(r)
                return True
        reached: dict[int, tuple[int, int | None]] = {}  # call -> (receipt that moves into it, the call it leaves)
        queue: deque[int] = deque()
        for c in wants[r]:
            if c not in dead and c not in reached:
                reached[c] = (r, None)
                queue.append(c)
        while queue:
            c = queue.popleft()
            if len(holders[c]) < capacity[c]:
                at: int | None = c
                while at is not None:
                    moving, left = reached[at]
                    holders[at].append(moving)
                    if left is not None:
                        holders[left].remove(moving)
                    at = left
                return True
            for other in holders[c]:
                for c2 in wants[other]:
                    if c2 not in dead and c2 not in reached:
                        reached[c2] = (other, c)
                        queue.append(c2)
        dead.update(reached)
        return False

    return [r for r in range(len(wants)) if not augment(r)]


def chosen(known: Mapping[tuple[str, str], list[int]], idents: list[tuple[str, str]]) -> tuple[str, str]:
    """The identifier a receipt is matched by: the first one a call that started an attempt was sent with."""
    for ident in idents:
        if known.get(ident):
            return ident
    return idents[0]


def describe(ident: tuple[str, str]) -> str:
    """How a message names an identifier."""
    return f"request {ident[1]}" if ident[0] == "body" else f"idempotency key {ident[1]!r}"
