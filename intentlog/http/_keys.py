"""Which idempotency key an HTTP request gets, so that running a script again maps it to its record.

A request made inside ``with task.key(k):`` belongs to the *scope* ``k``; any other
request belongs to the scope of its canonical request hash. Within a scope, requests are
numbered by occurrence in this process: the key of occurrence ``n`` is ``k`` (n = 0) or
``k#n`` for a named scope, and ``http:<request hash>#n`` for a hashed one. A script that
makes its requests in the same order on every run therefore maps the i-th request of a
scope to the same key — and so to the same recorded call — each time.

An occurrence is *taken* when a request starts (two concurrent identical requests get two
keys) and *consumed* only when its call completes. A call that did not complete — its
failure was handed back for the caller to retry, its effect is unknown, its request
drifted — is released, and the next request of the same scope with the same hash is that
call again. So an SDK's retry, a script's own retry loop, or a later identical request
continue the unfinished call (its next attempt, or the same ``EffectUnknown``); none of
them can open a second call and send a duplicate past an unresolved one.

The key travels to the provider (in a :class:`~intentlog.ProviderDedup` ``header``) as
it is for a named scope: the caller chose it. A hashed key names only the request, so two
tasks — or two ledgers — making the same request would send one key, and a provider that
deduplicates would answer the second with the first's result. A hashed key therefore
travels as :func:`sent_key`: a digest of the task stream's identity (its first event's
digest, unique to the ledger, task and stream, and the same on every run) and the call's
key — the same on every resend of the call, different for every other call anywhere. The
value sent is part of the recorded request; a call recorded with another value (an older
intentlog sent the key itself; a fork copied the call from another stream) keeps the
value it recorded, so its resend or replay is the same request.

The counts live with the task handle, which is shared process-wide, so every client made
for one task agrees on them. :func:`restart` forgets them, as a new process would.
"""

from __future__ import annotations

import heapq
import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, final

from .._internal.digest import digest_bytes
from ..errors import IntentlogError

if TYPE_CHECKING:
    from ..eventlog.format import Event
    from ..stream import TaskStream

__all__ = ["Occurrences", "hash_key", "named_key", "occurrences", "sent_key", "sent_values", "stream_identity"]

#: What a hashed key's header value starts with.
SENT_PREFIX: Final = "intentlog-"


def named_key(scope: str, n: int) -> str:
    return scope if n == 0 else f"{scope}#{n}"


def hash_key(request_hash: str, n: int) -> str:
    return f"http:{request_hash}#{n}"


def sent_key(identity: str, key: str) -> str:
    """The header value of hashed key ``key`` in the stream whose identity is ``identity``.

    ``intentlog-`` and 64 hex digits: the BLAKE3 digest of both, so it is printable ASCII
    and short enough for any provider, the same for every resend of the call, and unique
    to the stream (so to the ledger and the task) and the call.
    """
    return SENT_PREFIX + digest_bytes(f"{identity}\n{key}".encode()).partition(":")[2]


def sent_values(identity: str, key: str) -> tuple[str, ...]:
    """The header values a recorded call of hashed ``key`` may carry: this version's first, then the older one."""
    return (sent_key(identity, key), key)


def stream_identity(events: Iterable[Event], task_id: str) -> str:
    """The identity of a task stream: the digest of its first event (its ``task.created``)."""
    for ev in events:
        return ev.digest
    raise IntentlogError(f"task {task_id!r}: the stream has no first event to key its requests by")


@final
class Occurrences:
    """Per-scope occurrence counters with a pool of released (unfinished) occurrences."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}
        self._open: dict[tuple[str, str], list[int]] = {}
        self.identity: str | None = None  # the stream's identity, once read (see stream_identity)

    def take(self, scope: str, request_hash: str) -> int:
        """The occurrence a new request of ``scope`` gets: an unfinished one with its hash, else the next."""
        with self._lock:
            pool = self._open.get((scope, request_hash))
            if pool:
                return heapq.heappop(pool)
            n = self._next.get(scope, 0)
            self._next[scope] = n + 1
            return n

    def release(self, scope: str, request_hash: str, n: int) -> None:
        """Put back an occurrence whose call did not complete: the next such request continues it."""
        with self._lock:
            heapq.heappush(self._open.setdefault((scope, request_hash), []), n)

    def reset(self) -> None:
        with self._lock:
            self._next.clear()
            self._open.clear()
            self.identity = None


_LOCK = threading.Lock()
_BY_TASK: weakref.WeakKeyDictionary[TaskStream, Occurrences] = weakref.WeakKeyDictionary()


def occurrences(task: TaskStream) -> Occurrences:
    """The occurrence counters of ``task`` in this process (shared by all its clients).

    Kept by the task's stream core, which is shared process-wide as its handle is.
    """
    with _LOCK:
        found = _BY_TASK.get(task)
        if found is None:
            found = _BY_TASK[task] = Occurrences()
        return found
