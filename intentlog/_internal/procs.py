"""What this host's processes are and hold, read without touching them: liveness and flock holders.

Read-only (nothing here takes a lock or writes), so the checker and the views may use it.
"""

from __future__ import annotations

import os
import signal
from typing import Final

__all__ = ["PROC_LOCKS", "exit_text", "flock_holders", "flock_writer", "holds_flock", "lock_key", "pid_alive"]

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


def _read_table(table_path: str) -> str:
    """The lock table's text: no snapshot.

    Linux hands ``/proc/locks`` out in pieces (a page per ``read``, and within one
    ``read`` whenever its buffer fills), walking the list afresh by position each time:
    a lock held throughout is skipped when locks listed before it are released between
    two pieces. Even a table that came in one ``read`` was seen to miss one (1 in 3,000
    looks under churn).
    """
    fd = os.open(table_path, os.O_RDONLY)
    try:
        chunks: list[bytes] = []
        while True:
            got = os.read(fd, 1 << 16)
            if not got:
                break
            chunks.append(got)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", errors="replace")


def _parse(table: str) -> dict[str, int]:
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


def flock_holders(table_path: str = PROC_LOCKS) -> dict[str, int]:
    """Every exclusive ``flock`` held on this host: its file's :func:`lock_key` to the holder's pid (-1: unreadable).

    The one reader of ``/proc/locks``: one read answers for any number of lock files.
    A table longer than one page is read in pieces and may miss a lock held throughout
    (see :func:`_read_table`): a caller that must not miss one asks :func:`flock_writer`.
    Raises ``OSError`` when ``table_path`` cannot be read (the caller decides what then).
    """
    return _parse(_read_table(table_path))


#: full reads of a lock table too long for one read before a lock missing from each is called not held
_REREADS: Final = 3


def _mine(key: str) -> bool:
    """Whether one of this process's descriptors holds the exclusive ``flock`` on the file ``key`` names.

    Read from ``/proc/self/fdinfo``, one small file per descriptor (each a snapshot):
    exact, and asked only when the lock table could not say.
    """
    me = os.getpid()
    try:
        fds = os.listdir("/proc/self/fdinfo")
    except OSError:
        return False
    for fd in fds:
        held = _fd_locks(int(fd), me)
        if held is not None and key in held:  # None: closed meanwhile
            return True
    return False


def _fd_locks(fd: int, me: int) -> list[str] | None:
    """The ``/proc/locks`` names of the files descriptor ``fd`` of this process holds an exclusive ``flock`` on
    (taken by ``me``); None when ``/proc/self/fdinfo`` cannot be read."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii", errors="replace") as f:
            info = f.read()
    except OSError:
        return None
    held: list[str] = []
    for line in info.splitlines():
        # "lock:\t1: FLOCK  ADVISORY  WRITE 12345 fe:00:2148833 0 EOF" (only locks taken through this open file)
        parts = line.split()
        if parts[:1] == ["lock:"] and parts[2:3] == ["FLOCK"] and parts[4:6] == ["WRITE", str(me)] and len(parts) > 6:
            held.append(parts[6])
    return held


def holds_flock(fd: int, st: os.stat_result) -> bool | None:
    """Whether this process's descriptor ``fd`` holds the exclusive ``flock`` on the file ``st`` describes.

    The kernel's word on one descriptor, read from ``/proc/self/fdinfo/FD``: a snapshot of
    the locks taken through that open file, so exact (unlike ``/proc/locks``, which is
    walked in pieces, see :func:`_read_table`) and small whatever the number of locks on
    the host. A lock taken by another process (a parent before a fork) is not this
    process's. None when ``/proc/self/fdinfo`` cannot be read (the caller asks
    :func:`flock_writer` then).
    """
    held = _fd_locks(fd, os.getpid())
    if held is None:
        return None
    return lock_key(st) in held


def flock_writer(st: os.stat_result, table_path: str = PROC_LOCKS, *, mine: bool = False) -> int | None:
    """The pid holding an exclusive ``flock`` on the file ``st`` describes, per ``table_path`` (/proc/locks).

    None when no process holds one; -1 when one does but its pid is unreadable. Raises
    ``OSError`` when there is no readable ``/proc/locks`` (the caller decides what then).
    A lock found in the table is held. A lock missing from it may have been skipped: even a
    table that came in one read is walked in pieces by the kernel when locks come and go
    (see :func:`_read_table`). With ``mine`` -- the caller believes it holds the lock
    itself -- a miss is settled by this process's own descriptors, which are exact; without,
    the table is read up to :data:`_REREADS` times before the lock is called not held.
    """
    key = lock_key(st)
    for _ in range(_REREADS):
        got = _parse(_read_table(table_path)).get(key)
        if got is not None:
            return got
        if mine and table_path == PROC_LOCKS:
            return os.getpid() if _mine(key) else None
    return None
