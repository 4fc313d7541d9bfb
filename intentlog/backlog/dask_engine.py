"""The Dask engine: a backlog's items run in Dask tasks on a Dask distributed cluster, many items per task.

``backlog.run(step, engine="dask", workers=N)`` starts a ``LocalCluster`` of ``N`` worker
processes (one thread each); ``DaskEngine(scheduler="tcp://host:8786")`` uses a running
cluster. The ``distributed`` package is imported only here, on first use (the
``intentlog[dask]`` extra); ``import intentlog`` never loads it.

How an item runs. The supervisor (the calling process) keeps every decision -- which item,
when, backoff, ``max_attempts``, quotas, blocking -- recorded in the backlog stream exactly
as with local processes. Each of its ``N`` slots submits one Dask task (``pure=False``, a
fresh key) and keeps it: the task, on whichever worker Dask picks, connects back to the
slot (an authenticated ``multiprocessing.connection``), opens the shared ledger itself
and then runs the items the slot sends it, one after another, over that connection -- a
batch of items per Dask task, not one scheduler round trip per item. Each item runs
through :func:`intentlog.backlog.worker.run_item`:
it takes the item task's writer lock and holds it for the whole run, records
``lease.acquired``, and asks the supervisor for quota units before every
``attempt.started`` -- the same protocol the local workers speak.

Engine retries are harmless. Dask runs a task again when the worker running it dies; that
run connects back with the same token and is sent the item the dead one held: it takes
the lock again (the dead process's lock went with it) and *resumes* the item:
completed calls replay, and an attempt that started with nothing observed makes the item
blocked (``backlog.item_blocked`` with the reconcile command), never sent again. The slot
records ``backlog.holder_died`` when the connection to a running task drops. A task that
connects with a token other than the slot's current one (a late re-run of an item the slot
has finished) is turned away before it opens anything.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import secrets
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing import Pipe
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from typing import Any

from ..errors import UsageError
from . import leases
from .engines import StepArg
from .messages import (
    Answer,
    Busy,
    Died,
    Failed,
    Hello,
    Leased,
    Quit,
    Reserve,
    Run,
    TurnedAway,
    Welcome,
    from_slot,
)  # fmt: skip
from .model import LedgerLike
from .procs import host_name, start_time
from .worker import resolve_step, run_item

__all__ = ["DaskEngine", "run_remote"]

#: how long a task that connected has to say which submission it is
_HELLO_TIMEOUT = 10.0


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise UsageError(f"the Dask engine needs the 'dask' extra: pip install 'intentlog[dask]' ({exc})") from exc
    return distributed


def _connect(address: tuple[str, int], authkey: bytes) -> Connection:
    """An authenticated connection to a slot (TCP_NODELAY: the protocol's small messages go out at once)."""
    sock = socket.create_connection(address)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = Connection(sock.detach())
    try:
        answer_challenge(conn, authkey)
        deliver_challenge(conn, authkey)
    except BaseException:
        conn.close()
        raise
    return conn


class _Listener:
    """A slot's TCP listener: every connection authenticated (HMAC on a shared key) before a byte is unpickled."""

    def __init__(self, host: str, authkey: bytes) -> None:
        self.authkey = authkey
        self.sock = socket.create_server((host, 0))
        self.sock.settimeout(0.2)
        self.address: tuple[str, int] = self.sock.getsockname()[:2]

    def accept(self) -> Connection | None:
        """The next authenticated connection, or None (none within 0.2 s, or one that failed to authenticate)."""
        try:
            sock, _ = self.sock.accept()
        except TimeoutError:
            return None
        sock.setblocking(True)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # a peer that connects and says nothing cannot hold the acceptor: reads time out meanwhile
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(_HELLO_TIMEOUT), 0))
        conn = Connection(sock.fileno())
        sock.detach()
        try:
            deliver_challenge(conn, self.authkey)
            answer_challenge(conn, self.authkey)
            with socket.socket(fileno=os.dup(conn.fileno())) as dup:
                dup.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
        except Exception:  # a wrong key, a silent or vanished peer
            conn.close()
            return None
        return conn

    def close(self) -> None:
        self.sock.close()


