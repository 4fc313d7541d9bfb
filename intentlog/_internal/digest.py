"""Digest names: ``blake3:`` and 64 lowercase hex digits, computed over exact bytes."""

from __future__ import annotations

import re
from typing import Any, cast

from blake3 import blake3

from ..errors import InvalidDigest

__all__ = ["DIGEST_PREFIX", "check_digest", "digest_bytes", "is_digest", "is_ref"]

DIGEST_PREFIX = "blake3:"
_DIGEST_RE = re.compile(r"blake3:[0-9a-f]{64}\Z")


def digest_bytes(data: bytes | bytearray | memoryview) -> str:
    """The digest name of ``data`` (DESIGN §4 rule 6: hash exact bytes, never a re-serialisation)."""
    return DIGEST_PREFIX + blake3(data).hexdigest()


def is_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST_RE.match(value) is not None


def is_ref(v: Any) -> bool:
    """True for an artifact ref object: ``{"digest": "blake3:<64 hex>", "size": N >= 0, ...}``."""
    if type(v) is not dict or not is_digest(v.get("digest")):
        return False
    size = v.get("size")
    mt = v.get("media_type")
    return type(size) is int and size >= 0 and (mt is None or type(mt) is str)


def check_digest(value: object) -> str:
    """Return ``value`` if it is a well-formed digest name, else raise :class:`InvalidDigest`."""
    if not is_digest(value):
        raise InvalidDigest(value)
    return cast(str, value)
