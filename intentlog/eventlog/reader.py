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

import itertools
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, cast

import orjson
from blake3 import blake3

from .._internal.digest import DIGEST_PREFIX as _PREFIX
from .._internal.nofollow import open_nofollow
from ..errors import CorruptStream, LedgerError
from .format import Event, LineError, parse_line

_O_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)

__all__ = ["MAX_LINE", "ScanProblem", "StreamScan", "iter_lines", "scan"]

_CHUNK = 1 << 20
#: The longest line (bytes, with its newline) a stream may hold: the writer refuses to
#: append a longer one and readers raise :class:`~intentlog.errors.CorruptStream` at one
#: instead of buffering it. Large payloads belong in ``objects/`` as refs.
MAX_LINE: Final = 16 << 20


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


def line_spans(f: BinaryIO, max_line: int) -> Iterator[tuple[int, bytes | None]]:
    """``(offset, line)`` for every line; ``None`` for a line longer than ``max_line`` (skipped, never buffered).

    Linear in the file's size: pending pieces of a long line are kept in a list and only
    each new chunk is searched for the newline.
    """
    offset = 0
    pending: list[bytes] = []
    pending_len = 0
    overlong = False
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                break
            piece = chunk[start : nl + 1]
            length = pending_len + len(piece)
            if overlong or length > max_line:
                yield offset, None
            elif pending:
                pending.append(piece)
                yield offset, b"".join(pending)
            else:
                yield offset, piece
            offset += length
            pending, pending_len, overlong = [], 0, False
            start = nl + 1
        if start < len(chunk):
            pending_len += len(chunk) - start
            if overlong or pending_len > max_line:
                overlong, pending = True, []
            else:
                pending.append(chunk[start:] if start else chunk)
    if pending_len:
        yield offset, None if overlong else b"".join(pending)


def line_batches(f: BinaryIO, max_line: int) -> Iterator[tuple[int, list[bytes | None]]]:
    """The lines of :func:`line_spans`, a chunk's worth at a time: ``(offset of the first, lines)``.

    The same lines and offsets (each line's offset is the previous one's plus its
    length); a line longer than ``max_line`` comes alone as ``[None]`` in its own batch.
    A chunk is split by ``bytes.splitlines`` (in C) when it holds no ``\\r``, else
    newline by newline: only ``\\n`` ends a line.
    """
    offset = 0
    pending: list[bytes] = []  # pieces of a line that began in an earlier chunk
    pending_len = 0
    overlong = False
    while True:
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        first_nl = chunk.find(b"\n")
        if first_nl < 0:
            pending_len += len(chunk)
            if overlong or pending_len > max_line:
                overlong, pending = True, []
            else:
                pending.append(chunk)
            continue
        start = 0
        if pending_len:
            length = pending_len + first_nl + 1
            if overlong or length > max_line:
                yield offset, [None]
            else:
                pending.append(chunk[: first_nl + 1])
                yield offset, [b"".join(pending)]
            offset += length
            pending, pending_len, overlong = [], 0, False
            start = first_nl + 1
        last_nl = chunk.rfind(b"\n")
        if last_nl >= start:
            body = chunk[start : last_nl + 1] if start or last_nl + 1 < len(chunk) else chunk
            yield from _split(body, offset, max_line)
            offset += len(body)
        if last_nl + 1 < len(chunk):
            rest = chunk[last_nl + 1 :]
            pending_len = len(rest)
            if pending_len > max_line:
                overlong = True
            else:
                pending = [rest]
    if pending_len:
        yield offset, [None if overlong else b"".join(pending)]


