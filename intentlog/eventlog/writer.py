"""The durable append path (DESIGN §4 rules 1, 2, 4, 5).

An append is one ``write`` of the whole line on an ``O_APPEND`` descriptor followed by
``fdatasync``; it returns only after both. Every append, the stream's creation and the
lock go through the stream seam (:class:`~intentlog.eventlog.storage.FolderStreams` and
its lease: a conditional append, ``sync=False`` for group commit); the scan and the
torn-tail repair use the folder lease's descriptor. Inside :meth:`StreamWriter.batch` the sync is
shared by every event of the batch and done once when the batch ends (or earlier, when
an append asks for ``sync=True``). A failed write or sync poisons the writer: its
durability is unknown, so every later append raises :class:`StreamPoisoned` until the
task is reopened and its tail re-checked.

The writer takes the task's exclusive lock when it opens and keeps it until closed. On
open it scans the stream and repairs only what a crash can leave: a *torn tail* (an
incomplete last line, or garbage with nothing event-like after it) is moved to
``quarantine/``, the file truncated and fsynced, and a ``stream.repaired`` event
appended. Everything else is *damage* and refused with :class:`CorruptStream`: a bad
line followed by events, a whole last line that parses but does not chain (*suspect*),
a line longer than :data:`~intentlog.eventlog.reader.MAX_LINE`, and a stream that
contradicts its seal (``heads.json``: fewer events than sealed, or the sealed seq not
hashing to the sealed head). ``open(accept_damage=True)`` (``intentlog repair
--accept-damage``) moves damage aside the same way and records ``"accepted": "damage"``.

Nothing is read or written through a link: the stream, its lock file, ``tasks/``,
``tmp/`` and ``quarantine/`` are refused with :class:`LinkRefused` when they are links.
A writer belongs to the process that opened it: in a forked child it refuses to append
(:meth:`StreamWriter.owned` is False there) and never unlocks the parent's lock.

With ``storage=`` (an object store's seam) the writer leases, appends and reads through it
only: a segment there is whole or absent, so a bad line is damage, refused, never repaired
(see :meth:`StreamWriter._open_remote`); a lost lease makes every later append ``LeaseLost``.

Once open, the writer holds ONE lease behind :class:`~intentlog.eventlog.storage.StreamLease`
(the folder's lock or the store's stream lease): appends, syncs, the close and a forked
child's abandon go through it alike. A lease that fails -- a write or sync error (then
:class:`StreamPoisoned`), a fenced store lease (:class:`LeaseLost`), a put of unknown
outcome, a lock file replaced -- poisons the writer: every later append refuses.
"""

from __future__ import annotations

import os
import stat
import threading
import weakref
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from blake3 import blake3

from .._internal import fsops
from .._internal.digest import DIGEST_PREFIX, digest_bytes
from .._internal.fsutil import check_real_dir, makedirs_durable, publish_chunks, write_all
from ..errors import (
    Conflict,
    CorruptStream,
    IntentlogError,
    LeaseLost,
    LedgerError,
    NotSerializable,
    StreamPoisoned,
)
from .canonical import dumps
from .damage import (
    Checked,
    CheckedBytes,
    Damage,
    SealedHead,
    SealFacts,
    assess_facts,
    chunks_from,
    holds,
    lost,
    quarantine_plan,
    refusal,
    repaired_data,
    resend_refusal,
    resume_assess,
    started_in,
)
from .format import FORMAT, TASK_CREATED, Event, check_kind, encode_data, encode_line, new_stream_id, utc_now
from .reader import MAX_LINE, StreamScan
from .remote import events_in, tail_of
from .storage import FolderLease, FolderStreams, StreamLease, StreamStorage, file_stamp, ledger_os_error

# SealedHead and quarantine_plan are damage.py's; named here too for task.py and the tests that import them from here
__all__ = ["SealedHead", "StreamWriter", "fdatasync", "quarantine_plan"]

#: Every writer alive in this process, so a forked child can reset their thread locks.
_WRITERS: weakref.WeakSet[StreamWriter] = weakref.WeakSet()

#: an open writer marks where every this-many-th event it appends starts (:meth:`StreamWriter.events_since`
#: reads at most this many events before the first one asked for)
MARK_EVERY: Final = 32
#: at most this many bytes after a mark are read into memory by :meth:`StreamWriter.events_since`
MAX_SPAN: Final = 1 << 20
#: marks an open writer keeps before it drops those too far behind its end to be read from
_MARKS_KEPT: Final = 512


