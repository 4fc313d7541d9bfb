"""What killed puts leave in ``tmp/``, and sweeping it.

A put stages its bytes in ``tmp/`` under a name carrying its pid: ``put.<pid>.<hex>.staged``
(a streamed put) or the atomic-write helper's ``.<name>.<pid>.<hex>.tmp``. A staging file
whose maker is dead is a leftover: only space, never part of the record.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from .._internal.fsutil import check_real_dir, fsops, fsync_dir
from .._internal.procs import pid_alive
from ..errors import ArtifactError

__all__ = ["STAGING_RE", "sweep_dead_staging"]

#: What a put stages in tmp/. The pid tells whether its maker is alive.
STAGING_RE = re.compile(r"(?:put\.(\d+)\.[0-9a-f]+\.staged|\..*\.(\d+)\.[0-9a-f]{12}\.tmp)\Z")


def sweep_dead_staging(tmp: Path) -> int:
    """Remove the staging files in ``tmp`` whose creating process is dead; how many (durably gone).

    Files of live processes (this one included) and anything not named like a staging
    file are left alone; ``tmp`` that is a link is refused (:class:`~intentlog.errors.LinkRefused`).
    """
    removed = 0
    if not check_real_dir(tmp, what="staging files (tmp/)"):
        return 0
    try:
        entries = list(os.scandir(tmp))
    except OSError as exc:
        raise ArtifactError(f"cannot list {tmp}: {exc.strerror or exc}; check the ledger folder") from exc
    for e in entries:
        m = STAGING_RE.match(e.name)
        if m is None or not e.is_file(follow_symlinks=False):
            continue
        if pid_alive(int(m.group(1) or m.group(2))):
            continue
        with contextlib.suppress(FileNotFoundError):
            fsops.unlink(e.path)
            removed += 1
    if removed:
        fsync_dir(tmp)
    return removed