def run_remote(
    opener: Callable[[str], LedgerLike],
    root: str,
    address: Any,
    authkey: bytes,
    token: str,
    step: StepArg,
) -> str:
    """The Dask task of one slot: connect back, then run each item the slot sends; how many it answered.

    Runs on a Dask worker. Nothing is opened before the slot accepts ``token``; each item's
    lock is taken inside :func:`run_item`, held until it returns, and released with the
    lease (or by the process's death). Returns when the slot closes the connection.
    """
    conn = _connect(address, authkey)
    ledger: LedgerLike | None = None
    answered = 0
    try:
        me = os.getpid()
        conn.send(Hello("hello", token, me, host_name(), start_time(me)))
        if not isinstance(conn.recv(), Welcome):
            return "turned away"
        _secede()
        fn = resolve_step(step) if isinstance(step, str) else step
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                break
            if not msg or msg[0] != "item":  # a quit, or a "stop" told after an item ended
                if msg and msg[0] == "quit":
                    break
                continue
            run = Run(*msg)
            if ledger is None:
                ledger = opener(root)
            answer = run_item(ledger.task(run.task), conn, run.item, run.backlog, run.payload, fn, asks=run.asks)
            conn.send(answer)
            answered += 1
        return f"{answered} item(s)"
    finally:
        conn.close()
        close = getattr(ledger, "close", None)
        if callable(close):
            close()


def _secede() -> None:
    """Leave the Dask worker's thread pool: a slot's task waits between items, and must never keep another
    slot's task from starting (the supervisor's slots, not Dask's threads, bound the items run at once)."""
    try:
        _distributed().secede()
    except ValueError:  # not on a Dask worker (called directly): nothing to leave
        pass


