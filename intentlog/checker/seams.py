"""What the checker, the report and export read of a ledger: :class:`LedgerReads`, and its seam implementation.

Every read-only operation over a whole ledger -- verify, the report, export -- is written
once against :class:`LedgerReads`: the streams (listed, read line by line or as events),
the objects (hashed, listed, copied), the seal (``heads.json``, or a store's numbered
seals: each a lower bound), the gc log (what garbage collection deleted on purpose) and
the few things only a folder keeps (links, ``intentlog.json``, ``quarantine/``, writer
locks). Two implementations exist:

* :class:`~intentlog.checker.folder.FolderReads`: a ledger (or exported bundle) folder,
  read file by file, never through a link;
* :class:`SeamReads`: a ledger behind the two storage seams only -- its streams' bytes
  (``StreamStorage.read``, which checks that every segment continues the one before) and
  its objects (``ObjectStore.get``, ``stat``, ``list``) -- with the seals and gc log it
  keeps beside them (an object store's: :mod:`intentlog.s3.verifysource`; an in-memory
  storage's the same way). What such a storage does not keep -- links, ``intentlog.json``,
  lock files, torn tails -- is simply never there; the bytes a repair moved aside are read
  by name through ``kept`` (a store's ``quarantine/`` keys).

Both are read-only: nothing here writes, locks or probes. The checker imports no storage
code (and so no writing code) at all: :class:`StreamReads` and :class:`ObjectReads` name the
few calls made of a seam, as protocols.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from .._internal.digest import digest_bytes
from ..errors import ArtifactError, ArtifactMissing, CorruptStream, DigestMismatch, IntentlogError
from ..eventlog.format import Event, check_task_id
from ..eventlog.gclog import GcDeletion
from ..eventlog.reader import ScanProblem
from ..eventlog.remote import events_in
from ..heads.codec import StreamHead, furthest_heads

__all__ = [
    "EventRead",
    "LedgerReads",
    "ObjectReads",
    "Payload",
    "PayloadKind",
    "SeamReads",
    "Seams",
    "StreamReads",
]

#: What an object's first bytes say: absent, larger than asked for, not its digest's bytes, or the bytes.
PayloadKind = Literal["absent", "large", "bad", "ok"]


@dataclass(frozen=True, slots=True)
class Payload:
    """An object as a reader of bounded size sees it: ``kind``, its size when known, its bytes when ``ok``."""

    kind: PayloadKind
    size: int | None = None
    data: bytes | None = None


@dataclass(slots=True)
class EventRead:
    """One read of a task's stream: its trusted events (in order, as they are read), then what stopped it.

    After iterating ``events``: ``count`` events were trusted; ``problem`` is the first bad
    line (None when the whole stream is good); ``failure`` an error that stopped the read
    (the stream cannot be opened, or segments that do not make one stream).
    """

    events: Iterator[Event]
    count: int = 0
    problem: ScanProblem | None = None
    failure: str | None = None


def checked_payload(digest: str, data: bytes) -> Payload:
    """``ok`` with the bytes when they hash to ``digest``, else ``bad``."""
    return Payload("ok", len(data), data) if digest_bytes(data) == digest else Payload("bad", len(data))


class LedgerReads(Protocol):
    """The reads of one ledger that verify, the report and export make; nothing is written, locked or probed.

    Errors: a stream or object that cannot be read is an ``OSError`` (``FileNotFoundError``
    when absent), a file that is a link or not regular :class:`~intentlog._internal.regular.NotRegular`,
    segments that do not make one stream :class:`~intentlog.errors.CorruptStream`.
    """

    @property
    def where(self) -> str:
        """The ledger as a report names it: the folder, or the store's URL."""
        ...

    @property
    def tasks_where(self) -> str:
        """Where its task streams are, for a message that names a task not found there."""
        ...

    @property
    def default_workspace(self) -> Path | None:
        """What ``artifact.recorded`` locators are relative to when the caller names nothing (None: unknown)."""
        ...

    # -- the ledger's own files --------------------------------------------------------------

    def links(self) -> dict[str, str]:
        """Every symbolic link inside the ledger (relative path -> target): nothing is read through one."""
        ...

    def marker(self) -> bytes | None:
        """The bytes of ``intentlog.json`` (``OSError`` / ``NotRegular`` when unreadable); None: none is kept."""
        ...

    def heads(self) -> tuple[dict[str, StreamHead] | None, list[str]]:
        """The furthest head every seal recorded per task (None: never sealed), and what is wrong with the seals."""
        ...

    def gc_log(self) -> tuple[dict[str, GcDeletion], str | None]:
        """What the gc log records deleting (latest per task), and what is wrong with it (then nothing is excused)."""
        ...

    def retired(self, task: str, sealed: StreamHead) -> bool:
        """Whether a trusted gc log records deleting exactly the stream ``sealed`` seals for ``task``."""
        ...

    # -- streams ------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """The task ids with a stream, sorted (what is left of a stream gc deleted is no task)."""
        ...

    def listing(self) -> tuple[list[str], list[str], str | None]:
        """The task ids, the names listed beside them that are no task stream, and why listing failed (or None)."""
        ...

    def stream_where(self, task: str) -> str:
        """The task's stream as a message names it."""
        ...

    def lines(self, task: str) -> Iterator[tuple[int, bytes]]:
        """``(offset, line)`` of every line of the task's stream (the last may lack its newline)."""
        ...

    def events(self, task: str) -> EventRead:
        """The task's trusted events; a bad line ends them (a torn tail only where one can be: a folder)."""
        ...

    def stream_chunks(self, task: str) -> Iterable[bytes]:
        """The bytes of the task's stream as they are stored, in chunks (never through a link)."""
        ...

    def stream_bytes(self, task: str) -> bytes:
        """The whole stream's bytes."""
        ...

    def gc_remains(self, task: str, exc: Exception) -> GcDeletion | None:
        """The gc deletion ``task``'s unreadable stream is what is left of (its read raised ``exc``), else None."""
        ...

    def writer(self, task: str) -> int | None:
        """The pid holding the task's writer lock, probed without taking it; None when none is seen."""
        ...

    # -- objects ------------------------------------------------------------------------------

    def hash_object(self, digest: str, rel: str, buf: bytearray) -> tuple[str, int]:
        """What the stored object ``digest`` (``rel`` in a folder) hashes to, and its size (``FileNotFoundError``)."""
        ...

    def object_exists(self, digest: str, rel: str) -> bool:
        """Whether the object is stored (unreadable is not absent)."""
        ...

    def stored_objects(self) -> Iterator[tuple[str, int]]:
        """``(digest, size)`` of every stored object; a size of -1 is asked with :meth:`object_size` when needed."""
        ...

    def object_size(self, digest: str) -> int:
        """A stored object's size (``OSError`` when it cannot be asked)."""
        ...

    def payload(self, digest: str, limit: int) -> Payload:
        """At most ``limit`` bytes of an object, checked against its digest."""
        ...

    def object_chunks(self, digest: str, size: int | None, where: str) -> Iterable[bytes] | None:
        """The object's bytes (raising, so a copy is discarded, unless they hash to ``digest`` with ``size`` bytes).

        None when it is not stored. ``where`` names what refers to it, for the error.
        """
        ...

    # -- quarantine/ ----------------------------------------------------------------------------

    def hash_file(self, rel: str, buf: bytearray) -> tuple[str, int]:
        """What the ledger file ``rel`` (under ``quarantine/``) hashes to, and its size (``FileNotFoundError``)."""
        ...

    def quarantine_names(self) -> list[str]:
        """The names in ``quarantine/``, sorted (none kept: empty)."""
        ...

    def file_chunks(self, rel: str, digest: str, size: int | None) -> Iterable[bytes] | None:
        """The bytes of the ledger file ``rel``, checked as :meth:`object_chunks`; None when it is not there."""
        ...


