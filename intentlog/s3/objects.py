"""Artifacts on an object store: one immutable object per digest, created only if absent.

:class:`ObjectArtifacts` implements the object seam (:class:`~intentlog.artifacts.objects.ObjectStore`)
over any :class:`~intentlog.s3.client.ObjectClient`, with the folder's layout as keys:
``objects/xx/<the other 62 hex digits>``. A put is one conditional create of the digest's
key (an object store's put is atomic: a reader sees the whole object or none), so two
writers of the same bytes store them once; a get checks the bytes against their name.

An object store cannot refresh an object's modification time without rewriting it, so a
re-put changes nothing at all (retention's grace period counts from the first put).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from .._digest import DIGEST_PREFIX, check_digest, digest_bytes
from ..artifacts.objects import ObjectStat
from ..errors import ArtifactMissing, DigestMismatch, UsageError
from .client import ObjectClient

__all__ = ["ObjectArtifacts"]

_NAME_RE = re.compile(r"^objects/([0-9a-f]{2})/([0-9a-f]{62})$")


class ObjectArtifacts:
    """:class:`~intentlog.artifacts.objects.ObjectStore` on an object store's conditional create."""

    def __init__(self, client: ObjectClient, *, before_write: Callable[[], None] | None = None) -> None:
        self.client = client
        #: called before every put (a store opened to read runs its fencing probe there)
        self.before_write = before_write

    def __repr__(self) -> str:
        return f"ObjectArtifacts({self.client.describe('objects')!r})"

    @staticmethod
    def key_for(digest: str) -> str:
        """The key the object named ``digest`` is stored at (whether or not it exists)."""
        hexdigest = check_digest(digest)[len(DIGEST_PREFIX) :]
        return f"objects/{hexdigest[:2]}/{hexdigest[2:]}"

    def put(self, data: bytes) -> str:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise UsageError(f"an object is bytes, not {type(data).__name__}; nothing was stored")
        data = bytes(data)
        digest = digest_bytes(data)
        if self.before_write is not None:
            self.before_write()
        self.client.create(self.key_for(digest), data)  # refused: the same bytes are there already
        return digest

    def get(self, digest: str) -> bytes:
        key = self.key_for(digest)
        data = self.client.get(key)
        if data is None:
            raise ArtifactMissing(digest, self.client.describe(key))
        actual = digest_bytes(data)
        if actual != digest:
            raise DigestMismatch(digest, actual, self.client.describe(key))
        return data

    def stat(self, digest: str) -> ObjectStat:
        key = self.key_for(digest)
        size = self.client.head(key)
        if size is None:
            raise ArtifactMissing(digest, self.client.describe(key))
        return ObjectStat(digest, size)

    def list(self) -> Iterator[str]:
        for key, _ in self.client.scan("objects"):
            m = _NAME_RE.match(key)
            if m:  # a stray key is not an object; verify reports it
                yield f"{DIGEST_PREFIX}{m.group(1)}{m.group(2)}"

    def delete(self, digest: str) -> bool:
        key = self.key_for(digest)
        if self.client.head(key) is None:
            return False
        self.client.delete(key)
        return True
