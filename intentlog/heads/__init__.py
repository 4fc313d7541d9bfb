"""Sealing stream heads (DESIGN §4 rule 7): the anchor that makes a truncated tail visible.

A hash chain proves every line follows the one before it, but not that nothing was cut
from the end: a stream whose last events were removed is still a valid chain. ``seal``
writes ``heads.json`` at the ledger root -- for every task its stream id, last seq, head
digest and event count -- outside the streams. Committing the folder to git, or signing
``heads.json``, anchors it; :func:`intentlog.checker.verify_path` compares the
streams with it. A stream that grew past its sealed head is fine as long as the sealed
event is still in its chain.

The file format (its pure encode/decode and a read-only reader) is :mod:`.codec`, next to
this writer; the checker imports only that module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._internal.fsutil import check_real_dir, makedirs_durable, publish_bytes
from ..errors import CorruptStream
from ..eventlog.format import TASK_CREATED
from ..eventlog.reader import StreamScan
from .codec import HEADS_FILE, StreamHead, encode_heads, read_heads_at

if TYPE_CHECKING:
    from ..ledger import Ledger

__all__ = ["HEADS_FILE", "StreamHead", "read_heads", "seal", "stream_head"]


def stream_head(path: str | Path, task_id: str) -> StreamHead:
    """The head of one stream's trusted events, read without a lock.

    A torn tail is left out (the next writer quarantines it; the trusted prefix stays in
    the chain). Raises :class:`CorruptStream` when a bad line is followed by good ones, or
    when the stream does not begin with ``task.created`` naming its stream id: sealing
    must not anchor a stream that 'intentlog verify' would reject.
    """
    scan = StreamScan(path)
    stream_id: str | None = None
    for ev in scan:
        if ev.seq == 0 and ev.kind == TASK_CREATED and isinstance(ev.data.get("stream"), str):
            stream_id = ev.data["stream"]
    p = scan.problem
    if p is not None and p.suspect:
        raise CorruptStream(
            str(path),
            p.line,
            f"{p.reason}: a whole event that does not chain (the line before may be edited); not sealed",
        )
    if p is not None and not p.torn:
        raise CorruptStream(str(path), p.line, f"{p.reason}, and event lines follow it; not sealed")
    if scan.last is None or scan.head is None or stream_id is None:
        raise CorruptStream(
            str(path), 1, f"the stream of task {task_id!r} does not begin with task.created; not sealed"
        )
    return StreamHead(stream=stream_id, seq=scan.last.seq, head=scan.head, events=scan.count)


def seal(ledger: Ledger) -> Path:
    """Write ``heads.json`` for every task of ``ledger``; return its path.

    The file is replaced atomically (temp file, fsync, rename, directory fsync) and is
    deterministic: the same streams give the same bytes, so git shows a change only when
    a stream moved. Takes no writer lock: events appended while sealing are simply after
    the head. Raises :class:`CorruptStream` (and writes nothing) when a stream is corrupt
    in the middle; run 'intentlog verify' to see where; :class:`LinkRefused` when
    ``tasks/`` is a symbolic link (its streams are not the ledger's to anchor).
    """
    check_real_dir(ledger.tasks_dir, what="task streams")  # never anchor streams read through a link
    heads = {task: stream_head(ledger.stream_path(task), task) for task in ledger.task_ids()}
    dest = ledger.root / HEADS_FILE
    makedirs_durable(ledger.tmp_dir)
    publish_bytes(encode_heads(heads), dest, tmp_dir=ledger.tmp_dir, replace=True, mode=0o644)
    return dest


def read_heads(ledger: Ledger) -> dict[str, StreamHead] | None:
    """The heads last sealed, by task; None when the ledger was never sealed.

    Raises :class:`~intentlog.errors.LedgerError` when ``heads.json`` is malformed.
    """
    return read_heads_at(ledger.root)
