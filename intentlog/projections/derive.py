"""What a completion may carry: only what the interpretation or observation before it holds.

One rule, read by the live work-state fold (so a re-run refuses a forged value) and by
verify's graph check (so an auditor sees it). A value-carrying completion and the
interpretation it completes each reduce to a *token*: ``b"value "`` and the value as
canonical JSON (sorted keys, compact), or ``b"ref <digest>"`` (a value stored in
``objects/``); they must be equal, byte for byte. The standalone bundle verifier states the same
rule in its own code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from .._internal.digest import digest_bytes, is_ref

__all__ = ["canonical_digest", "completion_token", "interpretation_token"]


def canonical_digest(value: Any) -> str | None:
    """The digest of ``value`` as canonical JSON (sorted keys, compact); None if it cannot be encoded."""
    try:
        return digest_bytes(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    except (orjson.JSONEncodeError, TypeError):
        return None


def _value_token(value: Any) -> bytes:
    try:
        return b"value " + orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):  # parsed from a line, so it encodes; never equal to another
        return b"value ?" + repr(id(value)).encode()


def interpretation_token(d: Mapping[str, Any]) -> bytes | None:
    """What a completion of this ``attempt.interpreted`` must carry; None when it recorded an error (no value)."""
    if "result" in d:
        return _value_token(d["result"])
    ref = d.get("result_ref")
    if ref is None or not is_ref(ref):
        return None
    digest: str = ref["digest"]
    return b"ref " + digest.encode()


def completion_token(result: Any) -> bytes | None:
    """The token a ``call.completed`` result claims; None when it carries no value (raw, or malformed)."""
    if type(result) is dict and result.keys() == {"value"}:
        return _value_token(result["value"])
    if type(result) is dict and result.keys() == {"value_ref"} and is_ref(result["value_ref"]):
        digest: str = result["value_ref"]["digest"]
        return b"ref " + digest.encode()
    return None
