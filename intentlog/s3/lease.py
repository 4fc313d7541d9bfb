"""A held writer lease on one object-store stream: appends are conditional creates at the next number.

:meth:`intentlog.s3.streams.ObjectStreams.lease` grants it; see that module for the layout.
A holder fenced by a take-over finds its next segment number taken: :class:`~intentlog.errors.LeaseLost`,
nothing written (what it buffered is dropped, never stored).

A lease lives no longer than its process, as a folder's lock does:

- **Released when the process ends.** Every lease taken is registered here, and released
  (what it buffered put first) by an :mod:`atexit` hook when the process that took it
  ends normally -- whether or not the program closed its task -- or by an uncaught
  ``KeyboardInterrupt`` (Ctrl-C). A forked child's exit never releases its parent's
  leases. Only a process killed outright (``SIGKILL``, a power cut) leaves its lease held.
- **A heartbeat while held.** A background thread of the process creates, every
  :data:`HEARTBEAT_EVERY` s, a heartbeat object ``tasks/NAME/h/EPOCH.N`` for each lease it
  holds (deleting the one before), so a holder that is alive -- idle, or in the middle of
  a long send -- is seen to move by anyone watching, and a taker waiting for the stream to
  stand still never takes it from a living process. The heartbeat is not part of the
  stream (its records and its segments are untouched by it).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

import orjson

from ..errors import Conflict, CorruptStream, LeaseLost, LedgerError, UsageError
from .client import ObjectClient
from .segments import WIDTH, Segment, checked_records, segment_key

__all__ = [
    "HEARTBEAT_EVERY", "LeaseHost", "ObjectLease", "beat_key", "beats_folder", "given_up_tokens", "held_tokens",
]  # fmt: skip

#: seconds between two heartbeats of a held lease (a taker's default wait is many of them)
HEARTBEAT_EVERY = 10.0


def beats_folder(name: str) -> str:
    """Where the heartbeats of the stream ``name``'s lease holders are (``tasks/NAME/h``)."""
    return f"tasks/{name}/h"


def beat_key(name: str, epoch: int, n: int) -> str:
    """The ``n``-th heartbeat of the lease of ``epoch`` on stream ``name``."""
    return f"{beats_folder(name)}/{epoch:0{WIDTH}d}.{n:0{WIDTH}d}"


class LeaseHost(Protocol):
    """What a lease needs of the streams that granted it (:class:`~intentlog.s3.streams.ObjectStreams`)."""

    @property
    def client(self) -> ObjectClient: ...

    def where(self, name: str) -> str: ...

    def put_segment(self, key: str, body: bytes) -> tuple[bool, str | None]: ...

    def remember(self, name: str, seg: Segment, payload: bytes, size: int, tag: str | None = None) -> None: ...

    def checkpoint_after(self, name: str, seg: Segment) -> None: ...

    def forget(self, name: str, lease: ObjectLease) -> None: ...

    def tail(self, name: str) -> Segment: ...

    def known_stamp(self, name: str, last: Segment) -> str | None: ...


# -- the leases this process holds: released at its end, kept alive by its heartbeat ---------------

_live: dict[int, ObjectLease] = {}
_live_mutex = threading.Lock()
_wake = threading.Event()
_beater: tuple[int, threading.Thread] | None = None  # (the pid that started it, the thread)


def _register(lease: ObjectLease) -> None:
    global _beater
    with _live_mutex:
        _live[id(lease)] = lease
        pid = os.getpid()
        if _beater is None or _beater[0] != pid:  # none yet, or the parent's (a forked child has no such thread)
            thread = threading.Thread(target=_beat_forever, name="intentlog-lease-heartbeat", daemon=True)
            _beater = (pid, thread)
            thread.start()


def _unregister(lease: ObjectLease) -> None:
    with _live_mutex:
        _live.pop(id(lease), None)


def _mine() -> list[ObjectLease]:
    """The leases this very process took (a forked child's inherited entries are its parent's)."""
    pid = os.getpid()
    with _live_mutex:
        return [lease for lease in _live.values() if lease.pid == pid]


#: (pid, token) of the leases this process released whose ``release`` segment could not be put (a store
#: outage): still recorded as held, but by no writer -- this process takes them back at once
_given_up: set[tuple[int, str]] = set()


def given_up_tokens() -> frozenset[str]:
    """The holder tokens of leases this process released without storing the release (no writer uses them)."""
    pid = os.getpid()
    with _live_mutex:
        return frozenset(token for p, token in _given_up if p == pid)


def _give_up(token: str) -> None:
    with _live_mutex:
        _given_up.add((os.getpid(), token))


def held_tokens() -> frozenset[str]:
    """The holder tokens of the leases this process holds now (their holder is alive: it is this process)."""
    return frozenset(lease.token for lease in _mine())


