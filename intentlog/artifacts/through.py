"""An ArtifactStore over another ObjectStore: the store's calls, through it.

Guarantees: a put returns only once the backend's put returned (durable by its contract),
and the digest the backend names the bytes by is checked against the bytes' own
(:class:`~intentlog.errors.ArtifactError` if they differ); every read is checked against
its digest here as well as by the backend. ``put_fd`` reads the file into memory: the
protocol's put takes bytes.
"""

from __future__ import annotations

import io
import os
import typing
from collections.abc import Iterator

from ..errors import ArtifactError, ArtifactMissing, DigestMismatch
from .hashing import CHUNK_SIZE, digest_of
from .protocol import ObjectStore
from .ref import Ref

__all__ = ["exists_via", "get_via", "list_via", "open_via", "put_fd_via", "put_via", "size_via", "verify_via"]


def put_via(objects: ObjectStore, data: bytes, media_type: str | None) -> Ref:
    digest = digest_of(data)
    named = objects.put(data)
    if named != digest:
        raise ArtifactError(
            f"{objects!r} named {len(data)} bytes {named}, but they hash to {digest}; nothing refers to it"
        )
    return Ref(digest, len(data), media_type)


def put_fd_via(objects: ObjectStore, fd: int, *, source: str, media_type: str | None) -> Ref:
    parts: list[bytes] = []
    while chunk := os.read(fd, CHUNK_SIZE):
        parts.append(chunk)
    try:
        return put_via(objects, b"".join(parts), media_type)
    except OSError as exc:
        raise ArtifactError(f"cannot store {source} in {objects!r}: {exc}; put it again") from exc


def get_via(objects: ObjectStore, digest: str) -> bytes:
    data = objects.get(digest)
    actual = digest_of(data)
    if actual != digest:
        raise DigestMismatch(digest, actual, repr(objects))
    return data


def open_via(objects: ObjectStore, digest: str) -> typing.BinaryIO:
    return io.BytesIO(get_via(objects, digest))


def exists_via(objects: ObjectStore, digest: str) -> bool:
    try:
        objects.stat(digest)
    except ArtifactMissing:
        return False
    return True


def size_via(objects: ObjectStore, digest: str) -> int:
    return objects.stat(digest).size


def list_via(objects: ObjectStore) -> Iterator[str]:
    return iter(objects.list())


def verify_via(objects: ObjectStore, digest: str) -> bool:
    get_via(objects, digest)
    return True
