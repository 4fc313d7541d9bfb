"""``verify`` and ``seal`` on an ``--root s3://BUCKET/PREFIX``: the checker over the store's seams, and its next seal.

Every command runs on an object-store ledger as on a folder: the ledger it opens
(:func:`~intentlog.ledger.open_ledger`) reads and writes through its storage
(``Ledger.backend``), and the command line keeps no list of commands a store runs. These
two helpers are the store's ``verify`` and ``seal`` as the command line calls them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..checker import VerifyReport

__all__ = ["seal_store", "verify_store"]


def verify_store(url: str, tasks: Sequence[str] | None = None) -> VerifyReport:
    """Verify the ledger at ``url`` through its seams (nothing written, no probe, no local copy)."""
    from ..ledgerreads import verify_stored
    from ..s3 import connect

    storage = connect(url, write=False)
    return verify_stored(storage.client, storage.objects, list(tasks) if tasks else None, where=url)


def seal_store(url: str) -> tuple[str, bytes]:
    """Seal the ledger at ``url`` (the store must pass the probe: a seal is a write); where, and the bytes created."""
    from ..s3 import connect
    from ..s3.seals import create_seal

    return create_seal(connect(url, write=True).client)