# -- a ledger behind the storage seams ---------------------------------------------------------


class StreamReads(Protocol):
    """What is read of a stream seam."""

    def read(self, name: str, offset: int = 0) -> bytes: ...

    def names(self) -> list[str]: ...


class _Stat(Protocol):
    @property
    def size(self) -> int: ...


class ObjectReads(Protocol):
    """What is read of an object seam (``get`` checks the bytes against their name)."""

    def get(self, digest: str) -> bytes: ...

    def stat(self, digest: str) -> _Stat: ...

    def list(self) -> Iterable[str]: ...


@dataclass(frozen=True)
class SeamReads:
    """:class:`LedgerReads` of a ledger behind the two seams, with the seals and gc log kept beside them.

    ``seals`` are ``(where, heads.json bytes)`` in number order, each a lower bound
    (:func:`~intentlog.heads.codec.furthest_heads`); none: never sealed. ``gc_deleted`` /
    ``gc_problem``: what the gc log records deleting, and what is wrong with it (read as a
    folder's ``gc.jsonl`` is: :mod:`intentlog.eventlog.gclog`); ``gc_leftovers``: names that are what
    is left of a stream the log records deleting (no task for any reader). A stream's
    segments are whole or absent, so any line that fails its checks is damage, never a
    torn tail.
    """

    streams: StreamReads
    objects: ObjectReads
    where: str
    seals: Sequence[tuple[str, bytes]] = ()
    gc_deleted: Mapping[str, GcDeletion] = field(default_factory=dict)
    gc_problem: str | None = None
    gc_leftovers: frozenset[str] = frozenset()
    #: the bytes a store keeps at a ledger-relative key (``quarantine/NAME``: what a repair moved aside), or None
    kept: Callable[[str], bytes | None] | None = None

    @property
    def tasks_where(self) -> str:
        return self.where

    @property
    def default_workspace(self) -> Path | None:
        return None

    def links(self) -> dict[str, str]:
        return {}

    def marker(self) -> bytes | None:
        return None

    def heads(self) -> tuple[dict[str, StreamHead] | None, list[str]]:
        if not self.seals:
            return None, []
        furthest, problems = furthest_heads(self.seals)
        return {task: h for task, (_, h) in furthest.items()}, problems

    def gc_log(self) -> tuple[dict[str, GcDeletion], str | None]:
        return dict(self.gc_deleted), self.gc_problem

    def retired(self, task: str, sealed: StreamHead) -> bool:
        d = self.gc_deleted.get(task)
        return self.gc_problem is None and d is not None and d.matches(sealed)

    def names(self) -> list[str]:
        return sorted(check_task_id(n) for n in self.streams.names() if n not in self.gc_leftovers)

    def listing(self) -> tuple[list[str], list[str], str | None]:
        try:
            return self.names(), [], None
        except OSError as exc:
            return [], [], f"cannot list the streams of {self.where}: {exc}"

    def stream_where(self, task: str) -> str:
        return f"{self.where} task {task!r}"

    def lines(self, task: str) -> Iterator[tuple[int, bytes]]:
        data = self.streams.read(task)
        offset = 0
        for line in data.splitlines(keepends=True):
            yield offset, line
            offset += len(line)

    def events(self, task: str) -> EventRead:
        out = EventRead(iter(()))

        def events() -> Iterator[Event]:
            try:
                data = self.streams.read(task)
            except (OSError, IntentlogError) as exc:  # absent, or segments that do not make one stream
                out.failure = str(exc)
                return
            try:
                for ev in events_in(data, f"tasks/{task}.jsonl"):
                    out.count += 1
                    yield ev
            except CorruptStream as exc:  # no torn tail behind a seam: any bad line is damage
                out.problem = ScanProblem(exc.line, 0, exc.reason, False, 0)

        out.events = events()
        return out

    def stream_chunks(self, task: str) -> Iterable[bytes]:
        return (self.streams.read(task),)

    def stream_bytes(self, task: str) -> bytes:
        return self.streams.read(task)

    def gc_remains(self, task: str, exc: Exception) -> GcDeletion | None:
        d = self.gc_deleted.get(task)
        if d is None:
            return None
        if isinstance(exc, CorruptStream):  # its segment 0 gone (an older gc), or it is one of the leftovers
            return d if "segment 0 is missing" in exc.reason or task in self.gc_leftovers else None
        return d if isinstance(exc, FileNotFoundError) else None  # an empty folder, still listed

    def writer(self, task: str) -> int | None:
        return None  # a lease names no process here (and a stored segment is never torn)

    def hash_object(self, digest: str, rel: str, buf: bytearray) -> tuple[str, int]:
        try:
            return digest, len(self.objects.get(digest))
        except ArtifactMissing:
            raise FileNotFoundError(digest) from None
        except DigestMismatch as exc:
            return exc.actual, self.object_size(digest)
        except IntentlogError as exc:
            raise OSError(str(exc)) from exc

    def object_exists(self, digest: str, rel: str) -> bool:
        try:
            self.objects.stat(digest)
        except ArtifactMissing:
            return False
        except IntentlogError:
            return True  # unreadable is not absent: nothing to say about a bare digest
        return True

    def stored_objects(self) -> Iterator[tuple[str, int]]:
        try:
            for digest in self.objects.list():
                yield digest, -1
        except IntentlogError as exc:
            raise OSError(str(exc)) from exc

    def object_size(self, digest: str) -> int:
        try:
            return self.objects.stat(digest).size
        except IntentlogError as exc:
            raise OSError(str(exc)) from exc

    def payload(self, digest: str, limit: int) -> Payload:
        """The object's size by ``stat``; its bytes by ``get`` (checked there) only when at most ``limit``."""
        try:
            size = self.objects.stat(digest).size
            if size > limit:
                return Payload("large", size)
            data = self.objects.get(digest)
        except ArtifactMissing:
            return Payload("absent")
        except DigestMismatch:
            return Payload("bad", size)
        except (IntentlogError, ValueError):
            return Payload("absent")
        if len(data) > limit:  # replaced between the stat and the get
            return Payload("large", len(data))
        return Payload("ok", len(data), data)

    def object_chunks(self, digest: str, size: int | None, where: str) -> Iterable[bytes] | None:
        try:
            data = self.objects.get(digest)  # checked against its digest there
        except ArtifactMissing:
            return None
        if size is not None and len(data) != size:
            raise ArtifactError(
                f"{self.where}: object {digest} holds {len(data)} bytes but {where} says {size}; not exported"
            )
        return (data,)

    def hash_file(self, rel: str, buf: bytearray) -> tuple[str, int]:
        data = self.kept(rel) if self.kept is not None else None
        if data is None:
            raise FileNotFoundError(rel)  # nothing kept at that key (a storage without one keeps nothing)
        return digest_bytes(data), len(data)

    def quarantine_names(self) -> list[str]:
        return []  # the keys a repair moved aside are read by name (what stream.repaired records)

    def file_chunks(self, rel: str, digest: str, size: int | None) -> Iterable[bytes] | None:
        data = self.kept(rel) if self.kept is not None else None
        if data is None:
            return None
        if digest_bytes(data) != digest or (size is not None and len(data) != size):
            raise DigestMismatch(digest, digest_bytes(data), f"{rel} in {self.where}")
        return (data,)


#: The former name of :class:`SeamReads`.
Seams = SeamReads
