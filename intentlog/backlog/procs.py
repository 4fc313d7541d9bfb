"""Processes on this host as a lease names them: pid, host and start time, and ending one safely.

A pid alone names nothing durable (pids are reused); a pid together with the process's
start time (``/proc/PID/stat`` field 22, clock ticks since boot) and the boot id names one
process for the life of the machine. A holder is ended only when all three still match.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import socket
import time
from typing import Final

from .._internal import procs as _procs
from .._internal.procs import PROC_LOCKS, lock_key

__all__ = ["boot_id", "end_holder", "flock_holders", "host_name", "lock_key", "start_time", "die_with_parent"]

_PR_SET_PDEATHSIG: Final = 1


def host_name() -> str:
    return socket.gethostname()


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot, or None (no such process, no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    rest = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(rest[19])  # field 22 overall; rest starts at field 3
    except (IndexError, ValueError):
        return None


def end_holder(pid: int, started: int | None, *, wait: float = 5.0) -> bool:
    """SIGKILL process ``pid`` only if it still has start time ``started``; True once it is gone.

    A stopped (SIGSTOPped) process is ended too: SIGKILL needs no cooperation. Returns
    False (and kills nothing) when the pid now names another process or its start time
    cannot be read to compare.
    """
    if started is None or start_time(pid) != started:
        return start_time(pid) is None and started is not None
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        st = start_time(pid)  # a zombie (dead, not reaped by its parent yet) has ended too
        if st is None or st != started or zombie(pid):
            return True
        time.sleep(0.01)
    return False


def zombie(pid: int) -> bool:
    """Whether ``pid`` has ended, though its parent has not reaped it yet (or it is gone): state ``Z``.

    A process whose main thread exited while other threads run shows ``Z`` for its leader
    too: it has ended only when no thread but the leader is left (``/proc/PID/task``).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return True
    if raw[raw.rfind(b")") + 2 : raw.rfind(b")") + 3] != b"Z":
        return False
    try:
        return all(tid == str(pid) for tid in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return True


def flock_holders(table_path: str = PROC_LOCKS) -> dict[str, int] | None:
    """Every exclusive ``flock`` held on this host, ``"MAJ:MIN:INODE"`` to its holder's pid (-1: unreadable).

    One read of ``/proc/locks`` for many lock files (see :func:`lock_key`); None when it
    cannot be read (the caller probes each lock instead).
    """
    try:
        return _procs.flock_holders(table_path)
    except OSError:
        return None


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (a worker never outlives its supervisor).

    A parent that died before the ask took hold (between the fork and this call) sends no
    signal: a process started by :mod:`multiprocessing` whose parent is then gone ends
    itself here (it would otherwise wait forever on a pipe whose other end it holds too).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os.kill(os.getpid(), signal.SIGKILL)
