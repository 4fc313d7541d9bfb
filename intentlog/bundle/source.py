"""Reading the ledger being exported (through its :class:`~intentlog.checker.seams.LedgerReads`): no link followed.

Every copied byte is checked against its digest on the way (the reads raise, so a copy is
discarded); what a folder alone can hold -- links, ``intentlog.json`` -- is refused or
checked here, and is simply absent behind the storage seams.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from .._internal.regular import NotRegular
from ..artifacts.inline import inline_bytes
from ..checker.folder import checked_copy, read_range
from ..checker.seams import LedgerReads
from ..errors import ArtifactError, LedgerError, NotALedger
from ..eventlog.format import FORMAT
from ..heads.codec import HEADS_FILE
from ..refs import EXPORT_INLINE, walk
from .files import MARKER_FILE

__all__ = ["check_marker", "checked_copy", "inline_in", "read_range", "refuse_links"]


def inline_in(reads: LedgerReads, tasks: Sequence[str], wanted: set[str]) -> dict[str, bytes]:
    """Blobs that ride inline only in streams not being exported (checked against their digest)."""
    found: dict[str, bytes] = {}
    for task in tasks:
        if not wanted:
            break
        for ev in reads.events(task).events:
            for digest, ref in walk(ev.data, EXPORT_INLINE):
                if not wanted:
                    break
                if digest in wanted and ref is not None:
                    try:
                        data = inline_bytes(ref)
                    except ArtifactError:
                        data = None  # a corrupt copy: keep looking for a good one
                    if data is not None:
                        found[digest] = data
                        wanted.discard(digest)
    return found


_READ_TOP = frozenset({MARKER_FILE, HEADS_FILE, "tasks", "objects", "quarantine"})


def refuse_links(reads: LedgerReads) -> None:
    """:class:`LedgerError` naming the first link among what export reads; export never copies through one."""
    for rel, target in reads.links().items():
        top = rel.split("/", 1)[0]
        if top in _READ_TOP and not (top == "tasks" and rel.endswith(".lock")):
            raise LedgerError(
                f"{reads.where}/{rel} is a symbolic link (to {target!r}); export never copies through one, so "
                "nothing was exported. Replace it with the real file or folder (from a copy or git), then export "
                "again; 'intentlog verify' lists every link in the ledger"
            )


def check_marker(reads: LedgerReads) -> None:
    """:class:`NotALedger` unless the ledger's ``intentlog.json`` declares its format (none kept: nothing to check)."""
    try:
        data = reads.marker()
        if data is None:
            return
        marker = orjson.loads(data)
    except (OSError, NotRegular, orjson.JSONDecodeError) as exc:
        raise NotALedger(reads.where, f"{MARKER_FILE} cannot be read ({exc}); pass the ledger root") from exc
    if type(marker) is not dict or marker.get("format") != FORMAT:
        raise NotALedger(reads.where, f"{MARKER_FILE} does not declare format {FORMAT!r}")
