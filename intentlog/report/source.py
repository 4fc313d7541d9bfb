"""Where a report reads the record from: a ledger folder, or an object-store ledger through its seams.

:class:`FolderSource` reads ``tasks/*.jsonl`` with :class:`~intentlog.eventlog.reader.StreamScan`
and ``objects/`` without following a link, and checks with
:func:`~intentlog.checker.verify_path`. :class:`StoreSource` reads the same things through
the two storage seams only (``ObjectStreams.read``, ``ObjectArtifacts.stat`` and ``get``)
and checks with :func:`~intentlog.checker.verify_storage` against every seal: no local
copy, no probe, nothing written. A store holding the same streams and objects as a folder
gives the same page, byte for byte, with one difference on purpose: a store has no torn
tails (a segment is whole or absent), so a line that fails its checks there is damage and
the task is ``unreadable`` (as ``intentlog tasks`` on the store shows it), where a folder
would call a bad *last* line a torn tail.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from .._digest import DIGEST_PREFIX, is_digest
from ..errors import ArtifactMissing, CorruptStream, DigestMismatch, IntentlogError
from ..eventlog.format import Event
from ..eventlog.listing import task_ids
from ..eventlog.reader import ScanProblem, StreamScan
from ..eventlog.remote import events_in

if TYPE_CHECKING:
    from ..checker.report import VerifyReport
    from ..s3 import ObjectStorage

__all__ = ["FolderSource", "Payload", "ReportSource", "StoreSource", "Stream"]

#: What an object's first bytes say: absent, larger than the report shows, not its digest's bytes, or the bytes.
PayloadKind = Literal["absent", "large", "bad", "ok"]
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


@dataclass(frozen=True, slots=True)
class Payload:
    """An object as the report sees it: ``kind``, its size when known, its bytes when ``ok``."""

    kind: PayloadKind
    size: int | None = None
    data: bytes | None = None


@dataclass(slots=True)
class Stream:
    """One read of a task's stream: its trusted events (in order, as they are read), then what stopped it.

    After iterating ``events``: ``count`` events were trusted; ``problem`` is the first bad
    line (None when the whole stream is good); ``failure`` an error that stopped the read
    (the stream cannot be opened, or segments that do not make one stream), as the page shows it.
    """

    events: Iterator[Event]
    count: int = 0
    problem: ScanProblem | None = None
    failure: str | None = None


class ReportSource:
    """The reads a report makes (a base: :class:`FolderSource`, :class:`StoreSource`)."""

    def names(self) -> list[str]:  # pragma: no cover - every source overrides it
        raise NotImplementedError

    def where(self) -> str:  # pragma: no cover
        raise NotImplementedError

    def stream(self, task: str) -> Stream:  # pragma: no cover
        raise NotImplementedError

    def payload(self, digest: str, limit: int) -> Payload:  # pragma: no cover
        raise NotImplementedError

    def verify(self, tasks: Sequence[str] | None) -> VerifyReport:  # pragma: no cover
        raise NotImplementedError


class FolderSource(ReportSource):
    """A ledger (or bundle) folder: streams by :class:`StreamScan`, objects never through a link."""

    def __init__(self, root: Path, workspace: Path | None = None) -> None:
        self.root = root
        self.workspace = workspace

    def names(self) -> list[str]:
        return task_ids(self.root)

    def where(self) -> str:
        return str(self.root / "tasks")

    def stream(self, task: str) -> Stream:
        scan = StreamScan(self.root / "tasks" / f"{task}.jsonl")
        out = Stream(iter(()))

        def events() -> Iterator[Event]:
            try:
                yield from scan
            except (OSError, IntentlogError) as exc:
                out.failure = f"tasks/{task}.jsonl: {exc}"
            out.count, out.problem = scan.count, scan.problem

        out.events = events()
        return out

    def payload(self, digest: str, limit: int) -> Payload:
        """At most ``limit`` + 1 bytes of ``objects/xx/...``, read without following a link."""
        if not is_digest(digest):
            return Payload("absent")
        hexd = digest[len(DIGEST_PREFIX) :]
        try:
            fd = os.open(self.root / "objects" / hexd[:2] / hexd[2:], os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK)
        except OSError:
            return Payload("absent")
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a FIFO or device is never read
                return Payload("absent")
            chunks: list[bytes] = []
            n = 0
            while n <= limit:
                chunk = os.read(fd, limit + 1 - n)
                if not chunk:
                    break
                chunks.append(chunk)
                n += len(chunk)
        except OSError:
            return Payload("absent")
        finally:
            os.close(fd)
        if n > limit:
            return Payload("large", max(st.st_size, n))
        return _checked(digest, b"".join(chunks))

    def verify(self, tasks: Sequence[str] | None) -> VerifyReport:
        from ..checker.verify import verify_path

        return verify_path(self.root, tasks, workspace=self.workspace)


def _checked(digest: str, data: bytes) -> Payload:
    from .._digest import digest_bytes

    return Payload("ok", len(data), data) if digest_bytes(data) == digest else Payload("bad", len(data))


class StoreSource(ReportSource):
    """An object-store ledger, read through its two seams only (nothing written, no probe)."""

    def __init__(self, storage: ObjectStorage, location: str) -> None:
        self.storage = storage
        self.location = location

    def names(self) -> list[str]:
        from ..s3.retire import live_names

        return live_names(self.storage.client)  # what is left of a stream gc retired is no task

    def where(self) -> str:
        return self.location

    def stream(self, task: str) -> Stream:
        out = Stream(iter(()))

        def events() -> Iterator[Event]:
            try:
                data = self.storage.streams.read(task)
            except (OSError, IntentlogError) as exc:  # absent, or segments that do not make one stream
                out.failure = str(exc)
                return
            try:
                for ev in events_in(data, f"tasks/{task}.jsonl"):
                    out.count += 1
                    yield ev
            except CorruptStream as exc:  # no torn tail on a store: any bad line is damage
                out.problem = ScanProblem(exc.line, 0, exc.reason, False, 0)

        out.events = events()
        return out

    def payload(self, digest: str, limit: int) -> Payload:
        """The object's size by ``stat``; its bytes by ``get`` (checked there) only when at most ``limit``."""
        objects = self.storage.objects
        try:
            size = objects.stat(digest).size
            if size > limit:
                return Payload("large", size)
            data = objects.get(digest)
        except ArtifactMissing:
            return Payload("absent")
        except DigestMismatch:
            return Payload("bad", size)
        except (IntentlogError, ValueError):
            return Payload("absent")
        if len(data) > limit:  # replaced between the stat and the get
            return Payload("large", len(data))
        return Payload("ok", len(data), data)

    def verify(self, tasks: Sequence[str] | None) -> VerifyReport:
        from ..checker.verify import verify_stored

        # as verify on the store checks it: every seal a lower bound, what gc retired no task
        wanted = list(tasks) if tasks else None
        return verify_stored(self.storage.client, self.storage.objects, wanted, where=self.location)
