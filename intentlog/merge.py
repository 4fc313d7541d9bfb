"""Merging two ledgers: copy the tasks and objects one has and the other lacks.

:func:`merge_storage` is written against the two storage seams only (a
:class:`~intentlog.eventlog.storage.StreamStorage` and an
:class:`~intentlog.artifacts.objects.ObjectStore` on each side), so it merges a folder into
a folder, a folder into an object store or back, whatever the seams sit on. :func:`merge`
opens both sides as ledgers (a folder or an ``s3://`` URL: :func:`~intentlog.ledger.open_ledger`),
merges their seams and verifies the merged ledger (:func:`~intentlog.checker.verify.verify_ledger`).
It reads each side's tasks as the ledger lists them: a stream its gc deleted is no task, and
an id the destination holds without a task (on a store, what gc keeps of a stream it deleted)
is not copied into (``retired_in_destination``).

What it promises:

- A task only one side has is copied byte for byte (its hash chain with it). A task that
  is a prefix of the same task on the other side is *extended* with the missing lines; a
  destination that is ahead is left alone. When each task had one writer, nothing conflicts.
- A task that *diverged* — the same id with different lines at one seq — is refused and
  named (:class:`~intentlog.errors.MergeRefused`, every diverged task and the first seq
  where the sides differ), and then **nothing is written** to the destination: the whole
  plan is made, and every resulting stream's chain checked, before the first write.
- Objects are copied before the streams that name them, each checked against its digest
  on the way; a stream append goes through the destination's writer lease with the
  expected seq, so a writer that moved the destination meanwhile gets ``Conflict``, not a fork.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .errors import CorruptStream, MergeRefused, NotALedger
from .eventlog.format import LineError, parse_line
from .ledger import Ledger, open_ledger

if TYPE_CHECKING:
    from .artifacts.objects import ObjectStore
    from .checker.report import VerifyReport
    from .eventlog.storage import StreamStorage

__all__ = ["MergePlan", "MergeResult", "apply_merge", "merge", "merge_storage", "plan_merge"]


@dataclass
class MergePlan:
    """What a merge would do: streams to create or extend (name -> lines to add), objects to copy."""

    create: dict[str, list[bytes]] = field(default_factory=dict)
    extend: dict[str, tuple[int, list[bytes]]] = field(default_factory=dict)  # name -> (dst's next seq, lines)
    same: list[str] = field(default_factory=list)
    dst_ahead: list[str] = field(default_factory=list)
    diverged: list[tuple[str, int]] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)  # sources whose torn last line was not copied
    retired: list[str] = field(default_factory=list)  # tasks gc retired in an object-store destination: not copied

    @property
    def events(self) -> int:
        return sum(len(v) for v in self.create.values()) + sum(len(v) for _, v in self.extend.values())


@dataclass(frozen=True)
class MergeResult:
    """What :func:`merge` did, and the destination's verify report (None when it was not verified)."""

    plan: MergePlan
    verify: VerifyReport | None

    def to_json(self) -> dict[str, object]:
        p = self.plan
        return {
            "created": sorted(p.create),
            "extended": sorted(p.extend),
            "same": p.same,
            "destination_ahead": p.dst_ahead,
            "objects_copied": len(p.objects),
            "events_copied": p.events,
            "torn_tails_skipped": p.torn,
            "retired_in_destination": p.retired,
            "verified": None if self.verify is None else self.verify.ok,
        }


def _lines(data: bytes) -> tuple[list[bytes], bool]:
    """The complete lines (without newlines) and whether a torn last line was dropped."""
    lines = data.split(b"\n")
    tail = lines.pop()
    return lines, bool(tail)


def _check_chain(where: str, lines: list[bytes]) -> None:
    prev: str | None = None
    for seq, line in enumerate(lines):
        try:
            prev = parse_line(line + b"\n", seq, prev).digest
        except LineError as exc:
            raise CorruptStream(where, seq + 1, f"{exc.reason}; nothing was merged") from None


class StreamReads(Protocol):
    """What planning reads of a side's streams (a :class:`~intentlog.eventlog.storage.StreamStorage` is one)."""

    def read(self, name: str, offset: int = 0) -> bytes: ...

    def names(self) -> list[str]: ...


class ObjectList(Protocol):
    """What planning reads of a side's objects (an :class:`~intentlog.artifacts.objects.ObjectStore` is one)."""

    def list(self) -> Iterator[str]: ...


class _Unmade:
    """A destination not made yet (a new folder): no streams, no objects; it becomes a ledger once accepted."""

    def read(self, name: str, offset: int = 0) -> bytes:
        raise FileNotFoundError(name)

    def names(self) -> list[str]:
        return []

    def list(self) -> Iterator[str]:
        return iter(())


