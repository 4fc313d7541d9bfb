"""Streaming, checking reads of a stream file (DESIGN §4 rule 4).

Every line proves itself by parsing, ``seq`` and ``prev``. Reading stops trusting at the
first line that fails; what follows decides what that failure is:

- an incomplete last line, or bad lines with nothing event-like after them: a *torn
  tail*, what a crash mid-append (or garbage after power loss) leaves; the next writer
  quarantines it;
- a bad line followed by lines that look like events: *corruption* in the middle of the
  file, never repaired automatically.

Readers take no lock: an append is one ``write`` of a whole line, so a reader sees either
the whole line or a torn tail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
from blake3 import blake3

from .._digest import DIGEST_PREFIX as _PREFIX
from .format import _KEYS, Event, LineError, parse_line

__all__ = ["ScanProblem", "StreamScan", "iter_lines", "scan"]

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class ScanProblem:
    """The first line of a stream that failed its checks."""

    line: int  # 1-based line number in the file
    offset: int  # byte offset where the bad region starts
    reason: str
    torn: bool  # True: a tail the next writer may quarantine; False: mid-file corruption
    size: int  # bytes from offset to the end of the file
    incomplete: bool = False  # the bad line is the last one and lacks its newline
    suspect: bool = False  # the bad line is a whole JSON event that does not chain (DESIGN §4 rule 4)


def iter_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, line)`` for every line; the last may lack its ``\\n``."""
    with open(path, "rb", buffering=0) as f:
        offset = 0
        rest = b""
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            buf = rest + chunk if rest else chunk
            start = 0
            while True:
                nl = buf.find(b"\n", start)
                if nl < 0:
                    break
                yield offset, buf[start : nl + 1]
                offset += nl + 1 - start
                start = nl + 1
            rest = buf[start:]
        if rest:
            yield offset, rest


def _looks_like_event(line: bytes) -> bool:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return type(obj) is dict and type(obj.get("seq")) is int and "kind" in obj


class StreamScan:
    """Iterate over a stream's trusted events; afterwards ``problem``, ``end`` tell the rest.

    ``end`` is the byte offset just past the last trusted line; ``head`` the last trusted
    event's digest; ``count`` how many events were trusted.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.problem: ScanProblem | None = None
        self.end = 0
        self.count = 0
        self.head: str | None = None
        self.last: Event | None = None
        self.file_size = 0

    def __iter__(self) -> Iterator[Event]:
        self.file_size = os.stat(self.path).st_size
        seq = 0
        prev: str | None = None
        lines = iter_lines(self.path)
        lineno = 0
        loads = orjson.loads
        for offset, line in lines:
            lineno += 1
            if not line.endswith(b"\n"):
                self._fail(lineno, offset, "the last line is incomplete (a torn append)", torn=True, incomplete=True)
                return
            # the common case inline (a read builds one event per line); parse_line explains failures
            try:
                obj = loads(line)
                ok = (
                    type(obj) is dict
                    and obj.keys() == _KEYS
                    and obj["seq"] == seq
                    and type(obj["seq"]) is int
                    and obj["prev"] == prev
                    and type(obj["kind"]) is str
                    and type(obj["data"]) is dict
                    and type(obj["ts"]) is str
                )
            except orjson.JSONDecodeError:
                ok = False
            try:
                if not ok:
                    parse_line(line, seq, prev)
                    raise LineError("the line fails its checks", parsed=True)  # pragma: no cover
            except LineError as exc:
                torn = not any(_looks_like_event(rest) for _, rest in lines)
                self._fail(lineno, offset, exc.reason, torn=torn, suspect=exc.parsed)
                return
            ev = Event(seq, obj["kind"], obj["ts"], prev, obj["data"], _PREFIX + blake3(line).hexdigest())
            seq += 1
            prev = ev.digest
            self.end = offset + len(line)
            self.count = seq
            self.head = prev
            self.last = ev
            yield ev

    def _fail(
        self, lineno: int, offset: int, reason: str, *, torn: bool, incomplete: bool = False, suspect: bool = False
    ) -> None:
        self.problem = ScanProblem(lineno, offset, reason, torn, self.file_size - offset, incomplete, suspect)


def scan(path: str | os.PathLike[str]) -> StreamScan:
    """Run a scan to the end and return it (for writers re-checking a tail)."""
    s = StreamScan(path)
    for _ in s:
        pass
    return s
