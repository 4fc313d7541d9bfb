"""Engines: where a backlog's items run. The supervisor decides; an engine only carries items out.

An engine starts *slots*. A slot takes one item at a time over a
:class:`multiprocessing.connection.Connection` and speaks the typed messages of
:mod:`intentlog.backlog.messages` (``Reserve`` and its reply, one final ``Answer``; ``Leased`` is accepted),
so every scheduling decision -- priority, ``not_before``, backoff, ``max_attempts``,
quotas, blocking -- stays the supervisor's and is recorded in the backlog stream whichever
engine runs the items. Two engines:

- ``"local"`` (the default): forked worker processes on this host; for an async step,
  each process holds up to ``in_flight`` items at once, one slot (a *lane*) per item
  (:meth:`LocalEngine.spawn_lanes`, :mod:`intentlog.backlog.inflight`);
- ``"dask"``: each item is one task on a Dask distributed cluster
  (:class:`intentlog.backlog.dask_engine.DaskEngine`, the ``intentlog[dask]`` extra).

Whatever the engine, an item is taken only with its task's writer lock, so an engine
that runs an item again (Dask re-runs a task whose worker died) only resumes it.
"""

from __future__ import annotations

import inspect
import multiprocessing as mp
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Protocol

from . import leases
from .inflight import lanes_main
from .model import LedgerLike
from .procs import die_with_parent, start_time
from .worker import resolve_step, worker_main

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from ..task import Task

__all__ = ["Engine", "LocalEngine", "Slot", "StepArg"]

StepArg = Callable[["Task", Any], Any] | str


class Slot(Protocol):
    """One place an item runs: the process holding it (``pid``, ``started``) when known."""

    @property
    def pid(self) -> int | None: ...

    @property
    def started(self) -> int | None: ...

    @property
    def exitcode(self) -> int | None: ...

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...


class Engine(Protocol):
    """Starts slots for a run and is closed when the run ends."""

    name: str

    def spawn(self, ledger: LedgerLike, step: StepArg) -> tuple[Slot, Connection]: ...

    def close(self) -> None: ...


class _ProcSlot:
    def __init__(self, proc: BaseProcess) -> None:
        self.proc = proc
        assert proc.pid is not None
        self._started = start_time(proc.pid)

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    @property
    def started(self) -> int | None:
        return self._started

    @property
    def exitcode(self) -> int | None:
        return self.proc.exitcode

    def is_alive(self) -> bool:
        return self.proc.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self.proc.join(timeout)


def slot_main(ledger: LedgerLike, conn: Connection, step: StepArg) -> None:
    """A local slot's process: a plain step's worker loop, or an async step's event loop with one lane."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fn = resolve_step(step) if isinstance(step, str) else step
    if inspect.iscoroutinefunction(fn):
        lanes_main(ledger, [conn], fn)
    else:
        worker_main(ledger, conn, fn)


class LocalEngine:
    """Forked worker processes on this host, each dying with the supervisor."""

    name = "local"

    def spawn(self, ledger: LedgerLike, step: StepArg) -> tuple[Slot, Connection]:
        forks = ledger.backend.forks  # a storage whose handles cannot cross a fork: spawn, and reopen there
        ctx = mp.get_context("fork") if forks else mp.get_context("spawn")
        parent, child = ctx.Pipe()
        where = ledger if forks else leases.Reopened(ledger)
        p = ctx.Process(target=slot_main, args=(where, child, step), daemon=True)
        p.start()
        child.close()
        return _ProcSlot(p), parent

    def spawn_lanes(self, ledger: LedgerLike, step: StepArg, lanes: int) -> list[tuple[Slot, Connection]]:
        """One worker process running an async step with ``lanes`` items in flight: one pipe per lane.

        Every lane's slot is the same process: ending it ends all its lanes' items.
        """
        forks = ledger.backend.forks
        ctx = mp.get_context("fork") if forks else mp.get_context("spawn")
        pairs = [ctx.Pipe() for _ in range(lanes)]
        where = ledger if forks else leases.Reopened(ledger)
        p = ctx.Process(target=lanes_main, args=(where, [c for _, c in pairs], step), daemon=True)
        p.start()
        for _, child in pairs:
            child.close()
        slot = _ProcSlot(p)
        return [(slot, parent) for parent, _ in pairs]

    def close(self) -> None:
        pass
