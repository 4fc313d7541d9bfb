"""What a report shows, read from a ledger: each task's state, events, artifacts and checks.

Reads only, through a :class:`~intentlog.report.source.ReportSource` (a folder, or an
object-store ledger through its seams): streams checked line by line (no lock is taken,
no lock is probed: the report is of the record alone, so the same record always gives
the same report), small payloads inline in events or from ``objects/`` (on a folder never
through a link; shown only when their bytes hash to their digest). The operator state
is the one :func:`~intentlog.projections.status.status_of` names everywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .._internal.digest import DIGEST_PREFIX, digest_bytes
from ..artifacts.inline import inline_bytes
from ..checker.report import ERROR, Problem, VerifyReport
from ..errors import ArtifactError
from ..eventlog.format import Event
from ..projections.idioms import CHILD_SPAWNED, SPAWNED, IdiomFold
from ..projections.operator import OperatorFold
from ..projections.status import TaskStatus, status_of
from ..projections.workstate import WorkStateFold
from ..refs import EXPORT, walk
from .source import ReportSource

__all__ = [
    "MAX_EVENTS",
    "PAYLOAD_MAX",
    "UNREADABLE",
    "Artifact",
    "TaskData",
    "read_task",
]

#: The state of a task whose stream cannot be read past a damaged line (as ``intentlog tasks`` names it).
UNREADABLE: Final = "unreadable"
#: Payloads up to this many bytes are shown in place (larger ones: digest and size only).
PAYLOAD_MAX: Final = 4096
#: The events a task's detail shows; the rest are counted, with the command that lists them.
MAX_EVENTS: Final = 1000

Hint = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class Artifact:
    """One artifact a task's events refer to: where first, and its bytes when small and checked."""

    digest: str
    size: int | None
    media_type: str | None
    where: str  # "seq N (kind)" of the first event naming it
    payload: bytes | None  # the bytes, when at most PAYLOAD_MAX and they hash to the digest
    note: str | None  # why no payload is shown, when it is not


@dataclass(slots=True)
class TaskData:
    """One task as the report shows it. ``status`` is None when the stream is unreadable."""

    task: str
    state: str
    stream: str  # "ok" | "torn tail" | "unreadable"
    problem: str | None
    events: int
    status: TaskStatus | None
    detail: list[Event] | None = None  # the first MAX_EVENTS events, for a task shown in detail
    artifacts: list[Artifact] = field(default_factory=list)
    verify: list[Problem] = field(default_factory=list)
    #: the timestamps of its first and last event (the record's own; None when it has none)
    first_ts: str | None = None
    last_ts: str | None = None
    #: the parent/child tree: the task that spawned this one, and each child spawned with its state
    parent: str | None = None
    children: tuple[str, ...] = ()
    child_states: dict[str, str] = field(default_factory=dict)

    @property
    def next_step(self) -> str:
        if self.status is not None:
            return self.status.next_step
        return "see what is damaged: intentlog verify " + self.task

    @property
    def next_operation(self) -> str:
        return self.status.next_operation if self.status is not None else "verify"

    @property
    def unknown(self) -> int:
        """How many calls have an unknown effect (an attempt started, nothing recorded after it)."""
        if self.status is None:
            return 0
        return sum(1 for c in self.status.work.calls.values() if c.stage == "effect_unknown")

    @property
    def verify_errors(self) -> int:
        return sum(1 for p in self.verify if p.severity == ERROR)


