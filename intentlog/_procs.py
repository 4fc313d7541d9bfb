"""What this host's processes are and hold, read without touching them: liveness and flock holders.

Read-only (nothing here takes a lock or writes), so the checker and the views may use it.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["PROC_LOCKS", "flock_writer", "pid_alive"]

#: Where Linux lists the file locks held: read to see a live writer without touching its lock.
PROC_LOCKS: Final = "/proc/locks"


def pid_alive(pid: int) -> bool:
    """Is ``pid`` a live process on this host? Unknown (no permission) counts as alive."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def flock_writer(st: os.stat_result, table_path: str = PROC_LOCKS) -> int | None:
    """The pid holding an exclusive ``flock`` on the file ``st`` describes, per ``table_path`` (/proc/locks).

    None when no process holds one; -1 when one does but its pid is unreadable. Raises
    ``OSError`` when there is no readable ``/proc/locks`` (the caller decides what then).
    """
    with open(table_path, encoding="ascii", errors="replace") as f:
        table = f.read()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 12345 fe:00:2148833 0 EOF" (blocked waiters are marked "->")
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[3] == "WRITE" and parts[5] == dev:
            try:
                return int(parts[4])
            except ValueError:
                return -1
    return None
