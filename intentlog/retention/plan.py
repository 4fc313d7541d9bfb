"""Planning a gc from a scan: which streams expire, which blobs are unreferenced, what must be evacuated."""

from __future__ import annotations

import datetime as _dt
import heapq
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

from .._internal.args import check_count
from .._internal.digest import DIGEST_PREFIX
from ..errors import IntentlogError, LedgerError
from .policy import MAX_TRACKED, GcPolicy, check_now, format_duration, format_size, parse_ts, resolve_policy
from .report import Evacuation, ExpiredBlob, ExpiredTask, GcPlan
from .rows import LAST_TS, KeptTasks, expired_task
from .scan import NEVER, Candidate, Progress, Scan, micros
from .storage import GcLedger, GcStorage

_RUN = 4096  # tasks sorted at a time for the deletion order


def plan_gc(
    ledger: GcLedger,
    *,
    max_age: str | float | _dt.timedelta | None = None,
    max_size: str | int | None = None,
    grace: str | float | _dt.timedelta | None = None,
    now: _dt.datetime | None = None,
    max_tracked: int = MAX_TRACKED,
    progress: Progress | None = None,
) -> GcPlan:
    """Plan a garbage collection of ``ledger``; deletes nothing, writes nothing.

    ``progress(what, done, total)`` is called after each stream is scanned (a terminal's
    progress line; it must not raise).

    Policy values not given come from ``intentlog.json`` (``retention``), else the
    defaults (30d, 500MiB, 1h); see :func:`resolve_policy`. ``now`` (an aware datetime)
    replaces the clock, for tests and for an apply that must match a preview. Raises
    :class:`UsageError` for a malformed policy; a damaged ``keep.json`` makes the plan
    refused. See the module docstring for the rules.
    """
    max_tracked = check_count(max_tracked, "max_tracked")
    policy = resolve_policy(ledger, max_age=max_age, max_size=max_size, grace=grace)
    return make_plan(
        ledger.gc_storage(), policy, check_now(now), max_tracked=max_tracked, progress=progress, preview=True
    )


def make_plan(
    source: GcStorage,
    policy: GcPolicy,
    now: _dt.datetime,
    *,
    max_tracked: int,
    progress: Progress | None = None,
    preview: bool = False,
) -> GcPlan:
    """The plan over ``source``: the same rules, rows and bytes whatever holds the streams and objects.

    ``preview``: a plan only shown, which may take unchanged streams from an index; the plan an
    apply carries out reads every stream.
    """
    source.check_layout()
    refused: str | None = None
    try:
        marks = source.keep_marks()
    except IntentlogError as exc:
        marks = {}
        refused = f"{exc}; which tasks are kept is unknown, so nothing may be deleted"
    scan = source.scan(now, policy, marks, limit=max_tracked, progress=progress, preview=preview)
    incomplete = tuple(scan.incomplete)

    # the deletion order: eligible tasks, oldest last activity first (ties by id)
    order = oldest_first(scan.eligible, scan.last_us)
    rank = array("i", bytes(4 * len(scan.rows)))  # task index -> its place in the order (4 bytes a task)
    for r, idx in enumerate(order, start=1):
        rank[idx] = r
    cutoff = None if policy.max_age is None else micros(now - _dt.timedelta(seconds=policy.max_age))
    by_age = 0
    if cutoff is not None:
        while by_age < len(order) and scan.last_us[order[by_age]] < cutoff:
            by_age += 1

    # the objects: sizes, grace, and the rank at which each becomes unreferenced
    candidates: list[Candidate] = []
    freed_at = array("q", bytes(8 * (len(order) + 1)))
    object_bytes = 0
    now_ns = int(now.timestamp() * 1e9)
    grace_ns = int(policy.grace * 1e9)
    for digest, size, mtime_ns, touches in source.objects():
        object_bytes += size
        key = bytes.fromhex(digest[len(DIGEST_PREFIX) :])
        owner = scan.refs.get(key)
        if owner == NEVER:
            continue
        r = 0 if owner is None else rank[owner]
        in_grace = mtime_ns < 0 or now_ns - mtime_ns < grace_ns  # a time the store cannot say: in grace
        candidates.append(Candidate(r, digest, size, mtime_ns, in_grace, touches))
        if not in_grace and not incomplete:
            freed_at[r] += size

    # how many tasks go: all expired by age, then the oldest eligible until under the cap
    before = scan.stream_bytes + object_bytes
    after = before - sum(freed_at[: by_age + 1]) - sum(scan.sizes[i] for i in order[:by_age])
    k = by_age
    if policy.max_size is not None:
        while after > policy.max_size and k < len(order):
            k += 1
            after -= scan.sizes[order[k - 1]] + freed_at[k]
        while 0 < k < len(order) and _one_unit(scan, order[k - 1], order[k]):
            k += 1  # a unit goes together (adjacent in the order: the same latest activity)

    expired = [_expired(scan, idx, n < by_age, now, policy) for n, idx in enumerate(order[:k])]
    kept = KeptTasks(scan.rows, order[:k])

    blobs: list[ExpiredBlob] = []
    in_grace_n = in_grace_bytes = 0
    for c in candidates:
        if c.rank > k:
            continue
        if c.in_grace:
            in_grace_n += 1
            in_grace_bytes += c.size
        elif not incomplete:
            blobs.append(ExpiredBlob(c.digest, c.size, c.mtime_ns, c.touches))
    blobs.sort(key=lambda b: b.digest)

    evacuate = _plan_evacuations(source, scan, expired, k, rank, incomplete=bool(incomplete))

    notes: list[str] = []
    final_after = before - sum(t.size for t in expired) - sum(b.size for b in blobs) + sum(e.size for e in evacuate)
    if policy.max_size is not None and final_after > policy.max_size:
        notes.append(
            f"the ledger stays above max size {format_size(policy.max_size)} ({format_size(final_after)}): "
            "the rest is protected, kept, open, in its grace period, or unknown to an incomplete scan"
        )
    if refused is None and (expired or blobs) and len(expired) >= scan.stream_names:
        if scan.stream_names == 0:
            refused = (
                f"the ledger has no task stream: deleting its {len(blobs)} blob(s) would keep nothing, and an "
                "empty tasks/ may mean lost streams; restore them from a copy or git, or delete the folder by hand"
            )
        else:
            refused = (
                f"this plan would delete every task stream ({len(expired)}) and keep nothing: a wrong clock or "
                "a policy too tight? Mark a task with 'intentlog keep', or loosen --max-age / --max-size"
            )
    return GcPlan(
        now=now,
        policy=policy,
        expired=tuple(expired),
        kept=kept,
        blobs=tuple(blobs),
        evacuate=tuple(evacuate),
        bytes_before=before,
        stream_bytes=scan.stream_bytes,
        object_bytes=object_bytes,
        blobs_in_grace=in_grace_n,
        blob_bytes_in_grace=in_grace_bytes,
        incomplete=incomplete,
        refused=refused,
        notes=tuple(notes),
    )


