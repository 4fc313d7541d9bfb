"""Reading a ledger on an object store for a gc plan: the same scan, through the storage seams.

:class:`StoreSource` is the :class:`~intentlog.retention.source.GcSource` of a ledger on
an object store. Each stream is read whole through :class:`~intentlog.s3.ObjectStreams`
(its tail first: the tail's segment, offset and lease epoch are the stream's identity, what
"unchanged since the plan" means there), every line checked; the task's record, its
classification and the digests it names go through the same code as a folder's
(:func:`~intentlog.retention.scan.classify`, :func:`~intentlog.retention.scan.settle`), so
a store and a folder holding the same streams and objects give the same plan.

What differs, by nature: a task is *busy* when its stream's lease is held (a ``lease`` or
a holder's ``data`` segment is its tail), not when a lock file is locked; an object's time
is the store's last-modified time of the object or of its latest touch (a re-put of
bytes already there, :mod:`intentlog.s3.objects`); the keep marks are ``gc.kept`` /
``gc.released`` events in the store's gc log (:mod:`intentlog.s3.retire`); there is no
view cache, so a preview reads every stream, like the plan an apply carries out.
What is left of a stream gc deleted (segment 0 gone: an interrupted apply, a fenced
holder's late put) is not a task: the plan leaves it out and the next apply removes it.
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..errors import CorruptStream, IntentlogError, LedgerError
from ..eventlog.format import Event
from ..eventlog.remote import events_in
from ..gclog import GcDeletion, fold_deletions
from ..projections.backlogs import BACKLOG_SUFFIX, unfinished_item_tasks
from ..projections.status import status_of
from ..refs import INLINE, walk
from ..s3.objects import ObjectArtifacts
from ..s3.retire import leftovers, object_times, read_log
from ..s3.streams import ObjectStreams
from .marks import KeepMark, protected_by
from .policy import GcPolicy
from .scan import Progress, Scan, TaskInfo, classify, fold_for_gc, settle

if TYPE_CHECKING:
    from ..s3 import ObjectStorage

__all__ = ["KEPT", "RELEASED", "StoreSource", "marks_in"]

#: The gc log's events for ``keep`` and ``keep --remove`` on a store.
KEPT: Final = "gc.kept"
RELEASED: Final = "gc.released"


def marks_in(events: list[Event]) -> dict[str, KeepMark]:
    """The keep marks the gc log's events leave standing, by task (the latest decision wins)."""
    out: dict[str, KeepMark] = {}
    for ev in events:
        task = ev.data.get("task")
        if not isinstance(task, str):
            continue
        if ev.kind == KEPT:
            note = ev.data.get("note")
            out[task] = KeepMark(task, str(ev.data.get("since", "")), note if isinstance(note, str) else None)
        elif ev.kind == RELEASED:
            out.pop(task, None)
    return dict(sorted(out.items()))


