"""One supervisor per backlog: a run owns its backlog from ``backlog.run_started`` to ``backlog.run_stopped``.

The backlog's stream is the one place every run, ``add`` and ``unblock`` write through
its writer lease (a folder's ``flock``, a store's lease segment), so ownership is kept
there, written once for both storages:

- a run records ``backlog.run_started`` with a token of its own, under the stream's lease,
  only after reading that no other run is open (an open run: a ``run_started`` with no
  ``run_stopped`` after it);
- an open run proves it is alive by a heartbeat, ``backlog.run_alive``, every :data:`BEAT`
  s (durable: a store shows it to every host), and, each time, reads under the lease that
  the last ``run_started`` is still its own -- once it is not, it was taken over: it
  stops, granting nothing more and recording no end of a run that is not its own;
- a run starting meets an open one: on this machine (same boot id) the holder's pid and
  start time say at once whether it is alive (refused) or gone (taken over); otherwise it
  watches the stream on its own monotonic clock for :data:`STALE` s: a record of the
  holder's (anything but an ``add`` or an ``unblock``) refuses it (:class:`BacklogBusy`,
  naming the holder), none takes the run over, recorded (``took_over`` in its
  ``run_started``), never by comparing a timestamp another machine wrote;
- a run grants quota units only while its last heartbeat that landed is younger than
  :data:`FRESH` s (< :data:`STALE`): a holder that stood still long enough to be taken
  over has stopped granting before the next run starts, so two runs never grant at once.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..errors import IntentlogError
from .procs import boot_id, host_name, start_time, zombie

if TYPE_CHECKING:
    from .journal import Journal

__all__ = ["BEAT", "FRESH", "STALE", "BacklogBusy", "RunOwner", "holder_gone"]

#: seconds between a run's heartbeats
BEAT: Final = 1.5
#: a run grants only while its last heartbeat landed less than this many seconds ago
FRESH: Final = 3.5
#: seconds a starting run watches an open run elsewhere without a record of it before taking it over
STALE: Final = 6.0
#: what others write while a run is open: not the holder's records (no proof its holder lives)
NOT_THE_HOLDERS: Final = frozenset({"backlog.item_added", "backlog.item_unblocked"})
#: the tokens of the runs going on in this process (an open run of this pid not here ended without its record)
_RUNNING: set[str] = set()


def holder_gone(run: Mapping[str, Any]) -> bool | None:
    """Whether an open run's holder (its ``backlog.run_started`` data) is gone, as this machine can tell.

    True: it ran on this machine since its boot and its process is gone (its pid free,
    reused or a zombie not reaped yet, or it was this process's and ended without recording
    its end). False: it runs. None: it ran on another machine or before this boot, or its
    record names no pid or no start time; only its records can tell (a live run records a
    heartbeat every :data:`BEAT` s).
    """
    me = boot_id()
    if me is None or run.get("boot_id") != me or run.get("host") != host_name():
        return None
    pid = run.get("pid")
    if type(pid) is not int or pid <= 0:  # a record edited or written by something else: not this machine's word
        return None
    if pid == os.getpid():
        return run.get("run") not in _RUNNING
    st = start_time(pid)
    if st is None or zombie(pid):  # no process of that pid, or one that ended and waits to be reaped
        return True
    started = run.get("start_time")
    if type(started) is not int:  # which process the record meant cannot be told
        return None
    return st != started


class BacklogBusy(IntentlogError):
    """Another supervisor runs this backlog (``holder``: its ``backlog.run_started`` data)."""

    def __init__(self, backlog: str, holder: dict[str, Any]) -> None:
        self.backlog = backlog
        self.holder = holder
        super().__init__(
            f"backlog {backlog!r} is being run by process {holder.get('pid')} on host {holder.get('host')!r}: one "
            "supervisor per backlog; stop that run (SIGTERM) or let it end, then run again; nothing was written"
        )


class RunOwner:
    """A run's claim on its backlog: taken at the start, shown alive by heartbeats, checked before grants."""

    def __init__(self, journal: Journal, clock: Callable[[], float] = time.monotonic) -> None:
        self.journal = journal
        self.clock = clock
        self.token = secrets.token_hex(8)
        #: on this process's clock: when the last heartbeat (or the start) landed
        self.landed = float("-inf")
        #: the open run this one took over, or None
        self.took_over: dict[str, Any] | None = None
        #: once set: the run was taken over by another; it grants and records nothing more as the holder
        self.lost: str | None = None

    def start(self, ident: dict[str, Any], *, sleep: Callable[[float], None] = time.sleep) -> None:
        """Record ``backlog.run_started`` (``ident``, the token) once no other run is open; else BacklogBusy."""
        stream = self.journal.backlog.task.stream
        watched: tuple[str, int, float] | None = None  # (the open run's token, seq seen, when first seen here)
        while True:
            stream.open_writer()  # under the lease: what is read next is the whole stream
            self.journal.refresh()
            fold = self.journal.fold
            other = fold.run if fold.stopped is None else None
            if other is None or self._gone(other):
                break
            if self._alive_here(other):
                self.journal.close()
                raise BacklogBusy(self.journal.backlog.name, other)
            now = self.clock()
            token = str(other.get("run"))
            moved = watched is not None and (watched[0] != token or self._holder_wrote(watched[1]))
            if moved:
                self.journal.close()
                raise BacklogBusy(self.journal.backlog.name, other)
            if watched is None:
                watched = (token, fold.seq, now)
            elif now - watched[2] >= STALE:
                break  # stood still for STALE s on this clock: taken over, fenced by the record
            self.journal.close()  # let the holder (and add, unblock) in while watching
            sleep(0.2)
        if other is not None:
            self.took_over = {k: other.get(k) for k in ("pid", "host", "start_time", "run")}
        _RUNNING.add(self.token)  # before the record: a reader in this process never sees it open and gone
        try:
            self.journal.record(
                "backlog.run_started",
                {**ident, "run": self.token, **({"took_over": self.took_over} if self.took_over else {})},
            )
        except BaseException:
            _RUNNING.discard(self.token)
            raise
        self.journal.run = self.token  # from here the journal records only while the backlog is this run's
        self.landed = self.clock()

    def end(self) -> None:
        """This process runs the backlog no more (whether or not its end was recorded)."""
        _RUNNING.discard(self.token)

    def _gone(self, other: dict[str, Any]) -> bool:
        """The open run's holder ran on this machine since its boot and is gone (its pid free or reused, or it
        was this process's and ended without recording it)."""
        return holder_gone(other) is True

    def _alive_here(self, other: dict[str, Any]) -> bool:
        return holder_gone(other) is False

    def _holder_wrote(self, seq: int) -> bool:
        """Whether a record other than an add or an unblock follows ``seq`` in the backlog stream."""
        return any(ev.kind not in NOT_THE_HOLDERS for ev in self.journal.backlog.task.events(since=seq + 1))

    def mine(self) -> bool:
        """Under the lease: whether the last ``run_started`` is still this run's (sets :attr:`lost` otherwise)."""
        if self.lost is None and not self.journal.ours():
            run = self.journal.fold.run
            who = "another process" if run is None else f"process {run.get('pid')} on host {run.get('host')!r}"
            self.lost = f"backlog {self.journal.backlog.name!r} was taken over by {who}; this run stopped"
        return self.lost is None

    def beat(self) -> None:
        """A heartbeat when one is due, after checking the run is still this one's."""
        if self.lost is None and self.clock() - self.landed >= BEAT and self.mine():
            self.journal.record("backlog.run_alive", {"run": self.token})
            self.landed = self.clock()

    def fresh_until(self) -> float:
        """On this run's clock: when it stops being shown to hold its backlog (-inf once taken over)."""
        return self.landed + FRESH if self.lost is None else float("-inf")

    def fresh(self) -> bool:
        """Whether this run may grant now: it holds the backlog and its last heartbeat is younger than FRESH."""
        return self.lost is None and self.clock() - self.landed < FRESH
