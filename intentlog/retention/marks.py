"""Keep marks: an operator's decision that a task is never collected, made under the gc lock.

The marks live beside the record, not in it (a folder's ``keep.json``, replaced atomically;
``gc.kept`` / ``gc.released`` events in a store's gc log): where is the storage's business
(:class:`~intentlog.retention.storage.GcStorage`); what a mark is and when it may be made is
decided here, once.
"""

from __future__ import annotations

from .._internal.args import check_seconds
from ..errors import UsageError
from ..eventlog.format import check_task_id
from .policy import format_ts, utcnow
from .rules import KeepMark
from .storage import GcLedger

__all__ = ["KeepMark", "keep", "kept_tasks", "unkeep"]


def kept_tasks(ledger: GcLedger) -> dict[str, KeepMark]:
    """The tasks marked with :func:`keep`, by id. Raises :class:`IntentlogError` when the marks cannot be read
    (a damaged ``keep.json``, a damaged gc log on a store)."""
    return ledger.gc_storage().keep_marks()


def keep(ledger: GcLedger, task_id: str, note: str | None = None, *, wait: float = 30.0) -> KeepMark:
    """Mark ``task_id`` so that no gc policy deletes it; durable when this returns.

    The mark is an operator decision about the record, not part of it: it lives in
    ``<ledger>/keep.json`` (replaced atomically) in a folder, in the gc log on a store.
    Marking again replaces the note. Takes the gc lock (waiting up to ``wait`` seconds), so
    a mark and a running gc never interleave. Raises :class:`InvalidTaskId` or
    :class:`UsageError` (no such task) before writing anything; :class:`GcRefused` if a gc
    holds the lock.
    """
    check_task_id(task_id)
    check_seconds(wait, "wait")
    if note is not None and not isinstance(note, str):
        raise UsageError(f"a keep note must be a string, not {type(note).__name__}")
    storage = ledger.gc_storage()
    if not storage.has_task(task_id):
        raise UsageError(f"no task {task_id!r} in {storage.where}; see 'intentlog tasks'")
    with storage.locked(wait=wait) as held:
        mark = KeepMark(task_id, format_ts(utcnow()), note)
        held.mark(mark)
    return mark


def unkeep(ledger: GcLedger, task_id: str, *, wait: float = 30.0) -> bool:
    """Remove the keep mark of ``task_id``; False if it had none (then nothing is written)."""
    check_task_id(task_id)
    check_seconds(wait, "wait")
    with ledger.gc_storage().locked(wait=wait) as held:
        return held.release(task_id)
