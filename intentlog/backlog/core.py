"""A backlog: items added once, each done by its own task, run by a durable supervisor.

``ledger.backlog("nightly")`` names the backlog; its stream is the task ``nightly.backlog``
and item ``ITEM`` is done by the task ``nightly.item.ITEM``. Guarantees:

- ``add`` is idempotent per item id: the same payload again is a no-op, another payload
  under the same id raises :class:`PayloadChanged` and writes nothing; a new item whose
  task already exists (a task of that name, not the backlog's) raises :class:`ItemTaskTaken`
  and writes nothing: a backlog never adopts a task it did not start;
- the view (:meth:`Backlog.view`) is a projection of the folder: the backlog's stream and
  each item task's operator state (:func:`intentlog.projections.status.status_of`);
- ``unblock`` re-queues a blocked item only once its task no longer needs a person
  (:class:`StillBlocked` otherwise, nothing written);
- ``run`` (:mod:`intentlog.backlog.supervisor`) never runs an item again: a taken-over item
  resumes through the effect protocol, and an unknown effect blocks it for a person.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._internal.args import check_seconds
from .._internal.digest import digest_bytes
from ..errors import UsageError
from ..eventlog.canonical import dumps, redact_value
from ..eventlog.format import TASK_ID_RE, Event
from ..eventlog.redaction import scrub_text, shape_spans
from ..eventlog.storage import NO_STREAM
from ..ledgerstorage import LeaseOwner
from ..projections.backlogs import BacklogPace, PaceFold, Running
from ..projections.idioms import SPAWNED
from ..task import Task
from . import leases
from .children import children_elsewhere, with_children
from .dask_engine import DaskEngine
from .engines import Engine, LocalEngine
from .errors import BacklogTaken, ItemTaskTaken, PayloadChanged, StillBlocked
from .inflight import check_in_flight
from .itemcache import read_item_task, read_items, remember
from .model import (
    BACKLOG_NAME_RE,
    ITEM_STATES,
    BacklogFold,
    ItemRecord,
    ItemView,
    LedgerLike,
    backlog_stream_id,
    blocking_reason,
    first_record,
    given_up,
    item_task_id,
    item_view,
)
from .procs import flock_holders, host_name, lock_key
from .quota import Quota, parse_quota
from .supervisor import Supervisor

#: add's options, in its order (add_many's mappings take the same names)
_OPTIONS = ("priority", "not_before", "max_attempts", "inactivity", "max_duration")

__all__ = ["Backlog", "BacklogTaken", "BacklogView", "ItemTaskTaken", "PayloadChanged", "StillBlocked"]


@dataclass(frozen=True, slots=True)
class BacklogView:
    """``intentlog backlog NAME``: counts per state and one row per item, in run order."""

    name: str
    counts: dict[str, int]
    items: list[ItemView]
    quota_waiting: dict[str, Any] | None
    stopped: dict[str, Any] | None
    #: in flight (per process), the rate, the oldest running item, the open run's limits
    pace: BacklogPace | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "backlog": self.name,
            "counts": dict(self.counts),
            "items": [i.to_json() for i in self.items],
            "quota_waiting": self.quota_waiting,
            "stopped": self.stopped,
            "pace": None if self.pace is None else self.pace.to_json(),
        }


class Backlog:
    """One named backlog in a ledger; get it with :meth:`intentlog.Ledger.backlog`."""

    def __init__(self, ledger: LedgerLike, name: str) -> None:
        if not isinstance(name, str) or BACKLOG_NAME_RE.match(name) is None:
            raise UsageError(
                f"backlog name {name!r} must be letters, digits, '_' or '-' (no dot), starting with a letter "
                "or digit, at most 64 characters"
            )
        self.ledger = ledger
        self.name = name
        self.stream_id = backlog_stream_id(name)
        #: the fold as this handle last wrote it: reused while the stream's count and head match it
        self._fold: BacklogFold | None = None
        #: the stream's stamp when ``_fold`` was the whole stream (None: unknown), kept once :meth:`check_child`
        #: was asked of this handle (a plain add takes none)
        self._stamp: str | None = None
        self._checks = False

    def __repr__(self) -> str:
        return f"<Backlog {self.name!r} in {str(self.ledger.root)!r}>"

    @property
    def task(self) -> Task:
        """The backlog's own stream (a task stream of ``backlog.*`` records)."""
        return self.ledger.task(self.stream_id, wait=30.0)

    def task_id(self, item_id: str) -> str:
        return item_task_id(self.name, _check_item(item_id))

    # -- reading -------------------------------------------------------------------

    def fold(self, pace: PaceFold | None = None) -> BacklogFold:
        f = BacklogFold()
        for ev in self.task.events():
            f.apply(ev)
            if pace is not None:
                pace.apply(ev)
        return f

    def view(self, *, now: float | None = None) -> BacklogView:
        """Counts per state and a row per item (priority, then order of addition); reads only.

        Each item task is read whole only when its stream changed since the last view
        (:mod:`intentlog.backlog.itemcache`); who holds each task's lock is read live.
        """
        now = time.time() if now is None else now
        pace = PaceFold()
        f = self.fold(pace)
        self._refuse_foreign(f)
        ordered = f.ordered()
        got = read_items(self.ledger, self.name, [rec.task for rec in ordered])
        owner = _owner_probe(self.ledger)
        rows: list[ItemView] = []
        spent = (f.stopped or {}).get("quota")  # the last run stopped at a spent budget: queued items wait for it
        for rec in ordered:
            it = got[rec.task]
            row = item_view(self.name, rec, it.status, it.extras, owner=functools.partial(owner, rec.task), now=now)
            if spent and row.state == "queued":
                step = f"raise the budget: intentlog run {self.name} --step ... --quota ... (a larger budget)"
                row = replace(row, reason=f"the last run stopped: {spent}", next_step=step)
            rows.append(row)
        sent = {tid: it.extras.children_in for tid, it in got.items() if it.extras.children_in}
        elsewhere = children_elsewhere(self.ledger, ordered, sent, owner, now)
        rows = with_children(rows, elsewhere)
        counts = {s: 0 for s in ITEM_STATES}
        for r in rows:
            if r.backlog is None:  # a child in another backlog is counted there
                counts[r.state] += 1
        running = [
            Running(r.item, (r.holder or {}).get("pid"), (r.holder or {}).get("host"), (r.holder or {}).get("since"))
            for r in rows
            if r.state == "running"
        ]
        return BacklogView(self.name, counts, rows, f.quota_waiting, f.stopped, pace.pace(running, now))

    def item(self, item_id: str) -> ItemView:
        for row in self.view().items:
            if row.item == item_id:
                return row
        raise UsageError(f"backlog {self.name!r} has no item {item_id!r}; see 'intentlog backlog {self.name}'")

    # -- writing -------------------------------------------------------------------

    def add(
        self,
        item_id: str,
        payload: Any,
        *,
        priority: int = 0,
        not_before: float | None = None,
        max_attempts: int | None = None,
        inactivity: float | None = None,
        max_duration: float | None = None,
    ) -> ItemRecord:
        """Add an item once; the same payload again returns the recorded item and writes nothing.

        ``payload`` is JSON (stored inline in ``backlog.item_added``); ``not_before`` a Unix
        time; ``max_attempts`` how many step failures before the item is failed (None: no
        limit). ``inactivity`` and ``max_duration`` (seconds) override the run's limits for
        this item. Another payload under an existing id raises :class:`PayloadChanged`.
        On a store, the backlog stream's lease a SIGKILLed supervisor left is taken back
        once the stream stood still :data:`~intentlog.backlog.leases.BACKLOG_STALE` s here
        (its holder fenced); a live holder is waited for, never taken (also :meth:`add_many`).
        """
        entry = self._entry(item_id, payload, priority, not_before, max_attempts, inactivity, max_duration)
        return self._add_entries([entry])[0]

    def add_child(self, child_id: str, payload: Any, *, parent: str) -> ItemRecord:
        """Add the child task ``child_id`` that the item task ``parent`` spawned, as an item; idempotent by id.

        The item id and its task id are the child's id (its stream exists, opened by
        ``task.spawned {parent}``: that record is what lets the backlog take it as its own;
        a task of that id that another task spawned, or that holds other records first, is
        refused with :class:`ItemTaskTaken`). The child inherits its parent item's priority,
        ``max_attempts`` and limits. Called by a step's ``task.spawn`` inside a run
        (:mod:`intentlog.backlog.children`); the same child again writes nothing.
        """
        return self._add_entries([self._child_entry(child_id, payload, parent)])[0]

    def check_child(self, child_id: str, payload: Any, *, parent: str) -> None:
        """Raise what :meth:`add_child` would refuse for this child now, reading the backlog once; writes nothing.

        ``task.spawn`` asks this before it records the parent's link: a child the backlog
        refuses (its id another task's item, the item added with another payload, a
        credential in the payload, a stream no backlog wrote) leaves no link to a child that
        could never be added. The backlog is read again only when its stamp (one ``stat`` on
        a folder, one LIST on a store) changed since this handle last read or wrote it whole:
        a step spawning many children into a quiet backlog reads it once. Another process can
        still add the same item id between this check and the add: the add, under the lock,
        refuses it then.
        """
        entry = self._child_entry(child_id, payload, parent)
        self._checks = True
        stamp = self._stamp_now()  # before the read: an append racing it changes the stamp again
        f = self._fold
        if f is None or stamp is None or stamp != self._stamp:
            self._fold = None  # until the read below is whole
            f = self.fold()
            self._stamp = stamp
        self._refuse_foreign(f)
        old = f.items.get(child_id)
        if old is not None:
            self._refuse_other(entry, old.task, old.payload_hash)
        self._fold = f

    def _stamp_now(self) -> str | None:
        return self.ledger.backend.streams.stamps([self.stream_id])[self.stream_id]

    def _child_entry(self, child_id: str, payload: Any, parent: str) -> dict[str, Any]:
        if child_id == self.stream_id or child_id.startswith(f"{self.name}.item."):
            raise UsageError(
                f"backlog {self.name!r}: child id {child_id!r} names one of the backlog's own tasks; spawn the child "
                "under an id of its own; nothing was added to the backlog"
            )
        return self._entry(child_id, payload, None, None, None, None, None, task=child_id, parent=parent)

    def _refuse_other(self, e: dict[str, Any], task: str, payload_hash: str | None) -> None:
        """The refusal of entry ``e`` for an item id already added for ``task`` with ``payload_hash``."""
        if task != e["task"]:
            raise ItemTaskTaken(
                f"backlog {self.name!r} item {e['item']!r} is done by task {task!r}, not {e['task']!r}: "
                "an item id names one task; spawn the child under another id; nothing was written"
            )
        if payload_hash is not None and payload_hash != e["payload_hash"]:
            raise PayloadChanged(
                f"backlog {self.name!r} item {e['item']!r} was added with payload {payload_hash}, not "
                f"{e['payload_hash']}; an item id names one payload: add the new payload under a new id; "
                "nothing was written"
            )

    def add_many(self, items: Iterable[Mapping[str, Any]]) -> list[ItemRecord]:
        """Add many items under one lock and one sync: each a mapping of :meth:`add`'s arguments.

        ``{"item": ID, "payload": ..., "priority": ..., ...}``. All or nothing: a bad
        argument or a changed payload anywhere raises before anything is written.
        """
        entries = []
        for spec in items:
            if not isinstance(spec, Mapping) or "item" not in spec or "payload" not in spec:
                raise UsageError(f"add_many takes mappings with 'item' and 'payload' (and add's options), not {spec!r}")
            extra = set(spec) - {"item", "payload", *_OPTIONS}
            if extra:
                raise UsageError(f"add_many: unknown option(s) {sorted(extra)} for item {spec['item']!r}")
            entries.append(self._entry(spec["item"], spec["payload"], *(spec.get(o) for o in _OPTIONS)))
        return self._add_entries(entries)

    def _entry(
        self,
        item_id: object,
        payload: Any,
        priority: object,
        not_before: object,
        max_attempts: object,
        inactivity: object,
        max_duration: object,
        *,
        task: str | None = None,
        parent: str | None = None,
    ) -> dict[str, Any]:
        """The ``backlog.item_added`` data for one item, every argument checked; writes nothing.

        ``task`` and ``parent``: a child item's task (its own id) and the item task that spawned it."""
        item_id = _check_item(item_id)
        priority = 0 if priority is None else priority
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise UsageError(f"priority must be an int, not {priority!r}")
        nb = None if not_before is None else float(check_seconds(not_before, "not_before"))
        if max_attempts is not None and (
            not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1
        ):
            raise UsageError(f"max_attempts must be a positive int or None, not {max_attempts!r}")
        limits = {
            name: float(check_seconds(v, name))
            for name, v in (("inactivity", inactivity), ("max_duration", max_duration))
            if v is not None
        }
        h = digest_bytes(dumps(payload))
        self._refuse_credentials(item_id, payload)
        task_id = item_task_id(self.name, item_id) if task is None else task
        if TASK_ID_RE.match(task_id) is None:
            raise UsageError(f"item id {item_id!r} makes task id {task_id!r}, which is too long (128 at most)")
        return {
            "item": item_id, "task": task_id, "payload_hash": h, "payload": payload,
            "priority": priority, "not_before": nb, "max_attempts": max_attempts, **limits,
            **({"parent": parent} if parent is not None else {}),
        }  # fmt: skip

    def _refuse_credentials(self, item_id: str, payload: Any) -> None:
        """A payload is the item's input, read back from the record to run it: it cannot be recorded redacted,
        so one holding a credential (by the one redaction rule, docs/effects.md) is refused."""
        _, where = redact_value(payload)
        if where:
            shown = ", ".join(where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
            raise UsageError(
                f"backlog {self.name!r} item {item_id!r}: the payload holds a credential at {shown}; a payload "
                "is recorded as given and read back to run the item, so a credential in it would be stored in "
                "the ledger: keep it out of the payload (let the step read it from its environment or a secret "
                "store, by a name the payload may carry); nothing was written"
            )

    def _add_entries(self, entries: list[dict[str, Any]]) -> list[ItemRecord]:
        t = self.task
        leases.claim_stale(t)  # on a store: the lease a SIGKILLed supervisor left, taken back once it stood still
        with t.stream.mutex:
            try:
                w = t.stream.open_writer()  # the lock first: the fold below is then the whole stream
                f = self._fold
                # the hash chain's head names every record before it: the same count and head are the same stream
                if f is None or f.seq != w.next_seq - 1 or f.head != w.head:
                    self._fold = self._stamp = None
                    f = self.fold()
                self._refuse_foreign(f)
                new: dict[str, dict[str, Any]] = {}
                for e in entries:
                    old = f.items.get(e["item"])
                    seen = new.get(e["item"])
                    h = old.payload_hash if old is not None else seen["payload_hash"] if seen is not None else None
                    was = old.task if old is not None else seen["task"] if seen is not None else e["task"]
                    self._refuse_other(e, was, h)
                    if h is None:
                        new[e["item"]] = e
                # a task whose stamp says it has no stream holds no record to refuse: not read (on a store, the
                # stamps of all the new items are listed at once, one LIST each, where a read is two)
                stamps = self.ledger.backend.streams.stamps([e["task"] for e in new.values()])
                for e in new.values():
                    if stamps[e["task"]] != NO_STREAM:
                        self._refuse_taken(e["item"], e["task"], e.get("parent"))
                    if "parent" in e:
                        _inherit(e, f)
                self._fold = None  # until the appends below are all in the fold
                if new:
                    with t.batch():
                        if f.seq < 1:
                            self._created(t)
                        for e in new.values():
                            f.apply(t.append("backlog.item_added", e))
                # under the lock: the stamp of this fold's stream, for the next check (one stat, one LIST on a store)
                self._fold, self._stamp = f, (self._stamp_now() if self._checks else None)
                return [dataclasses.replace(f.items[e["item"]]) for e in entries]
            finally:
                t.close()  # a running supervisor waits for this lock

    def _refuse_foreign(self, f: BacklogFold) -> None:
        if f.foreign is not None:
            raise BacklogTaken(
                f"backlog {self.name!r}: {f.foreign}; the backlog never adopts a task it did not start: use another "
                "backlog name; nothing was written"
            )

    def _refuse_taken(self, item_id: str, task_id: str, parent: str | None = None) -> None:
        """:class:`ItemTaskTaken` when a new item's task already holds records: none of them is the backlog's.

        A child item's task begins with ``task.spawned {parent}`` naming the item task that
        spawned it (the link its parent recorded first): that task is the backlog's to run.
        """
        ev = first_record(self.ledger.task(task_id).events())
        if ev is not None and parent is not None and ev.kind == SPAWNED and ev.data.get("parent") == parent:
            return
        if ev is not None:
            raise ItemTaskTaken(
                f"backlog {self.name!r} item {item_id!r}: its task {task_id!r} already exists (seq {ev.seq} is "
                f"{ev.kind!r}), and the backlog never adopts a task it did not start: its records would be taken "
                "for the item's; add the payload under another item id; nothing was written"
            )

    def _created(self, t: Task) -> None:
        """The backlog stream's first records: what it is, as a checkpoint the task views show."""
        t.checkpoint(
            "backlog",
            note=(
                f"backlog {self.name!r}: its items are the tasks {self.name}.item.*; see: intentlog backlog {self.name}"
            ),
            by="intentlog backlog",
        )

    def unblock(self, item_id: str, *, by: str | None = None) -> Event:
        """Put a blocked item back in the queue once its task no longer needs a person.

        An item whose task was given up (``intentlog fail TASK --reason``) is not queued: it
        is failed at once (``backlog.item_failed`` with the person's reason; the event
        returned) and its step never runs again. Raises :class:`StillBlocked` (nothing
        written) while the task is still awaiting approval or paused for review;
        :class:`UsageError` for an item done or failed. An item its task blocked before the
        backlog recorded it (a run killed in between) is unblocked the same way: the
        person's decision is recorded either way.
        """
        item_id = _check_item(item_id)
        f = self.fold()
        self._refuse_foreign(f)
        rec = f.items.get(item_id)
        if rec is None:
            raise UsageError(f"backlog {self.name!r} has no item {item_id!r}; see 'intentlog backlog {self.name}'")
        whole = read_item_task(self.ledger, rec.task)  # read whole: a decision, never from the cache
        if whole.extras.foreign is not None:
            raise StillBlocked(
                f"item {item_id!r} of backlog {self.name!r}: {whole.extras.foreign}; it cannot run under this id: "
                "add the payload under another item id; nothing was written"
            )
        st = whole.status
        held = blocking_reason(st)
        if held is not None:
            raise StillBlocked(
                f"item {item_id!r} of backlog {self.name!r} is still {held[0]}: {held[1]}; first: {held[2]}; "
                "nothing was written"
            )
        if rec.done or rec.failed is not None:
            what = "done" if rec.done else "failed"
            raise UsageError(f"item {item_id!r} of backlog {self.name!r} is {what}; nothing to unblock")
        why = given_up(st)
        if why is not None:  # the person gave its task up: the item is failed now, never queued again
            t = self.task
            leases.claim_stale(t)
            ev = t.append(
                "backlog.item_failed",
                {"item": item_id, "task": rec.task, "failures": rec.failures, "reason": scrub_text(why), "by": by},
            )
            t.close()
            return ev
        if rec.blocked is None and not any(e.kind == "lease.acquired" for e in self.ledger.task(rec.task).events()):
            raise UsageError(  # never run, so never blocked: recording an unblock would say a person decided something
                f"item {item_id!r} of backlog {self.name!r} is not blocked (it has not run yet); nothing was written"
            )
        t = self.task
        leases.claim_stale(t)  # on a store: the lease a SIGKILLed supervisor left, taken back
        ev = t.append("backlog.item_unblocked", {"item": item_id, "by": by})
        t.close()
        return ev

    def run(
        self,
        step: Callable[[Task, Any], Any] | str,
        *,
        workers: int = 1,
        quota: Iterable[str | Quota] | str | Quota | None = None,
        until_idle: bool = False,
        inactivity: float = 300.0,
        max_duration: float | None = None,
        grace: float = 10.0,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
        poll: float = 0.05,
        engine: Any = "local",
        in_flight: int = 1,
    ) -> BacklogView:
        """Run the items with ``workers`` slots of ``engine``; see :mod:`intentlog.backlog.supervisor`.

        ``engine`` is ``"local"`` (forked processes on this host), ``"dask"`` (a local Dask
        cluster of ``workers`` processes; the ``intentlog[dask]`` extra) or an engine object
        such as ``DaskEngine(scheduler="tcp://host:8786")``
        (:mod:`intentlog.backlog.engines`). The scheduling is the same whatever the engine.
        ``in_flight``: items one worker process holds at once, for an ``async def`` step
        (:mod:`intentlog.backlog.inflight`); a quota ``in_flight=N`` caps the items running
        at once across all workers.
        """
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise UsageError(f"workers must be a positive int, not {workers!r}")
        in_flight, max_in_flight, quota = check_in_flight(step, in_flight, quota, engine)
        self._refuse_foreign(self.fold())
        quotas: tuple[Quota, ...]
        if quota is None:
            quotas = ()
        elif isinstance(quota, (str, Quota)) or not isinstance(quota, (list, tuple)):
            quotas = (parse_quota(quota),)
        else:
            quotas = tuple(parse_quota(q) for q in quota)
        sup = Supervisor(
            self, step, workers=workers, quotas=quotas, until_idle=until_idle, inactivity=inactivity,
            max_duration=max_duration, grace=grace, backoff=backoff, max_backoff=max_backoff, poll=poll,
            engine=engine_for(engine, workers), in_flight=in_flight, max_in_flight=max_in_flight,
        )  # fmt: skip
        sup.run()
        # the lines of the item tasks its workers wrote last: the view below reads only the others whole
        remember(self.ledger, self.name, sup.entries, {rec.task for rec in sup.fold.items.values()})
        return self.view()


def _inherit(entry: dict[str, Any], f: BacklogFold) -> None:
    """A child item takes its parent item's priority, ``max_attempts`` and limits (the parent is an item task)."""
    for rec in f.items.values():
        if rec.task == entry["parent"]:
            entry["priority"], entry["max_attempts"] = rec.priority, rec.max_attempts
            for name in ("inactivity", "max_duration"):
                if getattr(rec, name) is not None:
                    entry[name] = getattr(rec, name)
            return


def engine_for(engine: object, workers: int) -> Engine:
    """``"local"``, ``"dask"`` (a local Dask cluster of ``workers`` processes) or an engine object."""
    if engine is None or engine == "local":
        return LocalEngine()
    if engine == "dask":
        return DaskEngine(workers=workers)  # imports the dask extra only now
    if isinstance(engine, str):
        raise UsageError(f"engine {engine!r} is unknown: use 'local' or 'dask'")
    if not (callable(getattr(engine, "spawn", None)) and callable(getattr(engine, "close", None))):
        raise TypeError(f"engine {engine!r} is neither 'local', 'dask' nor an engine (spawn, close)")
    if getattr(engine, "workers", 0) is None:
        engine.workers = workers  # type: ignore[attr-defined]  # a local cluster as large as the run
    return engine  # type: ignore[return-value]


def _owner_probe(ledger: LedgerLike) -> Callable[[str], LeaseOwner | None]:
    """Who holds a task's writer lease, if anyone: ``/proc/locks`` read once for a folder's lock files.

    Where the ledger keeps no lock files this host's ``/proc/locks`` can name (a store), or
    that table cannot be read, each task's storage is asked (:meth:`LedgerStorage.lease_owner`).
    """
    holders = flock_holders()
    backend = ledger.backend
    files = backend.row_files()
    probe_each = holders is None or files is None
    tasks = str(files)
    if holders and not probe_each:  # only the locks on the tasks folder's device can be an item task's
        try:
            here = lock_key(os.stat(tasks)).rsplit(":", 1)[0] + ":"
            holders = {k: v for k, v in holders.items() if k.startswith(here)}
        except OSError:
            probe_each = True
    host = host_name()

    def owner(task_id: str) -> LeaseOwner | None:
        if probe_each:
            return backend.lease_owner(ledger.task(task_id).stream)
        if not holders:
            return None  # no exclusive flock held on this host at all
        try:
            st = os.stat(os.path.join(tasks, task_id + ".jsonl.lock"))
        except OSError:
            return None
        pid = holders.get(lock_key(st))
        return None if pid is None else LeaseOwner(pid, host, True)

    return owner


def _check_item(item_id: object) -> str:
    if not isinstance(item_id, str) or TASK_ID_RE.match(item_id) is None:
        raise UsageError(
            f"item id {item_id!r} must be letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if shape_spans(item_id):  # an id is recorded as given: a credential in it would be stored
        raise UsageError(
            "the item id looks like a credential (a token or key by its shape); an id is recorded as given: "
            "use an id of your own (an order number, a hash); nothing was written"
        )
    return item_id
