"""The object seam: what the ledger needs from the place that keeps artifact bytes.

Objects are named by their BLAKE3 digest, so a put is idempotent by construction: the same
bytes give the same name. :class:`ObjectStore` is the contract; :class:`FolderObjects` is
today's one, the ``objects/`` folder of an :class:`~intentlog.artifacts.store.ArtifactStore`
(temp + fsync + link + dir fsync, never through a link). An ``ArtifactStore`` built with
``objects=`` another implementation writes and reads through that one instead. The contract is one test suite
(tests/test_storage_contract.py) every implementation must pass; an S3-compatible store
(a conditional put of the digest's key) only has to pass it too.

Guarantees every implementation gives:

- :meth:`~ObjectStore.put` is atomic (a reader sees all of the bytes or no object) and
  durable on return; putting bytes already stored changes nothing and returns the same digest.
- :meth:`~ObjectStore.get` returns bytes checked against the digest;
  :class:`~intentlog.errors.ArtifactMissing` when there is no such object,
  :class:`~intentlog.errors.DigestMismatch` when the stored bytes are not the named ones.
- :meth:`~ObjectStore.stat` gives the size (``ArtifactMissing`` if absent);
  :meth:`~ObjectStore.list` every digest; :meth:`~ObjectStore.delete` removes one durably.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from .._internal.fsutil import fsops, open_dir_nofollow
from ..errors import ArtifactError
from .protocol import ObjectStat, ObjectStore
from .store import ArtifactStore

__all__ = ["FolderObjects", "ObjectStat", "ObjectStore"]


class FolderObjects:
    """:class:`ObjectStore` over a ledger's ``objects/`` folder (no inline payloads: bytes only)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.store = ArtifactStore(root)

    def __repr__(self) -> str:
        return f"FolderObjects({str(self.store.root)!r})"

    def put(self, data: bytes) -> str:
        return self.store.put(data).digest

    def get(self, digest: str) -> bytes:
        return self.store.get(digest)

    def stat(self, digest: str) -> ObjectStat:
        return ObjectStat(digest, self.store.size_of(digest))

    def list(self) -> Iterator[str]:
        return self.store.iter_digests()

    def delete(self, digest: str) -> bool:
        path = self.store.path_for(digest)
        try:
            fd = open_dir_nofollow(path.parent, what="an object shard folder")
        except FileNotFoundError:
            return False
        try:
            try:
                fsops.unlink(path.name, dir_fd=fd)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise ArtifactError(f"deleting {path} ({digest}) failed: {exc.strerror or exc}") from exc
            fsops.fsync(fd)
        finally:
            os.close(fd)
        return True
