"""A LangGraph thread as an intentlog task: its task id, its event kinds, and the pure fold that reads them.

One thread is one task (every checkpoint namespace of the thread -- the graph and its
subgraphs -- in one stream): a thread is what one graph run at a time writes, so the
task's single-writer lock is exactly LangGraph's own rule, and ``intentlog status TASK``
shows a thread's checkpoints and its tools' effects side by side.

The task id is ``PREFIX + thread_id`` when the thread id is a valid task id (letters,
digits, ``.``, ``_``, ``-``, at most 128 characters in all), else ``PREFIX + "h" + the
first 32 hex digits of the BLAKE3 digest of the thread id``; the thread id itself is in
every ``langgraph.checkpoint`` event, so the mapping never has to be reversed.

Event kinds (all under ``langgraph.``; values are serialized by the saver's serde and kept
as artifact refs, small ones inline in the event):

``langgraph.checkpoint``  ``{thread, ns, id, parent, checkpoint, metadata, versions, run_id, blobs}``
``langgraph.writes``      ``{ns, checkpoint, task, path, writes: [{idx, channel, value}]}``
``langgraph.deleted``     ``{thread, why}``: every checkpoint and write before it is gone for readers
``langgraph.pruned``      ``{keep: [{ns, id}]}``: every other checkpoint (and its writes) is gone for readers
``langgraph.runs_deleted`` ``{runs, removed: [{ns, id}]}``: the checkpoints those runs made are gone for readers

:class:`ThreadIndex` is a pure fold over those events (no I/O, no clock): what a reader
sees. The bytes of what is "gone" stay in the stream, hash-chained, until retention
expires the task (docs/langgraph.md, "Retention").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .._internal.digest import digest_bytes

__all__ = [
    "CHECKPOINT",
    "DELETED",
    "PRUNED",
    "RUNS_DELETED",
    "WRITES",
    "StoredCheckpoint",
    "StoredWrite",
    "ThreadIndex",
    "task_id_for",
    "version_key",
]

CHECKPOINT: Final = "langgraph.checkpoint"
WRITES: Final = "langgraph.writes"
DELETED: Final = "langgraph.deleted"
PRUNED: Final = "langgraph.pruned"
RUNS_DELETED: Final = "langgraph.runs_deleted"

_SAFE: Final = re.compile(r"[A-Za-z0-9._-]+")


def task_id_for(prefix: str, thread_id: str) -> str:
    """The task that keeps ``thread_id``'s checkpoints (see the module doc)."""
    candidate = prefix + thread_id
    if len(candidate) <= 128 and _SAFE.fullmatch(thread_id) and candidate[:1].isalnum():
        return candidate
    return prefix + "h" + digest_bytes(thread_id.encode("utf-8"))[len("blake3:") :][:32]


def version_key(version: object) -> str:
    """A channel version as a dict key: ``1`` and ``"1"`` stay apart (``i:1``, ``s:1``)."""
    if isinstance(version, str):
        return "s:" + version
    return f"n:{version!r}"


@dataclass
class StoredCheckpoint:
    """One checkpoint as the stream recorded it (values still serialized, as refs)."""

    ns: str
    id: str
    parent: str | None
    checkpoint: Mapping[str, Any]
    metadata: Mapping[str, Any]
    versions: Mapping[str, Any]
    run_id: str | None
    seq: int


@dataclass(frozen=True)
class StoredWrite:
    """One pending write: ``(task_id, channel, value record, task_path)``, as recorded."""

    task_id: str
    channel: str
    value: Mapping[str, Any]
    path: str
    idx: int


@dataclass
class ThreadIndex:
    """What a reader of one thread's task sees, folded from its events (pure)."""

    thread_id: str | None = None
    last_seq: int = -1
    checkpoints: dict[str, dict[str, StoredCheckpoint]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, str], Mapping[str, Any] | None] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], StoredWrite]] = field(default_factory=dict)

    def apply_all(self, events: Iterable[Any]) -> ThreadIndex:
        for ev in events:
            self.apply(ev.seq, ev.kind, ev.data)
        return self

    def apply(self, seq: int, kind: str, data: Mapping[str, Any]) -> None:
        """Fold one event; kinds outside ``langgraph.`` (a tool's effect, a note) are skipped."""
        if seq <= self.last_seq:
            return
        self.last_seq = seq
        if kind == CHECKPOINT:
            self._checkpoint(seq, data)
        elif kind == WRITES:
            self._writes(data)
        elif kind == DELETED:
            self.checkpoints.clear()
            self.blobs.clear()
            self.writes.clear()
        elif kind == PRUNED:
            keep = {(k["ns"], k["id"]) for k in data.get("keep", [])}
            self._drop([(ns, cid) for ns, by_id in self.checkpoints.items() for cid in by_id if (ns, cid) not in keep])
            self._drop_unused_blobs()
        elif kind == RUNS_DELETED:
            self._drop([(r["ns"], r["id"]) for r in data.get("removed", [])])

    def _checkpoint(self, seq: int, data: Mapping[str, Any]) -> None:
        ns = data["ns"]
        self.thread_id = data["thread"]
        for blob in data.get("blobs", []):
            self.blobs[(ns, blob["channel"], version_key(blob["version"]))] = blob.get("value")
        self.checkpoints.setdefault(ns, {})[data["id"]] = StoredCheckpoint(
            ns=ns,
            id=data["id"],
            parent=data.get("parent"),
            checkpoint=data["checkpoint"],
            metadata=data["metadata"],
            versions=data.get("versions", {}),
            run_id=data.get("run_id"),
            seq=seq,
        )

    def _writes(self, data: Mapping[str, Any]) -> None:
        slot = self.writes.setdefault((data["ns"], data["checkpoint"]), {})
        for w in data["writes"]:
            slot[(data["task"], w["idx"])] = StoredWrite(data["task"], w["channel"], w["value"], data["path"], w["idx"])

    def _drop(self, gone: list[tuple[str, str]]) -> None:
        for ns, cid in gone:
            self.checkpoints.get(ns, {}).pop(cid, None)
            self.writes.pop((ns, cid), None)
        for ns in [ns for ns, by_id in self.checkpoints.items() if not by_id]:
            del self.checkpoints[ns]

    def _drop_unused_blobs(self) -> None:
        used = {
            (ns, ch, version_key(v)) for ns, by_id in self.checkpoints.items() for c in by_id.values()
            for ch, v in c.versions.items()
        }
        for key in [k for k in self.blobs if k not in used]:
            del self.blobs[key]

    # -- reading -----------------------------------------------------------------------

    def has_write(self, ns: str, checkpoint_id: str, task_id: str, idx: int) -> bool:
        return (task_id, idx) in self.writes.get((ns, checkpoint_id), {})

    def latest(self, ns: str) -> StoredCheckpoint | None:
        by_id = self.checkpoints.get(ns)
        return by_id[max(by_id)] if by_id else None

    def ordered_writes(self, ns: str, checkpoint_id: str) -> list[StoredWrite]:
        """The checkpoint's pending writes in ``writes_sort_key`` order: (task_path, task_id, idx)."""
        stored = self.writes.get((ns, checkpoint_id), {})
        return sorted(stored.values(), key=lambda w: (w.path, w.task_id, w.idx))

    def all_checkpoints(self) -> list[StoredCheckpoint]:
        return [c for by_id in self.checkpoints.values() for c in by_id.values()]
