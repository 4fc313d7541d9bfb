"""``IntentlogSaver``: a LangGraph checkpointer whose record is an intentlog ledger.

Each thread's checkpoints and pending writes are events of one intentlog task (see
:mod:`.threads`): fsync'd and hash-chained when ``put`` / ``put_writes`` return, their
values serialized with the saver's serde (LangGraph's ``JsonPlusSerializer`` by default)
and kept as artifact refs -- inline in the event up to 4 KiB, else in the ledger's
content-addressed store, durable before the event that names them. ``intentlog verify``
checks all of it offline; the ledger may be a folder or an ``s3://`` store.

Guarantees, and what they rest on:

* **Durable on return.** ``put`` and ``put_writes`` return after the event is synced
  (DESIGN §4 rule 1); a process killed at any moment leaves every returned checkpoint
  readable, and at most a torn tail that the next writer moves to ``quarantine/``.
* **One writer per thread.** The first write to a thread takes its task's writer lock
  (a lease on a store) and holds it until :meth:`IntentlogSaver.close`: a second process
  writing the same thread gets :class:`~intentlog.errors.TaskBusy`, never an interleaved
  history. While this process holds a thread and has folded every event (the writer's next
  seq says so), reads come from memory; otherwise a read folds what the stream gained since
  (a tool's effect, another writer before this one), taking no lock.
* **Credentials stay out.** LangGraph copies the scalar values of a run's config into each
  checkpoint's metadata; those named like credentials (``api_key``, ``authorization``, ...
  the ledger's redaction rule) are recorded as ``[REDACTED]``. Channel values and writes
  are the graph's state and are kept as given.
* **Deletion is recorded, never silent.** ``delete_thread``, ``prune`` and
  ``delete_for_runs`` append an event after which readers no longer see what it names;
  the bytes stay, hash-chained, until retention expires the task (``intentlog gc``;
  docs/langgraph.md, "Retention").

Async methods run the sync ones on a worker thread (``asyncio.to_thread``), so an fsync
never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..artifacts import INLINE_MAX, inline_ref
from ..artifacts.inline import ref_bytes
from ..errors import NotSerializable, UsageError
from ..eventlog.canonical import dumps
from ..eventlog.redaction import REDACTED, is_credential_name
from ..ledger import Ledger, open_ledger
from ..task import Task
from .threads import (
    CHECKPOINT,
    DELETED,
    PRUNED,
    RUNS_DELETED,
    WRITES,
    StoredCheckpoint,
    ThreadIndex,
    task_id_for,
    version_key,
)

__all__ = ["DEFAULT_PREFIX", "IntentlogSaver"]

#: Thread tasks are named ``lg-<thread_id>`` unless another prefix is given.
DEFAULT_PREFIX: Final = "lg-"
#: seconds an effect in a node waits for the checkpoint it runs from to be recorded (see wait_recorded)
RECORDED_WAIT: Final = 300.0


class IntentlogSaver(BaseCheckpointSaver[str]):
    """A checkpointer keeping each thread as an intentlog task (sync and async).

    ``ledger``: a :class:`~intentlog.Ledger`, or a root (a folder or ``s3://BUCKET/PREFIX``)
    opened here and closed by :meth:`close`. ``prefix`` names the thread tasks.
    ``take_over_after`` (an object store): how long a dead holder's lease must stand still
    before this saver takes the thread over (None: the ledger's; a holder that ran on this
    machine and ended is taken at once).
    """

    def __init__(
        self,
        ledger: Ledger | str | os.PathLike[str],
        *,
        prefix: str = DEFAULT_PREFIX,
        serde: SerializerProtocol | None = None,
        take_over_after: float | None = None,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(prefix, str) or (prefix and task_id_for(prefix, "x") != prefix + "x"):
            raise UsageError(
                f"prefix {prefix!r} cannot start a task id: use letters, digits, '.', '_' or '-' (like 'lg-')"
            )
        self._owned = not isinstance(ledger, Ledger)
        self.ledger: Ledger = open_ledger(ledger) if not isinstance(ledger, Ledger) else ledger
        self.prefix = prefix
        self.take_over_after = take_over_after
        self._lock = threading.RLock()
        self._recorded = threading.Condition(self._lock)  # notified after every append (see wait_recorded)
        self._indexes: dict[str, ThreadIndex] = {}
        self._held: set[str] = set()

    # -- the thread's task ---------------------------------------------------------------

    def task_id(self, thread_id: str) -> str:
        """The id of the task that keeps ``thread_id`` (what ``intentlog status`` takes)."""
        if not isinstance(thread_id, str) or not thread_id:
            raise UsageError(f"a thread_id must be a non-empty string, not {thread_id!r}")
        return task_id_for(self.prefix, thread_id)

    def task(self, thread_id: str) -> Task:
        """The ledger's handle of the thread's task (tools record their effects in it too)."""
        return self.ledger.task(self.task_id(thread_id), take_over_after=self.take_over_after)

    def _index(self, task_id: str) -> ThreadIndex:
        """The fold of the thread's task, brought up to date unless this process writes it."""
        idx = self._indexes.get(task_id)
        if idx is None:
            idx = self._indexes[task_id] = ThreadIndex()
        task = self.ledger.task(task_id)
        if task_id in self._held and task.next_seq == idx.last_seq + 1:
            return idx  # this process holds the writer and folded every event: nothing new on disk
        if task.exists():
            idx.apply_all(task.events(since=idx.last_seq + 1))
        return idx

    def _append(self, thread_id: str, kind: str, data: dict[str, Any]) -> None:
        task_id = self.task_id(thread_id)
        idx = self._index(task_id)
        ev = self.task(thread_id).append(kind, data)
        self._held.add(task_id)
        if ev.seq != idx.last_seq + 1:  # a tool's effect (or another writer, before our lock) came between
            idx.apply_all(self.ledger.task(task_id).events(since=idx.last_seq + 1))
        else:
            idx.apply(ev.seq, ev.kind, ev.data)
        self._recorded.notify_all()

    def wait_recorded(self, thread_id: str, checkpoints: Mapping[str, str], *, timeout: float = RECORDED_WAIT) -> None:
        """Return once every checkpoint ``checkpoints`` names (namespace -> id) is durable in the thread's task.

        A node's LangGraph task id derives from the checkpoint it runs from; under the default
        ``durability="async"`` that checkpoint is written on a background thread while the
        node already runs. An effect keyed by the task id must wait for it: were the process
        killed before it landed, a resume would run from an older checkpoint, derive new task
        ids and send the effect again. Woken by this saver's own appends; another writer's
        (a second saver on the ledger) are seen by re-reading the task every 50 ms. Raises
        ``UsageError`` after ``timeout`` seconds, having recorded nothing.
        """
        task_id = self.task_id(thread_id)
        deadline = time.monotonic() + timeout
        with self._recorded:
            while True:
                idx = self._index(task_id)
                missing = [(ns, cid) for ns, cid in checkpoints.items() if cid not in idx.checkpoints.get(ns, {})]
                if not missing:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    ns, cid = missing[0]
                    raise UsageError(
                        f"thread {thread_id!r}: the checkpoint {cid} (namespace {ns!r}) this node runs from was not "
                        f"recorded within {timeout:g} s, so an effect keyed by its task could be sent again after a "
                        "crash; nothing was recorded or sent. Compile the graph with this saver as its checkpointer "
                        "and invoke it with durability 'async' (the default) or 'sync'"
                    )
                self._recorded.wait(min(left, 0.05))

    def _thread_task_ids(self) -> list[str]:
        return [t for t in self.ledger.task_ids() if t.startswith(self.prefix)]

    # -- values ----------------------------------------------------------------------------

    def _ref(self, data: bytes) -> dict[str, object]:
        if len(data) <= INLINE_MAX:
            return inline_ref(data)
        return self.ledger.artifacts.put(data).to_json()

    def _record(self, value: Any) -> dict[str, Any]:
        kind, data = self.serde.dumps_typed(value)
        return {"type": kind, "ref": self._ref(data)}

    def _load(self, record: Mapping[str, Any]) -> Any:
        if "json" in record:
            return record["json"]
        return self.serde.loads_typed((record["type"], ref_bytes(record["ref"], self.ledger.artifacts)))

    def _metadata_record(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Metadata as plain JSON in the event when it is exact JSON (readable, diffable), else serialized."""
        try:
            dumps(metadata)
        except (NotSerializable, RecursionError):
            return self._record(metadata)
        return {"json": dict(metadata)}

    # -- reading ---------------------------------------------------------------------------

    def _tuple(self, thread_id: str, idx: ThreadIndex, stored: StoredCheckpoint) -> CheckpointTuple:
        ns = stored.ns
        checkpoint = self._load(stored.checkpoint)
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            record = idx.blobs.get((ns, channel, version_key(version)))
            if record is not None:
                values[channel] = self._load(record)
        writes: list[PendingWrite] = [
            (w.task_id, w.channel, self._load(w.value)) for w in idx.ordered_writes(ns, stored.id)
        ]
        parent: RunnableConfig | None = None
        if stored.parent:
            parent = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": stored.parent}}
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": stored.id}},
            checkpoint=cast(Checkpoint, {**checkpoint, "channel_values": values}),
            metadata=self._load(stored.metadata),
            parent_config=parent,
            pending_writes=writes,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), else the thread's latest in its namespace."""
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = conf.get("checkpoint_id")
        with self._lock:
            idx = self._index(self.task_id(thread_id))
            stored = idx.checkpoints.get(ns, {}).get(checkpoint_id) if checkpoint_id else idx.latest(ns)
            return None if stored is None else self._tuple(thread_id, idx, stored)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (per namespace), by thread, namespace, metadata, ``before`` and ``limit``."""
        with self._lock:
            found = self._list(config, filter=filter, before=before, limit=limit)
        yield from found

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        task_ids = [self.task_id(conf["thread_id"])] if config else self._thread_task_ids()
        want_ns = conf.get("checkpoint_ns")
        want_id = conf.get("checkpoint_id")
        before_id = before["configurable"].get("checkpoint_id") if before else None
        out: builtins.list[CheckpointTuple] = []
        for task_id in task_ids:
            idx = self._index(task_id)
            if idx.thread_id is None:
                continue
            for ns, by_id in idx.checkpoints.items():
                if want_ns is not None and ns != want_ns:
                    continue
                for cid in sorted(by_id, reverse=True):
                    if (want_id and cid != want_id) or (before_id and cid >= before_id):
                        continue
                    stored = by_id[cid]
                    if filter:
                        metadata = self._load(stored.metadata)
                        if not all(metadata.get(k) == v for k, v in filter.items()):
                            continue
                    if limit is not None and len(out) >= limit:
                        return out
                    out.append(self._tuple(idx.thread_id, idx, stored))
        return out

    # -- writing ---------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Record a checkpoint (and the channel values ``new_versions`` names); durable on return."""
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        ns = conf.get("checkpoint_ns", "") or ""
        rest: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = rest.pop("channel_values", {})
        # LangGraph copies the config's scalar values into the metadata: a credential among them is redacted
        md = {k: REDACTED if is_credential_name(k) else v for k, v in get_checkpoint_metadata(config, metadata).items()}
        data: dict[str, Any] = {
            "thread": thread_id,
            "ns": ns,
            "id": checkpoint["id"],
            "parent": conf.get("checkpoint_id"),
            "run_id": md.get("run_id"),
            "versions": dict(checkpoint["channel_versions"]),
            "blobs": [
                {"channel": ch, "version": v, "value": self._record(values[ch]) if ch in values else None}
                for ch, v in new_versions.items()
            ],
            "checkpoint": self._record(rest),
            "metadata": self._metadata_record(md),
        }
        with self._lock:
            self._append(thread_id, CHECKPOINT, data)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Record a task's writes against a checkpoint; a (task, index) already recorded is not recorded again."""
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        ns = conf.get("checkpoint_ns", "") or ""
        checkpoint_id = conf["checkpoint_id"]
        with self._lock:
            idx = self._index(self.task_id(thread_id))
            entries = []
            for n, (channel, value) in enumerate(writes):
                at = WRITES_IDX_MAP.get(channel, n)
                if at >= 0 and idx.has_write(ns, checkpoint_id, task_id, at):
                    continue
                entries.append({"idx": at, "channel": channel, "value": self._record(value)})
            if entries:
                self._append(
                    thread_id,
                    WRITES,
                    {"ns": ns, "checkpoint": checkpoint_id, "task": task_id, "path": task_path, "writes": entries},
                )

    def delete_thread(self, thread_id: str) -> None:
        """Record that the thread is deleted: readers see none of its checkpoints or writes from now on."""
        with self._lock:
            idx = self._index(self.task_id(thread_id))
            if idx.checkpoints or idx.writes:
                self._append(thread_id, DELETED, {"thread": thread_id, "why": "delete_thread"})

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Record, per thread, that the checkpoints these runs made (and their writes) are deleted."""
        runs = set(run_ids)
        if not runs:
            return
        with self._lock:
            for task_id in self._thread_task_ids():
                idx = self._index(task_id)
                removed = [{"ns": c.ns, "id": c.id} for c in idx.all_checkpoints() if c.run_id in runs]
                if removed and idx.thread_id is not None:
                    self._append(idx.thread_id, RUNS_DELETED, {"runs": sorted(runs), "removed": removed})

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: record that only each namespace's newest checkpoint stays; ``delete``: delete them all."""
        if strategy not in ("keep_latest", "delete"):
            raise UsageError(f"prune strategy {strategy!r} is not known: use 'keep_latest' or 'delete'")
        with self._lock:
            for thread_id in thread_ids:
                if strategy == "delete":
                    self.delete_thread(thread_id)
                    continue
                idx = self._index(self.task_id(thread_id))
                keep = [{"ns": ns, "id": max(by_id)} for ns, by_id in idx.checkpoints.items() if by_id]
                if sum(len(by_id) for by_id in idx.checkpoints.values()) > len(keep):
                    self._append(thread_id, PRUNED, {"keep": keep})

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append the source thread's checkpoints and writes to the target thread (the source is untouched)."""
        with self._lock:
            src = self._index(self.task_id(source_thread_id))
            if not src.checkpoints:
                return
            target = self.task(target_thread_id)
            with target.batch():
                for stored in sorted(src.all_checkpoints(), key=lambda c: c.seq):
                    blobs = [
                        {"channel": ch, "version": v, "value": self._refreshed(src.blobs.get((stored.ns, ch, key)))}
                        for ch, v in stored.versions.items()
                        for key in [version_key(v)]
                    ]
                    self._append(
                        target_thread_id,
                        CHECKPOINT,
                        {
                            "thread": target_thread_id,
                            "ns": stored.ns,
                            "id": stored.id,
                            "parent": stored.parent,
                            "run_id": stored.run_id,
                            "versions": dict(stored.versions),
                            "blobs": blobs,
                            "checkpoint": self._refreshed(stored.checkpoint),
                            "metadata": self._refreshed(stored.metadata),
                            "copied_from": source_thread_id,
                        },
                    )
                    by_task: dict[tuple[str, str], list[dict[str, Any]]] = {}
                    for w in src.ordered_writes(stored.ns, stored.id):
                        by_task.setdefault((w.task_id, w.path), []).append(
                            {"idx": w.idx, "channel": w.channel, "value": self._refreshed(w.value)}
                        )
                    for (task_id, path), entries in by_task.items():
                        self._append(
                            target_thread_id,
                            WRITES,
                            {"ns": stored.ns, "checkpoint": stored.id, "task": task_id, "path": path,
                             "writes": entries},
                        )

    def _refreshed(self, record: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """A value record to name again in a new event: a blob in the store is put again first (gc's rule)."""
        if record is None:
            return None
        out = dict(record)
        ref = record.get("ref")
        if isinstance(ref, Mapping) and "inline" not in ref and "inline_b64" not in ref:
            self.ledger.artifacts.put(ref_bytes(ref, self.ledger.artifacts))
        return out

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions as LangGraph's own savers make them: a zero-padded counter and a random tie-breaker."""
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(current.split(".")[0])
        return f"{n + 1:032}.{random.random():016}"

    # -- async: the same on a worker thread -----------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Release the threads this saver wrote (their writer locks) and, if it opened the ledger, the ledger."""
        with self._lock:
            for task_id in sorted(self._held):
                self.ledger.task(task_id).close()
            self._held.clear()
            self._indexes.clear()
            if self._owned:
                self.ledger.close()

    def __enter__(self) -> IntentlogSaver:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> IntentlogSaver:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)