def fdatasync(fd: int) -> None:
    """``fdatasync`` where the platform has it, else ``fsync`` (looked up per call so tests can count it)."""
    _fdatasync(fd)


def _fdatasync(fd: int) -> None:
    fsops.fdatasync(fd)


class _WriterIO:
    """The writer's own write and sync, looked up in this module per call (tests count or fail them)."""

    def write(self, fd: int, data: bytes) -> None:
        write_all(fd, data)

    def sync(self, fd: int) -> None:
        fdatasync(fd)


_IO = _WriterIO()


class StreamWriter:
    """The single writer of one task stream inside this process."""

    def __init__(
        self,
        *,
        path: Path,
        task_id: str,
        quarantine_dir: Path,
        tmp_dir: Path,
        on_event: Callable[[Event], None] | None = None,
        seal: SealedHead | None = None,
        in_root: bool = False,
        storage: StreamStorage | None = None,
    ) -> None:
        self.path = path
        self.in_root = in_root  # the stream lives in the ledger folder itself (gc.jsonl), which may be a link
        self.seal = seal
        self.task_id = task_id
        self.quarantine_dir = quarantine_dir
        self.tmp_dir = tmp_dir
        self.storage = FolderStreams(path.parent, tmp_dir=tmp_dir, in_root=in_root, io=_IO)
        self._name = path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else task_id
        #: the one lease this writer holds while open (a folder's lock or a store's stream lease)
        self._lease: StreamLease | None = None
        #: a storage other than a folder (an object store): leased, appended and read through the seam only
        self._store = storage
        self._fenced: LeaseLost | None = None  # the lease this writer lost (every later append says so)
        self._fd: int | None = None  # the lease's descriptor on the stream, while open
        self._seq = 0
        self._head: str | None = None
        self._last_len = 0  # the length of the last line (the one hashing to the head)
        #: the hash and size of the stream's bytes so far (checked at the open, then appended): the
        #: checked prefix a later open in this process compares before it trusts those bytes again
        self._hasher: Any = None
        self._size = 0
        #: (seq, byte offset, prev) of every :data:`MARK_EVERY`-th event this open appended, and of where the
        #: stream ended at the open: :meth:`events_since` reads from the nearest one (empty: not known)
        self._marks: list[tuple[int, int, str | None]] = []
        self._facts: SealFacts | None = None  # what the open's check saw that the seal check needs
        #: whether the last open checked only the bytes after what this process had checked before
        self.resumed = False
        #: what :meth:`checked` said as the last :meth:`close` let the stream go (None: nothing to resume from)
        self.last_checked: Checked | CheckedBytes | None = None
        #: the stream's stamp as the last :meth:`close` left it, when this writer vouches for every byte of it
        #: (:meth:`~intentlog.eventlog.storage.StreamStorage.stamps`; None otherwise)
        self.left_stamp: str | None = None
        self._poisoned: str | None = None
        self._batch_depth: dict[int, int] = {}  # per thread: a batch defers only its own thread's syncs
        self._mutex = threading.RLock()
        self._on_event = on_event
        self.repaired: Event | None = None
        self.damage: Damage | None = None  # what the last open found (and repaired)
        self.quarantined: dict[str, Any] | None = None
        self._started: list[dict[str, Any]] = []  # attempt.started lines a repair accepted to move aside
        self._pid = os.getpid()
        _WRITERS.add(self)

    # -- opening -------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._lease is not None

    @property
    def owned(self) -> bool:
        """False in a forked child: the handle (and its lock) belong to the parent process."""
        return self._pid == os.getpid()

    @property
    def lock_fd(self) -> int | None:
        """On a folder, the descriptor holding this writer's lock while open (None on a store, or closed)."""
        lease = self._lease
        return lease.lock_fd if isinstance(lease, FolderLease) else None

    def open(
        self,
        *,
        wait: float = 0.0,
        replay: Callable[[Event], None] | None = None,
        accept_damage: bool = False,
        accept_resend: bool = False,
        take_over_after: float | None = None,
        resume: Checked | CheckedBytes | None = None,
        restart: Callable[[], None] | None = None,
    ) -> None:
        """Lock, re-check the tail, repair a torn one, create the stream if missing.

        ``resume`` (a folder stream; what :meth:`checked` gave when this process last let
        the stream go): check only the bytes added since, when the stream is provably the
        one checked (:func:`~intentlog.eventlog.damage.resume_assess`); ``replay`` then sees
        the added events only, and :attr:`resumed` is True. Otherwise -- or when the added
        bytes show anything -- ``restart`` is called and the whole stream is checked and
        replayed as without ``resume``: a stream replaced, truncated or edited since is
        judged exactly as always.

        ``take_over_after`` is given to the storage's lease (:meth:`StreamStorage.lease`):
        on an object store, the seconds a dead holder's stream must stand still before
        this writer takes its lease (None: never).

        ``replay`` sees every trusted event already in the stream (the scan that checks
        the tail is also the caller's chance to build state without a second read).
        Damage (see the module doc) raises :class:`CorruptStream` and writes nothing,
        unless ``accept_damage``: then it is moved aside and recorded like a torn tail --
        except bytes that record an ``attempt.started`` (a re-run would send again):
        refused (:func:`resend_refusal`) unless ``accept_resend`` too.
        """
        with self._mutex:
            if self._lease is not None:
                return
            self._pid = os.getpid()
            kind = CheckedBytes if self._store is not None else Checked
            if resume is not None and not isinstance(resume, kind):  # checked on another storage: not this one
                resume = None
                if restart is not None:
                    restart()
            self._marks = []
            if self._store is not None:
                ck = resume if isinstance(resume, CheckedBytes) else None
                self._open_remote(self._store, wait, replay, take_over_after, ck, restart)
                self._mark_end()
                return
            folder_ck = resume if isinstance(resume, Checked) else None
            try:
                self._check_folders()
            except OSError as exc:
                raise ledger_os_error(self.path, "checking the ledger's folders", exc) from exc
            # the lock, the stream and a new stream's name are reached inside one descriptor
            # on the folder: a folder swapped for a link after the check is never reached
            lease = self.storage.lease(self._name, wait=wait, create=self._first_line, repair=True)
            self._lease, self._fd = lease, lease.fd
            try:
                self._open_locked(lease, replay, accept_damage, accept_resend, folder_ck, restart)
            except BaseException:
                self._close_lease()
                raise
            self._mark_end()

    def _mark_end(self) -> None:
        """The stream's end as the open left it: the first mark :meth:`events_since` may read from."""
        self._marks = [(self._seq, self._size, self._head)] if self._hasher is not None else []

    def _open_remote(
        self,
        store: StreamStorage,
        wait: float,
        replay: Callable[[Event], None] | None,
        take_over_after: float | None = None,
        resume: CheckedBytes | None = None,
        restart: Callable[[], None] | None = None,
    ) -> None:
        """Lease the stream on a non-folder storage, read it whole and check every line.

        A bad line is :class:`CorruptStream`, the lease given back, nothing written (no
        repair or quarantine there). A store's seals are checked by the storage's own lease
        (``ObjectStreams.lease``), before anything is written. With ``resume`` (what this
        process checked before), when the stream read starts with exactly the bytes checked
        then (their hash), only the lines after them are checked and replayed.
        """
        lease = store.lease(self._name, wait=wait, create=self._created_record, take_over_after=take_over_after)
        try:
            self._poisoned, self._fenced = None, None
            self.repaired = self.damage = self.quarantined = None
            self.resumed = False
            data = store.read(self._name)
            hasher = blake3()
            tail = None
            if resume is not None and len(data) >= resume.size:
                hasher.update(memoryview(data)[: resume.size])
                if DIGEST_PREFIX + hasher.hexdigest() == resume.prefix:
                    try:
                        at = (resume.size, resume.seq, resume.head)
                        tail = tail_of(data, str(self.path), replay, resume=at)
                        self.resumed = True
                    except CorruptStream:
                        tail = None  # judged by the whole read below, as always
                    hasher.update(memoryview(data)[resume.size :])
            if tail is None:
                if resume is not None and restart is not None:
                    restart()
                hasher = blake3(data)
                tail = tail_of(data, str(self.path), replay)
            self._hasher, self._size = hasher, len(data)
            if tail.count != lease.next_seq:
                raise CorruptStream(
                    str(self.path), tail.count + 1, f"the stream holds {tail.count} events but its lease counts "
                    f"{lease.next_seq}; nothing was written (merge it to a folder and verify it there)"
                )
            self._seq, self._head = tail.count, tail.head
        except BaseException:
            lease.release()
            raise
        self._lease = lease

    def _created_record(self) -> bytes:
        return self._created_line()[:-1]

    def _check_folders(self) -> None:
        """tasks/, tmp/ and quarantine/ must be real folders (or absent), never links (the root may be one)."""
        if not self.in_root:
            check_real_dir(self.path.parent, what="task streams")
        check_real_dir(self.tmp_dir, what="staging files (tmp/)")
        check_real_dir(self.quarantine_dir, what="quarantined bytes (quarantine/)")

    def _first_line(self) -> bytes:
        """Line 0 of a stream about to be created (under the lock); a sealed stream that vanished is refused."""
        if self.seal is not None and not self.seal.retired:
            raise lost(self.path, self.seal)
        try:
            makedirs_durable(self.tmp_dir)
        except OSError as exc:
            raise ledger_os_error(self.path, "creating the stream", exc) from exc
        self._check_folders()
        return self._created_line()[:-1]

    def _created_line(self) -> bytes:
        return encode_line(
            TASK_CREATED,
            dumps({"format": FORMAT, "stream": new_stream_id(), "task": self.task_id}),
            None,
            0,
            utc_now(),
        )

    def _open_locked(
        self,
        lease: FolderLease,
        replay: Callable[[Event], None] | None,
        accept_damage: bool,
        accept_resend: bool = False,
        resume: Checked | None = None,
        restart: Callable[[], None] | None = None,
    ) -> None:
        self._poisoned = None
        self.repaired = self.damage = self.quarantined = None
        self.resumed = False
        self._hasher, self._size = None, 0
        try:
            got = None
            if resume is not None and self._fd is not None:
                got = resume_assess(self.path, self.seal, replay, fd=self._fd, checked=resume)
            if got is not None and resume is not None:
                s, self._facts, hasher = got
                damage = None
                self.resumed = True
                self._last_len = s.end - s.last_start if s.last is not None else resume.last_len
            else:
                if resume is not None and restart is not None:
                    restart()
                hasher = blake3()
                s, damage, self._facts = assess_facts(self.path, self.seal, replay, fd=self._fd, hasher=hasher)
                self._last_len = s.end - s.last_start if s.last is not None else 0
        except OSError as exc:
            raise ledger_os_error(self.path, "reading the stream", exc) from exc
        if damage is not None and damage.kind == "damage" and not accept_damage:
            raise refusal(self.path, damage)
        started: list[dict[str, Any]] = []
        if damage is not None and damage.kind == "damage":
            started = started_in(self.path, damage.offset, fd=self._fd)
            if started and not accept_resend:
                raise resend_refusal(self.path, damage, started)
        self._started = started
        self._seq = s.count
        self._head = s.head
        lease.adopt(s.count)
        try:
            if s.count == 0 and s.problem is None and damage is None:
                # an empty file: a crash between a repair's truncate and its new first line
                self._write_created(sync=True)
            elif damage is None and s.problem is None:
                # the scan read the whole file and trusted every line: its hash is the checked prefix's
                self._hasher, self._size = hasher, s.end
            if damage is not None:
                self._repair(lease, s, damage)
            if self._hasher is None and self._fd is not None:  # the open wrote or cut bytes: hash what is there
                self._hasher, self._size = self._hash_file(self._fd)
        except OSError as exc:
            raise ledger_os_error(self.path, "repairing the stream's tail", exc) from exc
        if replay and self.repaired is not None:
            replay(self.repaired)

    def _hash_file(self, fd: int) -> tuple[Any, int]:
        """The BLAKE3 state and size of the stream's bytes now (read through the writer's descriptor)."""
        hasher, size = blake3(), 0
        for chunk in chunks_from(self.path, 0, fd=fd):
            hasher.update(chunk)
            size += len(chunk)
        return hasher, size

    def _close_lease(self) -> None:
        lease, self._lease, self._fd = self._lease, None, None
        if lease is not None:
            lease.release()

    def quarantine_plan(self, offset: int) -> tuple[str, str, int]:
        """The quarantine name, digest and size of the bytes from ``offset`` to the end."""
        return quarantine_plan(self.path, self.task_id, offset, fd=self._fd)

    def _repair(self, lease: FolderLease, s: StreamScan, d: Damage) -> None:
        """Move the bad tail to quarantine/, truncate, fsync, and record it (DESIGN §4 rule 4)."""
        qname, digest, size = self.quarantine_plan(d.offset)
        makedirs_durable(self.quarantine_dir)
        makedirs_durable(self.tmp_dir)
        self._check_folders()
        qname = self._keep_aside(qname, digest, size, d.offset)
        lease.truncate(d.offset)
        lease.adopt(self._seq)
        if d.offset == 0:
            self._seq, self._head = 0, None
            lease.adopt(0)
            self._write_created(sync=False)
        self.quarantined = {"file": f"quarantine/{qname}", "digest": digest, "size": size}
        self.damage = d
        self.repaired = self.append("stream.repaired", repaired_data(d, self.quarantined, self._started))

    def _keep_aside(self, qname: str, digest: str, size: int, offset: int) -> str:
        """Copy the bytes from ``offset`` into ``quarantine/`` (durably); the name they are kept under.

        The name is never overwritten. A file already there is reused only when it holds
        exactly these bytes (a repair that crashed after its copy); anything else there (other
        bytes, a link) stays untouched and the bytes go under a new name beside it.
        """
        name = qname
        for _ in range(8):
            chunks = chunks_from(self.path, offset, limit=size, fd=self._fd)
            if publish_chunks(chunks, self.quarantine_dir / name, tmp_dir=self.tmp_dir, mode=0o444):
                return name
            if holds(self.quarantine_dir / name, digest, size):
                return name
            name = f"{qname[: -len('.bin')]}.{os.urandom(6).hex()}.bin"
        raise LedgerError(
            f"{self.quarantine_dir}: cannot find a free name for the bytes to move aside; nothing was cut"
        )

    def _write_created(self, *, sync: bool) -> None:
        """Line 0 of a stream left empty (without ``sync``, synced by the caller's next sync)."""
        if self._lease is None:
            return
        line = self._created_line()
        self._lease_append(line, 0, sync=sync)
        self._seq, self._head = 1, digest_bytes(line)

    def _lease_append(self, line: bytes, seq: int, *, sync: bool) -> None:
        """One line through the lease; its failure raised as the ``OSError`` it was (the caller poisons)."""
        lease = self._lease
        if lease is None:  # pragma: no cover - callers check the writer is open
            raise IntentlogError(f"{self.path}: the writer is closed; open the task again")
        try:
            lease.append_line(line, expected_seq=seq, sync=sync)
        except LedgerError as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError):
                raise cause from None
            raise

    # -- appending ---------------------------------------------------------------

    @property
    def next_seq(self) -> int:
        return self._seq

    @property
    def head(self) -> str | None:
        return self._head

    def append(
        self,
        kind: str,
        data: dict[str, Any],
        *,
        expected_seq: int | None = None,
        sync: bool = False,
        defer: bool = False,
        data_json: bytes | None = None,
    ) -> Event:
        """Append one event; durable on return unless inside a batch (then at its end, or now with ``sync``).

        ``defer=True`` writes it now (every reader sees it) and leaves it to this writer's
        next sync: the next append outside a batch, a batch's end, :meth:`sync` or the
        close. Only for a record nothing outside acts on before a later durable one: a
        power cut can lose it only together with everything after it.
        ``data_json`` is ``data`` already encoded by :func:`encode_data` (callers that
        checked it pass it, so the data is serialised once).
        """
        if sync and defer:
            raise ValueError("an append is synced now (sync=True) or left to the next sync (defer=True), not both")
        if data_json is None:
            check_kind(kind)
            data_json = encode_data(data)
        if len(data_json) > MAX_LINE - 4096:
            raise NotSerializable(
                f"the event is {len(data_json)} bytes of JSON, more than a stream line may hold "
                f"({MAX_LINE} bytes with its envelope); store large payloads as artifacts "
                "(Ledger.artifacts.put) and record their ref; nothing was written",
                path="data",
            )
        with self._mutex:
            if self._poisoned is not None:
                self._refuse_poisoned()
            if not self.owned:
                raise IntentlogError(
                    f"{self.path}: this handle was opened by process {self._pid}, not by this forked "
                    f"process {os.getpid()}; nothing was written: open the ledger again in the child "
                    "(intentlog.open(...).task(...)) once the parent has closed the task"
                )
            if self._lease is None:
                raise IntentlogError(f"{self.path}: the writer is closed; open the task again")
            if expected_seq is not None and expected_seq != self._seq:
                raise Conflict(self.task_id, expected_seq, self._seq)
            stamp = utc_now()
            line = encode_line(kind, data_json, self._head, self._seq, stamp)
            try:
                durable = sync or not (defer or self._batch_depth.get(threading.get_ident()))
                self._lease_append(line, self._seq, sync=durable)
            except OSError as exc:
                self._poison(exc)
                raise StreamPoisoned(str(self.path), self._poisoned or str(exc)) from exc
            except IntentlogError as exc:  # a lost lease (fenced), a put of unknown outcome, a lock file replaced
                self._poisoned = f"{type(exc).__name__}: {exc}"
                self._fenced = exc if isinstance(exc, LeaseLost) else None
                raise
            ev = Event(self._seq, kind, stamp, self._head, data, digest_bytes(line))
            self._last_len = len(line)
            if self._hasher is not None:
                if self._seq % MARK_EVERY == 0 and self._marks:
                    self._marks.append((self._seq, self._size, self._head))
                    if len(self._marks) > _MARKS_KEPT:  # a mark more than MAX_SPAN behind the end is never read from
                        self._marks = [m for m in self._marks if self._size - m[1] <= MAX_SPAN] or self._marks[-1:]
                self._hasher.update(line)
                self._size += len(line)
            self._seq += 1
            self._head = ev.digest
            if self._on_event is not None:
                self._on_event(ev)
            return ev

    def events_since(self, since: int) -> list[Event] | None:
        """The stream's events from seq ``since`` on, read from this open writer's nearest mark; or None.

        Only while this process holds the stream (its writer open, not poisoned): the bytes
        before a mark were checked by the open or appended through it, so only those after
        it are read (through the lease: the writer's descriptor on a folder, its cached
        segments on a store) and checked, at most :data:`MARK_EVERY` events before
        ``since``. They must chain from the mark to exactly this writer's head and size;
        anything else (bytes another process wrote or cut) gives None, and the caller reads
        the stream whole, which judges them as always. None too when no mark is at or
        before ``since`` (an event older than the open), when more than :data:`MAX_SPAN`
        bytes follow it (the whole read streams them in constant memory), and on a folder
        unless the stream's path still names this writer's file, of exactly its size,
        inside a real folder (a file replaced, removed or reached through a link is the
        whole read's to judge). Bytes before the mark edited in place while this writer
        holds the stream are not read here: the next open, any other reader and
        ``intentlog verify`` find them. The events are those there when called (a list),
        not those appended while the caller iterates.
        """
        with self._mutex:
            if self._lease is None or self._poisoned is not None or not self.owned or not self._marks:
                return None
            if not self._still_its_file():
                return None
            if since >= self._seq:
                return []
            i = bisect_right(self._marks, since, key=lambda m: m[0]) - 1
            if i < 0:
                return None
            seq, offset, prev = self._marks[i]
            if self._size - offset > MAX_SPAN:
                return None
            try:
                data = self._bytes_from(offset)
            except OSError:
                return None
            if len(data) != self._size - offset:
                return None
            try:
                events = list(events_in(data, str(self.path), since, resume=(0, seq, prev)))
            except CorruptStream:
                return None
            if not events or events[-1].seq != self._seq - 1 or events[-1].digest != self._head:
                return None
            return events

    def _still_its_file(self) -> bool:
        """On a folder: the stream's path, in a real folder, names this writer's file, of the size it wrote."""
        fd = self._fd
        if self._store is not None:
            return True  # a held lease: the store's stream is what this writer appended, read through its cache
        if fd is None:
            return False
        try:
            if not self.in_root:
                check_real_dir(self.path.parent, what="task streams")
            at, mine = os.lstat(self.path), os.fstat(fd)
        except (OSError, IntentlogError):
            return False
        same = (at.st_dev, at.st_ino) == (mine.st_dev, mine.st_ino)
        return same and stat.S_ISREG(at.st_mode) and mine.st_size == self._size

    def _bytes_from(self, offset: int) -> bytes:
        """The stream's bytes from ``offset`` to its end, through this writer's lease."""
        if self._store is not None:
            return self._store.read(self._name, offset)
        if self._fd is None:
            raise OSError("the writer's descriptor is closed")
        return b"".join(chunks_from(self.path, offset, limit=MAX_SPAN + 1, fd=self._fd))

    def _refuse_poisoned(self) -> None:
        """A poisoned writer refuses: a fenced one with :class:`LeaseLost` again, any other with StreamPoisoned."""
        f = self._fenced
        if f is not None:
            raise LeaseLost(f.task_id, f.where, f.epoch)
        raise StreamPoisoned(str(self.path), self._poisoned or "")

    def _poison(self, exc: OSError) -> None:
        self._poisoned = f"{type(exc).__name__}: {exc}"

    def sync(self) -> None:
        """Make every event written so far durable."""
        with self._mutex:
            if self._poisoned is not None:
                self._refuse_poisoned()
            lease = self._lease
            if lease is None or not lease.dirty:
                return  # nothing appended since the last sync: no write, no request
            try:
                lease.sync()  # a folder syncs its descriptor; an object store puts the group as one segment
            except LedgerError as exc:
                if not isinstance(exc.__cause__, OSError):
                    self._poisoned = f"{type(exc).__name__}: {exc}"  # a put of unknown outcome, a lock file replaced
                    raise
                self._poison(exc.__cause__)
                raise StreamPoisoned(str(self.path), self._poisoned or str(exc)) from exc.__cause__
            except IntentlogError as exc:  # fenced: nothing more appended, and later appends say so
                self._poisoned = f"{type(exc).__name__}: {exc}"
                self._fenced = exc if isinstance(exc, LeaseLost) else None
                raise

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group commit: the events appended inside share one sync, done when the block exits."""
        me = threading.get_ident()
        with self._mutex:
            self._batch_depth[me] = self._batch_depth.get(me, 0) + 1
        try:
            yield
        finally:
            with self._mutex:
                depth = self._batch_depth.pop(me) - 1
                if depth:
                    self._batch_depth[me] = depth
                last = depth == 0
            if last:
                self.sync()

    def checked(self) -> Checked | CheckedBytes | None:
        """What this open writer's stream is known to hold, checked: for the next open in this process to resume from.

        None on an object store, for a poisoned writer, one not open, or an empty stream.
        Taken under the lock (before :meth:`close`): every line up to the file's size now
        was checked at the open or appended by this writer.
        """
        with self._mutex:
            fd, facts = self._fd, self._facts
            if self._store is not None:
                if self._lease is None or self._poisoned is not None or self._hasher is None or self._head is None:
                    return None
                if self._lease.dirty:
                    return None
                return CheckedBytes(self._size, DIGEST_PREFIX + self._hasher.hexdigest(), self._seq, self._head)
            if fd is None or facts is None or self._poisoned is not None or self._hasher is None:
                return None
            if self._head is None or self._seq == 0 or self._last_len <= 0 or (self._lease and self._lease.dirty):
                return None
            try:
                st = os.fstat(fd)
            except OSError:
                return None
            if st.st_size != self._size:  # bytes this writer did not append (or lost): nothing to vouch for
                return None
            hasher = self._hasher.copy()
            return Checked(
                st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, self._seq, self._head,
                self._last_len, self.seal, facts.stream_id, facts.digest_at_seal, facts.accepted,
                DIGEST_PREFIX + hasher.hexdigest(), hasher,
            )  # fmt: skip

    # -- closing -----------------------------------------------------------------

    def abandon(self) -> None:
        """In a forked child: close the inherited descriptors, leaving the parent's lock and stream alone."""
        lease, self._lease, self._fd = self._lease, None, None
        if lease is not None:
            lease.abandon()  # the parent's lease: neither released nor written by this child

    def close(self) -> None:
        """Sync what is pending, close the descriptor and release the lock."""
        if not self.owned:
            self.abandon()
            return
        with self._mutex:
            self.last_checked = self.left_stamp = None
            self._marks = []
            lease, ck = self._lease, None
            try:
                pending = lease is not None and lease.dirty
                if self._poisoned is None and pending:
                    self.sync()  # a store's buffered group is put here (no request when none): a failure raises
                self.last_checked = ck = self.checked()  # still under the lock, everything synced
            finally:
                self._close_lease()
            if isinstance(ck, Checked):  # the file as this writer left it (closing writes nothing into it)
                self.left_stamp = file_stamp(ck.size, ck.ino, ck.dev, ck.mtime_ns, ck.ctime_ns)
            elif ck is not None:  # a store's release segment is the last: known once it is created
                self.left_stamp = lease.left_stamp if lease is not None else None


def _after_fork_in_child() -> None:
    """Thread locks held by other threads at fork time stay held forever in the child: renew them."""
    for w in list(_WRITERS):
        w._mutex = threading.RLock()
        w._batch_depth = {}
        if w._lease is not None:
            w._lease.renew_mutex()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
