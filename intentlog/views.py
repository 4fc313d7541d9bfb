"""The operator's rows: one task's state as ``intentlog tasks`` and ``intentlog status`` show it.

Both commands, and gc's plan, name a task's state with the one projection
:func:`intentlog.projections.status.status_of`; this module adds only what reading the
file tells beside it -- whether the stream is whole (``stream``: ``ok``, ``torn tail``,
``unreadable``) and whether a live process holds its writer lock. It reads, never writes,
and takes no lock.

A task whose stream cannot be read has ``state`` ``unreadable`` (a word of
:data:`STATES`), its error in ``problem``; a torn tail keeps the state of the events
before it, with ``stream`` ``torn tail`` and the problem beside it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from ._digest import DIGEST_PREFIX
from .errors import ArtifactMissing, IntentlogError, InvalidDigest, UsageError
from .eventlog.reader import StreamScan
from .projections.operator import OperatorFold
from .projections.status import OPERATOR_STATES, TaskStatus, status_of
from .projections.workstate import WorkStateFold

if TYPE_CHECKING:
    from .eventlog.format import Event
    from .ledger import Ledger

__all__ = [
    "MIN_PREFIX",
    "STATES",
    "STREAM_OK",
    "STREAM_TORN",
    "STREAM_UNREADABLE",
    "UNREADABLE",
    "TaskRow",
    "AmbiguousDigest",
    "resolve_digest",
    "task_row",
    "task_rows",
]

#: The state of a task whose stream cannot be read past a damaged line.
UNREADABLE: Final = "unreadable"
#: Every word the JSON ``state`` of ``tasks``, ``status`` and gc's plan takes.
STATES: Final = (*OPERATOR_STATES, UNREADABLE)

STREAM_OK: Final = "ok"
STREAM_TORN: Final = "torn tail"
STREAM_UNREADABLE: Final = "unreadable"


@final
@dataclass(frozen=True, slots=True)
class TaskRow:
    """One task as the operator views show it. ``status`` is None when the stream is unreadable."""

    task: str
    state: str  # one of STATES
    stream: str  # "ok" | "torn tail" | "unreadable"
    problem: str | None
    events: int
    status: TaskStatus | None

    @property
    def next_operation(self) -> str:
        return self.status.next_operation if self.status is not None else "verify"

    @property
    def next_step(self) -> str:
        if self.status is not None:
            return self.status.next_step
        return "see what is damaged: intentlog verify " + self.task

    def to_json(self) -> dict[str, Any]:
        """The row of ``intentlog tasks --json`` (documented in docs/cli.md)."""
        st = self.status
        return {
            "task": self.task,
            "state": self.state,
            "reason": st.reason if st is not None else None,
            "stream": self.stream,
            "problem": self.problem,
            "events": self.events,
            "last_activity": st.work.last_ts if st is not None else None,
            "phase": st.phase if st is not None else None,
            "next_operation": self.next_operation,
            "next_step": self.next_step,
        }


def task_row(ledger: Ledger, task_id: str) -> TaskRow:
    """Read one task's stream and project its row. Raises ``InvalidTaskId`` for a malformed id."""
    task = ledger.task(task_id)
    if task.stream.remote is not None:
        return _row_on_store(task_id, task.events)
    path = task.path
    work = WorkStateFold(task_id)
    ops = OperatorFold()
    try:
        scan = StreamScan(path)
        for ev in scan:
            work.apply(ev)
            ops.apply(ev)
    except (OSError, IntentlogError) as exc:
        return TaskRow(task_id, UNREADABLE, STREAM_UNREADABLE, f"{path}: {exc}", 0, None)
    p = scan.problem
    if p is not None and (p.suspect or not p.torn):
        problem = f"tasks/{task_id}.jsonl line {p.line}: {p.reason}"
        return TaskRow(task_id, UNREADABLE, STREAM_UNREADABLE, problem, scan.count, None)
    ws = work.result()
    st = status_of(task_id, ws, ops.result(ws), running=task.writer_pid() is not None)
    if p is not None:
        problem = f"tasks/{task_id}.jsonl line {p.line}: {p.reason}; the next writer quarantines it"
        return TaskRow(task_id, st.state, STREAM_TORN, problem, scan.count, st)
    return TaskRow(task_id, st.state, STREAM_OK, None, scan.count, st)


