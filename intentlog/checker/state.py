"""What the checker accumulates while it reads a ledger, and the folder-level checks.

One :class:`CheckerState` per run: the problems found, the digests referenced and
where, the workspace captures, the quarantined files. :mod:`.streams` and
:mod:`.artifacts` add the stream and the byte checks on top of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from .._internal.regular import NotRegular
from ..eventlog.format import FORMAT
from ..projections.graph_links import SpawnLinks
from .report import ERROR, INFO, Problem
from .seams import LedgerReads
from .walk import CHUNK_SIZE, through_link

__all__ = [
    "MAX_INFO_PER_CODE",
    "MAX_PROBLEMS_PER_TASK",
    "UNKNOWN",
    "Capture",
    "CheckerState",
    "Need",
    "Progress",
    "QuarantineFile",
    "StreamFacts",
]

#: Problems listed per stream before the rest are only counted (a garbage file must not
#: make the report grow with its bytes).
MAX_PROBLEMS_PER_TASK: Final = 200

#: ``info`` findings listed per code before the rest are only counted (one line at the end):
#: a ledger of 100,000 unsealed tasks or stray objects says so in a bounded report.
MAX_INFO_PER_CODE: Final = 100

#: ``progress(phase, done, total)``, called as streams, artifacts and workspace files are checked.
Progress = Callable[[str, int, int], None]


@dataclass(slots=True)
class Need:
    """A digest some event refers to without carrying its bytes: first reference, how many."""

    size: int
    task: str
    seq: int
    line: int
    label: str
    refs: int = 1


@dataclass(slots=True)
class Capture:
    """The latest ``artifact.recorded`` of one workspace locator."""

    ts: str
    digest: str
    size: int
    task: str
    seq: int
    line: int


@dataclass(slots=True)
class QuarantineFile:
    file: str
    digest: str
    size: int
    task: str
    seq: int
    line: int


@dataclass(slots=True)
class StreamFacts:
    """What the checker learns about one stream while reading it."""

    task: str
    last_seq: int = -1
    stream_id: str | None = None
    sealed_seq: int | None = None
    at_sealed: str | None = None
    listed: int = 0
    suppressed: int = 0


UNKNOWN: Final = object()


class CheckerState:
    """The state of one run and the folder-level checks (links, the marker, the task list)."""

    def __init__(self, reads: LedgerReads, workspace: Path | None, progress: Progress | None) -> None:
        #: what the ledger is read through (a folder, or the storage seams): the run reads nothing else
        self.reads = reads
        self.workspace = workspace
        self.progress = progress
        self.problems: list[Problem] = []
        self.events = 0
        self.bytes_hashed = 0
        self.checked = 0
        self.inline: dict[str, int] = {}  # digest -> size, bytes checked where they ride
        self.needs: dict[str, Need] = {}
        self.bare: dict[str, tuple[str, int, int]] = {}  # digest -> first (task, seq, line)
        self.bad_inline: dict[str, tuple[str, int]] = {}  # digest -> (task, line) of a corrupt inline copy
        self.captures: dict[str, Capture] = {}
        self.quarantined: list[QuarantineFile] = []
        self.buf = bytearray(CHUNK_SIZE)
        self._stream: StreamFacts | None = None
        self.links: dict[str, str] = {}
        self._infos: dict[str, int] = {}  # code -> info findings of that code, listed or not
        self.spawn_links = SpawnLinks()  # every stream's parent/child link records, judged once all are read

    # -- reporting ---------------------------------------------------------------------

    def add(self, severity: str, code: str, message: str, **where: Any) -> None:
        s = self._stream
        if s is not None and where.get("task") == s.task:
            if s.listed >= MAX_PROBLEMS_PER_TASK:
                s.suppressed += 1
                return
            s.listed += 1
        if severity == INFO:
            n = self._infos[code] = self._infos.get(code, 0) + 1
            if n > MAX_INFO_PER_CODE:
                return
        self.problems.append(Problem(severity, code, message, **where))

    def unlisted(self) -> list[Problem]:
        """One ``info`` line per code whose findings were past :data:`MAX_INFO_PER_CODE`: how many more."""
        return [
            Problem(INFO, "more", f"{n - MAX_INFO_PER_CODE} more [{code}] info finding(s) like the above were not "
                    "listed (info never fails a check)")
            for code, n in self._infos.items()
            if n > MAX_INFO_PER_CODE
        ]  # fmt: skip

    def tick(self, phase: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(phase, done, total)

    # -- the ledger folder -------------------------------------------------------------

    def check_links(self) -> None:
        """Every symbolic link in the ledger is a problem, and nothing is read through one (issue 12 item 1)."""
        try:
            self.links = self.reads.links()
        except OSError as exc:  # pragma: no cover - find_links skips what it cannot list
            self.add(ERROR, "io", f"cannot walk the ledger: {exc}")
            return
        for rel, target in self.links.items():
            self.add(
                ERROR, "link", f"{rel} is a symbolic link (to {target!r}): a ledger holds only its own files and "
                "folders, so nothing was read through it; replace it with the real file (from a copy or git) "
                "or remove it", locator=rel,
            )

    def blocked(self, rel: str) -> bool:
        """True when ``rel`` is or lies under a link (already reported): it must not be read."""
        return through_link(rel, self.links) is not None

    def check_marker(self) -> None:
        if self.blocked("intentlog.json"):
            return
        try:
            data = self.reads.marker()
            if data is None:
                return  # none is kept: the storage is a ledger by construction
            marker = orjson.loads(data)
        except (OSError, NotRegular, orjson.JSONDecodeError) as exc:
            self.add(ERROR, "ledger", f"intentlog.json cannot be read ({exc}); is this a ledger folder?")
            return
        if type(marker) is not dict or marker.get("format") != FORMAT:
            self.add(ERROR, "ledger", f"intentlog.json does not declare format {FORMAT!r}: {marker!r}")

    def list_tasks(self) -> list[str]:
        if self.blocked("tasks"):
            return []
        names, strays, failed = self.reads.listing()
        if failed is not None:
            self.add(ERROR, "io", failed)
            return []
        for rel in strays:
            self.add(INFO, "stray", f"{rel} is not named like a task stream; it was not checked")
        return names

    def stream_lines(self, task: str) -> Iterator[tuple[int, bytes]]:
        """``(offset, line)`` of the task's stream, as the ledger stores it."""
        return self.reads.lines(task)

    def hash_object(self, digest: str, rel: str) -> tuple[str, int]:
        """What the object ``digest`` (at ``rel`` in a folder) hashes to, and its size; FileNotFoundError if absent."""
        return self.reads.hash_object(digest, rel, self.buf)

    def object_exists(self, digest: str, rel: str) -> bool:
        return self.reads.object_exists(digest, rel)

    def _writer(self, task: str) -> int | None:
        """The pid holding ``task``'s writer lock, probed without taking it; None when none is seen."""
        return self.reads.writer(task)
