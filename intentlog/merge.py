"""Merging two ledgers: copy the tasks and objects one has and the other lacks.

:func:`merge_storage` is written against the two storage seams only (a
:class:`~intentlog.eventlog.storage.StreamStorage` and an
:class:`~intentlog.artifacts.objects.ObjectStore` on each side), so it merges a folder into
a folder, a folder into an object store or back, whatever the seams sit on. :func:`merge`
opens both sides from a path or an ``s3://`` URL and verifies the merged ledger (a store
through its seams).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import CorruptStream, MergeRefused, NotALedger
from .eventlog.format import LineError, parse_line

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


def _live(storage: StreamStorage) -> list[str]:
    """The side's tasks; on a store without what is left of the streams its gc deleted (no task)."""
    from .s3.streams import ObjectStreams

    if isinstance(storage, ObjectStreams):
        from .s3.retire import live_names

        return live_names(storage.client)
    return storage.names()


def plan_merge(src: StreamStorage, src_objects: ObjectStore, dst: StreamStorage, dst_objects: ObjectStore) -> MergePlan:
    """Decide the merge, reading both sides and writing nothing (``CorruptStream`` for a broken chain)."""
    plan = MergePlan()
    have = set(dst.names())
    for name in _live(src):
        ours, torn = _lines(src.read(name))
        if torn:
            plan.torn.append(name)
        if name not in have:
            _check_chain(f"{src!r} task {name!r}", ours)
            plan.create[name] = ours
            continue
        retired = getattr(dst, "retired", None)
        if callable(retired) and retired(name):  # a store never uses a retired id again: nothing to copy into
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


def _open_side(location: str | os.PathLike[str], *, write: bool) -> tuple[StreamStorage, ObjectStore, Path | None]:
    text = os.fspath(location)
    if text.startswith("s3://"):
        from .s3 import connect

        storage = connect(text, write=write)
        return storage.streams, storage.objects, None
    from .artifacts.objects import FolderObjects
    from .eventlog.storage import FolderStreams
    from .ledger import open_ledger

    path = Path(text)
    if not write:
        open_ledger(path, create=False)  # a source must be a ledger (NotALedger otherwise)
    elif path.exists() and not (path / "intentlog.json").is_file() and any(path.iterdir()):
        raise NotALedger(str(path), "is a non-empty folder that is not a ledger; merge into a ledger or a new folder")
    return FolderStreams(path / "tasks", tmp_dir=path / "tmp"), FolderObjects(path), path


def merge(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> MergeResult:
    """Merge the ledger at ``src`` (a folder or ``s3://bucket/prefix``) into ``dst`` (created if new).

    Nothing is written to ``dst`` when the merge is refused. ``dst`` is verified after the
    merge (a folder by its files, a store through its seams; the report is in the result).
    """
    s_streams, s_objects, _ = _open_side(src, write=False)
    d_streams, d_objects, d_path = _open_side(dst, write=True)
    plan = plan_merge(s_streams, s_objects, d_streams, d_objects)
    if plan.diverged:
        raise MergeRefused(os.fspath(src), os.fspath(dst), plan.diverged)
    if d_path is not None and not (d_path / "intentlog.json").is_file():
        from .ledger import open_ledger

        open_ledger(d_path, create=True)  # a new destination becomes a ledger only now: nothing on refusal
    apply_merge(plan, s_streams, s_objects, d_streams, d_objects)
    from .checker.verify import verify_path
    from .ledgerreads import verify_stored

    if d_path is not None:
        return MergeResult(plan, verify_path(d_path))
    client = getattr(d_streams, "client", None)
    assert client is not None, "a destination that is not a folder is an object store"
    return MergeResult(plan, verify_stored(client, d_objects, where=os.fspath(dst)))  # its seals and gc log too