class _DaskSlot:
    """One supervisor slot: a thread that carries the slot's items to Dask and relays the protocol."""

    def __init__(self, engine: DaskEngine, ledger: LedgerLike, step: StepArg) -> None:
        self.engine, self.step = engine, step
        ws = getattr(ledger, "workspace", None)
        spec = ledger.backend.reopen_spec()  # what the worker opens: a folder's path, a store's URL
        workspace = None if ws is None else str(ws)
        default = functools.partial(leases.reopen, type(ledger), spec.connect, workspace=workspace)
        self.opener = engine.open_ledger or default
        self.root = spec.location
        self.listener = _Listener(engine.listen_host(), engine.authkey)
        self.parent, self.child = Pipe()
        self.conns: queue.Queue[Connection] = queue.Queue()
        self.closed = False
        self.future: Any = None
        self.token = ""
        #: the connection of the slot's Dask task, kept between items (None: none connected now)
        self.live: Connection | None = None
        self._pid: int | None = None
        self._started: int | None = None
        self.acceptor = threading.Thread(target=self._accept, daemon=True, name="intentlog-dask-accept")
        self.thread = threading.Thread(target=self._bridge, daemon=True, name="intentlog-dask-slot")
        self.acceptor.start()
        self.thread.start()

    # -- what the supervisor sees (the Slot protocol) ------------------------------------

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def started(self) -> int | None:
        return self._started  # None for a holder on another host: it is never ended from here

    @property
    def exitcode(self) -> int | None:
        return None

    def is_alive(self) -> bool:
        return self.thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        fut, self.future = self.future, None
        live, self.live = self.live, None
        if live is not None:
            live.close()  # the task waiting for its next item sees EOF and ends
        if fut is not None:
            fut.cancel()
        self.acceptor.join(2.0)  # it looks at ``closed`` every 0.2 s
        self.listener.close()
        self.child.close()
        while not self.conns.empty():  # tasks that connected and were never answered see EOF now
            self.conns.get_nowait().close()

    # -- the threads ---------------------------------------------------------------------

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn = self.listener.accept()
            except OSError:
                return
            if conn is None:
                continue
            if self.closed:
                conn.close()
                return
            self.conns.put(conn)

    def _bridge(self) -> None:
        try:
            while True:
                msg = self.child.recv()
                if isinstance(msg, Quit):
                    return
                if not isinstance(msg, Run):  # a "stop" after the item ended: nothing is running to stop
                    continue
                item = msg.item
                try:
                    answer = self.carry(item, msg.task, msg.backlog, msg.payload, msg.asks)
                except (EOFError, OSError):
                    raise
                except Exception as exc:  # the engine failed (not the step): the item stays queued, never hangs
                    why = f"the Dask engine failed while carrying item {item!r}: {type(exc).__name__}: {exc}"
                    print(f"intentlog: {why}; the item is taken up again", file=sys.stderr)
                    answer = Busy("busy", item, why)  # a task still running elsewhere holds the lease: watched, fenced
                self.child.send(answer)
        except (EOFError, OSError):
            return

    def carry(self, item: str, task_id: str, backlog: str, payload: Any, asks: bool = True) -> Answer:
        """Send the item to the slot's Dask task (submitted when there is none) and relay it; its final answer."""
        run = Run("item", item, task_id, backlog, payload, asks)
        sent, fresh = False, False
        while True:
            conn = self.live
            if conn is not None and not sent and conn.poll(0):  # its task ended while idle (EOF waiting)
                conn.close()
                conn = self.live = None
            if conn is None:
                if self.future is None:
                    self.submit()
                    fresh = True
                conn = self.next_conn(self.token, self.future)
                if conn is None:  # the task ended without connecting (again)
                    fut, self.future = self.future, None
                    self._pid = self._started = None
                    if not sent and not fresh:
                        continue  # an old task that ended between items: the item goes to a new one
                    return Failed("error", item, _ended(fut))
                self.live = conn
            try:
                conn.send(run)
            except OSError:
                self.live = None
                continue
            sent = True
            final = self.relay(conn)
            if final is not None:
                return final
            self.live = None
            where = f"pid {self._pid}" if self._pid is not None else "its process"
            self.child.send(
                Died("died", item, self._pid, f"the Dask worker ({where}) was lost mid-item; Dask runs it again")
            )
            self._pid = self._started = None

    def submit(self) -> None:
        """Submit the slot's Dask task (a fresh token and key): it connects back and takes items until closed."""
        self.token = secrets.token_hex(8)
        self.engine.submitted += 1
        self.future = self.engine.client().submit(
            run_remote, self.opener, self.root, self.listener.address, self.engine.authkey, self.token,
            self.step, key=f"intentlog-slot-{self.token}", pure=False,
        )  # fmt: skip

    def next_conn(self, token: str, fut: Any) -> Connection | None:
        """The next connection from this submission's task, or None once the task ended without one."""
        while not self.closed:
            try:
                conn = self.conns.get(timeout=0.05)
            except queue.Empty:
                if fut.done() and self.conns.empty():
                    return None
                continue
            try:
                hello = conn.recv() if conn.poll(_HELLO_TIMEOUT) else None
                if not isinstance(hello, Hello) or hello.token != token:
                    conn.send(TurnedAway("no"))
                    conn.close()
                    continue
                conn.send(Welcome("ok"))
            except (EOFError, OSError):
                continue
            self._pid = hello.pid
            self._started = hello.started if hello.host == host_name() else None
            return conn
        return None

    def relay(self, conn: Connection) -> Answer | None:
        """Pass the task's messages to the supervisor (and its grants back); its final answer, or None if lost.

        The connection stays open after the final answer: the task waits on it for the next item.
        """
        try:
            while True:
                msg = from_slot(conn.recv())
                if not isinstance(msg, (Leased, Reserve, Died)):
                    return msg  # the final answer: the bridge hands it over
                self.child.send(msg)
                if isinstance(msg, Reserve):
                    conn.send(self.child.recv())
        except (EOFError, OSError):
            conn.close()
            return None


