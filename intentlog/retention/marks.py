"""What gc never deletes: tasks a person must act on, tasks marked kept, and the gc lock that guards the marks."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import orjson

from .._args import check_seconds
from .._fsutil import makedirs_durable, open_nofollow, publish_bytes
from ..errors import GcRefused, IntentlogError, TaskBusy, UsageError
from ..eventlog.format import check_task_id
from ..eventlog.lock import WriterLock
from ..projections.status import AWAITING_APPROVAL, INTERRUPTED, PAUSED_FOR_REVIEW, TaskStatus
from .policy import GC_LOCK, KEEP_FILE, KEEP_FORMAT, format_ts, utcnow

if TYPE_CHECKING:
    from ..ledger import Ledger


_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


# -- what is protected -----------------------------------------------------------------

#: Operator states that hold a task's stream: a person must act on it first.
_HOLDING_STATES: Final = frozenset({PAUSED_FOR_REVIEW, AWAITING_APPROVAL})


def protected_by(st: TaskStatus) -> str | None:
    """Why no policy may delete this task's stream, or None.

    The one rule, derived from the task's operator state (:func:`intentlog.projections.status.status_of`,
    the projection ``tasks`` and ``status`` show), so gc never disagrees with them:

    * **paused for review** or **awaiting approval**: a person decides, from this record
      (an unknown effect, a failed call, a served call whose response is lost, a failed
      checkpoint, an undecided approval); the detail names the command that decides it;
    * **interrupted with an external effect at stake**: an unresolved call whose provider
      effect is unknown (a resend accepted but not made) or happened but not yet turned
      into a result (observed, interpreted): without the stream, re-running would pay twice.

    Everything else may expire by age or size: queued, interrupted with no external
    effect yet, awaiting acceptance, complete, and **failed** -- an operator gave the task
    up (``intentlog fail TASK``), which is how a task paused on a failed call is released.
    """
    if st.state in _HOLDING_STATES:
        return f"{st.state}: {st.reason}; next: {st.next_step}"
    if st.state != INTERRUPTED:
        return None
    ws = st.work
    for cid in ws.unresolved:
        pending = ws.calls.get(cid)
        if pending is not None and pending.provider_effect in ("unknown", "happened"):
            return (
                f"interrupted with a paid-for effect at stake: {cid} (key {pending.key!r}) is "
                f"{pending.stage.replace('_', ' ')}, provider effect {pending.provider_effect}; next: {st.next_step}"
            )
    return None


# -- keep marks ------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class KeepMark:
    """An operator's mark that a task must never be collected (``keep.json``)."""

    task: str
    since: str
    note: str | None

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "since": self.since, "note": self.note}


def _keep_path(ledger: Ledger) -> Path:
    return ledger.root / KEEP_FILE


def kept_tasks(ledger: Ledger) -> dict[str, KeepMark]:
    """The tasks marked with :func:`keep`, by id. Raises :class:`IntentlogError` for a damaged ``keep.json``.

    On an object store the marks are the gc log's ``gc.kept`` / ``gc.released`` events
    (:mod:`intentlog.retention.storekeep`); a damaged log raises the same way.
    """
    if ledger.storage is not None:
        from .storescan import StoreSource

        return StoreSource(ledger.storage).keep_marks()
    path = _keep_path(ledger)
    try:
        with os.fdopen(open_nofollow(path, os.O_RDONLY | _O_NONBLOCK, what="the keep marks (keep.json)"), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # a FIFO would block the read forever
                raise IntentlogError(f"{path}: is not a regular file; restore keep.json from git or a copy")
            raw = f.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise IntentlogError(f"{path}: cannot be read ({exc.strerror or exc}); check its permissions") from exc
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise IntentlogError(f"{path}: not valid JSON ({exc}); restore it from git or a copy") from exc
    tasks = obj.get("tasks") if isinstance(obj, dict) and obj.get("format") == KEEP_FORMAT else None
    if not isinstance(tasks, dict):
        raise IntentlogError(
            f'{path}: expected {{"format": "{KEEP_FORMAT}", "tasks": {{...}}}}; restore it from git or a copy'
        )
    out: dict[str, KeepMark] = {}
    for tid, mark in tasks.items():
        if not isinstance(mark, dict):
            raise IntentlogError(f"{path}: the mark of task {tid!r} is not an object; restore it from git or a copy")
        note = mark.get("note")
        out[tid] = KeepMark(tid, str(mark.get("since", "")), note if isinstance(note, str) else None)
    return out


def _write_keep(ledger: Ledger, marks: Mapping[str, KeepMark]) -> None:
    body = {
        "format": KEEP_FORMAT,
        "tasks": {t: {"since": m.since, "note": m.note} for t, m in sorted(marks.items())},
    }
    data = orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    makedirs_durable(ledger.tmp_dir)
    publish_bytes(data, _keep_path(ledger), tmp_dir=ledger.tmp_dir, replace=True, mode=0o644)


def keep(ledger: Ledger, task_id: str, note: str | None = None, *, wait: float = 30.0) -> KeepMark:
    """Mark ``task_id`` so that no gc policy deletes it; durable when this returns.

    The mark lives in ``<ledger>/keep.json`` (replaced atomically), not in the task's
    stream: it is an operator decision about the record, not part of it. Marking again
    replaces the note. Takes the gc lock (waiting up to ``wait`` seconds), so a mark and a
    running gc never interleave. Raises :class:`InvalidTaskId` or :class:`UsageError` (no
    such task) before touching the disk; :class:`GcRefused` if a gc holds the lock.
    """
    check_task_id(task_id)
    check_seconds(wait, "wait")
    if note is not None and not isinstance(note, str):
        raise UsageError(f"a keep note must be a string, not {type(note).__name__}")
    if ledger.storage is not None:
        from .storekeep import keep_on_store

        return keep_on_store(ledger.storage, ledger.location, task_id, note, wait=wait)
    if not ledger.stream_path(task_id).exists():
        raise UsageError(f"no task {task_id!r} in {ledger.root}; see 'intentlog tasks'")
    with gc_lock(ledger, wait=wait):
        marks = kept_tasks(ledger)
        mark = KeepMark(task_id, format_ts(utcnow()), note)
        marks[task_id] = mark
        _write_keep(ledger, marks)
    return mark


def unkeep(ledger: Ledger, task_id: str, *, wait: float = 30.0) -> bool:
    """Remove the keep mark of ``task_id``; False if it had none (then nothing is written)."""
    check_task_id(task_id)
    check_seconds(wait, "wait")
    if ledger.storage is not None:
        from .storekeep import unkeep_on_store

        return unkeep_on_store(ledger.storage, task_id, wait=wait)
    with gc_lock(ledger, wait=wait):
        marks = kept_tasks(ledger)
        if marks.pop(task_id, None) is None:
            return False
        _write_keep(ledger, marks)
    return True


class _GcLock:
    def __init__(self, ledger: Ledger, wait: float) -> None:
        self._lock = WriterLock(ledger.root / GC_LOCK, "gc")
        self._wait = check_seconds(wait, "wait")

    def __enter__(self) -> None:
        try:
            self._lock.acquire(self._wait)
        except TaskBusy as exc:
            who = f"process {exc.holder_pid}" if exc.holder_pid else "another process"
            raise GcRefused(
                f"{exc.path} is held by {who}: a gc or a keep is running; wait for it to finish and run again"
            ) from exc

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def gc_lock(ledger: Ledger, *, wait: float) -> _GcLock:
    return _GcLock(ledger, wait)
