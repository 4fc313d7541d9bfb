"""Keep marks on an object store: ``gc.kept`` and ``gc.released`` events in the store's gc log.

A folder replaces ``keep.json`` atomically under its gc lock; a store replaces nothing, so
each decision is appended to the gc log under its lease -- the same lease a gc holds while
it plans and deletes, so a mark and a gc never interleave. The marks in force are the
log's latest decision per task (:func:`~intentlog.retention.storescan.marks_in`); the
decisions stay as their record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UsageError
from ..s3.streams import ObjectStreams
from .marks import KeepMark
from .policy import format_ts, utcnow
from .storeapply import log_writer
from .storescan import KEPT, RELEASED, StoreSource

if TYPE_CHECKING:
    from ..s3 import ObjectStorage

__all__ = ["keep_on_store", "unkeep_on_store"]


def keep_on_store(storage: ObjectStorage, where: str, task_id: str, note: str | None, *, wait: float) -> KeepMark:
    """Mark ``task_id`` kept: one ``gc.kept`` event, durable when this returns."""
    if task_id not in ObjectStreams(storage.client).names():
        raise UsageError(f"no task {task_id!r} in {where}; see 'intentlog tasks'")
    log = log_writer(storage, wait=wait)
    try:
        mark = KeepMark(task_id, format_ts(utcnow()), note)
        log.append(KEPT, {"task": task_id, "since": mark.since, "note": note}, sync=True)
    finally:
        log.close()
    return mark


def unkeep_on_store(storage: ObjectStorage, task_id: str, *, wait: float) -> bool:
    """Release ``task_id``'s mark: one ``gc.released`` event; False (nothing written) if it had none."""
    log = log_writer(storage, wait=wait)
    try:
        if task_id not in StoreSource(storage).keep_marks():  # read under the lease: no mark races this one
            return False
        log.append(RELEASED, {"task": task_id}, sync=True)
    finally:
        log.close()
    return True
