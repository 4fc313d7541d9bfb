"""One run of the replay checker over a ledger's reads (:class:`~intentlog.checker.seams.LedgerReads`).

:func:`verify` is the one run; :func:`verify_path` (a folder), :func:`verify_storage` (the
storage seams) and :func:`verify_ledger` (an open ledger, whatever keeps it) only say what
is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from .._internal.args import check_names, check_path
from ..errors import NotALedger, UsageError
from ..eventlog.format import check_task_id
from ..eventlog.gclog import GC_LOG, GcDeletion
from ..heads.codec import HEADS_FILE, StreamHead
from .artifacts import ArtifactChecks
from .folder import FolderReads
from .links import LinkChecks
from .report import ERROR, INFO, SEVERITIES, VerifyReport, abbr
from .seams import LedgerReads, ObjectReads, SeamReads, StreamReads
from .state import Progress
from .streams import StreamChecks


class ReadableLedger(Protocol):
    """What :func:`verify_ledger` needs of an open ledger (a :class:`~intentlog.Ledger` is one)."""

    @property
    def workspace(self) -> Path | None: ...

    def reads(self) -> LedgerReads: ...

__all__ = ["verify", "verify_ledger", "verify_path", "verify_storage"]


class Checker(StreamChecks, LinkChecks, ArtifactChecks):
    """A whole run: the stream checks, the links between streams, then the byte checks, over one shared state."""


def verify(
    reads: LedgerReads,
    tasks: Sequence[str] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check the ledger ``reads`` reads; changes nothing, takes no lock, probes nothing.

    ``tasks`` limits the stream checks to those tasks (orphan blobs are then not looked
    for: that needs every stream). ``workspace`` is what ``artifact.recorded`` locators
    are relative to (default: ``reads.default_workspace``, a folder's parent).
    ``progress(phase, done, total)`` is called as streams, artifacts and workspace files
    are checked. Raises :class:`InvalidTaskId` or :class:`UsageError` for a named task that
    has no stream (and was never sealed); everything found wrong is in the report, not raised.
    The same streams, objects, seals and gc log give the same report whatever keeps them,
    but for what only a folder can hold (links, ``intentlog.json``, ``quarantine/``, torn tails).
    """
    tasks = check_names(tasks, "tasks")
    ws = Path(workspace) if workspace is not None else reads.default_workspace
    checker = Checker(reads, ws, progress)
    checker.check_links()
    checker.check_marker()
    heads: dict[str, StreamHead] | None
    if checker.blocked(HEADS_FILE):
        heads = {}  # a linked seal: reported, unread
    else:
        heads, wrong = reads.heads()
        for message in wrong:
            checker.add(ERROR, "heads", message)
    gc_deleted, gc_problem = reads.gc_log()
    return _run(checker, reads.where, reads.tasks_where, tasks, heads, gc_deleted, gc_problem)


