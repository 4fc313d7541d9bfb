"""A ledger's storage on an S3-compatible object store (the ``s3`` extra: ``pip install 'intentlog[s3]'``).

The two storage seams get their object-store implementations here: streams as numbered
segment objects created with a conditional put (:class:`ObjectStreams`), artifacts as
immutable content-addressed objects (:class:`ObjectArtifacts`), both over the small
:class:`ObjectClient` protocol whose S3 implementation (:class:`S3Client`, obstore) is
imported on first use. :func:`connect` opens both for an ``s3://bucket/prefix`` URL and,
before anything is written, runs the conformance probe (:func:`require_fencing`): a store
whose conditional create does not fence is refused. docs/scale-out.md tells the design.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from .client import ObjectClient, S3Client, S3Location, parse_s3_url
from .objects import ObjectArtifacts
from .probe import ProbeCheck, ProbeReport, probe_store, require_fencing
from .retire import finished_deletion
from .streams import CHECKPOINT_EVERY, ObjectLease, ObjectStreams, Segment

__all__ = [
    "CHECKPOINT_EVERY",
    "ObjectArtifacts",
    "ObjectClient",
    "ObjectLease",
    "ObjectStorage",
    "ObjectStreams",
    "ProbeCheck",
    "ProbeReport",
    "S3Client",
    "S3Location",
    "Segment",
    "connect",
    "on_client",
    "parse_s3_url",
    "probe_store",
    "require_fencing",
]


@dataclass(frozen=True, slots=True)
class ObjectStorage:
    """A ledger's two seams on one object store: its streams and its artifacts."""

    client: ObjectClient
    streams: ObjectStreams
    objects: ObjectArtifacts


def on_client(client: ObjectClient, *, write: bool = True) -> ObjectStorage:
    """Both seams over ``client``; the store must pass the probe (``StoreRefused``) before anything is written.

    With ``write`` the probe runs now; without, before the first segment or object the seams
    put (once per process and store), so a ledger opened to read that is then written to is
    probed all the same.
    """
    if write:
        require_fencing(client)
        storage = ObjectStorage(client, ObjectStreams(client), ObjectArtifacts(client))
    else:

        def probe() -> None:
            require_fencing(client)

        storage = ObjectStorage(
            client, ObjectStreams(client, before_write=probe), ObjectArtifacts(client, before_write=probe)
        )
    storage.streams.deleted = partial(finished_deletion, client)  # a task id gc deleted may be used again
    return storage


def connect(url: str, *, write: bool = True, env: dict[str, str] | None = None) -> ObjectStorage:
    """Open ``s3://bucket/prefix`` with the standard AWS settings (``env``, else the environment)."""
    return on_client(S3Client(parse_s3_url(url), env=env), write=write)
