"""Which :class:`~intentlog.checker.seams.LedgerReads` a ledger location or an open ledger is read through.

Beside them, :func:`revisions_of`: the recorded revisions of one workspace path across a
ledger's streams, read through the ledger's own seam (``Ledger.revisions``).

The one place a whole-ledger reader's storage is chosen: a folder is read file by file
(:class:`~intentlog.checker.folder.FolderReads`), an ``s3://bucket/prefix`` root (or a
ledger opened on an object store) through its two seams with the seals and gc log the
store keeps beside them (:class:`~intentlog.checker.seams.SeamReads` over
:func:`intentlog.s3.verifysource.store_reads`). Verify, the report and export are written
once against what is returned. Nothing is written and no probe runs.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, final, overload

from ._internal.digest import is_digest
from .artifacts.records import normalize_locator
from .checker.folder import FolderReads
from .checker.report import VerifyReport
from .checker.seams import LedgerReads, ObjectReads, SeamReads
from .checker.state import Progress
from .checker.verify import verify
from .errors import IntentlogError, OutsideWorkspace
from .eventlog.format import Event

if TYPE_CHECKING:
    from .s3.client import ObjectClient

__all__ = ["Revision", "Revisions", "open_reads", "revisions_of", "store_reads_on", "verify_stored"]


def open_reads(location: str | os.PathLike[str]) -> LedgerReads:
    """The reads of the ledger at ``location``: a folder, or ``s3://bucket/prefix`` (standard AWS settings)."""
    text = os.fspath(location)
    if text.startswith("s3://"):
        from .s3 import connect

        storage = connect(text, write=False)  # no probe: it only reads
        return store_reads_on(storage.client, text.rstrip("/"), storage.objects)
    return FolderReads(Path(text))


def store_reads_on(client: ObjectClient, where: str, objects: ObjectReads | None = None) -> SeamReads:
    """The reads of the ledger on the store behind ``client`` named ``where`` (``objects``: its artifacts' seam)."""
    from .s3.verifysource import store_reads

    parts = store_reads(client, where)
    return SeamReads(
        parts.streams, objects if objects is not None else parts.objects, where, parts.seals,
        parts.gc_deleted, parts.gc_problem, parts.gc_leftovers, kept=client.get,
    )  # fmt: skip


def verify_stored(
    client: ObjectClient,
    objects: ObjectReads,
    tasks: Sequence[str] | None = None,
    *,
    where: str,
    workspace: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """:func:`~intentlog.checker.verify.verify` of a ledger on the object store behind ``client``.

    Its streams read through a handle of their own (what the store holds), against every
    seal (each a lower bound) and the store's gc log (what gc retired is no task).
    """
    return verify(store_reads_on(client, where, objects), tasks, workspace=workspace, progress=progress)


@final
@dataclass(frozen=True, slots=True)
class Revision:
    """One recorded revision of a workspace path: an ``artifact.recorded`` event naming it.

    ``changed`` is False when its bytes are those of the revision before it in the
    listing (the same digest recorded again), True for the first and for new bytes.
    """

    path: str
    task: str
    seq: int
    ts: str
    digest: str
    size: int
    producer: str | None
    media_type: str | None
    changed: bool

    def to_json(self) -> dict[str, Any]:
        """The object ``intentlog revisions --json`` lists (documented in docs/cli.md)."""
        return {
            "path": self.path, "task": self.task, "seq": self.seq, "ts": self.ts, "digest": self.digest,
            "size": self.size, "producer": self.producer, "media_type": self.media_type, "changed": self.changed,
        }  # fmt: skip


@final
@dataclass(frozen=True, slots=True)
class Revisions(Sequence[Revision]):
    """The revisions of ``path`` (a sequence of :class:`Revision`), and the streams that could not be read.

    ``problems`` holds ``(task, message)`` for each stream that raised on reading: one
    unreadable stream never hides the revisions the others record.
    """

    path: str
    items: tuple[Revision, ...]
    problems: tuple[tuple[str, str], ...] = ()

    @overload
    def __getitem__(self, i: int) -> Revision: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Revision]: ...
    def __getitem__(self, i: int | slice) -> Revision | Sequence[Revision]:
        return self.items[i]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Revision]:
        return iter(self.items)


def _locator(path: str | os.PathLike[str], workspace: Path) -> str:
    """``path`` as a recorded locator: relative to the workspace, normal posix form (an absolute path inside it too)."""
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"a path is a str or os.PathLike[str], not {type(text).__name__}")
    if os.path.isabs(text):
        inside = os.path.relpath(os.path.normpath(text), os.path.abspath(workspace))
        if inside == os.pardir or inside.startswith(os.pardir + os.sep):
            raise OutsideWorkspace(text, str(workspace))
        text = PurePosixPath(*Path(inside).parts).as_posix()
    return normalize_locator(text, str(workspace))


def _recorded(task: str, events: Iterable[Event], locator: str) -> list[tuple[str, str, int, dict[str, Any]]]:
    return [
        (ev.ts, task, ev.seq, ev.data)
        for ev in events
        if ev.kind == "artifact.recorded" and ev.data.get("locator") == locator and is_digest(ev.data.get("digest"))
    ]


def revisions_of(
    path: str | os.PathLike[str],
    task_ids: Iterable[str],
    scan: Callable[[str], Iterable[Event]],
    *,
    workspace: Path,
) -> Revisions:
    """Every ``artifact.recorded`` of ``path`` in the streams of ``task_ids``, read through ``scan``.

    ``path`` is a locator relative to ``workspace`` (``./a//b`` and an absolute path inside
    the workspace name the same one; one outside raises
    :class:`~intentlog.errors.OutsideWorkspace`). The order is the record's: each task's
    revisions in seq order, the tasks' merged by recorded timestamp (ties by task id).
    Reads only; a stream that raises is named in ``problems`` and the others are still read.
    """
    locator = _locator(path, workspace)
    found: list[list[tuple[str, str, int, dict[str, Any]]]] = []
    problems: list[tuple[str, str]] = []
    for tid in task_ids:
        try:
            found.append(_recorded(tid, scan(tid), locator))
        except (OSError, IntentlogError) as exc:
            problems.append((tid, str(exc)))
    items: list[Revision] = []
    last: str | None = None
    # heapq.merge never reorders two items of one input: each task's own revisions stay in seq order
    for ts, tid, seq, d in heapq.merge(*found, key=lambda r: (r[0], r[1])):
        size = d.get("size")
        producer, media = d.get("producer"), d.get("media_type")
        digest = str(d["digest"])
        items.append(Revision(
            locator, tid, seq, ts, digest, size if type(size) is int else 0,
            producer if type(producer) is str else None, media if type(media) is str else None, digest != last,
        ))  # fmt: skip
        last = digest
    return Revisions(locator, tuple(items), tuple(problems))
