"""What retention needs of an object store: its gc log, deleting a stream, and deleting an object safely.

A folder keeps ``gc.jsonl``, ``keep.json`` and ``gc.lock`` in its root. On a store nothing
is replaced, so all three are one stream: the **gc log**, a hash-chained stream of the
task-stream format (``gc.started`` / ``gc.finished`` exactly as in ``gc.jsonl``, plus
``gc.kept`` / ``gc.released`` for the keep marks) stored as numbered segments created with
``If-None-Match: *`` under ``gc/`` (``gc/tasks/log/s/000000000000`` ...; not under
``tasks/``, so it is never listed as a task). Its writer lease is the store's gc lock: a
second gc (or ``keep``) gets :class:`~intentlog.errors.TaskBusy`, a gc whose lease was
taken over is fenced by its next put.

Retiring a stream (:func:`delete_stream`) keeps every number a fenced holder may still put
at -- segment 0, each take-over lease, gc's own lease (the tail) -- and deletes the rest,
segment 1 first (from the first delete on what is left has a hole: never a shorter stream).
A holder whose lease was taken over while it stood still therefore finds its next number
taken for ever (``LeaseLost``). No writer leases or takes over gc's lease; once the gc log
records gc finished deleting the stream, a writer creating the id again puts a ``cut``
after gc's lease that voids everything before it and begins a new stream, as a folder's
writer creates a new file where gc removed one (the numbers stay taken and void); a stalled
gc that resumes deletes nothing after the last gc lease (:func:`fenced_numbers`). Readers
tell what is left by the gc log
(:func:`leftovers`: the deletion carried out, segment 0 beginning the very stream it names).
The log is trusted only as far as the seals anchor it (:func:`anchor_problem`: a log that
does not hold the head a seal recorded is treated as damaged: it excuses nothing).

Deleting an object (:func:`retire_object`) keeps the folder's guarantee that a writer who
stored bytes gc is about to delete never names a missing object: gc first creates a
*dying* marker ``gc/dying/<hex>``, then checks that no writer *touched* the object since
the plan (``gc/touch/<hex>/<token>``: what a re-put of existing bytes creates, as a
folder's re-put refreshes the file's mtime), then deletes it, its touches and the marker.
A writer whose create was refused touches the object, then waits while a dying marker is
there, then checks the object is still there (else stores it again):
:meth:`~intentlog.s3.objects.ObjectArtifacts.put`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Final, Protocol, runtime_checkable

from .._internal.digest import DIGEST_PREFIX
from ..errors import CorruptStream, LedgerError
from ..eventlog.gclog import GcDeletion, store_gc_deletions
from ..eventlog.remote import events_in
from ..heads.codec import StreamHead, decode_gc_head
from .bounds import SEALS, seal_number
from .client import ObjectClient
from .streams import GC_HOLDER, ObjectStreams

__all__ = [
    "DYING",
    "GC_FOLDER",
    "LOG_STREAM",
    "TOUCHED",
    "SubClient",
    "TimedClient",
    "compact_touches",
    "delete_stream",
    "dying_key",
    "fenced_numbers",
    "finished_deletion",
    "anchor_problem",
    "live_names",
    "leftovers",
    "log_streams",
    "object_times",
    "orphans",
    "read_log",
    "retire_object",
    "sealed_log_head",
    "stale_markers",
    "store_gc_log",
    "stream_keys",
    "touch_key",
]

#: Where the store keeps what a folder keeps in its root for retention.
GC_FOLDER: Final = "gc"
#: The gc log's stream name (under ``gc/``).
LOG_STREAM: Final = "log"
DYING: Final = f"{GC_FOLDER}/dying"
TOUCHED: Final = f"{GC_FOLDER}/touch"
_OBJECT_RE = re.compile(r"^objects/([0-9a-f]{2})/([0-9a-f]{62})$")
_SEGMENT_RE = re.compile(r"/s/(\d{12})$")


@runtime_checkable
class TimedClient(Protocol):
    """A client that lists keys with the time the store last wrote each (``S3Client`` does)."""

    def scan_times(self, folder: str) -> Iterator[tuple[str, int, int]]:
        """``(key, size, mtime_ns)`` of every object under ``folder/``, in key order."""


class SubClient:
    """An :class:`ObjectClient` over the keys under ``folder/`` of another client (the gc log's streams)."""

    def __init__(self, client: ObjectClient, folder: str) -> None:
        self.client = client
        self.folder = folder

    def _k(self, key: str) -> str:
        return f"{self.folder}/{key}"

    def describe(self, key: str = "") -> str:
        return self.client.describe(self._k(key) if key else self.folder)

    def create(self, key: str, data: bytes) -> bool:
        return self.client.create(self._k(key), data)

    def get(self, key: str) -> bytes | None:
        return self.client.get(self._k(key))

    def head(self, key: str) -> int | None:
        return self.client.head(self._k(key))

    def scan(self, folder: str, start_after: str | None = None) -> Iterator[tuple[str, int]]:
        cut = len(self.folder) + 1
        after = self._k(start_after) if start_after is not None else None
        for key, size in self.client.scan(self._k(folder), after):
            yield key[cut:], size

    def folders(self, folder: str) -> list[str]:
        return self.client.folders(self._k(folder))

    def delete(self, key: str) -> None:
        self.client.delete(self._k(key))


def log_streams(client: ObjectClient) -> ObjectStreams:
    """The gc log's stream seam: an :class:`ObjectStreams` under ``gc/`` (its one stream is :data:`LOG_STREAM`)."""
    return ObjectStreams(SubClient(client, GC_FOLDER))


def read_log(client: ObjectClient) -> bytes | None:
    """The gc log's bytes (None when no gc or keep ever wrote it); ``CorruptStream`` if its segments are damaged."""
    try:
        return log_streams(client).read(LOG_STREAM)
    except FileNotFoundError:
        return None


def store_gc_log(
    client: ObjectClient, names: list[str] | None = None
) -> tuple[dict[str, GcDeletion], str | None, frozenset[str]]:
    """What the store's gc log records deleting (latest per task), what is wrong with it, and the leftovers.

    The leftovers are the stream names that are what is left of a stream the log records
    deleting (no segment 0: :func:`leftovers`): no task for any reader. A damaged log
    excuses nothing (none then).
    """
    where = client.describe(f"{GC_FOLDER}/{LOG_STREAM}.jsonl")
    try:
        data = read_log(client)
    except CorruptStream as exc:
        return {}, f"the store's gc log ({where}) line {exc.line}: {exc.reason}", frozenset()
    unanchored = anchor_problem(client, data, where)
    if unanchored is not None:
        return {}, unanchored, frozenset()
    deleted, problem = store_gc_deletions(data, where)
    if problem is not None or not deleted:
        return deleted, problem, frozenset()
    listed = ObjectStreams(client).names() if names is None else names
    return deleted, None, frozenset(leftovers(client, listed, deleted))


def sealed_log_head(client: ObjectClient) -> tuple[str, StreamHead] | None:
    """The furthest gc log head any seal recorded, and where (None: none did); ``LedgerError`` when seals disagree."""
    best: tuple[str, StreamHead] | None = None
    for key, _ in client.scan(SEALS):
        if seal_number(key) is None:
            continue
        body = client.get(key)
        h = decode_gc_head(body, where=client.describe(key)) if body is not None else None
        if h is None:
            continue
        if best is not None and h.stream != best[1].stream:
            raise LedgerError(
                f"{client.describe(key)} anchors gc log stream {h.stream} but {best[0]} anchors {best[1].stream}"
            )
        if best is None or h.seq > best[1].seq:
            best = (client.describe(key), h)
    return best


def anchor_problem(client: ObjectClient, data: bytes | None, where: str) -> str | None:
    """What is wrong with the gc log ``data`` against the head the seals anchored (None: it continues it).

    Every seal is a lower bound: the log must hold, at the sealed seq, the event with the
    sealed digest, in the sealed log's stream. A log that was cut, rewritten or replaced
    (however well chained) is not the log the seals anchored.
    """
    try:
        sealed = sealed_log_head(client)
    except LedgerError as exc:
        return f"the seals of the store's gc log ({where}) disagree: {exc}"
    if sealed is None:
        return None
    seal_where, h = sealed
    said = f"{seal_where} anchors the gc log at seq {h.seq} with head {h.head} (stream {h.stream})"
    if data is None:
        return f"the store's gc log ({where}) is gone but {said}"
    stream: object = None
    at: str | None = None
    try:
        for ev in events_in(data, where):
            if ev.seq == 0:
                stream = ev.data.get("stream")
            if ev.seq == h.seq:
                at = ev.digest
                break
    except CorruptStream as exc:
        return f"the store's gc log ({where}) line {exc.line}: {exc.reason}"
    if stream != h.stream or at != h.head:
        return f"the store's gc log ({where}) does not continue what the seals anchored: {said}"
    return None


def leftovers(client: ObjectClient, names: list[str], deleted: dict[str, GcDeletion]) -> list[str]:
    """The names in ``names`` that are what is left of a stream the gc log records deleting.

    That is: no segment 0 (what an older gc left), or a segment 0 that begins the very
    stream the log names (its ``task.created`` stream id is the deleted one's: what
    :func:`delete_stream` keeps). One GET per name the log names; no task for any reader.
    """
    return [n for n in names if n in deleted and _left_of(client, n, deleted[n])]


def _left_of(client: ObjectClient, name: str, d: GcDeletion) -> bool:
    """No segment 0 (what an older gc left), or gc's lease at the tail over what begins the very stream deleted.

    A stream created again after the deletion (:meth:`ObjectStreams.lease` on a retired
    name) begins another stream id and its tail is no longer gc's: a task again.
    """
    streams = ObjectStreams(client)
    try:
        _, payload = streams.segment(name, 0)
    except CorruptStream:
        return not client.get(f"tasks/{name}/s/{0:012d}")  # missing: no stream; unreadable: not gc's to excuse
    try:
        first = next(events_in(payload, name), None)
    except CorruptStream:
        return False
    if first is None or first.seq != 0:
        return False
    if first.data.get("stream") == d.stream and streams.retired(name):
        return True  # gc's lease at the tail: what gc left of the stream it deleted
    return streams.retired(name) and streams.generation_id(name) == d.stream  # gc deleted it after a rebirth


def finished_deletion(client: ObjectClient, name: str) -> str | None:
    """The stream id of ``name`` the gc log records gc finished deleting (``gc.finished``), if any; else None.

    None too when the log is damaged or not what the seals anchored: it excuses nothing.
    """
    deleted, problem, _ = store_gc_log(client, [])
    d = deleted.get(name)
    return d.stream if problem is None and d is not None and d.finished else None


def live_names(client: ObjectClient) -> list[str]:
    """The store's task streams without what is left of those its gc log records deleting (a damaged log: all)."""
    names = ObjectStreams(client).names()
    left = store_gc_log(client, names)[2]
    return [n for n in names if n not in left]


# -- streams --------------------------------------------------------------------------


def stream_keys(client: ObjectClient, name: str) -> list[str]:
    """Every key of the stream ``name`` (segments and checkpoints), in key order."""
    return [k for k, _ in client.scan(f"tasks/{name}")]


def delete_stream(client: ObjectClient, name: str) -> int:
    """Delete the stream's keys but the numbers a fenced holder may still put at. How many keys went.

    Kept: segment 0 and every ``cut`` that restarts the stream (what tells a retired stream's
    id: a writer creates the id again only after gc finished deleting exactly that stream,
    :meth:`ObjectStreams.lease`), every *take-over* lease segment (a ``lease`` whose predecessor is a ``lease`` or
    ``data`` segment, or is gone: the number the holder it fenced targets next), and a
    last segment that is a lease (gc's own, its tail: writers are refused it). A fenced
    holder's next put therefore always finds its number taken (``LeaseLost``), before and
    after gc. Deleted: checkpoints, then the other segments in order (segment 1 first: from
    the first delete on what is left has a hole, never a shorter stream). A stream with no
    segment 0 (what an older gc left) goes whole.
    """
    keys = stream_keys(client, name)
    numbers = {int(m.group(1)): k for k in keys if (m := _SEGMENT_RE.search(k))}
    others = [k for k in keys if not _SEGMENT_RE.search(k)]
    kept = fenced_numbers(client, name, sorted(numbers)) if 0 in numbers else set()
    gone = [*others, *(numbers[n] for n in sorted(numbers) if n not in kept)]
    for key in gone:
        client.delete(key)
    if not kept:  # a store that keeps folders (SeaweedFS's filer) would still list the name: remove them too
        for folder in (f"tasks/{name}/c", f"tasks/{name}/s", f"tasks/{name}"):
            client.delete(folder)  # a delete of a folder that holds anything removes nothing
    return len(gone)


def fenced_numbers(client: ObjectClient, name: str, numbers: list[int]) -> set[int]:
    """The numbers of ``name`` kept for ever: 0, take-over leases, a lease at the tail (:func:`delete_stream`)."""
    streams = ObjectStreams(client)

    def kind(n: int) -> str | None:
        try:
            head = streams.segment(name, n)[0]
        except CorruptStream:
            return None  # gone or unreadable: nothing is known of it
        if head.kind == "lease" and head.holder.startswith(GC_HOLDER):
            return "gc-lease"
        return "restart" if head.kind == "cut" and head.void == 0 else head.kind

    with ThreadPoolExecutor(min(8, max(1, len(numbers)))) as pool:
        kinds = dict(zip(numbers, pool.map(kind, numbers), strict=True))
    kept = {0} | {n for n in numbers if kinds[n] == "restart"}  # where each generation of the id begins
    leases = ("lease", "gc-lease")
    for n in numbers[1:]:
        k, before = kinds[n], kinds.get(n - 1)
        if k is None or (k in leases and (before is None or before in (*leases, "data"))):
            kept.add(n)  # a take-over (or what cannot be told from one): a fenced holder's number
    if numbers and kinds[numbers[-1]] in leases:
        kept.add(numbers[-1])
    gc_leases = [n for n in numbers if kinds[n] == "gc-lease"]
    if gc_leases:  # what follows the last gc lease was written after gc began: a new stream under the id
        kept |= {n for n in numbers if n > gc_leases[-1]}
    return kept


def orphans(client: ObjectClient, name: str) -> list[str] | None:
    """The keys of ``name`` when they are no stream (no segment 0: an interrupted delete, a fenced put); else None."""
    keys = stream_keys(client, name)
    if f"tasks/{name}/s/{0:012d}" in keys:
        return None
    return keys  # none at all: an empty folder a store that keeps folders still lists


# -- objects --------------------------------------------------------------------------


def _hex(digest: str) -> str:
    return digest[len(DIGEST_PREFIX) :]


def dying_key(digest: str) -> str:
    return f"{DYING}/{_hex(digest)}"


def touch_key(digest: str, token: str) -> str:
    return f"{TOUCHED}/{_hex(digest)}/{token}"


def _touches(client: ObjectClient, digest: str) -> list[str]:
    return [k for k, _ in client.scan(f"{TOUCHED}/{_hex(digest)}")]


def object_times(client: ObjectClient) -> Iterator[tuple[str, int, int, int]]:
    """``(digest, size, mtime_ns, touches)`` of every object; its time is its latest put or touch.

    A client that cannot say when it wrote a key gives ``mtime_ns`` -1: unknown, so never
    past a grace period (nothing is deleted on a guess).
    """
    touched: dict[str, tuple[int, int]] = {}
    if isinstance(client, TimedClient):
        for key, _, mtime in client.scan_times(TOUCHED):
            hexd = key.split("/")[2] if key.count("/") >= 3 else ""
            last, n = touched.get(hexd, (0, 0))
            touched[hexd] = (max(last, mtime), n + 1)
        listing: Iterator[tuple[str, int, int]] = client.scan_times("objects")
    else:
        listing = ((k, s, -1) for k, s in client.scan("objects"))
    for key, size, mtime in listing:
        m = _OBJECT_RE.match(key)
        if m is None:
            continue  # a stray key is not an object (verify reports it)
        hexd = m.group(1) + m.group(2)
        last, n = touched.get(hexd, (-1, 0))
        yield DIGEST_PREFIX + hexd, size, mtime if mtime < 0 else max(mtime, last), n


def retire_object(
    client: ObjectClient,
    digest: str,
    key: str,
    touches: int,
    token: str,
    before_delete: Callable[[], None] | None = None,
) -> str:
    """Delete the object at ``key`` unless a writer touched it since the plan saw ``touches`` touches.

    ``"deleted"``, ``"restored"`` (touched since: kept), ``"gone"`` (not there), or
    ``"busy"`` (another gc's dying marker: left alone). The dying marker is created first
    and removed last, so a writer that re-puts meanwhile waits for the verdict.
    """
    marker = dying_key(digest)
    if not client.create(marker, token.encode()):
        return "busy"
    try:
        found = _touches(client, digest)
        if len(found) != touches:
            return "restored"
        if client.head(key) is None:
            return "gone"
        if before_delete is not None:
            before_delete()  # gc proves it still holds its lease (a stalled gc stops here)
        client.delete(key)
        for t in found:
            client.delete(t)
        return "deleted"
    finally:
        try:
            client.delete(marker)
        except LedgerError:
            pass  # a marker left behind is removed by the next gc (writers wait for it a bounded time)


def compact_touches(client: ObjectClient) -> int:
    """Delete every touch but each object's latest (which alone dates it); how many went.

    Only ever called under the gc log's lease, before a plan: a writer's touch made
    meanwhile is newer than the listing and stays.
    """
    if not isinstance(client, TimedClient):
        return 0
    latest: dict[str, tuple[int, str]] = {}
    extra: list[str] = []
    for key, _, mtime in client.scan_times(TOUCHED):
        hexd = key.split("/")[2] if key.count("/") >= 3 else key
        prev = latest.get(hexd)
        if prev is None or mtime >= prev[0]:
            if prev is not None:
                extra.append(prev[1])
            latest[hexd] = (mtime, key)
        else:
            extra.append(key)
    for key in extra:
        client.delete(key)
    return len(extra)


def stale_markers(client: ObjectClient) -> list[str]:
    """Dying markers a crashed gc left (only ever called under the gc log's lease)."""
    return [k for k, _ in client.scan(DYING)]