def read_task(source: ReportSource, task: str, *, keep_events: bool) -> TaskData:
    """Fold one task's stream (keeping its first :data:`MAX_EVENTS` events when ``keep_events``)."""
    work = WorkStateFold(task)
    ops = OperatorFold()
    tree = IdiomFold()  # only the spawn records: the parent/child tree
    kept: list[Event] | None = [] if keep_events else None
    read = source.stream(task)
    first: str | None = None
    last: str | None = None
    for ev in read.events:
        work.apply(ev)
        ops.apply(ev)
        if ev.kind in (CHILD_SPAWNED, SPAWNED):
            tree.apply(ev)
        if first is None:
            first = ev.ts
        last = ev.ts
        if kept is not None and len(kept) < MAX_EVENTS:
            kept.append(ev)
    if read.failure is not None:
        return TaskData(task, UNREADABLE, UNREADABLE, read.failure, 0, None, kept)
    p = read.problem
    if p is not None and (p.suspect or not p.torn):
        problem = f"tasks/{task}.jsonl line {p.line}: {p.reason}"
        return TaskData(task, UNREADABLE, UNREADABLE, problem, read.count, None, kept)
    ws = work.result()
    st = status_of(task, ws, ops.result(ws), running=False)
    tail = None if p is None else f"tasks/{task}.jsonl line {p.line}: {p.reason}; the next writer quarantines it"
    return TaskData(
        task, st.state, "ok" if p is None else "torn tail", tail, read.count, st, kept, first_ts=first,
        last_ts=last, parent=tree.parent, children=tuple(tree.children),
    )  # fmt: skip


def collect_artifacts(source: ReportSource, events: Iterable[Event]) -> list[Artifact]:
    """Every artifact the events name, in the order first named, with small payloads checked."""
    inline: dict[str, bytes] = {}
    found: dict[str, tuple[int | None, str | None, str]] = {}
    for ev in events:
        where = f"seq {ev.seq} ({ev.kind})"
        for digest, ref in walk(ev.data, EXPORT):
            if ref is not None:
                try:
                    data = inline_bytes(ref)
                except ArtifactError:
                    data = None
                if data is not None and digest_bytes(data) == digest:
                    inline.setdefault(digest, data)
                size, media = ref.get("size"), ref.get("media_type")
                if digest not in found:
                    found[digest] = (
                        size if type(size) is int else None,
                        media if type(media) is str else None,
                        where,
                    )
            elif digest not in found:
                found[digest] = (None, None, where)
    return [_artifact(source, d, size, media, where, inline) for d, (size, media, where) in found.items()]


def _artifact(
    source: ReportSource, digest: str, size: int | None, media: str | None, where: str, inline: Mapping[str, bytes]
) -> Artifact:
    data = inline.get(digest)
    if data is not None:
        return Artifact(digest, size if size is not None else len(data), media, where, data, None)
    if size is not None and size > PAYLOAD_MAX:
        return Artifact(digest, size, media, where, None, _too_large(digest))
    got = source.payload(digest, PAYLOAD_MAX)
    if got.kind == "absent":
        return Artifact(digest, size, media, where, None, "not in objects/ (see the verify result)")
    if got.kind == "large":
        return Artifact(digest, got.size, media, where, None, _too_large(digest))
    if got.kind == "bad" or got.data is None:
        return Artifact(digest, size, media, where, None, "its bytes do not hash to its digest: not shown")
    return Artifact(digest, len(got.data), media, where, got.data, None)


def _too_large(digest: str) -> str:
    return f"larger than {PAYLOAD_MAX} bytes: intentlog show {digest}"


def attach_verify(tasks: Mapping[str, TaskData], report: VerifyReport) -> list[Problem]:
    """Give each task the problems found in it; return the rest (the folder's own)."""
    folder: list[Problem] = []
    for p in report.problems:
        t = tasks.get(p.task) if p.task is not None else None
        if t is not None:
            t.verify.append(p)
        else:
            folder.append(p)
    return folder


def event_summary(data: Mapping[str, Any]) -> dict[str, Any]:
    """An event's data with refs shortened and inline payloads left out (they are shown as artifacts)."""
    out: dict[str, Any] = {}
    for k in sorted(data):
        out[k] = _brief(data[k], 0)
    return out


def _brief(v: Any, depth: int) -> Any:
    if depth > 8:
        return "…"
    if type(v) is dict:
        d = v.get("digest")
        if isinstance(d, str) and d.startswith(DIGEST_PREFIX) and type(v.get("size")) is int:
            return f"{d[:19]}… ({v['size']} B)"
        return {str(k): _brief(x, depth + 1) for k, x in sorted(v.items())}
    if type(v) is list:
        return [_brief(x, depth + 1) for x in v[:20]] + (["…"] if len(v) > 20 else [])
    if type(v) is str and len(v) > 300:
        return v[:299] + "…"
    return v
