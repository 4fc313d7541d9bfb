"""The object seam's contract: content-addressed bytes behind ``put``, ``get``, ``stat``, ``list``, ``delete``.

Guarantees every implementation gives are in :mod:`intentlog.artifacts.objects` (which
re-exports these names with the folder implementation); the contract is the test suite
tests/test_storage_contract.py. An :class:`~intentlog.artifacts.store.ArtifactStore` given
an ``ObjectStore`` (``ArtifactStore(root, objects=...)``) writes and reads through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ObjectStat", "ObjectStore"]


@dataclass(frozen=True, slots=True)
class ObjectStat:
    """What :meth:`ObjectStore.stat` says about a stored object."""

    digest: str
    size: int


class ObjectStore(Protocol):
    """Content-addressed bytes: atomic put, checked get, stat, list, delete."""

    def put(self, data: bytes) -> str:
        """Store ``data`` atomically and durably; its digest (the same for the same bytes)."""

    def get(self, digest: str) -> bytes:
        """The object's bytes, checked (``ArtifactMissing``, ``DigestMismatch``)."""

    def stat(self, digest: str) -> ObjectStat:
        """The object's size (``ArtifactMissing`` if absent)."""

    def list(self) -> Iterator[str]:
        """Every stored digest."""

    def delete(self, digest: str) -> bool:
        """Remove the object durably; False if there was none."""
