"""``--root s3://BUCKET/PREFIX``: which commands run on an object-store ledger, and verify's local copy.

The read views (``tasks``, ``status``, ``log``, ``show``) and ``init`` (which runs the
store's fencing probe) read and write through the storage seams. ``verify`` checks a
local copy: the store is merged into a new temporary folder (``intentlog merge``, which
reads every segment and object through the seams) and the folder checker runs there --
the report says so. Every other command is refused before anything is read or written,
naming what to do instead: merge the ledger to a folder and run the command there.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import click

from ..errors import UsageError

if TYPE_CHECKING:
    from ..checker import VerifyReport

__all__ = ["ON_STORE", "check_on_store", "verify_store"]

#: The commands that run on an object-store ledger (``verify`` through a local copy).
ON_STORE: Final = frozenset({"init", "tasks", "status", "log", "show", "verify", "doctor", "merge", "run", "backlog"})


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


def verify_store(url: str, tasks: Sequence[str] | None = None) -> tuple[VerifyReport, str]:
    """Verify the ledger at ``url`` on a local copy made by merge; the report and a note saying so.

    The copy is made in a new temporary folder and removed afterwards. ``tasks`` limits
    the stream checks as for a folder.
    """
    from ..checker import verify_path
    from ..merge import merge

    with tempfile.TemporaryDirectory(prefix="intentlog-verify-") as tmp:
        copy = Path(tmp) / "ledger"
        result = merge(url, copy)  # verifies the whole copy
        plan = result.plan
        report = result.verify if result.verify is not None and not tasks else verify_path(copy, list(tasks or ()))
        note = (
            f"verified a local copy of {url} made by 'intentlog merge' "
            f"({len(plan.create)} streams, {len(plan.objects)} objects copied through the seams)"
        )
        return report, note