class StoreSource:
    """What a gc plan reads of a ledger on an object store (see the module doc)."""

    def __init__(self, storage: ObjectStorage) -> None:
        self.client = storage.client
        # a handle of its own: what the store holds, never this process's unsynced buffer
        self.streams = ObjectStreams(storage.client)
        self._log: list[Event] | None = None
        #: stream names that are what is left of a stream gc deleted, found by the last scan
        self.leftovers: list[str] = []

    def log_events(self) -> list[Event]:
        """The gc log's events, read once (``IntentlogError`` when it is damaged)."""
        if self._log is None:
            where = self.client.describe("gc/")
            try:
                data = read_log(self.client)
                self._log = [] if data is None else list(events_in(data, where))
            except CorruptStream as exc:
                raise IntentlogError(f"the store's gc log is damaged ({exc}); run 'intentlog verify'") from exc
        return self._log

    def forget_log(self) -> None:
        """Read the gc log again next time (it was appended to)."""
        self._log = None

    def check_layout(self) -> None:
        """Nothing to check: a store has no links to be swapped in."""

    def keep_marks(self) -> dict[str, KeepMark]:
        return marks_in(self.log_events())

    def retired(self) -> dict[str, GcDeletion]:
        """The tasks the gc log records deleting, carried out (the plan leaves what is left of them out)."""
        try:
            return fold_deletions(self.log_events(), self.client.describe("gc/"), carried_out=True)
        except IntentlogError:
            return {}

    def scan(
        self,
        now: _dt.datetime,
        policy: GcPolicy,
        marks: Mapping[str, KeepMark],
        *,
        limit: int,
        progress: Progress | None,
        preview: bool,
    ) -> Scan:
        scan = Scan()
        retired = self.retired()
        try:
            names = sorted(self.streams.names())
        except LedgerError as exc:
            raise IntentlogError(f"cannot list the streams of {self.client.describe('tasks')}: {exc}") from exc
        self.leftovers = leftovers(self.client, names, retired)
        names = [n for n in names if n not in set(self.leftovers)]
        scan.stream_names = len(names)
        needed = self._backlog_needs(names)
        held: dict[str, str] = {}

        def busy(task: str) -> str | None:
            return held.get(task)

        for done, tid in enumerate(names, start=1):
            if progress is not None:
                progress("streams", done, len(names))
            info = TaskInfo(tid)
            index = len(scan.rows)
            refs: set[bytes] = set()
            inline: set[bytes] = set()
            readable = self._scan_one(info, refs, inline, scan, held)
            scan.stream_bytes += info.size
            if readable:
                classify(info, now, policy, marks, needed, busy)
            settle(scan, info, refs, inline, readable=readable, index=index, limit=limit)
        return scan

    def _read(self, task: str) -> bytes:
        return self.streams.read(task)

    def _scan_one(self, info: TaskInfo, refs: set[bytes], inline: set[bytes], scan: Scan, held: dict[str, str]) -> bool:
        """Read one stream through the seam: size, identity, head, latest timestamp, state, digests."""
        where = f"tasks/{info.task}.jsonl"  # named as a folder names it: the same damage reads the same
        try:
            tail = self.streams.tail(info.task)
            data = self._read(info.task)
            fold, ops, latest, last = fold_for_gc(info, events_in(data, where), refs, inline)
            count, head = (last.seq + 1, last.digest) if last is not None else (0, None)
        except CorruptStream as exc:
            info.rule, info.detail = "unreadable", f"line {exc.line}: {exc.reason}; run 'intentlog verify'"
            scan.incomplete.append(f"{where} line {exc.line}: {exc.reason}")
            return False
        except (LedgerError, FileNotFoundError) as exc:
            info.rule, info.detail = "unreadable", f"cannot be read: {exc}"
            scan.incomplete.append(f"{where}: cannot be read ({exc})")
            return False
        info.size = len(data)
        info.ident = (tail.seg, tail.end_off, tail.epoch)
        info.head, info.events, info.last_ts = head, count, latest
        ws = fold.result()
        st = status_of(info.task, ws, ops.result(ws))
        info.state = sys.intern(st.state)
        if len(data) != tail.end_off:
            info.rule, info.detail = "busy", "it changed while it was read (a writer is appending)"
            return True
        if tail.held:
            held[info.task] = f"open for writing: its lease is held (lease epoch {tail.epoch})"
        protected = protected_by(st)
        if protected is not None:
            info.rule, info.detail = "protected", protected
        return True

    def _backlog_needs(self, names: list[str]) -> dict[str, str]:
        """Task id -> the backlog whose unfinished item it is (as :func:`.backlogs.backlog_needs` says)."""
        needed: dict[str, str] = {}
        for tid in names:
            if not tid.endswith(BACKLOG_SUFFIX):
                continue
            backlog = tid[: -len(BACKLOG_SUFFIX)]
            try:
                tasks = unfinished_item_tasks(events_in(self._read(tid), f"tasks/{tid}.jsonl"))
            except (CorruptStream, LedgerError, FileNotFoundError):
                prefix = f"{backlog}.item."
                tasks = {n for n in names if n.startswith(prefix)}  # unreadable: claims every item-like task
            if tasks:
                needed[tid] = backlog
            for t in tasks:
                needed[t] = backlog
        return needed

    def objects(self) -> Iterator[tuple[str, int, int, int]]:
        return object_times(self.client)

    def inline_payloads(self, task: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for ev in events_in(self._read(task), f"tasks/{task}.jsonl"):
            for digest, ref in walk(ev.data, INLINE):
                if ref is not None:
                    yield digest, ref

    def has_object(self, digest: str) -> bool:
        return self.client.head(ObjectArtifacts.key_for(digest)) is not None
