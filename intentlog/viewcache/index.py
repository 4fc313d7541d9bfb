"""The listings' index, read and rewritten as a stream: memory per block, not per task.

``cache/index-rows.json`` (``intentlog tasks``) and ``cache/index-gc.json`` (gc's preview)
and ``cache/index-backlogs.json`` (what each backlog stream still needs, for gc) each hold
one entry per task stream, sorted by task id, so that a listing -- which walks the
streams in id order -- merge-joins the index with the directory listing, one entry at a
time (:class:`IndexJoin`)::

    intentlog-viewindex/4\\n
    #<length> <blake3 of the block>\\n
    <entry>\\n ...                       (one block: at most about 64 KiB of entries)
    #<length> <blake3>\\n ...

An entry is the JSON array ``[task, size, inode, device, mtime_ns, ctime_ns, value]``:
the stream's file facts when it was last read whole, and what the listing keeps of it.
Every check is made as the entry is reached, never trusted as read: a block whose digest
fails is skipped whole, an entry that does not parse, is of the wrong shape or is out of
order is skipped, and the stream of a skipped entry is read again. An entry is used only
when the stream's facts now are the ones it recorded (the caller compares them).

The file is rewritten (temp + rename inside ``cache/``, not fsync'd: it is derivable)
only when the listing changed something: until the first difference nothing is written,
and then the entries kept so far are copied from the old file once more. A listing that
stops early writes nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final

import orjson
from blake3 import blake3

from .store import cache_dir, drop_temp, new_temp, open_file

__all__ = ["BLOCK_BYTES", "INDEX_FORMAT", "PARTS", "Facts", "IndexJoin", "facts_of", "iter_index", "write_index"]

INDEX_FORMAT: Final = b"intentlog-viewindex/5"  # /5: a backlog stream's row is in its items' state
#: The index files, by part.
PARTS: Final = ("rows", "gc", "backlogs")
#: A writer closes a block past this many bytes of entries (a reader holds one block at a time).
BLOCK_BYTES = 64 * 1024
_MAX_BLOCK: Final = 4 << 20  # a block header naming more than this is damage: stop reading

#: ``(size, inode, device, mtime_ns, ctime_ns)`` of a stream file. The change time is in
#: because ``os.utime`` (or ``cp -p``) can put an edited file's mtime back; nothing can
#: set its ctime.
Facts = tuple[int, int, int, int, int]

#: An entry as read: task id, facts, value, and its line's bytes (copied as is when kept).
_Entry = tuple[str, Facts, Any, bytes]


def facts_of(st: os.stat_result) -> Facts:
    """The file facts an index entry records of a stream."""
    return (st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns)


def _index_name(part: str) -> str:
    if part not in PARTS:
        raise ValueError(f"no index part {part!r}")
    return f"index-{part}.json"


def _blocks(fd: int) -> Iterator[list[bytes] | None]:
    """The entry lines of each block from the start of the file, one block at a time; None for a damaged block.

    Stops at the end, at a header that is not one, or at a short block.
    """
    head = os.pread(fd, len(INDEX_FORMAT) + 1, 0)
    if head != INDEX_FORMAT + b"\n":
        return
    at = len(head)
    while True:
        raw = os.pread(fd, 96, at)
        nl = raw.find(b"\n")
        if nl < 0:
            return
        parts = raw[:nl].split(b" ")
        if len(parts) != 2 or parts[0][:1] != b"#" or not parts[0][1:].isdigit():
            return
        n = int(parts[0][1:])
        if n > _MAX_BLOCK:
            return
        body = os.pread(fd, n, at + nl + 1)
        if len(body) != n:
            return
        at += nl + 1 + n
        if not body.endswith(b"\n") or blake3(body).hexdigest().encode() != parts[1]:
            yield None
            continue
        yield body[:-1].split(b"\n")


def _parse(line: bytes, after: str) -> _Entry | None:
    """One entry, checked for shape and order (its id sorts after ``after``); None otherwise."""
    try:
        v = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if type(v) is not list or len(v) != 7 or type(v[0]) is not str or v[0] <= after:
        return None
    facts = (v[1], v[2], v[3], v[4], v[5])
    if not all(type(x) is int for x in facts):
        return None
    return v[0], facts, v[6], line


class _Writer:
    """Blocks into a temp file in ``cache/``; :meth:`commit` renames it over the index."""

    def __init__(self, dfd: int, name: str, fd: int, tmp: str) -> None:
        self._dfd, self._name, self._tmp = dfd, name, tmp
        self._f: BinaryIO | None = os.fdopen(fd, "wb")
        self._buf: list[bytes] = []
        self._size = 0
        self._f.write(INDEX_FORMAT + b"\n")

    def add(self, line: bytes) -> None:
        self._buf.append(line)
        self._size += len(line) + 1
        if self._size >= BLOCK_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._buf or self._f is None:
            return
        body = b"\n".join(self._buf) + b"\n"
        self._f.write(b"#%d %s\n" % (len(body), blake3(body).hexdigest().encode()))
        self._f.write(body)
        self._buf, self._size = [], 0

    def commit(self) -> None:
        try:
            self._flush()
            if self._f is not None:
                self._f.close()
                self._f = None
            os.replace(self._tmp, self._name, src_dir_fd=self._dfd, dst_dir_fd=self._dfd)
        except OSError:
            self.abort()

    def abort(self) -> None:
        if self._f is not None:
            with contextlib.suppress(OSError):
                self._f.close()
            self._f = None
        drop_temp(self._dfd, self._tmp)


class IndexJoin:
    """One pass over an index part beside a listing in task-id order (ids strictly increasing).

    Per task: :meth:`find` the entry the index holds for it (None: none usable), then
    :meth:`keep` it as it was or :meth:`put` a new one (neither: the task gets no entry).
    :meth:`commit` at the end replaces the file when anything differs from it (``write``
    False: never); :meth:`close` releases everything and writes nothing not committed.
    Memory: one block of the old file and one of the new, whatever the number of tasks.
    """

    def __init__(self, root: Path, part: str, *, write: bool, read: bool = True) -> None:
        self._name = _index_name(part)
        self._dfd = cache_dir(root, None, create=False)
        self._fd = None if self._dfd is None or not read else open_file(self._dfd, self._name)
        self._write = write and self._dfd is not None
        self._blocks = _blocks(self._fd) if self._fd is not None else iter(())
        self._lines: Iterator[bytes] = iter(())
        self._last = ""  # the id of the last entry read (entries must increase)
        self._peek: _Entry | None = None
        self._pending: _Entry | None = None
        self._kept = 0  # entries kept unchanged while nothing differed
        self._diverged = False
        self._out: _Writer | None = None
        self._advance()

    # -- reading the old file, one entry ahead ------------------------------------------------

    def _advance(self) -> None:
        """Read the next usable entry into ``_peek`` (None at the end); anything skipped is a difference."""
        while True:
            line = next(self._lines, None)
            if line is None:
                block = next(self._blocks, ())
                if block == ():
                    self._peek = None
                    return
                if block is None:
                    self._diverge()  # a damaged block: its tasks are read again
                    continue
                self._lines = iter(block)
                continue
            entry = _parse(line, self._last)
            if entry is None:
                self._diverge()
                continue
            self._last = entry[0]
            self._peek = entry
            return

    def find(self, task: str) -> tuple[Facts, Any] | None:
        """The facts and value the index holds for ``task``; None when it holds none usable."""
        self._settle()
        while self._peek is not None and self._peek[0] < task:
            self._diverge()  # a task no longer listed
            self._advance()
        if self._peek is not None and self._peek[0] == task:
            self._pending = self._peek
            self._advance()
            return self._pending[1], self._pending[2]
        return None

    def entries(self) -> Iterator[tuple[str, Facts, Any]]:
        """Every usable entry left, in id order, each kept as it is."""
        while self._peek is not None:
            task = self._peek[0]
            found = self.find(task)
            if found is not None:
                yield task, found[0], found[1]
                self.keep()

    def keep(self) -> None:
        """The entry :meth:`find` just returned stays, byte for byte."""
        if self._pending is not None:
            line, self._pending = self._pending[3], None
            self._emit(line)

    def put(self, task: str, facts: Facts, value: Any) -> None:
        """A new entry for ``task`` (the one :meth:`find` was last asked about).

        An entry that cannot be written as JSON (text that is not UTF-8: a lone surrogate
        from a file name) is dropped, never raised: the task is read again next time.
        """
        self._pending = None
        self._diverge()
        try:
            line = orjson.dumps([task, *facts, value])
        except TypeError:  # orjson.JSONEncodeError is one
            return
        self._emit(line)

    def _settle(self) -> None:
        if self._pending is not None:  # found, neither kept nor replaced: dropped
            self._pending = None
            self._diverge()

    # -- writing the new file ----------------------------------------------------------------------

    def _emit(self, line: bytes) -> None:
        if not self._diverged:
            self._kept += 1
        elif self._out is not None:
            self._out.add(line)

    def _diverge(self) -> None:
        """The new index differs from the old: start the new file with the entries kept so far."""
        if self._diverged:
            return
        self._diverged = True
        if not self._write or self._dfd is None:
            return
        made = new_temp(self._dfd, self._name)
        if made is None:
            return
        self._out = _Writer(self._dfd, self._name, *made)
        if self._kept and self._fd is not None:  # the first entries of the old file, all kept: copy them
            left = self._kept
            for block in _blocks(self._fd):
                for line in block or ():
                    if left == 0:
                        break
                    self._out.add(line)
                    left -= 1
                if left == 0:
                    break

    def commit(self) -> None:
        """Finish the pass: replace the index when anything differed (entries left unread differ)."""
        self._settle()
        if self._peek is not None:
            self._diverge()
        if self._out is not None:
            self._out.commit()
            self._out = None
        self.close()

    def close(self) -> None:
        """Release the files; a new index not committed is removed."""
        if self._out is not None:
            self._out.abort()
            self._out = None
        for fd in (self._fd, self._dfd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._dfd = None

    def __enter__(self) -> IndexJoin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_index(root: Path, part: str) -> Iterator[tuple[str, Facts, Any]]:
    """Every usable entry of an index part in id order (what :class:`IndexJoin` would find)."""
    with IndexJoin(root, part, write=False) as join:
        yield from join.entries()


def write_index(root: Path, part: str, entries: Iterator[tuple[str, Facts, Any]]) -> None:
    """Replace an index part with ``entries`` (sorted by id; out-of-order ones are dropped); best effort."""
    with IndexJoin(root, part, write=True, read=False) as join:
        last = ""
        for task, facts, value in entries:
            if task > last:
                join.find(task)
                join.put(task, facts, value)
                last = task
        join.commit()
