"""Retention: bounded records, and cleanup that never eats evidence still needed.

``plan_gc`` says what garbage collection would delete and why; ``apply_gc`` re-plans under
the ledger's gc lock and carries out exactly that plan. Mark and sweep, streams first:

* **Tasks expire by age** -- ``now`` minus the latest timestamp *inside* the stream
  (DESIGN §4 rule 8: never a file mtime, which a git checkout resets) -- **or by size**:
  while streams and objects together exceed ``max_size``, the oldest eligible tasks go
  first.
* **Never deleted**: a task with an unresolved external effect (see :func:`protected_by`),
  a task marked with :func:`keep`, a task open for writing (its writer lock is held), a
  task active within the grace period, a stream that cannot be read completely or dated,
  a backlog's unfinished item. A parent waiting for children it has not joined is
  protected, and a *unit* -- a task and its inbox, a parent and each child it has not
  joined -- is kept or expired whole (:class:`~.scan.UnitSettler`; an apply deletes an
  inbox or a child only after its task or parent). A plan that would leave no task stream
  at all is refused.
* **Blobs**: every artifact referenced by a retained stream is kept (a ``{"digest",
  "size"}`` ref, or any ``blake3:<64 hex>`` string anywhere in event data, to be safe); an
  unreferenced blob is deleted only once its mtime is older than the grace period (a
  writer may have stored it and not yet appended its event; a re-put refreshes the mtime).
  Bytes that ride inline in an expiring stream but are referred to by a retained one are
  first copied into ``objects/`` (*evacuated*), so nothing kept loses its bytes.
* **Incomplete scans**: a stream that cannot be read completely (a bad line that is not
  an incomplete last line, an I/O error, a stray name in ``tasks/``) or more distinct
  digests than ``max_tracked`` make the scan explicitly incomplete: the plan says so and no
  blob is deleted, because references are unknown.

The scan streams every file once (:class:`~intentlog.eventlog.reader.StreamScan`); memory
never grows with the number of events, and with the number of tasks by about 48 bytes each
in arrays (each task's record goes to a scratch file, see :mod:`.rows`; ``GcPlan.kept`` is
read back from it as it is iterated) and the sorted listing; it grows with the number of
distinct digests (32 bytes each, as dict keys, up to ``max_tracked``).

What an apply deletes is recorded *before* it deletes anything, in ``<ledger>/gc.jsonl`` (the gc log on a store):
a hash-chained stream in the task stream format (appended by the same durable writer), a
``gc.started`` event listing every task (with its head digest) and blob it is about to
delete, then a ``gc.finished`` event with what was actually done. An auditor can tell
deletion from loss; ``verify`` still passes on everything kept.

Concurrency (DESIGN §4 rules 3 and 5): the whole apply -- and :func:`keep` -- hold the
ledger's gc lock. Each expired stream is deleted while held against writers, after
checking it did not change since the plan; a task a writer reopened in between is skipped
and its references kept. A blob a writer stores again while gc runs is spared (put back).

Written once, against one seam (:class:`~intentlog.retention.storage.GcStorage`), with
two implementations: a folder (:mod:`.folder`: ``gc.lock``, ``keep.json``, each stream
under its writer lock, each blob moved aside first) and an object store
(``StoreGc``, beside the store's seams: the store's gc log is the lock, the record and the keep
marks; each stream under its lease, each object behind a dying marker).
"""

from __future__ import annotations

from ..errors import GcRefused
from .apply import apply_gc
from .marks import keep, kept_tasks, unkeep
from .plan import plan_gc
from .policy import (
    DEFAULT_GRACE,
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_SIZE,
    GC_LOCK,
    GC_LOG,
    KEEP_FILE,
    GcPolicy,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
    resolve_policy,
)
from .report import Evacuation, ExpiredBlob, ExpiredTask, GcPlan, GcResult, KeptTask
from .rules import KeepMark

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_MAX_AGE",
    "DEFAULT_MAX_SIZE",
    "GC_LOG",
    "GC_LOCK",
    "KEEP_FILE",
    "ExpiredBlob",
    "ExpiredTask",
    "Evacuation",
    "GcPlan",
    "GcPolicy",
    "GcRefused",
    "GcResult",
    "KeepMark",
    "KeptTask",
    "apply_gc",
    "format_duration",
    "format_size",
    "keep",
    "kept_tasks",
    "parse_duration",
    "parse_size",
    "plan_gc",
    "resolve_policy",
    "unkeep",
]
