"""Offline replay: answer requests from a task's record alone, never from the network.

Where the live transport *resumes* (and may send what the record proves safe), a replay
transport only *reads*: it opens no writer, takes no lock and appends nothing. Each
request is keyed exactly as the live transport keys it; the i-th try of a key gets the
i-th recorded attempt's outcome — its response (byte for byte), its ``not sent``
connection error — so a recorded run that saw a 503 and then a 200 replays as a 503 and
then a 200. A request the record does not hold, or whose hash differs from the recorded
one, raises :class:`NotRecorded` naming the request, its key, the record, and where the
nearest recorded request to the same URL differs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, final

import orjson

from .._internal.diff import first_difference
from ..artifacts.inline import ref_bytes
from ..effects.intent import current_key
from ..errors import IntentlogError
from ._flavor import Flavor
from ._keys import Occurrences, hash_key, named_key, stream_identity
from ._transport import Options, check_task, hashed_keyed_plan, keyed_plan, unkeyed_plan
from ._wire import RequestPlan, decode_response

if TYPE_CHECKING:
    from ..eventlog import Event
    from ..stream import StreamSource

__all__ = ["AsyncReplayCore", "NotRecorded", "Replay", "SyncReplayCore"]


class NotRecorded(IntentlogError, AssertionError):
    """A request is not in the record being replayed, or differs from the recorded one.

    Also an :class:`AssertionError`, so test runners report it as a failed expectation.
    """

    def __init__(
        self,
        *,
        request: str,
        request_hash: str,
        key: str,
        record: str,
        reason: str,
        difference: str | None = None,
        hint: str = "record it again",
    ) -> None:
        self.request = request
        self.request_hash = request_hash
        self.key = key
        self.record = record
        self.reason = reason
        self.difference = difference
        diff = f"; {difference}" if difference else ""
        super().__init__(f"replay of {record}: {request} (request {request_hash}, key {key!r}) {reason}{diff}; {hint}")


@dataclass(slots=True)
class _Try:
    kind: str  # "response" | "not_sent" | "unknown"
    ref: Mapping[str, Any] | None = None
    reason: str | None = None
    completes: bool = False


@dataclass(slots=True)
class _Recorded:
    key: str
    request_hash: str | None = None
    request_ref: Mapping[str, Any] | None = None
    name: str | None = None
    tries: list[_Try] = field(default_factory=list)
    cursor: int = 0


def index_record(events: Iterable[Event]) -> dict[str, _Recorded]:
    """Every key of a task's record with its request hash and its attempts' outcomes, in order.

    Attempts of every call of a key (a resumed call and its successors) are taken in
    recording order. An attempt reconciled ``not_served`` never reached the server and is
    left out, as is one reconciled ``provider_dedup`` (the provider answered it again in
    the next attempt); one reconciled ``served`` with evidence replays the evidence.
    """
    by_key: dict[str, _Recorded] = {}
    call_key: dict[str, str] = {}
    tries: dict[tuple[str, int], _Try] = {}
    for ev in events:
        d = ev.data
        cid = d.get("call")
        if not isinstance(cid, str):
            continue
        if ev.kind == "call.requested" and isinstance(d.get("key"), str):
            key = d["key"]
            call_key[cid] = key
            rec = by_key.setdefault(key, _Recorded(key))
            rec.name = d.get("name") if isinstance(d.get("name"), str) else rec.name
            continue
        key = call_key.get(cid)
        if key is None:
            continue
        rec = by_key[key]
        n = d.get("attempt")
        if ev.kind == "call.manifest":
            rec.request_hash = d.get("request_hash")
            ref = d.get("request")
            rec.request_ref = ref if isinstance(ref, dict) else None
        elif ev.kind == "attempt.started" and isinstance(n, int):
            t = _Try("unknown")
            tries[(cid, n)] = t
            rec.tries.append(t)
        elif isinstance(n, int) and (cid, n) in tries:
            t = tries[(cid, n)]
            if ev.kind == "attempt.observed" and isinstance(d.get("response"), dict):
                t.kind, t.ref = "response", d["response"]
            elif ev.kind == "attempt.not_sent":
                t.kind, t.reason = "not_sent", str(d.get("reason") or "not sent")
            elif ev.kind == "effect.reconciled" and d.get("outcome") in ("not_served", "provider_dedup"):
                t.kind = "skip"  # never reached the server, or answered again by the next attempt
            elif ev.kind == "call.completed":
                t.completes = True
    for rec in by_key.values():
        rec.tries = [t for t in rec.tries if t.kind != "skip"]
    return by_key


@final
class Replay:
    """Offline replay of one task's record; make clients with :meth:`client` / :meth:`async_client`.

    ``misses`` lists every :class:`NotRecorded` raised, so a harness can fail a test even
    when the code under test swallowed the exception.
    """

    def __init__(self, task: StreamSource, *, options: Options | None = None, hint: str = "record it again") -> None:
        self.stream = check_task(task)
        self.task = task  # as given (a Task, or its stream)
        self.options = options or Options()
        self.hint = hint
        self.misses: list[NotRecorded] = []
        self.occurrences = Occurrences()
        self._lock = threading.Lock()
        self._index: dict[str, _Recorded] | None = None

    def __repr__(self) -> str:
        return f"<intentlog.http.Replay of task {self.stream.id!r} in {str(self.stream.root)!r}>"

    @property
    def record(self) -> str:
        return f"{self.stream.root}/tasks/{self.stream.id}.jsonl"

    def index(self) -> dict[str, _Recorded]:
        with self._lock:
            if self._index is None:
                self._index = index_record(self.stream.events())
            return self._index

    def identity(self) -> str:
        """The recorded stream's identity (its first event's digest): what its hashed keys travel with."""
        with self._lock:
            if self.occurrences.identity is None:
                self.occurrences.identity = stream_identity(self.stream.events(), self.stream.id)
            return self.occurrences.identity

    def restart(self) -> None:
        """Replay from the start of the record again."""
        with self._lock:
            self._index = None
        self.occurrences.reset()

    def _load(self, ref: Mapping[str, Any]) -> bytes:
        return ref_bytes(ref, self.stream.store)

    def _recorded_request(self, rec: _Recorded) -> Any:
        if rec.request_ref is None:
            return None
        try:
            return orjson.loads(self._load(rec.request_ref))
        except (IntentlogError, orjson.JSONDecodeError):
            return None

    def _miss(self, plan: RequestPlan, key: str, reason: str, rec: _Recorded | None) -> NotRecorded:
        now = orjson.loads(plan.canonical.data)
        difference = None
        if rec is not None:
            recorded = self._recorded_request(rec)
            found = first_difference(recorded, now) if recorded is not None else None
            difference = f"it differs from the recorded request at {found}" if found else None
        else:
            for candidate in self.index().values():  # the nearest: same method and URL, not used up
                recorded = self._recorded_request(candidate)
                if not isinstance(recorded, dict):
                    continue
                if (recorded.get("method"), recorded.get("url")) != (now.get("method"), now.get("url")):
                    continue
                found = first_difference(recorded, now)
                if found:
                    difference = f"the nearest recorded request to that URL (key {candidate.key!r}) differs at {found}"
                    if candidate.cursor < len(candidate.tries):
                        break
        exc = NotRecorded(
            request=plan.label,
            request_hash=plan.canonical.digest,
            key=key,
            record=self.record,
            reason=reason,
            difference=difference,
            hint=self.hint,
        )
        with self._lock:
            self.misses.append(exc)
        return exc

    def answer(self, request: Any, plan: RequestPlan, flavor: Flavor, scope: str, key: str) -> tuple[Any, bool]:
        """The recorded outcome of this try of ``key``, and whether it completed the call."""
        rec = self.index().get(key)
        if rec is None:
            raise self._miss(plan, key, "is not in the record", None)
        plan = plan.as_recorded(rec.request_hash)  # a record made under the first canonicalisation
        if rec.request_hash != plan.canonical.digest:
            raise self._miss(plan, key, f"does not match the recorded request {rec.request_hash}", rec)
        with self._lock:
            t = rec.tries[rec.cursor] if rec.cursor < len(rec.tries) else None
            if t is not None:
                rec.cursor += 1
        if t is None:
            raise self._miss(plan, key, f"was tried more often than recorded ({len(rec.tries)} attempts)", rec)
        if t.kind == "not_sent":
            raise flavor.lib.ConnectError(f"recorded as not sent: {t.reason}", request=request)
        if t.kind != "response" or t.ref is None:
            raise self._miss(plan, key, "has an unknown effect in the record (attempt started, nothing after)", rec)
        parts = decode_response(self._load(t.ref))
        info = {"task": self.stream.id, "key": key, "request_hash": plan.canonical.digest, "sent": False}
        response = flavor.response(
            parts.status,
            parts.headers,
            parts.body,
            http_version=parts.http_version,
            reason=parts.reason,
            request=request,
            extensions={"intentlog": {**info, "retry_pending": not t.completes, "replay": True}},
        )
        return response, t.completes

    # -- clients ------------------------------------------------------------------------

    def transport(self, *, lib: Any = None) -> Any:
        from ._flavor import flavor as get_flavor

        fl = get_flavor(lib)
        return fl.bind(SyncReplayCore, asynchronous=False)(self, fl)

    def async_transport(self, *, lib: Any = None) -> Any:
        from ._flavor import flavor as get_flavor

        fl = get_flavor(lib)
        return fl.bind(AsyncReplayCore, asynchronous=True)(self, fl)

    def client(self, *, lib: Any = None, **kwargs: Any) -> Any:
        """A client of ``lib`` (``"httpx"`` or ``"httpx2"``) answered from the record only."""
        from ._flavor import flavor as get_flavor

        fl = get_flavor(lib)
        return _no_bypass(fl.lib.Client(**kwargs), lambda: self.transport(lib=fl.lib))

    def async_client(self, *, lib: Any = None, **kwargs: Any) -> Any:
        from ._flavor import flavor as get_flavor

        fl = get_flavor(lib)
        return _no_bypass(fl.lib.AsyncClient(**kwargs), lambda: self.async_transport(lib=fl.lib))


def _no_bypass(client: Any, make: Callable[[], Any]) -> Any:
    """Replace every transport the client built (default, proxies, mounts) by a replay one.

    The replaced ones never opened a connection; there is nothing to close.
    """
    client._transport = make()
    mounts = getattr(client, "_mounts", None)
    if isinstance(mounts, dict):
        for pattern, transport in list(mounts.items()):
            if transport is not None:
                mounts[pattern] = make()
    return client


class _ReplayCore:
    def __init__(self, replay: Replay, flavor: Flavor) -> None:
        self.replay = replay
        self.flavor = flavor

    def __repr__(self) -> str:
        return f"<intentlog.http replay transport for task {self.replay.stream.id!r} ({self.flavor.name})>"

    def _handle(self, request: Any) -> Any:
        plan = unkeyed_plan(request, self.replay.options)  # the dedup header (if declared) carries the key
        named = current_key(self.replay.stream)
        index = self.replay.index()
        if named is None and hash_key(plan.canonical.digest, 0) not in index:
            for old in plan.older():  # the key an older intentlog gave this request, if that is the one recorded
                if hash_key(old.canonical.digest, 0) in index:
                    plan = plan.as_recorded(index[hash_key(old.canonical.digest, 0)].request_hash)
                    break
        digest = plan.canonical.digest
        scope = named if named is not None else digest
        make = functools.partial(named_key, named) if named is not None else functools.partial(hash_key, digest)
        occ = self.replay.occurrences
        n = occ.take(scope, digest)
        done = False
        try:
            key = make(n)
            if named is not None:
                plan = keyed_plan(request, self.replay.options, plan, key)
            else:
                rec = index.get(key)
                recorded = None if rec is None else rec.request_hash
                plan = hashed_keyed_plan(
                    request,
                    self.replay.options,
                    plan,
                    key,
                    self.replay.identity,
                    recorded,
                    lambda: None if rec is None else self.replay._recorded_request(rec),
                )
            response, done = self.replay.answer(request, plan, self.flavor, scope, key)
        finally:
            if not done:
                occ.release(scope, digest, n)
        return response


class SyncReplayCore(_ReplayCore):
    def handle_request(self, request: Any) -> Any:
        request.read()
        return self._handle(request)

    def close(self) -> None:
        pass


class AsyncReplayCore(_ReplayCore):
    async def handle_async_request(self, request: Any) -> Any:
        await request.aread()
        return self._handle(request)

    async def aclose(self) -> None:
        pass
