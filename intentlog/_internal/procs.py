"""What this host's processes are and hold, read without touching them: liveness and flock holders.

Read-only (nothing here takes a lock or writes), so the checker and the views may use it.
"""

from __future__ import annotations

import os
import signal
from typing import Final

__all__ = ["PROC_LOCKS", "exit_text", "flock_holders", "flock_writer", "lock_key", "pid_alive"]

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


def exit_text(exitcode: int | None) -> str:
    """How a child process ended, from ``multiprocessing``'s ``exitcode``: a signal by name, a status, or not yet.

    ``-9`` is "killed by SIGKILL", ``3`` "exited with status 3", None "closed its pipe and has
    not exited yet".
    """
    if exitcode is None:
        return "closed its pipe and has not exited yet"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with status {exitcode}"


def lock_key(st: os.stat_result) -> str:
    """The ``/proc/locks`` name of the file ``st`` describes: ``"MAJ:MIN:INODE"`` (hex device numbers)."""
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


def flock_holders(table_path: str = PROC_LOCKS) -> dict[str, int]:
    """Every exclusive ``flock`` held on this host: its file's :func:`lock_key` to the holder's pid (-1: unreadable).

    The one reader of ``/proc/locks``: one read answers for any number of lock files.
    Raises ``OSError`` when ``table_path`` cannot be read (the caller decides what then).
    """
    with open(table_path, encoding="ascii", errors="replace") as f:
        table = f.read()
    out: dict[str, int] = {}
    for line in table.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 12345 fe:00:2148833 0 EOF" (blocked waiters are marked "->")
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[3] == "WRITE" and parts[5] not in out:
            try:
                out[parts[5]] = int(parts[4])
            except ValueError:
                out[parts[5]] = -1
    return out


def flock_writer(st: os.stat_result, table_path: str = PROC_LOCKS) -> int | None:
    """The pid holding an exclusive ``flock`` on the file ``st`` describes, per ``table_path`` (/proc/locks).

    None when no process holds one; -1 when one does but its pid is unreadable. Raises
    ``OSError`` when there is no readable ``/proc/locks`` (the caller decides what then).
    """
    return flock_holders(table_path).get(lock_key(st))