def _ended(fut: Any) -> str:
    try:
        exc = fut.exception(timeout=5)
    except Exception as e:  # cancelled, or the scheduler is gone
        return f"the Dask task ended without an answer ({type(e).__name__}: {e})"
    if exc is not None:
        return f"the Dask task failed: {type(exc).__name__}: {exc}"
    return f"the Dask task ended without an answer ({fut.result()})"


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored while the local cluster's processes start: they inherit it.

    A Ctrl-C reaches the whole process group; the cluster's workers then keep running the
    effects in flight while the supervisor stops the run (``grace``), as local workers do.
    A process whose SIGINT is ignored at start keeps it ignored (Python installs its
    KeyboardInterrupt handler only over the default). Only the main thread can do this.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


class DaskEngine:
    """Run a backlog's items on Dask: ``DaskEngine(scheduler=ADDRESS)`` or a local cluster of ``workers``.

    ``workers`` is the number of items run at once (the supervisor's slots) and, without a
    ``scheduler``, the number of worker processes of the ``LocalCluster`` started on
    first use (one thread each) and closed with the run. ``open_ledger(root)`` opens the
    shared ledger on a worker (default: the ledger's own class at the same path, which
    every worker must reach). ``host`` is the address the workers connect back to
    (default: 127.0.0.1 for a local cluster, else this host's address toward the
    scheduler).
    """

    name = "dask"

    def __init__(
        self,
        *,
        scheduler: str | None = None,
        workers: int | None = None,
        open_ledger: Callable[[str], LedgerLike] | None = None,
        host: str | None = None,
        cluster_options: dict[str, Any] | None = None,
    ) -> None:
        if scheduler is not None and not isinstance(scheduler, str):
            raise TypeError(f"scheduler must be an address string like 'tcp://host:8786', not {scheduler!r}")
        self.distributed = _distributed()
        self.scheduler, self.workers = scheduler, workers
        self.open_ledger, self.host = open_ledger, host
        self.cluster_options = dict(cluster_options or {})
        self.authkey = secrets.token_bytes(32)
        self._client: Any = None
        self._cluster: Any = None
        self.slots: list[_DaskSlot] = []
        #: Dask tasks submitted so far (each carries items until its slot closes or its worker is lost)
        self.submitted = 0

    def __repr__(self) -> str:
        return f"<DaskEngine {self.scheduler or 'local cluster'}>"

    def listen_host(self) -> str:
        if self.host is not None:
            return self.host
        if self.scheduler is None:
            return "127.0.0.1"
        hostport = self.scheduler.split("://", 1)[-1]
        return str(self.distributed.utils.get_ip(hostport.rsplit(":", 1)[0]))

    def client(self) -> Any:
        """The Dask client, the local cluster started on first use when no scheduler was given."""
        if self._client is None:
            if self.scheduler is None:
                options = {
                    "n_workers": self.workers or 1, "threads_per_worker": 1, "processes": True,
                    "dashboard_address": None, "silence_logs": logging.ERROR,
                    **self.cluster_options,
                }  # fmt: skip
                with _signals_ignored():  # its processes, like the local workers, leave SIGINT/SIGTERM to us
                    self._cluster = self.distributed.LocalCluster(**options)
                self._client = self.distributed.Client(self._cluster)
            else:
                self._client = self.distributed.Client(self.scheduler)
        return self._client

    def spawn(self, ledger: LedgerLike, step: StepArg) -> tuple[_DaskSlot, Connection]:
        self.client()
        slot = _DaskSlot(self, ledger, step)
        self.slots.append(slot)
        return slot, slot.parent

    def close(self) -> None:
        """Close the slots (pending tasks cancelled), the client, and the local cluster if this engine started it."""
        for slot in self.slots:
            slot.close()
        self.slots.clear()
        client, self._client = self._client, None
        cluster, self._cluster = self._cluster, None
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
