"""Small payloads that ride inline in an event, beside their digest (DESIGN §3).

As RocksDB's BlobDB keeps values under ``min_blob_size`` in its log, bytes up to
:data:`INLINE_MAX` may be stored in the event that first records them, so one sync covers
payload and event. They are kept as a JSON string (``"inline"``) when they are valid UTF-8
-- which round-trips through JSON to the very same bytes -- else as base64
(``"inline_b64"``). Reading them back always checks them against the ref's digest and size.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from typing import Protocol

from .._internal.digest import check_digest, digest_bytes
from ..errors import ArtifactError, DigestMismatch

__all__ = ["INLINE_MAX", "ObjectSource", "inline_bytes", "inline_ref", "ref_bytes"]

#: The largest payload stored inline (bytes); larger ones always go to ``objects/``.
INLINE_MAX = 4096


def inline_ref(data: bytes, *, media_type: str | None = None) -> dict[str, object]:
    """A ref object carrying ``data`` inline: ``{"digest", "size", "inline" | "inline_b64"}``.

    Raises ValueError if ``data`` is longer than :data:`INLINE_MAX`. Strict UTF-8 decoding
    decides the form: valid UTF-8 never decodes to a lone surrogate, so the string encodes
    back to exactly ``data``.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"inline_ref() takes bytes, not {type(data).__name__}")
    payload = bytes(data)
    if len(payload) > INLINE_MAX:
        raise ValueError(f"{len(payload)} bytes is more than INLINE_MAX ({INLINE_MAX}); put them in the artifact store")
    ref: dict[str, object] = {"digest": digest_bytes(payload), "size": len(payload)}
    if media_type is not None:
        ref["media_type"] = media_type
    try:
        ref["inline"] = payload.decode("utf-8")
    except UnicodeDecodeError:
        ref["inline_b64"] = binascii.b2a_base64(payload, newline=False).decode("ascii")
    return ref


def inline_bytes(ref: Mapping[str, object]) -> bytes | None:
    """The bytes carried inline in ``ref``, checked; None if it carries none.

    Raises :class:`InvalidDigest` for a malformed digest, :class:`ArtifactError` for a
    malformed payload, and :class:`DigestMismatch` when the bytes do not match the ref's
    digest or size (the event was edited or damaged).
    """
    has_text = "inline" in ref
    has_b64 = "inline_b64" in ref
    if not has_text and not has_b64:
        return None
    digest = check_digest(ref.get("digest"))
    if has_text and has_b64:
        raise ArtifactError(f"inline payload of {digest} has both 'inline' and 'inline_b64'; keep one")
    if has_text:
        text = ref["inline"]
        if not isinstance(text, str):
            raise ArtifactError(f"inline payload of {digest}: 'inline' must be a string")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ArtifactError(
                f"inline payload of {digest} holds a lone surrogate, which no valid UTF-8 "
                "decodes to; the event was altered"
            ) from exc
    else:
        encoded = ref["inline_b64"]
        if not isinstance(encoded, str):
            raise ArtifactError(f"inline payload of {digest}: 'inline_b64' must be a string")
        import base64  # only here: the encoder above needs only binascii, and imports cost every script

        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ArtifactError(f"inline payload of {digest}: 'inline_b64' is not valid base64") from exc
    size = ref.get("size")
    actual = digest_bytes(data)
    if actual != digest:
        raise DigestMismatch(digest, actual, f"inline payload ({len(data)} bytes)")
    if isinstance(size, bool) or not isinstance(size, int) or size != len(data):
        raise DigestMismatch(digest, actual, f"inline payload ({len(data)} bytes, but its ref says size {size!r})")
    return data


class ObjectSource(Protocol):
    """Anything that gives an object's checked bytes by digest (the artifact store, an object store)."""

    def get(self, digest: str, /) -> bytes: ...


def ref_bytes(
    ref: Mapping[str, object],
    store: ObjectSource,
    *,
    inline_index: Mapping[str, Mapping[str, object]] | None = None,
) -> bytes:
    """The bytes ``ref`` names: carried inline (checked), else the store's object (checked).

    The one rule "inline bytes, else the store". ``inline_index`` maps digests to refs that
    carry the bytes inline elsewhere (an event that recorded the same payload earlier); it
    is consulted when ``ref`` itself carries none. Raises what :func:`inline_bytes` and
    ``store.get`` raise (:class:`DigestMismatch`, :class:`~intentlog.errors.ArtifactMissing`).
    """
    data = inline_bytes(ref)
    if data is not None:
        return data
    digest = str(ref.get("digest"))
    if inline_index is not None and digest in inline_index:
        data = inline_bytes(inline_index[digest])
        if data is not None:
            return data
    return store.get(digest)
