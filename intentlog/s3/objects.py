"""Artifacts on an object store: one immutable object per digest, created only if absent.

:class:`ObjectArtifacts` implements the object seam (:class:`~intentlog.artifacts.objects.ObjectStore`)
over any :class:`~intentlog.s3.client.ObjectClient`, with the folder's layout as keys:
``objects/xx/<the other 62 hex digits>``. A put is one conditional create of the digest's
key (an object store's put is atomic: a reader sees the whole object or none), so two
writers of the same bytes store them once; a get checks the bytes against their name.

An object store cannot refresh an object's modification time without rewriting it, so a
re-put of bytes already there *touches* them instead: it creates ``gc/touch/<hex>/<token>``
(retention's grace period counts from the latest put or touch, as a folder's from the
file's mtime, which a re-put refreshes). It then waits while a gc's dying marker
(``gc/dying/<hex>``) is there and checks the object is still there, storing it again if a
gc deleted it meanwhile: a put that returns leaves the object stored and either touched
after every gc plan that could delete it, or stored anew (:mod:`intentlog.s3.retire`).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator

from .._internal.digest import DIGEST_PREFIX, check_digest, digest_bytes
from ..artifacts.objects import ObjectStat
from ..errors import ArtifactMissing, DigestMismatch, LedgerError, UsageError
from .client import ObjectClient
from .retire import dying_key, touch_key

__all__ = ["ObjectArtifacts"]

_NAME_RE = re.compile(r"^objects/([0-9a-f]{2})/([0-9a-f]{62})$")
#: How long a re-put waits for a gc's dying marker to go (a gc holds one for three requests).
DYING_WAIT = 30.0
_POLL = 0.05


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
        key = self.key_for(digest)
        if self.client.create(key, data):
            return digest  # a new object: no gc plan saw it
        self._refresh(digest, key, data)  # the same bytes are there already: touch them
        return digest

    def _refresh(self, digest: str, key: str, data: bytes) -> None:
        """Touch existing bytes, wait out a gc deleting them, store them again if one did."""
        deadline = time.monotonic() + DYING_WAIT
        while True:
            self.client.create(touch_key(digest, secrets.token_hex(8)), b"")
            while self.client.head(dying_key(digest)) is not None:
                if time.monotonic() >= deadline:
                    raise LedgerError(
                        f"{self.client.describe(key)}: a gc has been deleting this object for {DYING_WAIT:.0f} s "
                        f"(its marker {self.client.describe(dying_key(digest))} stays); nothing was stored: if no "
                        "gc is running, run 'intentlog gc --apply' (it clears what a killed gc left), then put again"
                    )
                time.sleep(_POLL)
            if self.client.head(key) is not None:
                return
            if self.client.create(key, data):
                return

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