def _split(body: bytes, offset: int, max_line: int) -> Iterator[tuple[int, list[bytes | None]]]:
    """``body`` (whole lines) as batches; an over-long line alone as ``[None]``."""
    # splitlines also ends a line at \\r: only used when there is none
    split = [piece + b"\n" for piece in body[:-1].split(b"\n")] if b"\r" in body else body.splitlines(keepends=True)
    lines = cast("list[bytes | None]", split)
    if max_line >= len(body):
        yield offset, lines
        return
    run: list[bytes | None] = []
    at = offset
    for line in lines:
        assert line is not None
        if len(line) > max_line:
            if run:
                yield at, run
            yield offset, [None]
            run, at = [], offset + len(line)
        else:
            run.append(line)
        offset += len(line)
    if run:
        yield at, run


def open_stream(path: str | os.PathLike[str]) -> BinaryIO:
    """The stream file for reading, refusing a link (:class:`~intentlog.errors.LinkRefused`).

    Opened non-blocking and checked with ``fstat``: a FIFO, device or socket at a
    stream's name raises :class:`~intentlog.errors.LedgerError` at once instead of
    blocking the reader forever (opening a FIFO for reading waits for a writer).
    """
    fd = open_nofollow(path, os.O_RDONLY | _O_NONBLOCK, what="a task stream")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LedgerError(
                f"{os.fspath(path)}: is not a regular file (a FIFO, device or socket) where intentlog keeps a task "
                "stream, so it was not read: move it aside and put back the real stream (from a copy or git)"
            )
        if _O_NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb", buffering=0)


def _dup_stream(fd: int) -> BinaryIO:
    """A reader over an already open stream descriptor, from its first byte (the caller keeps ``fd``)."""
    f = os.fdopen(os.dup(fd), "rb", buffering=0)
    f.seek(0)
    return f