def _beat_forever() -> None:
    while True:
        _wake.wait(HEARTBEAT_EVERY)
        _wake.clear()
        for lease in _mine():
            try:
                lease.beat()
            except Exception:  # a missed beat is retried at the next; the holder's own puts report
                pass


def _after_fork_in_child() -> None:
    """A lock the heartbeat thread held at the fork stays held in the child: renew it (the thread is not there)."""
    global _live_mutex, _wake
    _live_mutex = threading.Lock()
    _wake = threading.Event()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _release_at_exit() -> None:
    """Release every lease this process still holds: its end gives them up, as a folder's lock dies with it."""
    for lease in _mine():
        try:
            lease.release()
        except Exception:  # at exit nothing can be reported; the next writer takes it over
            pass


class ObjectLease:
    """A held lease on one object-store stream: appends are conditional creates at the next number.

    ``lives_with_process=False``: a lease meant to outlive its holder (gc's, which stays a
    retired stream's tail): neither released at the process's end nor kept alive by its
    heartbeat.

    Group commit: records appended with ``sync=False`` are buffered and put, with whatever
    the next synced append brings, as ONE segment by the next :meth:`sync` (or synced
    append). Until then they are counted (:attr:`next_seq`) and readable through the
    :class:`ObjectStreams` that granted the lease (its :meth:`~ObjectStreams.read` adds
    them after the stored segments), but not stored: another handle does not see them, a
    crash loses them, and a holder fenced before its sync never stores them (the put is
    refused whole: :class:`~intentlog.errors.LeaseLost`, the buffer dropped).
    """

    #: a buffer this large is put at once, before its sync (one segment stays one GET to read)
    FLUSH_BYTES = 4 << 20

    def __init__(self, streams: LeaseHost, name: str, lease: Segment, *, lives_with_process: bool = True) -> None:
        self._streams = streams
        self.name = name
        self._last = lease
        self._epoch = lease.epoch
        self._holder = lease.holder
        self._state = "held"  # "held" | "released" | "lost" | "poisoned"
        self._mutex = threading.RLock()
        self._buf: list[bytes] = []
        self._buf_size = 0
        #: the process that took the lease: only it releases it at its end, and only it beats
        self.pid = os.getpid()
        self._beat_mutex = threading.Lock()
        self._beats = 0
        self._beat: str | None = None  # the heartbeat object standing now
        self._released: Segment | None = None  # the release segment this lease created
        if lives_with_process:
            _register(self)

    @property
    def token(self) -> str:
        """The holder token written in the lease segment."""
        return self._holder

    @property
    def epoch(self) -> int:
        """This lease's epoch: one more than the lease before it."""
        return self._epoch

    @property
    def next_seq(self) -> int:
        return self._last.end_seq + len(self._buf)

    @property
    def dirty(self) -> bool:
        """Whether records were appended that no sync has put yet."""
        return bool(self._buf)

    def pending(self) -> tuple[int, bytes]:
        """The last segment this lease stored and the buffered records' bytes after it (one snapshot)."""
        with self._mutex:
            return self._last.seg, b"".join(r + b"\n" for r in self._buf)

    def append(self, records: Sequence[bytes], *, expected_seq: int, sync: bool = True) -> int:
        """Append ``records`` at ``expected_seq``: one conditional create of the next segment.

        With ``sync=False`` the records are buffered (see the class): the put happens at the
        next :meth:`sync` or synced append, which stores the buffer and its own records as
        one segment. Returns the new next seq.
        """
        if isinstance(expected_seq, bool) or not isinstance(expected_seq, int):
            raise UsageError(f"expected_seq must be an int, not {expected_seq!r}")
        recs = checked_records(records)
        with self._mutex:
            self._check_state()
            if expected_seq != self.next_seq:
                raise Conflict(self.name, expected_seq, self.next_seq)
            self._buf.extend(recs)
            self._buf_size += sum(len(r) + 1 for r in recs)
            if sync or self._buf_size >= self.FLUSH_BYTES:
                self._put_buffer()
            return self.next_seq

    def append_line(self, line: bytes, *, expected_seq: int, sync: bool = True) -> int:
        """:meth:`append` of one record given as a line ending in its newline."""
        return self.append([line[:-1] if line.endswith(b"\n") else line], expected_seq=expected_seq, sync=sync)

    def abandon(self) -> None:
        """In a forked child: the lease stays the parent's (released at the parent's end, never at the child's)."""

    def renew_mutex(self) -> None:
        """In a forked child: locks a thread of the parent held at the fork stay held there; replace them."""
        self._mutex = threading.RLock()
        self._beat_mutex = threading.Lock()

    def sync(self) -> None:
        """Put the buffered records as one segment; a lost or failed lease says so (nothing to put: no request)."""
        with self._mutex:
            if self._state == "released":
                return  # nothing buffered: a release puts what was
            self._check_state()
            self._put_buffer()

    def beat(self) -> None:
        """Create the next heartbeat object and delete the one before (nothing once the lease is not held)."""
        with self._beat_mutex:
            if self._state != "held":
                return
            client = self._streams.client
            self._beats += 1
            key = beat_key(self.name, self._epoch, self._beats)
            client.create(key, orjson.dumps({"holder": self._holder, "n": self._beats}))
            before, self._beat = self._beat, key
            if before is not None:
                client.delete(before)

    def _end_beats(self) -> None:
        """No more heartbeats: leave the registry, delete the standing heartbeat (best effort)."""
        _unregister(self)
        with self._beat_mutex:
            key, self._beat = self._beat, None
        if key is not None:
            try:
                self._streams.client.delete(key)
            except LedgerError:
                pass  # a stale heartbeat says nothing once the stream's tail is not this lease

    def _check_state(self) -> None:
        where = self._streams.where(self.name)
        if self._state == "lost":
            raise LeaseLost(self.name, where, self._epoch)
        if self._state == "poisoned":
            raise LedgerError(f"{where}: an append failed; lease the stream again to see what it holds")
        if self._state != "held":
            raise LedgerError(f"{where}: the lease was {self._state}; lease the stream again to append")

    def _put_buffer(self) -> None:
        """One conditional create of the next segment holding the buffer. Holds the mutex."""
        records, self._buf, self._buf_size = self._buf, [], 0
        if not records:
            return
        where = self._streams.where(self.name)
        last = self._last
        size = sum(len(r) + 1 for r in records)
        seg = Segment("data", last.seg + 1, last.end_seq, last.end_off, self._epoch, self._holder, len(records), size)
        body = seg.encode(records)
        key = segment_key(self.name, seg.seg)
        client = self._streams.client
        try:
            stored, tag = self._streams.put_segment(key, body)
            stored = stored or client.get(key) == body  # a retried put of ours is ours (its ETag then unknown)
        except LedgerError as exc:
            self._state = "poisoned"  # the put's outcome is unknown: the next lease reads the tail again
            self._streams.forget(self.name, self)
            self._end_beats()
            raise LedgerError(f"{where}: append failed ({exc}); lease the stream again to see what it holds") from exc
        if not stored:
            self._state = "lost"  # fenced: the records buffered are dropped, never stored
            self._streams.forget(self.name, self)
            self._end_beats()
            raise LeaseLost(self.name, client.describe(key), self._epoch)
        self._last = seg
        self._streams.remember(self.name, seg, body[body.index(b"\n") + 1 :], len(body), tag)
        self._streams.checkpoint_after(self.name, seg)

    def release(self) -> None:
        """Put what is buffered, then write the ``release`` segment (idempotent; a lost lease writes nothing).

        When the buffered records cannot be put because the lease was taken over, they are
        not stored and :class:`~intentlog.errors.LeaseLost` says so (never a silent loss).
        """
        with self._mutex:
            if self._state in ("released", "lost"):
                _unregister(self)
                return
            if self._state == "held" and self._buf:
                try:
                    self._put_buffer()  # what was appended is stored, as a folder's release leaves it written
                except LedgerError:
                    pass  # poisoned: the put's outcome is unknown (looked at below)
            self._streams.forget(self.name, self)
            state, self._state = self._state, "released"  # no heartbeat from here on
            self._end_beats()
            last = self._last
            if state == "poisoned":
                try:
                    last = self._streams.tail(self.name)
                except (LedgerError, CorruptStream, FileNotFoundError):
                    _give_up(self._holder)  # perhaps still recorded as ours: taken back at our next lease
                    return
                if (last.epoch, last.holder) != (self._epoch, self._holder) or not last.held:
                    return
            mark = Segment("release", last.seg + 1, last.end_seq, last.end_off, self._epoch, self._holder)
            try:
                created, tag = self._streams.put_segment(segment_key(self.name, mark.seg), mark.encode())
                if created:
                    self._released = mark
                    self._streams.remember(self.name, mark, b"", len(mark.encode()), tag)
                    self._streams.checkpoint_after(self.name, mark)
            except LedgerError:
                # the lease stays recorded as held: another process takes it over (take_over_after), this
                # one at its next lease of the stream at once -- it knows no writer of its own holds it
                _give_up(self._holder)

    @property
    def left_stamp(self) -> str | None:
        """Once released: the stream's stamp as this lease left it (its release segment the last), no request.

        None before the release, after a lost or failed one, or when the handle no longer
        keeps every segment from 0 with its ETag (:meth:`ObjectStreams.known_stamp`).
        """
        with self._mutex:
            mark = self._released
        return None if mark is None else self._streams.known_stamp(self.name, mark)

    def __enter__(self) -> ObjectLease:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