def plan_merge(
    src: StreamReads,
    src_objects: ObjectList,
    dst: StreamReads,
    dst_objects: ObjectList,
    *,
    src_tasks: Sequence[str] | None = None,
    dst_tasks: Sequence[str] | None = None,
) -> MergePlan:
    """Decide the merge, reading both sides and writing nothing (``CorruptStream`` for a broken chain).

    ``src_tasks`` and ``dst_tasks`` are each side's tasks (default: every stream it names); an id
    the destination's streams name that is not one of its tasks is held without a stream (gc
    retired it) and is not copied into.
    """
    plan = MergePlan()
    have = set(dst.names())
    live = have if dst_tasks is None else set(dst_tasks)
    for name in src.names() if src_tasks is None else src_tasks:
        ours, torn = _lines(src.read(name))
        if torn:
            plan.torn.append(name)
        if name not in have:
            _check_chain(f"{src!r} task {name!r}", ours)
            plan.create[name] = ours
            continue
        if name not in live:  # an id held without its stream (what gc keeps on a store): nothing to copy into
            plan.retired.append(name)
            continue
        theirs, _ = _lines(dst.read(name))
        common = min(len(ours), len(theirs))
        differ = next((i for i in range(common) if ours[i] != theirs[i]), None)
        if differ is not None:
            plan.diverged.append((name, differ))
        elif len(ours) == len(theirs):
            plan.same.append(name)
        elif len(ours) < len(theirs):
            plan.dst_ahead.append(name)
        else:
            _check_chain(f"{src!r} task {name!r}", ours)
            plan.extend[name] = (len(theirs), ours[len(theirs) :])
    held = set(dst_objects.list())
    plan.objects = sorted(d for d in src_objects.list() if d not in held)
    return plan


def apply_merge(
    plan: MergePlan, src: StreamStorage, src_objects: ObjectStore, dst: StreamStorage, dst_objects: ObjectStore
) -> None:
    """Carry a plan out: objects first, then each stream created or extended under its lease."""
    if plan.diverged:
        raise MergeRefused(repr(src), repr(dst), plan.diverged)
    for digest in plan.objects:
        dst_objects.put(src_objects.get(digest))  # get checks the bytes against their name
    for name, lines in plan.create.items():
        dst.create(name, lines)  # atomically, whole: a power cut leaves the stream whole or absent, never empty
    for name, (at, lines) in plan.extend.items():
        with dst.lease(name) as lease:
            lease.append(lines, expected_seq=at)  # Conflict if the destination moved since the plan


def merge_storage(
    src: StreamStorage, src_objects: ObjectStore, dst: StreamStorage, dst_objects: ObjectStore
) -> MergePlan:
    """Merge ``src`` into ``dst`` through the seams; ``MergeRefused`` (nothing written) when a task diverged."""
    plan = plan_merge(src, src_objects, dst, dst_objects)
    apply_merge(plan, src, src_objects, dst, dst_objects)
    return plan


def _destination(location: str | os.PathLike[str]) -> Ledger | None:
    """The destination ledger, or None for one not made yet (a new or empty folder, made once the merge is accepted).

    A location that is no ledger and cannot become one (a folder holding other files) is
    refused by :func:`~intentlog.ledger.open_ledger` when it is made, before anything is written.
    """
    try:
        return open_ledger(location, create=False, write=True)  # a store must fence writers: its probe runs now
    except NotALedger:
        return None


def merge(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> MergeResult:
    """Merge the ledger at ``src`` (a folder or ``s3://bucket/prefix``) into ``dst`` (created if new).

    Nothing is written to ``dst`` when the merge is refused. ``dst`` is verified after the
    merge (the checker over its seams and files: the report is in the result). A store
    destination must fence writers: its probe runs when it is opened, before anything is read.
    """
    source = open_ledger(src, create=False)  # NotALedger unless it is one
    target = _destination(dst)
    unmade = _Unmade()
    plan = plan_merge(
        source.streams,
        source.objects,
        target.streams if target is not None else unmade,
        target.objects if target is not None else unmade,
        src_tasks=source.task_ids(),
        dst_tasks=target.task_ids() if target is not None else [],
    )
    if plan.diverged:
        raise MergeRefused(os.fspath(src), os.fspath(dst), plan.diverged)
    if target is None:
        target = open_ledger(dst, create=True)  # a new destination becomes a ledger only now: nothing on refusal
    apply_merge(plan, source.streams, source.objects, target.streams, target.objects)
    from .checker.verify import verify_ledger

    # recorded files are compared in the folder holding the destination's location (as verify of
    # a ledger folder does); a location that is no local folder, such as a store's, has none: not compared
    beside = Path(os.fspath(dst)).absolute().parent
    return MergeResult(plan, verify_ledger(open_ledger(dst, create=False, workspace=beside)))
