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

The counts live with the task handle, which is shared process-wide, so every client made
for one task agrees on them. :func:`restart` forgets them, as a new process would.
"""

from __future__ import annotations

import heapq
import threading
import weakref
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from ..stream import TaskStream

__all__ = ["Occurrences", "hash_key", "named_key", "occurrences"]


def named_key(scope: str, n: int) -> str:
    return scope if n == 0 else f"{scope}#{n}"


def hash_key(request_hash: str, n: int) -> str:
    return f"http:{request_hash}#{n}"


@final
class Occurrences:
    """Per-scope occurrence counters with a pool of released (unfinished) occurrences."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}
        self._open: dict[tuple[str, str], list[int]] = {}

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