def _one_unit(scan: Scan, a: int, b: int) -> bool:
    """Are the tasks at ``a`` and ``b``, next in the deletion order, one unit (:func:`.scan.join_unit`)?

    A unit's tasks are settled one after the other (``scan.bound``) with the same latest
    activity, so they are next to each other in the order too.
    """
    return b == a + 1 and a in scan.bound


def oldest_first(eligible: array[int], last_us: array[int]) -> array[int]:
    """The eligible task indices ordered by (last activity, id): sorted in runs, then merged.

    ``eligible`` is in id order. Memory: the result and the runs (4 bytes a task each) and
    one run's list while it is sorted, never a Python object per task.
    """

    def key(i: int) -> tuple[int, int]:
        return (last_us[i], i)

    runs = [array("i", sorted(eligible[lo : lo + _RUN], key=key)) for lo in range(0, len(eligible), _RUN)]
    out = array("i")
    out.extend(heapq.merge(*runs, key=key))
    return out


def _expired(scan: Scan, idx: int, by_age: bool, now: _dt.datetime, policy: GcPolicy) -> ExpiredTask:
    """The task at ``idx`` as the plan deletes it, and why (its record read back from the scan)."""
    record = scan.rows.get(idx)
    last_ts = record[LAST_TS]
    idle = format_duration((now - parse_ts(last_ts)).total_seconds())
    if by_age:
        why = "age"
        detail = f"last activity {last_ts}, {idle} ago: older than max age {format_duration(policy.max_age)}"
    else:
        why, detail = (
            "size",
            (
                f"last activity {last_ts}, {idle} ago: among the oldest while the ledger exceeds "
                f"max size {format_size(policy.max_size)}"
            ),
        )
    return expired_task(record, why, detail)


def _plan_evacuations(
    source: GcStorage, scan: Scan, expired: list[ExpiredTask], k: int, rank: Sequence[int], *, incomplete: bool
) -> list[Evacuation]:
    """Inline payloads of expiring streams that a kept stream still needs, and nothing else holds.

    Needed: a retained task refers to the digest (or, when the scan is incomplete, any
    task might). Held elsewhere: a retained task carries it inline too, or it is in
    ``objects/``.
    """
    if not expired:
        return []

    def survives(owner: int | None) -> bool:
        return owner is not None and (owner == NEVER or rank[owner] > k)

    out: list[Evacuation] = []
    chosen: set[str] = set()
    for t in expired:
        try:
            payloads = list(_evacuation_candidates(source.inline_payloads(t.task)))
        except (OSError, LedgerError):
            continue  # the apply re-checks each stream under its lock
        for digest, size in payloads:
            if digest in chosen:
                continue
            key = bytes.fromhex(digest[len(DIGEST_PREFIX) :])
            needed = incomplete or not scan.tracking or survives(scan.refs.get(key))
            if not needed or (scan.tracking and survives(scan.held.get(key))):
                continue
            if source.has_object(digest):
                continue
            chosen.add(digest)
            out.append(Evacuation(digest, size, t.task))
    return out


def _evacuation_candidates(payloads: Iterator[tuple[str, dict[str, Any]]]) -> Iterator[tuple[str, int]]:
    seen: set[str] = set()
    for digest, ref in payloads:
        size = ref.get("size")
        if digest not in seen and isinstance(size, int) and not isinstance(size, bool):
            seen.add(digest)
            yield digest, size
