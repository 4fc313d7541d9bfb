"""``--root s3://BUCKET/PREFIX``: which commands run on an object-store ledger, and verify's local copy.

The read views (``tasks``, ``status``, ``log``, ``show``), ``verify`` (the checker over
the seams: :func:`~intentlog.checker.verify_storage`), ``export`` (a local bundle, the
store read through the seams), ``seal`` (the next ``heads/N.json``, created only if
absent: :mod:`intentlog.s3.seals`) and ``init`` (which runs the store's
fencing probe), ``run`` (a backlog on the store: its leases are the streams' lease
epochs, :mod:`intentlog.backlog.leases`) and ``backlog`` (its view), and the operator's
decisions (``accept``, ``approve``, ``reject``, ``reconcile``, ``fail``, ``unblock``: each
an append through the stream's lease, fenced by the store like every append) read and
write through the storage seams. ``report`` reads through the seams only (the page a
folder holding the same streams and objects gives, byte for byte; nothing written, no probe),
``fork`` creates the new task's stream there in one conditional create, and ``--dry-run``
copies the task's streams from the store to a private folder; ``repair`` there finds
nothing to repair or refuses the damage it names, writing nothing.
Every other command is refused
before anything is read or written, naming what to do instead: merge the ledger to a
folder and run the command there. ``gc`` and ``keep`` plan, delete and mark through the
seams, under the store's gc log lease (:mod:`intentlog.retention.storeapply`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import click

from ..errors import UsageError

if TYPE_CHECKING:
    from ..checker import VerifyReport

__all__ = ["ON_STORE", "check_on_store", "seal_store", "verify_store"]

#: The commands that run on an object-store ledger.
ON_STORE: Final = frozenset(
    {"init", "tasks", "status", "log", "show", "verify", "export", "seal", "doctor", "merge", "run", "backlog"}
    | {"accept", "approve", "reject", "reconcile", "fail", "unblock"}  # appends through the stream's lease
    | {"report", "fork", "repair"}  # report reads through the seams; fork creates there; repair names damage
    | {"gc", "keep"}  # retention through the seams; the gc log, keep marks and gc lock are the store's gc log
)


def check_on_store(url: str) -> None:
    """Refuse (``UsageError``: exit 2, nothing written) a command that does not run on a store yet."""
    ctx = click.get_current_context(silent=True)
    name = ctx.info_name if ctx is not None else None
    if name is None or name in ON_STORE:
        return
    raise UsageError(
        f"{name!r} does not run on an object-store ledger ({url}) yet; nothing was read or written: "
        f"copy the ledger to a folder first (merge {url} DIR), then run {name} with --root DIR "
        f"(on a store: {', '.join(sorted(ON_STORE))})"
    )


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
