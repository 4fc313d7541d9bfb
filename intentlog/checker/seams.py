"""The checker's read-only view of a ledger kept behind the storage seams (an object store).

A folder ledger is read file by file (:mod:`.walk`); a ledger on an object store is read
through the two seams only: its streams' bytes (``StreamStorage.read``, which checks that
every segment continues the one before) and its objects (``ObjectStore.get``, ``stat``,
``list``). :class:`Seams` names the few calls the checker makes, as protocols, so the
checker imports no storage code (and so no writing code) at all; any object with these
methods will do -- :class:`~intentlog.s3.ObjectStreams` and :class:`~intentlog.s3.ObjectArtifacts`
are the ones that exist.

What a store does not keep is not looked for there: no links, no ``intentlog.json``, no
``heads.json`` or ``gc.jsonl`` (yet) and no lock files; its ``quarantine/`` keys are read
through :attr:`Seams.kept`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ArtifactMissing, DigestMismatch, IntentlogError
from ..gclog import GcDeletion

__all__ = ["ObjectReads", "Seams", "StreamReads"]


class StreamReads(Protocol):
    """What the checker reads of a stream seam."""

    def read(self, name: str, offset: int = 0) -> bytes: ...

    def names(self) -> list[str]: ...


class _Stat(Protocol):
    @property
    def size(self) -> int: ...


class ObjectReads(Protocol):
    """What the checker reads of an object seam (``get`` checks the bytes against their name)."""

    def get(self, digest: str) -> bytes: ...

    def stat(self, digest: str) -> _Stat: ...

    def list(self) -> Iterable[str]: ...


@dataclass(frozen=True)
class Seams:
    """A ledger's two seams and where they are (for the report's root).

    ``gc_deleted`` / ``gc_problem``: what the store's gc log records deleting, and what is
    wrong with the log (a folder's ``gc.jsonl``, read the same way: :mod:`intentlog.gclog`).
    """

    streams: StreamReads
    objects: ObjectReads
    where: str
    gc_deleted: Mapping[str, GcDeletion] = field(default_factory=dict)
    gc_problem: str | None = None
    #: names that are what is left of a stream gc deleted (no segment 0): not tasks, not exported
    gc_leftovers: frozenset[str] = frozenset()
    #: the bytes a store keeps at a ledger-relative key (``quarantine/NAME``: what a repair moved aside), or None
    kept: Callable[[str], bytes | None] | None = None

    def lines(self, task: str) -> Iterator[tuple[int, bytes]]:
        """``(offset, line)`` of every line of the stream (``CorruptStream`` from the seam propagates)."""
        data = self.streams.read(task)
        offset = 0
        for line in data.splitlines(keepends=True):
            yield offset, line
            offset += len(line)

    def hash_object(self, digest: str) -> tuple[str, int]:
        """The digest the stored bytes hash to and their size; ``FileNotFoundError`` when there are none.

        A store that cannot be read is an ``OSError`` (reported as ``io``, as for a folder).
        """
        try:
            return digest, len(self.objects.get(digest))
        except ArtifactMissing:
            raise FileNotFoundError(digest) from None
        except DigestMismatch as exc:
            return exc.actual, self.size(digest)
        except IntentlogError as exc:
            raise OSError(str(exc)) from exc

    def exists(self, digest: str) -> bool:
        try:
            self.objects.stat(digest)
        except ArtifactMissing:
            return False
        except IntentlogError:
            return True  # unreadable is not absent: nothing to say about a bare digest
        return True

    def digests(self) -> Iterator[str]:
        """Every stored object's digest (``OSError`` when the store cannot be listed)."""
        try:
            yield from self.objects.list()
        except IntentlogError as exc:
            raise OSError(str(exc)) from exc

    def size(self, digest: str) -> int:
        """An object's size (``OSError`` when it cannot be asked)."""
        try:
            return self.objects.stat(digest).size
        except IntentlogError as exc:
            raise OSError(str(exc)) from exc
