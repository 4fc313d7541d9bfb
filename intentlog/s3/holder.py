"""Who holds a stream's lease: the process, its host, and whether it can be told to be alive from here.

A lease segment records its holder (:class:`Holder`: pid, host name, the host's boot id,
its pid namespace and the process's start time). The record is for people first: a
refused writer's :class:`~intentlog.errors.TaskBusy` names the process and host. It is
also a shortcut for a taker on the same machine: when the holder ran under this boot and
pid namespace and that process is gone (or its pid now names another process, started at
another time), it cannot write again, and its lease can be taken at once without waiting
for its stream to stand still. Anywhere else (another host, another boot, no ``/proc``)
:meth:`Holder.alive` says it cannot tell, and only the stream standing still on the
taker's own clock counts. Safety never rests on this record: a holder is fenced by the
store's conditional create whatever was believed of it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

__all__ = ["Holder", "this_process"]


@dataclass(frozen=True, slots=True)
class Holder:
    """A lease holder's process: enough to name it, and on its own machine to tell whether it still runs."""

    pid: int
    host: str
    boot: str = ""  # the host's boot id ("" where the system has none)
    ns: str = ""  # the pid namespace the pid is in ("" where unknown)
    start: str = ""  # the process's start time in clock ticks since boot ("" where unknown)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "host": self.host, "boot": self.boot, "ns": self.ns, "start": self.start}

    @classmethod
    def from_json(cls, value: object) -> Holder | None:
        """The holder a lease segment records; None when it records none (or something unreadable)."""
        if not isinstance(value, dict):
            return None
        pid, host = value.get("pid"), value.get("host")
        rest = [value.get(k, "") for k in ("boot", "ns", "start")]
        if isinstance(pid, bool) or not isinstance(pid, int) or not isinstance(host, str):
            return None
        if not all(isinstance(x, str) for x in rest):
            return None
        return cls(pid, host, *rest)

    def __str__(self) -> str:
        return f"process {self.pid} on {self.host}"

    def alive(self) -> bool | None:
        """True: it runs; False: it is gone (it can never write again); None: that cannot be told from here."""
        me = this_process()
        if not (self.boot and self.ns and self.start) or (self.host, self.boot, self.ns) != (me.host, me.boot, me.ns):
            return None
        started = _start_time(self.pid)
        return started is not None and started == self.start


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (None when there is none, or it is a zombie: it ended)."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def _namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


_ME: tuple[int, Holder] | None = None


def this_process() -> Holder:
    """This process as a lease records it (worked out once per process: a forked child gets its own)."""
    global _ME
    pid = os.getpid()
    if _ME is None or _ME[0] != pid:
        _ME = (
            pid,
            Holder(
                pid,
                socket.gethostname(),
                _read("/proc/sys/kernel/random/boot_id"),
                _namespace(),
                _start_time(pid) or "",
            ),
        )
    return _ME[1]