def verify_path(
    root: str | os.PathLike[str],
    tasks: Sequence[str] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """:func:`verify` of the ledger (or exported bundle) folder ``root``; changes nothing, takes no lock.

    ``workspace`` defaults to the parent of ``root``, as for :func:`intentlog.open`. Raises
    :class:`NotALedger` when ``root`` is not a folder.
    """
    root_path = check_path(root, "root")
    tasks = check_names(tasks, "tasks")
    if not root_path.is_dir():
        raise NotALedger(str(root_path), "is not a folder; pass the ledger root (the folder holding intentlog.json)")
    return verify(FolderReads(root_path), tasks, workspace=workspace, progress=progress)


def verify_storage(
    streams: StreamReads,
    objects: ObjectReads,
    tasks: Sequence[str] | None = None,
    *,
    where: str,
    workspace: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    seal: tuple[str, bytes] | None = None,
    seals: Sequence[tuple[str, bytes]] | None = None,
    gc_log: tuple[dict[str, GcDeletion], str | None, frozenset[str]] | None = None,
    kept: Callable[[str], bytes | None] | None = None,
) -> VerifyReport:
    """:func:`verify` of a ledger kept behind the storage seams (:class:`~intentlog.checker.seams.SeamReads`).

    ``seals`` are the seals kept beside the streams (where each is and its ``heads.json``
    bytes, in number order), each a lower bound; ``seal`` is one alone (``seals=[seal]``).
    Without either the ``heads`` note says a truncated tail cannot be seen. ``where`` is
    the report's root. ``gc_log`` is what the gc log records deleting, what is wrong with
    it, and the names that are what is left of a stream it deleted.
    """
    if seal is not None and seals is not None:
        raise UsageError("pass seal or seals, not both (seals=[seal] is the same as seal)")
    found = list(seals) if seals is not None else [seal] if seal is not None else []
    deleted, problem, left = gc_log if gc_log is not None else ({}, None, frozenset[str]())
    reads = SeamReads(streams, objects, where, found, deleted, problem, left, kept)
    return verify(reads, tasks, workspace=workspace, progress=progress)


def _run(
    checker: Checker,
    root: str,
    tasks_where: str,
    tasks: list[str] | None,
    heads: dict[str, StreamHead] | None,
    gc_deleted: dict[str, GcDeletion],
    gc_problem: str | None,
) -> VerifyReport:
    """The checks after the ledger's own files were read: streams, seals, gc log, bytes, orphans."""
    present = checker.list_tasks()
    present_set = set(present)  # built once: every membership test below is O(1)
    if tasks is None:
        selected = present
    else:
        for t in tasks:
            check_task_id(t)
            if t not in present_set and (heads is None or t not in heads):
                raise UsageError(f"no task {t!r} in {tasks_where}; 'intentlog tasks' lists the tasks there")
        selected = list(dict.fromkeys(tasks))  # each once, in the order named
    sealed = heads is not None
    if heads is None:
        checker.add(
            INFO, "heads", "no heads.json: a truncated tail cannot be detected (a hash chain cannot see one); "
            "run 'intentlog seal' and commit heads.json to anchor the streams",
        )
        heads = {}
    checked = [t for t in selected if t in present_set]
    for i, task in enumerate(checked, start=1):
        checker.check_stream(task, heads.get(task))
        if sealed and task not in heads:
            checker.add(INFO, "unsealed", "not in heads.json (written after the last seal): its tail is not anchored; "
                        "run 'intentlog seal'", task=task)
        checker.tick("streams", i, len(checked))
    if gc_problem is not None:
        checker.add(
            ERROR, "gc_log", f"{gc_problem}: which streams garbage collection deleted cannot be trusted; "
            "restore gc.jsonl from a copy or git",
        )
    for task in selected if tasks is not None else sorted(heads):
        if task not in present_set and task in heads:
            h = heads[task]
            d = gc_deleted.get(task)
            if d is not None and d.matches(h):
                end = "" if d.finished else "; that gc run did not record its end (interrupted)"
                checker.add(
                    INFO, "deleted_by_gc", f"deleted by gc at {d.ts} ({GC_LOG} seq {d.seq}), not lost: heads.json "
                    f"sealed it at seq {h.seq}, and the stream gc deleted held {d.events} events ending at "
                    f"{abbr(d.head)}{end}; run 'intentlog seal' to drop it from heads.json",
                    task=task, seq=h.seq, digest=h.head,
                )
                continue
            checker.add(
                ERROR, "heads", f"heads.json sealed this task at seq {h.seq} ({h.events} events), but its stream is "
                "gone; restore it from a copy or git", task=task, seq=h.seq, digest=h.head,
            )
    checker.check_spawn_links(present_set, gc_deleted, gc_problem is None)
    checked_set = set(checked)
    others = [t for t in present if t not in checked_set]
    checker.check_artifacts(others)
    checker.check_quarantined()
    checker.check_captures()
    checker.check_bare()
    if tasks is None:
        checker.check_orphans()
        checker.check_unrecorded_quarantine()
    checker.problems.extend(checker.unlisted())
    return VerifyReport(
        root=root,
        # errors first, then changed, then info; in the order found within each
        problems=tuple(sorted(checker.problems, key=lambda p: SEVERITIES.index(p.severity))),
        tasks=len(checked),
        events=checker.events,
        artifacts=checker.checked,
        bytes_hashed=checker.bytes_hashed,
    )


def verify_ledger(
    ledger: ReadableLedger, tasks: Sequence[str] | None = None, *, progress: Progress | None = None
) -> VerifyReport:
    """:func:`verify` of an open :class:`~intentlog.ledger.Ledger` (what its storage holds) and its workspace."""
    return verify(ledger.reads(), tasks, workspace=ledger.workspace, progress=progress)
