"""Carrying out a gc plan under the gc lock: evacuate, delete streams, move blobs aside and delete them."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import os
import re
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._args import check_count, check_seconds
from .._digest import DIGEST_PREFIX
from .._fsutil import check_real_dir, fsops, fsync_dir, makedirs_durable, open_dir_nofollow
from ..artifacts.inline import inline_bytes
from ..errors import ArtifactError, GcRefused, IntentlogError, TaskBusy, UsageError, WrongType
from ..eventlog.lock import WriterLock
from ..eventlog.reader import StreamScan
from ..eventlog.writer import StreamWriter
from ..gclog import finished_data
from .marks import gc_lock
from .plan import inline_payloads, make_plan
from .policy import GC_LOG, MAX_TRACKED, check_now, format_ts, resolve_policy
from .report import ExpiredBlob, ExpiredTask, GcPlan, GcResult
from .scan import O_CLOEXEC, O_NOFOLLOW, collect_digests, digests_in_file_tail, file_ident

if TYPE_CHECKING:
    from ..ledger import Ledger


_MOVED_RE = re.compile(r"\.gc\.([0-9a-f]{64})\.[0-9a-f]+\.moved\Z")


def apply_gc(
    ledger: Ledger,
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
    not needed. See :mod:`intentlog.retention.storeapply`.
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
    if ledger.storage is not None:
        from .storeapply import apply_on_store

        return apply_on_store(
            ledger.storage, policy, when, plan, wait=wait, take_over_after=take_over_after, max_tracked=max_tracked
        )
    with gc_lock(ledger, wait=wait):
        _restore_moved(ledger)
        current = make_plan(ledger, policy, when, max_tracked=max_tracked)
        check_replan(current, plan)
        if current.empty:
            return GcResult(current, (), (), (), (), (), 0, None)
        return _carry_out(ledger, current)


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


def _carry_out(ledger: Ledger, plan: GcPlan) -> GcResult:
    log = StreamWriter(
        path=ledger.root / GC_LOG,
        task_id="gc",
        quarantine_dir=ledger.quarantine_dir,
        tmp_dir=ledger.tmp_dir,
        in_root=True,
    )
    makedirs_durable(ledger.tmp_dir)
    log.open(wait=10.0)
    try:
        started = log.append("gc.started", started_data(plan))
        evac = {e.digest for e in plan.evacuate}
        deleted: list[str] = []
        skipped: list[tuple[str, str]] = []
        evacuated: list[str] = []
        try:
            for t in plan.expired:
                why = _delete_stream(ledger, t, evac, evacuated)
                if why is None:
                    deleted.append(t.task)
                else:
                    skipped.append((t.task, why))
            blobs = list(plan.blobs)
            if skipped:
                blobs = _spare_referenced(ledger, [t for t, _ in skipped], blobs)
            blobs_deleted, restored = _delete_blobs(ledger, blobs)
        except OSError as exc:
            raise IntentlogError(
                f"gc stopped after deleting {len(deleted)} task stream(s): {exc.strerror or exc} "
                f"({exc.filename or ledger.root}); {GC_LOG} seq {started.seq} lists what it set out to delete; "
                "fix the cause and run gc again (blobs moved aside are put back first)"
            ) from exc
        result = GcResult(
            plan, tuple(deleted), tuple(skipped), tuple(blobs_deleted), tuple(restored), tuple(evacuated),
            bytes_freed(plan, deleted, blobs_deleted, evacuated), None,
        )  # fmt: skip
        finished = log.append("gc.finished", finished_fields(result, started.seq))
    finally:
        log.close()
    return dataclasses.replace(result, log_seq=finished.seq)


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


def _delete_stream(ledger: Ledger, t: ExpiredTask, evac: set[str], evacuated: list[str]) -> str | None:
    """Delete one expired stream under its writer lock; the reason it was left in place, or None."""
    path = ledger.tasks_dir / f"{t.task}.jsonl"
    lock_path = path.with_name(path.name + ".lock")
    lock = WriterLock(lock_path, t.task)
    check_real_dir(ledger.tasks_dir, what="task streams")  # the lock file is written there
    try:
        lock.acquire(0)
    except TaskBusy as exc:
        return f"a writer opened it after the plan ({exc.holder_pid or 'unknown pid'})"
    try:
        tasks_fd = open_dir_nofollow(ledger.tasks_dir, what="task streams")
    except FileNotFoundError:
        lock.release()
        return "its stream vanished after the plan"
    except BaseException:
        lock.release()
        raise
    try:
        try:
            sfd = os.open(path.name, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC, dir_fd=tasks_fd)
        except FileNotFoundError:
            return "its stream vanished after the plan"
        except OSError as exc:
            return f"its stream cannot be opened without following a link ({exc.strerror or exc})"
        try:
            if file_ident(os.fstat(sfd)) != t.ident:
                return "it changed after the plan"
            if evac:
                why = _evacuate(ledger, path, sfd, evac, evacuated)
                if why is not None:
                    return why
        finally:
            os.close(sfd)
        fsops.unlink(path.name, dir_fd=tasks_fd)
        # the lock file stays: unlinking it while a writer waits on it would let a third
        # process lock a fresh file of the same name, and two writers would hold "the" lock
        fsops.fsync(tasks_fd)
        return None
    finally:
        os.close(tasks_fd)
        lock.release()


def _evacuate(ledger: Ledger, path: Path, fd: int, evac: set[str], evacuated: list[str]) -> str | None:
    """Copy the inline bytes a kept task needs out of the stream open at ``fd``; why not, or None."""
    for digest, ref in inline_payloads(path, fd):
        if digest in evac and digest not in evacuated:
            try:
                data = inline_bytes(ref)
            except ArtifactError as exc:
                return (
                    f"it holds inline bytes of {digest} that a kept task needs, but they fail their check "
                    f"({exc})"
                )
            if data is None:  # pragma: no cover - inline_payloads yields inline refs only
                continue
            try:
                ledger.artifacts.put(data)
            except ArtifactError as exc:
                return f"copying inline bytes of {digest} that a kept task needs into objects/ failed ({exc})"
            evacuated.append(digest)
    return None


def _spare_referenced(ledger: Ledger, tasks: list[str], blobs: list[ExpiredBlob]) -> list[ExpiredBlob]:
    """Drop from ``blobs`` every one that a skipped (so retained) stream refers to."""
    refs: set[bytes] = set()
    held: set[bytes] = set()
    for task in tasks:
        path = ledger.tasks_dir / f"{task}.jsonl"
        try:
            s = StreamScan(path)
            for ev in s:
                collect_digests(ev.data, refs, held)
            if s.problem is not None:
                if not s.problem.incomplete:
                    return []
                digests_in_file_tail(path, s.problem.offset, refs)
        except FileNotFoundError:
            continue
        except OSError:
            return []
    return [b for b in blobs if bytes.fromhex(b.digest[len(DIGEST_PREFIX) :]) not in refs]


def _moved_name(digest: str) -> str:
    return f".gc.{digest[len(DIGEST_PREFIX) :]}.{secrets.token_hex(6)}.moved"


def _delete_blobs(ledger: Ledger, blobs: list[ExpiredBlob]) -> tuple[list[str], list[str]]:
    """Move each blob aside, check nobody refreshed it, then unlink it (or put it back)."""
    deleted: list[str] = []
    restored: list[str] = []
    if not blobs:
        return deleted, restored
    # every move and unlink goes through descriptors on the real folders: a folder swapped
    # for a link after the checks is never reached (LinkRefused instead)
    objects_fd = open_dir_nofollow(ledger.root / "objects", what="artifact objects (objects/)")
    shards: dict[str, int | None] = {}
    try:
        tmp_fd = open_dir_nofollow(ledger.tmp_dir, what="staging files (tmp/)")
        try:
            for b in blobs:
                hexd = b.digest[len(DIGEST_PREFIX) :]
                if hexd[:2] not in shards:
                    try:
                        shards[hexd[:2]] = open_dir_nofollow(
                            hexd[:2], what="artifact objects (a shard of objects/)", dir_fd=objects_fd
                        )
                    except FileNotFoundError:
                        shards[hexd[:2]] = None
                shard_fd = shards[hexd[:2]]
                if shard_fd is None:
                    continue
                name, aside = hexd[2:], _moved_name(b.digest)
                try:
                    fsops.rename(name, aside, src_dir_fd=shard_fd, dst_dir_fd=tmp_fd)
                except FileNotFoundError:
                    continue  # gone already (moved to quarantine by a check): nothing to do
                st = os.stat(aside, dir_fd=tmp_fd, follow_symlinks=False)
                if st.st_mtime_ns != b.mtime_ns or st.st_size != b.size:
                    # a writer stored it again since the plan: it is wanted
                    with contextlib.suppress(FileExistsError):  # stored again meanwhile: same bytes
                        fsops.link(aside, name, src_dir_fd=tmp_fd, dst_dir_fd=shard_fd, follow_symlinks=False)
                    fsops.unlink(aside, dir_fd=tmp_fd)
                    restored.append(b.digest)
                    continue
                fsops.unlink(aside, dir_fd=tmp_fd)
                deleted.append(b.digest)
            for fd in shards.values():
                if fd is not None:
                    fsops.fsync(fd)
            fsops.fsync(tmp_fd)
        finally:
            os.close(tmp_fd)
    finally:
        for fd in shards.values():
            if fd is not None:
                os.close(fd)
        os.close(objects_fd)
    return deleted, restored


def _put_back(aside: Path, dest: Path) -> None:
    try:
        fsops.link(aside, dest)
    except FileExistsError:
        pass  # stored again meanwhile: the new copy has the same bytes
    else:
        fsync_dir(dest.parent)
    fsops.unlink(aside)


def _restore_moved(ledger: Ledger) -> None:
    """Put back blobs a crashed apply moved aside and never decided on (always safe)."""
    try:
        names = [n for n in os.listdir(ledger.tmp_dir) if _MOVED_RE.match(n)]
    except FileNotFoundError:
        return
    for name in names:
        m = _MOVED_RE.match(name)
        if m is None:  # pragma: no cover - filtered above
            continue
        dest = ledger.artifacts.path_for(DIGEST_PREFIX + m.group(1))
        makedirs_durable(dest.parent)
        _put_back(ledger.tmp_dir / name, dest)
    if names:
        fsync_dir(ledger.tmp_dir)
