"""The artifact reference events carry: ``{"digest", "size"}`` (+ ``media_type``), checked on every way in."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass

from .._internal.digest import check_digest
from ..errors import ArtifactError

__all__ = ["Ref"]


@typing.final
@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to an artifact as events carry it: ``{"digest", "size"}`` (+ ``media_type``).

    The media type travels with the reference, not with the bytes: one object may be
    referred to under several media types.
    """

    digest: str
    size: int
    media_type: str | None = None

    def __post_init__(self) -> None:
        check_digest(self.digest)
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ArtifactError(
                f"artifact ref for {self.digest}: size must be a non-negative integer, got {self.size!r}"
            )
        if self.media_type is not None and not isinstance(self.media_type, str):
            raise ArtifactError(
                f"artifact ref for {self.digest}: media_type must be a string or None, "
                f"got {type(self.media_type).__name__}"
            )

    def to_json(self) -> dict[str, object]:
        """The JSON object stored in events (DESIGN §3)."""
        out: dict[str, object] = {"digest": self.digest, "size": self.size}
        if self.media_type is not None:
            out["media_type"] = self.media_type
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> Ref:
        """Read a ref object back, refusing a bad shape.

        Keys other than ``digest``, ``size`` and ``media_type`` (such as the inline
        payload keys) are ignored. Raises :class:`InvalidDigest` for a malformed digest
        and :class:`ArtifactError` for any other bad shape.
        """
        if not isinstance(obj, Mapping):
            raise ArtifactError(f"an artifact ref must be a JSON object, got {type(obj).__name__}")
        if "digest" not in obj or "size" not in obj:
            raise ArtifactError(
                f"artifact ref with keys {sorted(map(str, obj))} lacks 'digest' or 'size'; "
                "a ref is {'digest': 'blake3:<64 hex>', 'size': N}"
            )
        digest = check_digest(obj["digest"])
        size = obj["size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ArtifactError(f"artifact ref for {digest}: size must be a non-negative integer, got {size!r}")
        media_type = obj.get("media_type")
        if media_type is not None and not isinstance(media_type, str):
            raise ArtifactError(
                f"artifact ref for {digest}: media_type must be a string, got {type(media_type).__name__}"
            )
        return cls(digest, size, media_type)

