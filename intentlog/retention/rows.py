"""A plan's per-task records, held outside memory: written once in id order, read back as they are printed.

A gc scan learns a few facts about every task (its reason to stay, its size, its latest
timestamp, its head); a plan names every task. Held as objects that is about a kilobyte a
task. :class:`TaskRows` writes each task's record as one JSON line to an anonymous scratch
file (kept in memory up to :data:`SPOOL_BYTES`, then in the system's temp folder, unlinked:
nothing is ever written in the ledger), and keeps 8 bytes a task (its offset). The plan's
kept tasks are a :class:`KeptTasks` view over those records, read again on each iteration.
The records are immutable once written: a plan made from them says the same thing however
often it is read.
"""

from __future__ import annotations

import os
import tempfile
import threading
import weakref
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import Any, overload

import orjson

from ..errors import IntentlogError
from .report import ExpiredTask, KeptTask

__all__ = ["SPOOL_BYTES", "KeptTasks", "TaskRows", "expired_task"]

#: Records up to this many bytes stay in memory; past it they go to an unlinked temp file.
SPOOL_BYTES = 64 * 1024
_READ = 64 * 1024

# the fields of a record, in order
TASK, RULE, DETAIL, SIZE, LAST_TS, STATE, HEAD, EVENTS, STREAM, IDENT, AFTER = range(11)


class TaskRows:
    """Every scanned task's record, in scan (task-id) order; memory: 8 bytes a task."""

    def __init__(self) -> None:
        self._file = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - closed by the finalizer
        self._closer = weakref.finalize(self, self._file.close)
        self._offsets = array("q")
        self._end = 0
        self._at_end = True  # the file's position is its end (no read since the last append)
        self._lock = threading.Lock()  # one seek-and-read or seek-and-write at a time (threads sharing a plan)

    def append(self, record: list[Any]) -> None:
        """Add the next task's record (a JSON-able list in the field order above)."""
        try:
            line = orjson.dumps(record) + b"\n"
        except orjson.JSONEncodeError:  # text that is not UTF-8 (a lone surrogate): kept, escaped
            line = orjson.dumps([_printable(x) for x in record]) + b"\n"
        try:
            with self._lock:
                if not self._at_end:
                    self._file.seek(self._end)
                    self._at_end = True
                self._file.write(line)
        except OSError as exc:
            raise IntentlogError(
                f"cannot write the gc plan's scratch file in {_temp_folder()}: {exc.strerror or exc}; "
                "free space there or point TMPDIR at a writable folder"
            ) from exc
        self._offsets.append(self._end)
        self._end += len(line)

    def __len__(self) -> int:
        return len(self._offsets)

    def get(self, index: int) -> list[Any]:
        """The record of the task at ``index`` (its place in the scan)."""
        start = self._offsets[index]
        stop = self._offsets[index + 1] if index + 1 < len(self._offsets) else self._end
        with self._lock:
            self._at_end = False
            self._file.seek(start)
            data = self._file.read(stop - start)
        return orjson.loads(data)  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[list[Any]]:
        """Every record in order, read block by block (another reader may interleave)."""
        pos, carry = 0, b""
        while pos < self._end:
            with self._lock:
                self._at_end = False
                self._file.seek(pos)
                chunk = self._file.read(min(_READ, self._end - pos))
            if not chunk:  # pragma: no cover - the file holds every byte appended
                raise IntentlogError("the gc plan's scratch file is shorter than what was written to it")
            pos += len(chunk)
            lines = (carry + chunk).split(b"\n")
            carry = lines.pop()
            for line in lines:
                yield orjson.loads(line)


def _temp_folder() -> str:
    """Where the scratch file goes, for a message: never raises (``gettempdir`` does when none is usable)."""
    chosen = tempfile.tempdir or os.environ.get("TMPDIR")
    return chosen if chosen else "the system's temp folder (none is usable: TMPDIR unset)"


def expired_task(r: list[Any], reason: str, detail: str) -> ExpiredTask:
    """The record ``r`` as a task the plan deletes, for ``reason``."""
    return ExpiredTask(
        r[TASK], reason, detail, r[LAST_TS] or "", r[SIZE], r[HEAD], r[EVENTS], r[STREAM], tuple(r[IDENT]),
        state=r[STATE], after=r[AFTER],
    )  # fmt: skip


def _printable(x: Any) -> Any:
    return x.encode("utf-8", "backslashreplace").decode() if isinstance(x, str) else x


def _kept(r: list[Any]) -> KeptTask:
    if r[RULE] is None:
        return KeptTask(r[TASK], "young", f"last activity {r[LAST_TS]}", r[SIZE], r[LAST_TS], r[STATE])
    return KeptTask(r[TASK], r[RULE], r[DETAIL], r[SIZE], r[LAST_TS], r[STATE])


class KeptTasks(Sequence[KeptTask]):
    """The tasks a plan keeps, in scan order: every scanned task but the expired ones, read as iterated.

    Scan order is id order, but for a unit's tasks, together where the last of it was scanned.

    Memory: the records' offsets (in :class:`TaskRows`) and 4 bytes an expired task.
    """

    __slots__ = ("_gone", "_rows")

    def __init__(self, rows: TaskRows, expired: Sequence[int]) -> None:
        self._rows = rows
        self._gone = array("i", sorted(expired))

    def __len__(self) -> int:
        return len(self._rows) - len(self._gone)

    def __iter__(self) -> Iterator[KeptTask]:
        gone, g = self._gone, 0
        for i, r in enumerate(self._rows):
            if g < len(gone) and gone[g] == i:
                g += 1
                continue
            yield _kept(r)

    @overload
    def __getitem__(self, at: int) -> KeptTask: ...
    @overload
    def __getitem__(self, at: slice) -> Sequence[KeptTask]: ...
    def __getitem__(self, at: int | slice) -> KeptTask | Sequence[KeptTask]:
        if isinstance(at, slice):
            return tuple(self)[at]
        n = len(self)
        if at < 0:
            at += n
        if not 0 <= at < n:
            raise IndexError("kept task index out of range")
        # the at-th index not in gone: the smallest i with i - (expired indices <= i) == at
        i = at
        while True:
            j = at + bisect_right(self._gone, i)
            if j == i:
                return _kept(self._rows.get(i))
            i = j

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{len(self)} kept task(s)>"
