"""Carrying out a gc plan under the gc lock: sweep, re-plan, record, evacuate, delete streams, delete blobs.

Written once against :class:`~intentlog.retention.storage.GcStorage`; each step's mechanics
(what holds a stream against writers, how a blob is deleted so a writer storing it again
meanwhile is never left naming a missing object) are the storage's. The order:

1. **The gc lock** (a folder's ``gc.lock``, a store's gc log lease): a second gc or a
   ``keep`` is refused (:class:`GcRefused`).
2. **Sweep** what a killed apply left (blobs moved aside put back; a store's dying
   markers, streams leased or half deleted).
3. **Re-plan** under the lock, every stream read, and check it against the preview.
4. ``gc.started``: every task and blob about to go, durable before anything is deleted.
5. **Streams**: each held against writers and checked unchanged since the plan (else
   skipped, its references kept), the inline bytes a kept task needs copied out, deleted.
6. **Blobs**: those a skipped stream names are spared; each other one deleted unless a
   writer stored it again since the plan (then *restored*).
7. ``gc.finished``: what was done.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Iterator, Sequence
from typing import Any

from .._internal.args import check_count, check_seconds
from .._internal.digest import DIGEST_PREFIX
from ..artifacts.inline import inline_bytes
from ..errors import ArtifactError, CorruptStream, GcRefused, IntentlogError, LedgerError, UsageError, WrongType
from ..eventlog.gclog import GC_FINISHED, GC_STARTED, finished_data
from ..projections.idioms import INBOX_SUFFIX
from .plan import make_plan
from .policy import MAX_TRACKED, check_now, format_ts, resolve_policy
from .report import ExpiredBlob, ExpiredTask, GcPlan, GcResult
from .storage import Evacuate, GcLedger, GcSession


def apply_gc(
    ledger: GcLedger,
    plan: GcPlan | None = None,
    *,
    max_age: str | float | _dt.timedelta | None = None,
    max_size: str | int | None = None,
    grace: str | float | _dt.timedelta | None = None,
    now: _dt.datetime | None = None,
    wait: float = 0.0,
    max_tracked: int = MAX_TRACKED,
    take_over_after: float | None = None,
) -> GcResult:
    """Re-plan under the ledger's gc lock and carry out exactly that plan.

    With ``plan`` (a preview from :func:`plan_gc`), the re-plan uses the preview's policy
    and clock and must delete exactly what the preview said, else :class:`GcRefused`
    ("the ledger changed since the preview") and nothing is deleted. Without it, the
    policy arguments (or ``intentlog.json``, or the defaults) and ``now`` are used.

    Before deleting anything, ``gc.started`` -- every task and blob about to go -- is
    durable in ``gc.jsonl``; then streams go (each under its writer lock), then blobs;
    then ``gc.finished``. Raises :class:`GcRefused` for a refused plan or when another gc
    holds the lock (after ``wait`` seconds).

    On a ledger on an object store the lock is the store's gc log lease, and
    ``take_over_after`` (seconds) takes it from a gc whose log has not moved for that long
    on this process's clock (a killed gc's lease stays recorded as held; the old holder, if
    alive, is fenced by its next put). A folder's gc lock dies with its holder: there it is
    not needed.
    """
    if plan is not None and not isinstance(plan, GcPlan):
        raise WrongType(f"plan must be a GcPlan from plan_gc(), not {type(plan).__name__} {plan!r}")
    wait = check_seconds(wait, "wait")
    max_tracked = check_count(max_tracked, "max_tracked")
    if plan is not None and (max_age is not None or max_size is not None or grace is not None or now is not None):
        raise UsageError("pass either a preview plan or policy arguments to apply_gc, not both")
    policy = (
        plan.policy if plan is not None else resolve_policy(ledger, max_age=max_age, max_size=max_size, grace=grace)
    )
    when = plan.now if plan is not None else check_now(now)
    if take_over_after is not None:
        take_over_after = check_seconds(take_over_after, "take_over_after")
    storage = ledger.gc_storage()
    with storage.locked(wait=wait, take_over_after=take_over_after) as held:
        held.sweep()
        current = make_plan(storage, policy, when, max_tracked=max_tracked)
        check_replan(current, plan)
        if current.empty:
            return GcResult(current, (), (), (), (), (), 0, None)
        return _carry_out(held, current)


def check_replan(current: GcPlan, preview: GcPlan | None) -> None:
    """Refuse (:class:`GcRefused`) a re-plan that is refused, or that deletes other than its preview said."""
    if preview is not None and current.deletions() != preview.deletions():
        raise GcRefused(
            f"the ledger changed since the preview: it would now delete {len(current.expired)} task(s) and "
            f"{len(current.blobs)} blob(s), the preview said {len(preview.expired)} and {len(preview.blobs)}; "
            "re-run the preview and apply that"
        )
    if current.refused is not None:
        raise GcRefused(f"gc refused: {current.refused}")


def _delete_units(
    held: GcSession,
    expired: Sequence[ExpiredTask],
    started: int,
    evacuate: Evacuate,
    deleted: list[str],
    skipped: list[tuple[str, str]],
) -> None:
    """Delete the expired streams, each task of a unit only once the one it follows was deleted.

    A unit (:func:`~intentlog.retention.scan.join_unit`) goes in waves: first the tasks that
    follow none (a task, a parent), then each inbox whose task and each unjoined child whose
    parent was deleted, and so on down. A task that a writer took up again since the plan is
    skipped (changed, busy), and what follows it stays with it: a signal the task is about
    to receive, or a child's result its parent's re-run joins, is never deleted.
    """
    planned = {t.task for t in expired}
    gone: set[str] = set()
    stays: set[str] = set()
    pending = list(expired)
    while pending:
        ready = [t for t in pending if t.after not in planned or t.after in gone or t.after in stays]
        if not ready:  # bonds in a circle (records that contradict each other): none is deleted
            ready = pending
            stays.update(t.task for t in pending)
        go = []
        for t in ready:
            if t.after in stays:
                skipped.append((t.task, f"kept with {_relation(t)} {t.after!r}, which was not deleted"))
                stays.add(t.task)
            else:
                go.append(t)
        if go:
            n = len(deleted)
            held.delete_streams(go, started, evacuate, deleted, skipped)
            gone.update(deleted[n:])
            stays.update(t.task for t in go if t.task not in gone)
        taken = {t.task for t in ready}
        pending = [t for t in pending if t.task not in taken]


def _relation(t: ExpiredTask) -> str:
    return "its task" if t.task == f"{t.after}{INBOX_SUFFIX}" else "its parent"


def _carry_out(held: GcSession, plan: GcPlan) -> GcResult:
    started = held.append(GC_STARTED, started_data(plan))
    evac = {e.digest for e in plan.evacuate}
    deleted: list[str] = []
    skipped: list[tuple[str, str]] = []
    evacuated: list[str] = []

    def evacuate(task: str, payloads: Iterator[tuple[str, dict[str, Any]]]) -> str | None:
        return _evacuate(held, payloads, evac, evacuated) if evac else None

    try:
        _delete_units(held, plan.expired, started, evacuate, deleted, skipped)
        blobs = list(plan.blobs)
        if skipped:
            blobs = _spare_referenced(held, [t for t, _ in skipped], blobs)
        blobs_deleted, restored = held.delete_objects(blobs, started)
    except OSError as exc:
        raise IntentlogError(
            f"gc stopped after deleting {len(deleted)} task stream(s): {exc.strerror or exc} "
            f"({exc.filename or held.where}); {held.log_file} seq {started} lists what it set out to delete; "
            "fix the cause and run gc again (blobs moved aside are put back first)"
        ) from exc
    result = GcResult(
        plan, tuple(deleted), tuple(skipped), tuple(blobs_deleted), tuple(restored), tuple(evacuated),
        bytes_freed(plan, deleted, blobs_deleted, evacuated), None, held.log_file,
    )  # fmt: skip
    finished = held.append(GC_FINISHED, finished_fields(result, started))
    return dataclasses.replace(result, log_seq=finished)


def started_data(plan: GcPlan) -> dict[str, Any]:
    """``gc.started``: the clock, the policy, every task and blob about to go (a folder's and a store's alike)."""
    return {
        "now": format_ts(plan.now),
        "policy": plan.policy.to_json(),
        "tasks": [t.to_json() for t in plan.expired],
        "blobs": {
            "count": len(plan.blobs),
            "bytes": plan.blob_bytes_freed,
            "digests": [b.digest for b in plan.blobs],
        },
        "evacuate": [e.digest for e in plan.evacuate],
        "bytes_before": plan.bytes_before,
        "bytes_freed": plan.bytes_freed,
        "bytes_after": plan.bytes_after,
        "incomplete": list(plan.incomplete),
    }


def bytes_freed(plan: GcPlan, deleted: Sequence[str], blobs: Sequence[str], evacuated: Sequence[str]) -> int:
    """What an apply freed: the streams and blobs it deleted, less the inline bytes it copied out."""
    gone, moved = set(deleted), set(evacuated)
    sizes = {b.digest: b.size for b in plan.blobs}
    freed = sum(t.size for t in plan.expired if t.task in gone)
    freed += sum(sizes[d] for d in blobs)
    return freed - sum(e.size for e in plan.evacuate if e.digest in moved)


def finished_fields(result: GcResult, started: int) -> dict[str, Any]:
    """``gc.finished``: what the run closing ``started`` (the seq of its ``gc.started``) did."""
    return finished_data(
        started,
        result.deleted,
        result.skipped,
        blobs_deleted=len(result.blobs_deleted),
        restored=list(result.restored),
        evacuated=list(result.evacuated),
        bytes_freed=result.bytes_freed,
    )


def _evacuate(
    held: GcSession, payloads: Iterator[tuple[str, dict[str, Any]]], evac: set[str], evacuated: list[str]
) -> str | None:
    """Copy the inline bytes a kept task needs out of an expiring stream into the objects; why not, or None."""
    try:
        for digest, ref in payloads:
            if digest in evac and digest not in evacuated:
                try:
                    data = inline_bytes(ref)
                except ArtifactError as exc:
                    return (
                        f"it holds inline bytes of {digest} that a kept task needs, but they fail their check ({exc})"
                    )
                if data is None:  # pragma: no cover - inline payloads are inline refs only
                    continue
                try:
                    held.put_object(data)
                except ArtifactError as exc:
                    return f"copying inline bytes of {digest} that a kept task needs into objects/ failed ({exc})"
                evacuated.append(digest)
    except (CorruptStream, LedgerError) as exc:
        return f"its stream cannot be read to copy out inline bytes a kept task needs ({exc})"
    return None


def _spare_referenced(held: GcSession, tasks: list[str], blobs: list[ExpiredBlob]) -> list[ExpiredBlob]:
    """Drop from ``blobs`` every one that a skipped (so retained) stream refers to; all if one cannot be read."""
    refs: set[bytes] = set()
    for task in tasks:
        if not held.references(task, refs):
            return []
    return [b for b in blobs if bytes.fromhex(b.digest[len(DIGEST_PREFIX) :]) not in refs]
