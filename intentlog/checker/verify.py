"""One run of the replay checker: over a ledger (or bundle) folder, or over the storage seams (a store)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .._args import check_names, check_path
from ..errors import LedgerError, NotALedger, UsageError
from ..eventlog.format import check_task_id
from ..gclog import GC_LOG, GcDeletion, read_gc_deletions
from ..heads.codec import HEADS_FILE, StreamHead, read_heads_at
from .artifacts import ArtifactChecks
from .report import ERROR, INFO, SEVERITIES, VerifyReport, abbr
from .seams import ObjectReads, Seams, StreamReads
from .state import Progress
from .streams import StreamChecks

if TYPE_CHECKING:
    from ..ledger import Ledger
    from ..s3.client import ObjectClient

__all__ = ["verify_ledger", "verify_path", "verify_storage"]


class Checker(StreamChecks, ArtifactChecks):
    """A whole run: the stream checks, then the byte checks, over one shared state."""


def verify_path(
    root: str | os.PathLike[str],
    tasks: Sequence[str] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check the ledger (or exported bundle) at ``root``; changes nothing, takes no lock.

    ``tasks`` limits the stream checks to those tasks (orphan blobs are then not looked
    for: that needs every stream). ``workspace`` is what ``artifact.recorded`` locators
    are relative to (default: the parent of ``root``, as for :func:`intentlog.open`).
    ``progress(phase, done, total)`` is called as streams, artifacts and workspace files
    are checked. Raises :class:`NotALedger` when ``root`` is not a folder,
    :class:`InvalidTaskId` or :class:`UsageError` for a named task that has no stream
    (and was never sealed); everything found wrong is in the report, not raised.
    """
    root_path = check_path(root, "root")
    tasks = check_names(tasks, "tasks")
    if not root_path.is_dir():
        raise NotALedger(str(root_path), "is not a folder; pass the ledger root (the folder holding intentlog.json)")
    ws = Path(workspace) if workspace is not None else root_path.absolute().parent
    checker = Checker(root_path, ws, progress)
    checker.check_links()
    checker.check_marker()
    try:
        heads = {} if checker.blocked(HEADS_FILE) else read_heads_at(root_path)  # a linked seal: reported, unread
    except LedgerError as exc:
        checker.add(ERROR, "heads", str(exc))
        heads = {}
    gc_deleted, gc_problem = read_gc_deletions(root_path)
    return _run(checker, str(root_path), f"{root_path / 'tasks'}", tasks, heads, gc_deleted, gc_problem)


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
    """The same checks over a ledger kept behind the storage seams (an object store); changes nothing.

    Streams are read with ``streams.read`` (a store's segments are checked to make one
    stream there: a hole or a spliced segment is an ``ERROR`` finding, code ``segments``),
    objects with ``objects.get`` / ``stat`` / ``list``. The findings are the ones a folder
    holding the same streams and objects gets (``tests/test_s3_verify.py``): what a store
    does not keep -- links, ``intentlog.json``, ``gc.jsonl``, ``quarantine/`` -- is not
    looked for. ``seals`` are the store's seals (where each is, and the bytes of its
    ``heads.json``, in number order: :func:`intentlog.s3.seals.all_seals`): every seal is a
    lower bound, so each stream is compared like a folder's against the furthest head any
    seal recorded for it, and seals that contradict each other are a ``heads`` ``ERROR``
    (:func:`intentlog.s3.seals.combine_seals`). ``seal`` is one seal alone (the same as
    ``seals=[seal]``). Without either the ``heads`` note says a truncated tail cannot be
    seen. ``where`` is the report's root (the store's URL). ``gc_log`` is what the store's gc
    log records deleting, what is wrong with it, and the names that are what is left of a
    stream it deleted (:func:`intentlog.s3.retire.store_gc_log`), read as a folder's
    ``gc.jsonl`` is: a sealed stream gc deleted is ``deleted_by_gc``, not lost; what is left
    of one (its segment 0 gone, an empty folder) is no task.
    """
    tasks = check_names(tasks, "tasks")
    if seal is not None and seals is not None:
        raise UsageError("pass seal or seals, not both (seals=[seal] is the same as seal)")
    found = list(seals) if seals is not None else [seal] if seal is not None else []
    ws = Path(workspace) if workspace is not None else None
    gc_deleted, gc_problem, left = gc_log if gc_log is not None else ({}, None, frozenset[str]())
    checker = Checker(Path(where), ws, progress, Seams(streams, objects, where, gc_deleted, gc_problem, left, kept))
    heads: dict[str, StreamHead] | None = None
    if found:
        from ..s3.seals import combine_seals  # pure: reads no store

        heads, wrong = combine_seals(found)
        for message in wrong:
            checker.add(ERROR, "heads", message)
    return _run(checker, where, where, tasks, heads, gc_deleted, gc_problem)


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
    if tasks is None:
        selected = present
    else:
        selected = []
        for t in tasks:
            check_task_id(t)
            if t not in present and (heads is None or t not in heads):
                raise UsageError(f"no task {t!r} in {tasks_where}; 'intentlog tasks' lists the tasks there")
            if t not in selected:
                selected.append(t)
    sealed = heads is not None
    if heads is None:
        checker.add(
            INFO, "heads", "no heads.json: a truncated tail cannot be detected (a hash chain cannot see one); "
            "run 'intentlog seal' and commit heads.json to anchor the streams",
        )
        heads = {}
    present_set = set(present)
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
    others = [t for t in present if t not in set(checked)]
    checker.check_artifacts(others)
    checker.check_quarantined()
    checker.check_captures()
    checker.check_bare()
    if tasks is None:
        checker.check_orphans()
        checker.check_unrecorded_quarantine()
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
    ledger: Ledger, tasks: Sequence[str] | None = None, *, progress: Progress | None = None
) -> VerifyReport:
    """:func:`verify_path` over an open :class:`~intentlog.ledger.Ledger` and its workspace.

    A ledger on an object store is checked through its seams (:func:`verify_storage`).
    """
    storage = ledger.storage
    if storage is not None:
        return verify_stored(
            storage.client, storage.objects, tasks, where=ledger.location, workspace=ledger.workspace, progress=progress
        )
    return verify_path(ledger.root, tasks, workspace=ledger.workspace, progress=progress)


def verify_stored(
    client: ObjectClient,
    objects: ObjectReads,
    tasks: Sequence[str] | None = None,
    *,
    where: str,
    workspace: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """:func:`verify_storage` of a ledger on an object store, as every command checks one.

    Its streams read through a handle of its own (what the store holds: never a cache or
    this process's unsynced buffer), against every seal (each a lower bound) and the
    store's gc log (what gc retired is no task). Nothing written, no probe.
    """
    from ..s3.retire import store_gc_log
    from ..s3.seals import all_seals
    from ..s3.streams import ObjectStreams

    return verify_storage(
        ObjectStreams(client), objects, tasks, where=where, workspace=workspace, progress=progress,
        seals=all_seals(client), gc_log=store_gc_log(client), kept=client.get,
    )  # fmt: skip