def _row_on_store(task_id: str, events: Callable[[], Iterator[Event]]) -> TaskRow:
    """The row of a stream on an object store: read whole through the seam (no torn tails there)."""
    work, ops, n = WorkStateFold(task_id), OperatorFold(), 0
    try:
        for ev in events():
            work.apply(ev)
            ops.apply(ev)
            n += 1
    except (OSError, IntentlogError) as exc:
        return TaskRow(task_id, UNREADABLE, STREAM_UNREADABLE, str(exc), n, None)
    ws = work.result()
    st = status_of(task_id, ws, ops.result(ws), running=False)  # a lease on a store names no process
    return TaskRow(task_id, st.state, STREAM_OK, None, n, st)


def task_rows(ledger: Ledger) -> list[TaskRow]:
    """Every task's row, in id order; one damaged stream never hides the others."""
    return [task_row(ledger, tid) for tid in ledger.task_ids()]


# -- digests as people type them ----------------------------------------------------------

#: The shortest prefix (hex digits after ``blake3:``) accepted; ``intentlog log`` prints 12.
MIN_PREFIX: Final = 6
_HEX = frozenset("0123456789abcdef")
_DIGEST_BYTES = re.compile(rb"blake3:[0-9a-f]{64}")


def resolve_digest(ledger: Ledger, text: str) -> str:
    """The one full digest ``text`` names: a full digest, or a unique prefix as ``log`` prints it.

    ``blake3:`` is optional and a trailing ``…`` (as ``log`` shortens) is ignored. Candidates
    are the objects in ``objects/`` and every digest the streams name (small payloads ride
    inline). Raises :class:`~intentlog.errors.InvalidDigest` for a malformed or too short
    prefix, :class:`~intentlog.errors.UsageError` naming the candidates when it is ambiguous,
    :class:`~intentlog.errors.ArtifactMissing` when nothing matches. Reads only.
    """
    raw = text.strip().rstrip("…").rstrip(".")
    hexpart = raw[len(DIGEST_PREFIX) :] if raw.startswith(DIGEST_PREFIX) else raw
    if not hexpart or not set(hexpart) <= _HEX or len(hexpart) > 64:
        raise InvalidDigest(text)
    if len(hexpart) == 64:
        return DIGEST_PREFIX + hexpart
    if len(hexpart) < MIN_PREFIX:
        raise UsageError(f"digest prefix {text!r} is too short: give at least {MIN_PREFIX} hex digits")
    want = DIGEST_PREFIX + hexpart
    found = {d for d in ledger.artifacts.iter_digests() if d.startswith(want)}
    needle = want.encode()
    for tid in ledger.task_ids():
        try:
            data = ledger.streams.read(tid) if ledger.storage is not None else ledger.stream_path(tid).read_bytes()
        except (OSError, IntentlogError):
            continue
        if needle in data:
            found.update(m.group().decode() for m in _DIGEST_BYTES.finditer(data) if m.group().startswith(needle))
    if not found:
        raise ArtifactMissing(f"{want}…")
    if len(found) > 1:
        names = "\n  ".join(sorted(found))
        raise AmbiguousDigest(f"digest prefix {want} is ambiguous; it matches {len(found)}:\n  {names}")
    return found.pop()


class AmbiguousDigest(UsageError):
    """A digest prefix matches more than one digest (a usage error: give more digits)."""


def resolve_prefix(text: str, candidates: Sequence[str]) -> str:
    """``text`` expanded to the one of ``candidates`` it is a prefix of; a full digest is returned as given.

    Raises :class:`~intentlog.errors.InvalidDigest` when malformed, :class:`AmbiguousDigest`
    when several match. With no match the text is returned unchanged, for the caller's own
    refusal (an approval names the hash it binds).
    """
    raw = text.strip().rstrip("…")
    hexpart = raw[len(DIGEST_PREFIX) :] if raw.startswith(DIGEST_PREFIX) else raw
    if not hexpart or not set(hexpart) <= _HEX or len(hexpart) > 64:
        raise InvalidDigest(text)
    if len(hexpart) == 64:
        return DIGEST_PREFIX + hexpart
    want = DIGEST_PREFIX + hexpart
    found = sorted({cand for cand in candidates if cand.startswith(want)})
    if len(found) > 1:
        raise AmbiguousDigest(f"digest prefix {want} is ambiguous; it matches {len(found)}:\n  " + "\n  ".join(found))
    return found[0] if found else want