def iter_lines(path: str | os.PathLike[str], *, max_line: int = MAX_LINE) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, line)`` for every line; the last may lack its ``\\n``.

    Time is linear in the file's size and memory bounded by ``max_line``: a line longer
    than that raises :class:`~intentlog.errors.CorruptStream` instead of being buffered.
    A stream that is a symbolic link raises :class:`~intentlog.errors.LinkRefused`.
    """
    with open_stream(path) as f:
        for lineno, (offset, line) in enumerate(line_spans(f, max_line), start=1):
            if line is None:
                raise CorruptStream(os.fspath(path), lineno, _overlong(max_line))
            yield offset, line


def _overlong(max_line: int) -> str:
    return (
        f"the line is longer than {max_line} bytes, the maximum a stream line may have "
        "(intentlog never writes one), so it is not read"
    )


def _looks_like_event(line: bytes | None) -> bool:
    if line is None:
        return False
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return type(obj) is dict and type(obj.get("seq")) is int and "kind" in obj


class _Hashing:
    """A reader that feeds every chunk it reads to ``hasher`` (a scan's bytes hashed in the same pass)."""

    def __init__(self, f: BinaryIO, hasher: Any) -> None:
        self._f, self._hasher = f, hasher

    def read(self, n: int = -1) -> bytes:
        chunk = self._f.read(n)
        if chunk:
            self._hasher.update(chunk)
        return chunk


class StreamScan:
    """Iterate over a stream's trusted events; afterwards ``problem``, ``end`` tell the rest.

    ``end`` is the byte offset just past the last trusted line; ``head`` the last trusted
    event's digest; ``count`` how many events were trusted.

    ``resume=(offset, seq, prev)`` starts at byte ``offset`` as if the events before it
    (``seq`` of them, the last hashing to ``prev``) had been read and trusted: the caller
    vouches for that prefix (the view cache checks the line before ``offset`` hashes to
    ``prev``); everything from there on is checked exactly as a full read checks it, and
    ``problem``, ``end``, ``count`` and ``head`` come out the same.

    ``hasher`` (a BLAKE3 hasher), when given, is fed every byte the scan reads, in the
    same pass: after a scan that found no problem it has hashed the file from the start
    offset to its end (the writer keeps it as the hash of its checked prefix).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fd: int | None = None,
        resume: tuple[int, int, str | None] | None = None,
        hasher: Any = None,
    ) -> None:
        self.path = Path(path)
        #: a BLAKE3 hasher fed every byte the scan reads (from ``resume``'s offset, or 0, to the end)
        self.hasher = hasher
        self.fd = fd  # read through this open descriptor (from its start) instead of opening ``path``
        self.problem: ScanProblem | None = None
        self.start, self._count0, self._head0 = resume if resume is not None else (0, 0, None)
        self.end = self.start
        self._last_len = 0
        self.last: Event | None = None
        self.file_size = 0
        self.stat: os.stat_result | None = None  # the stream's file facts when it was opened

    # derived from the last trusted event, so the hot loop stores two attributes per line, not five
    @property
    def count(self) -> int:
        """How many events are trusted (those before ``resume`` included)."""
        last = self.last
        return self._count0 if last is None else last.seq + 1

    @property
    def head(self) -> str | None:
        """The last trusted event's digest."""
        last = self.last
        return self._head0 if last is None else last.digest

    @property
    def last_start(self) -> int:
        """The byte offset of the last trusted line (0 before any)."""
        return self.end - self._last_len if self.last is not None else 0

    def __iter__(self) -> Iterator[Event]:
        with open_stream(self.path) if self.fd is None else _dup_stream(self.fd) as f:
            self.stat = os.fstat(f.fileno())
            self.file_size = self.stat.st_size
            if self.start:
                f.seek(self.start)
            src = f if self.hasher is None else cast("BinaryIO", _Hashing(f, self.hasher))
            yield from self._events(line_batches(src, MAX_LINE))

    def _events(self, batches: Iterator[tuple[int, list[bytes | None]]]) -> Iterator[Event]:
        """Check and yield every trusted line; the hot loop, so its names are local."""
        seq = self._count0
        prev = self._head0
        lineno = seq
        base = self.start
        loads = orjson.loads
        decode_error = orjson.JSONDecodeError
        hasher = blake3
        make = Event
        for first, batch in batches:
            offset = base + first
            for i, line in enumerate(batch):
                lineno += 1
                if line is None:
                    self._fail(lineno, offset, _overlong(MAX_LINE), torn=False)
                    return
                if line[-1:] != b"\n":
                    self._fail(
                        lineno, offset, "the last line is incomplete (a torn append)", torn=True, incomplete=True
                    )
                    return
                # the common case inline (a read builds one event per line); parse_line explains failures
                try:
                    obj = loads(line)
                    if type(obj) is dict and len(obj) == 5:
                        s_, k_, d_, t_ = obj["seq"], obj["kind"], obj["data"], obj["ts"]
                        ok = (
                            s_ == seq
                            and type(s_) is int
                            and obj["prev"] == prev
                            and type(k_) is str
                            and type(d_) is dict
                            and type(t_) is str
                        )
                    else:
                        ok = False
                except (decode_error, KeyError):
                    ok = False
                if not ok:
                    self._bad(line, lineno, offset, seq, prev, batch[i + 1 :], batches)
                    return
                n = len(line)
                ev = make(seq, k_, t_, prev, d_, _PREFIX + hasher(line).hexdigest())
                prev = ev.digest
                seq += 1
                offset += n
                self._last_len = n
                self.end = offset
                self.last = ev
                yield ev

    def _bad(
        self,
        line: bytes,
        lineno: int,
        offset: int,
        seq: int,
        prev: str | None,
        rest: list[bytes | None],
        batches: Iterator[tuple[int, list[bytes | None]]],
    ) -> None:
        """Judge the first line that fails: a torn tail when nothing event-like follows it, else damage."""
        try:
            parse_line(line, seq, prev)
            raise LineError("the line fails its checks", parsed=True)  # pragma: no cover
        except LineError as exc:
            later = itertools.chain(rest, (x for _, b in batches for x in b))
            torn = not any(_looks_like_event(x) for x in later)
            self._fail(lineno, offset, exc.reason, torn=torn, suspect=exc.parsed)

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
