"""The live transports: every request an effect, sent through an inner transport (DESIGN §5).

For each request the transport builds its envelope and hash (:mod:`._wire`), chooses its
key (:mod:`._keys`) and runs the effect protocol on the task's stream core
(:class:`~intentlog.stream.TaskStream`, never the ``Task`` facade) with a ``send`` that does
the real exchange through the inner transport and returns the response artifact. What
happens then is the protocol's: a completed call replays its recorded response and sends
nothing; a call whose intent is recorded but that never started is sent after the drift
check; an attempt that started and left nothing after it raises
:class:`~intentlog.errors.EffectUnknown` and is never resent blind.

What the caller sees:

- a response: always built from the stored artifact, the first time as on every replay,
  so a run and its replay hand the client the very same status, headers and body bytes;
- with a :class:`~intentlog.ProviderDedup` declaration: its ``header`` (if any) carries
  the call's key on every attempt and is part of the recorded request; a 400/422 naming
  the idempotency key is :class:`~intentlog.errors.KeyReused` (the call fails as drift);
  a 409 ("key in use") is the retryable failure below, never a new effect;
- an error status the server asks to be retried (408, 409, 429, 5xx, or
  ``x-should-retry: true``): recorded as a provider failure (``attempt.observed`` with
  the error, then ``attempt.retry_decided``) and *handed back* as that response, so the
  SDK or script decides when to try again; its next try is the same call's next attempt;
- a connection error proving the request never left (DNS failure, connection refused,
  connect or pool timeout): recorded as ``attempt.not_sent`` plus a retry decision, and
  the library's own exception (``ConnectError`` …) raised, so SDK retry logic works as
  usual; the next try, in this run or the next, is the next attempt;
- anything else after ``attempt.started`` (read timeout, connection reset, server gone
  mid-answer): :class:`~intentlog.errors.EffectUnknown`, chained from the library's
  exception. It is not an ``httpx`` error: ``openai`` lets it through untouched;
  ``anthropic`` 2.x wraps it in ``APIConnectionError`` and may retry — each retry is the
  same unresolved call and raises it again without sending (see ``unknown_effect``).

Async transports run the protocol — its fsyncs — in a worker thread
(``anyio.to_thread``), and the exchange itself back on the event loop
(``anyio.from_thread``): a sync fsync can take milliseconds, and the loop must not stall
for it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, TypedDict, final

import orjson

from ..artifacts.inline import ref_bytes
from ..dedup import ProviderDedup
from ..dedup import check as check_dedup
from ..effects import RetryPolicy
from ..effects.intent import check_rules, current_key
from ..effects.options import EffectOptions
from ..effects.prepare import run_effect
from ..errors import IntentlogError, KeyReused, NotSent, ProviderFailure, RetryHandedBack, UsageError
from ..eventlog.canonical import CANON_VERSION, canon_before
from ..eventlog.redaction import scrub_text
from ..stream import StreamSource, TaskStream
from . import _keys
from ._flavor import Flavor
from ._keys import hash_key, named_key, occurrences
from ._wire import (
    HASHED_HEADERS,
    REDACT_HEADERS,
    REDACT_QUERY,
    RequestPlan,
    decode_response,
    encode_response,
    plan_request,
)

__all__ = [
    "HTTP_DEFAULTS",
    "AsyncTransportCore",
    "HashKwargs",
    "HttpKwargs",
    "Options",
    "Retryable",
    "SyncTransportCore",
    "check_task",
    "default_retryable",
    "keyed_plan",
    "unkeyed_plan",
]

Headers = list[tuple[bytes, bytes]]
#: Says which error responses are handed back as retry-pending failures: ``(status, headers) -> bool``.
Retryable = Callable[[int, Headers], bool]


def default_retryable(status: int, headers: Headers) -> bool:
    """408, 409, 429 and 5xx are worth another try, unless ``x-should-retry`` says otherwise.

    The same rule the OpenAI and Anthropic SDKs apply before their own retries.
    """
    return ProviderFailure.retry_wanted(status, headers)


def check_task(task: object) -> TaskStream:
    """The stream core of ``task`` (a :class:`~intentlog.Task`, or its stream), else :class:`UsageError`.

    Nothing is written. The transports and the replay are written against the stream core.
    """
    stream = getattr(task, "stream", None)
    if not isinstance(stream, TaskStream):
        raise UsageError(f"intentlog.http needs a task (intentlog.open(...).task(id)), not {type(task).__name__}")
    return stream


# -- the options, as keyword arguments: each declared once --------------------------


class HashKwargs(TypedDict, total=False):
    """How requests are hashed and recorded: the options of :func:`intentlog.http.replay`."""

    hash_headers: Iterable[str]  # request headers hashed beside the default ones
    redact: Iterable[str]  # names redacted beside the default ones
    drop: Iterable[str] | None  # the canonicaliser's dropped timestamp keys (None: its own)
    dedup: ProviderDedup | None  # the provider's idempotency window


class HttpKwargs(HashKwargs, total=False):
    """The options of :func:`intentlog.http.transport` and of the client factories."""

    retryable: Retryable | None  # which error responses are handed back (None: default_retryable)


#: The options' defaults where not None.
HTTP_DEFAULTS: Final[Mapping[str, object]] = {"hash_headers": (), "redact": ()}


@final
@dataclass(frozen=True, slots=True)
class Options:
    """How requests become records: shared by every transport a client factory makes."""

    hash_headers: frozenset[str] = HASHED_HEADERS
    redact: frozenset[str] = REDACT_HEADERS
    redact_query: frozenset[str] = REDACT_QUERY
    drop: tuple[str, ...] | None = None
    retryable: Callable[[int, Headers], bool] = default_retryable
    dedup: ProviderDedup | None = None

    @classmethod
    def of(cls, given: Mapping[str, Any], allowed: type, where: str) -> Options:
        """The options a public entry point was given, checked once: nothing is written.

        ``allowed`` is the entry point's TypedDict (:class:`HttpKwargs`, :class:`HashKwargs`);
        a name outside it raises :class:`TypeError` as Python does for an unexpected
        keyword argument of ``where``.
        """
        for name in given:
            if name not in allowed.__annotations__:
                raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
        return cls.build(**given)

    @classmethod
    def build(
        cls,
        *,
        hash_headers: Iterable[str] = (),
        redact: Iterable[str] = (),
        drop: Iterable[str] | None = None,
        retryable: Retryable | None = None,
        dedup: ProviderDedup | None = None,
    ) -> Options:
        check_dedup(dedup)
        for label, names in (("hash_headers", hash_headers), ("redact", redact)):
            if isinstance(names, str):
                raise UsageError(f"{label} must be a collection of names, not the string {names!r}")
        check_rules(drop, None)
        extra_redact = frozenset(n.lower() for n in redact)
        # the key header is part of the recorded request: the provider sees the recorded key
        key_header = frozenset({dedup.header.lower()}) if dedup is not None and dedup.header else frozenset()
        return cls(
            hash_headers=HASHED_HEADERS | frozenset(n.lower() for n in hash_headers) | key_header,
            redact=REDACT_HEADERS | extra_redact,
            redact_query=REDACT_QUERY | extra_redact,
            drop=None if drop is None else tuple(drop),
            retryable=retryable or default_retryable,
            dedup=dedup,
        )

    def effect(self, name: str) -> EffectOptions:
        """The effect options of one request (``name``: its label), from these checked options."""
        return EffectOptions(name=name, drop=self.drop, redact=self.redact, dedup=self.dedup, retry=HAND_BACK)


# -- handing a retry decision back to the caller ------------------------------------


def plan_for(request: Any, o: Options, version: str = CANON_VERSION) -> RequestPlan:
    """What a request is for the record (method, URL, headers that matter, body), under ``o``.

    The plan can give its first-canonicalisation form (``plan.legacy()``), computed only
    when a record made by an older intentlog needs it.
    """
    plan = plan_request(
        request.method,
        str(request.url),
        request.headers.raw,
        request.content,
        hash_headers=o.hash_headers,
        redact=o.redact,
        redact_query=o.redact_query,
        drop=o.drop,
        version=version,
        public=frozenset({o.dedup.header.lower()}) if o.dedup is not None and o.dedup.header else frozenset(),
    )
    before = canon_before(version)
    if before is None:
        return plan
    return replace(plan, legacy=functools.partial(plan_for, request, o, before))


def unkeyed_plan(request: Any, o: Options) -> RequestPlan:
    """The plan a request's key is chosen from: without the dedup header, whose value is the key itself."""
    if o.dedup is not None and o.dedup.header is not None and o.dedup.header in request.headers:
        del request.headers[o.dedup.header]
    return plan_for(request, o)


def keyed_plan(request: Any, o: Options, plan: RequestPlan, key: str, value: str | None = None) -> RequestPlan:
    """With a dedup ``header``, put the call's key (as ``value``) in it and plan again: the header is recorded.

    The key was chosen from the request without that header (any value the caller or SDK
    put there is replaced), so a re-run maps to the same key and the same hash.
    """
    if o.dedup is None or o.dedup.header is None:
        return plan
    sent = key if value is None else value
    if not sent.isascii() or not sent.isprintable():
        raise UsageError(
            f"key {key!r} cannot travel in the {o.dedup.header} header (printable ASCII only): choose another key"
        )
    request.headers[o.dedup.header] = sent
    return plan_for(request, o)


def hashed_keyed_plan(
    request: Any,
    o: Options,
    plan: RequestPlan,
    key: str,
    identity: Callable[[], str],
    recorded: str | None,
    recorded_request: Callable[[], Any],
) -> RequestPlan:
    """:func:`keyed_plan` for a hashed key: it travels as :func:`~._keys.sent_key`, unique to the stream and call.

    ``recorded``: the request hash the record holds for ``key`` (None: no call yet). A call
    already recorded keeps the value it was sent with — an older intentlog's (the key
    itself), or one made in the task a fork copied it from — read from the recorded
    request (``recorded_request()``, its parsed JSON, or None) when it is neither of
    :func:`~._keys.sent_values`: its resend or replay is the same request under the same key.
    """
    if o.dedup is None or o.dedup.header is None:
        return plan
    values = _keys.sent_values(identity(), key)
    if recorded is None:
        return keyed_plan(request, o, plan, key, values[0])
    candidates = [*values, _header_of(recorded_request(), o.dedup.header)]
    for value in candidates:
        if value is None:
            continue
        keyed = keyed_plan(request, o, plan, key, value)
        if keyed.as_recorded(recorded).canonical.digest == recorded:
            return keyed
    return keyed_plan(request, o, plan, key, values[0])


def _header_of(recorded_request: Any, header: str) -> str | None:
    """The value of ``header`` in a recorded request (parsed JSON), or None."""
    headers = recorded_request.get("headers") if isinstance(recorded_request, Mapping) else None
    value = headers.get(header.lower()) if isinstance(headers, Mapping) else None
    return value if isinstance(value, str) else None


# Every attempt's failure that allows another try is recorded with a retry decision
# (delay null: the caller chooses when to try again) and handed back as RetryHandedBack:
# the SDK (or the script, or the next run) makes the next attempt. There is no attempt
# limit here: the caller's own retry budget is the limit.
HAND_BACK: Final = RetryPolicy(
    max_attempts=1_000_000,
    retry_not_sent=True,
    retry_on=lambda failure: failure.retryable,
    hand_back=True,
)


@dataclass(slots=True)
class _Raw:
    status: int
    headers: Headers
    body: bytes
    http_version: str
    reason: str


@dataclass(slots=True)
class _Trace:
    """What happened inside one ``effect`` run, for the caller's view of it."""

    sent: bool = False
    not_sent: BaseException | None = None  # the library's exception proving nothing left
    failure: bytes | None = None  # the artifact of a failure handed back
    handed_back: bool = False


def _scrubbed(exc: BaseException, secrets: frozenset[str]) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return scrub_text(text, secrets)


class _Core:
    """What the sync and async transports share: planning, keys, the protocol, the response."""

    def __init__(self, task: StreamSource, *, inner: Any, flavor: Flavor, options: Options) -> None:
        self.stream = check_task(task)
        self.task = task  # as given (a Task, or its stream)
        self.inner = inner
        self.flavor = flavor
        self.options = options
        self._occurrences = occurrences(self.stream)

    def __repr__(self) -> str:
        return f"<intentlog.http transport for task {self.stream.id!r} ({self.flavor.name})>"

    def _plan(self, request: Any) -> RequestPlan:
        """The request's plan; an earlier canonicalisation's, when the record holds the request under that hash.

        A ledger written before the redaction rules grew keys an unnamed request by its
        old hash (``http:<old hash>#0``): continuing that call (replaying it) instead of
        opening a new one under the new hash is what keeps a re-run from sending it again.
        """
        plan = unkeyed_plan(request, self.options)  # the dedup header (if declared) carries the key
        if current_key(self.stream) is not None or plan.legacy is None:
            return plan
        if not (plan.secrets or plan.canonical.earlier_may_differ):
            return plan
        if not self.stream.exists() or self._recorded_hash(hash_key(plan.canonical.digest, 0)) is not None:
            return plan
        for old in plan.older():
            recorded = self._recorded_hash(hash_key(old.canonical.digest, 0))
            if recorded is not None:
                return plan.as_recorded(recorded)
        return plan

    def _recorded_hash(self, key: str) -> str | None:
        """The request hash the record holds for ``key`` (its latest call's manifest), or None."""
        stream = self.stream
        with stream.mutex:  # threads sharing the handle (an async client's workers)
            fold = stream.live()
            call = fold.latest_call(key)
            return None if call is None else fold.call_state(call).request_hash

    def _scope(self, plan: RequestPlan) -> tuple[str, Callable[[int], str]]:
        named = current_key(self.stream)
        if named is not None:
            return named, functools.partial(named_key, named)
        return plan.canonical.digest, functools.partial(hash_key, plan.canonical.digest)

    def _keyed(self, request: Any, plan: RequestPlan, key: str, named: bool) -> RequestPlan:
        """The plan with the key in the dedup header; reads the record (run it off an event loop)."""
        if named:  # a named key travels as the caller named it
            return keyed_plan(request, self.options, plan, key)
        if self.options.dedup is None or self.options.dedup.header is None:
            return plan
        recorded = self._recorded_hash(key)  # opens the writer: the stream (its first event) exists
        return hashed_keyed_plan(
            request, self.options, plan, key, self._identity, recorded, functools.partial(self._recorded_request, key)
        )

    def _recorded_request(self, key: str) -> Any:
        """The request recorded for ``key``'s latest call, parsed (None: none, or not JSON)."""
        stream = self.stream
        with stream.mutex:
            fold = stream.live()
            call = fold.latest_call(key)
            ref = None if call is None else fold.call_state(call).request
        if ref is None:
            return None
        try:
            return orjson.loads(ref_bytes(ref, stream.store))
        except (IntentlogError, orjson.JSONDecodeError):
            return None

    def _identity(self) -> str:
        """The stream's identity (its first event's digest), read once per process."""
        occ = self._occurrences
        if occ.identity is None:
            occ.identity = _keys.stream_identity(self.stream.events(), self.stream.id)
        return occ.identity

    def _key_reused(self, raw: _Raw, key: str) -> bool:
        """A 400/422 naming the idempotency key: the provider holds other parameters under it."""
        if self.options.dedup is None or raw.status not in (400, 422):
            return False
        body = raw.body.lower()
        return b"idempoten" in body or key.lower().encode("utf-8", "replace") in body

    def _raw_to_artifact(self, raw: _Raw, plan: RequestPlan, trace: _Trace, key: str = "") -> bytes:
        data = encode_response(
            raw.status,
            raw.headers,
            raw.body,
            http_version=raw.http_version,
            reason=raw.reason,
            redact=self.options.redact,
            secrets=plan.secrets,
        )
        if self._key_reused(raw, key):
            raise KeyReused(f"HTTP {raw.status} {raw.reason}: key reused with other parameters".strip(), body=data)
        if self.options.retryable(raw.status, raw.headers):
            trace.failure = data
            raise ProviderFailure(f"HTTP {raw.status} {raw.reason}".strip(), body=data, retryable=True)
        return data

    def _protocol(self, plan: RequestPlan, key: str, trace: _Trace, exchange: Callable[[], _Raw]) -> bytes:
        """Run the effect for ``key``; the response artifact, live or from the record."""
        if plan.legacy is not None and self.stream.exists():  # a key an older intentlog recorded (a named one)
            plan = plan.as_recorded(self._recorded_hash(key))

        def send(_request: Any) -> bytes:
            trace.sent = True
            return self._raw_to_artifact(exchange(), plan, trace, key)

        try:
            data = run_effect(self.stream, key, plan.envelope, send, self.options.effect(plan.label))
        except RetryHandedBack:
            trace.handed_back = True
            if trace.not_sent is not None:
                raise trace.not_sent from None
            return trace.failure if trace.failure is not None else self._last_response(key)
        if not isinstance(data, bytes):  # pragma: no cover - an interpreter-free call returns bytes
            raise IntentlogError(f"key {key!r}: the record holds a result that is not a response")
        return data

    def _last_response(self, key: str) -> bytes:
        """The latest recorded response of ``key`` (a failure redecided from an earlier run)."""
        stream = self.stream
        with stream.mutex:
            fold = stream.live()
            call = fold.latest_call(key)
            ref = None if call is None else fold.call_state(call).response
        if ref is None:
            raise IntentlogError(f"key {key!r}: a retry was decided but no response is recorded")
        return ref_bytes(ref, stream.store)

    def _response(self, data: bytes, request: Any, plan: RequestPlan, key: str, trace: _Trace) -> Any:
        parts = decode_response(data)
        info = {
            "task": self.stream.id,
            "key": key,
            "request_hash": plan.canonical.digest,
            "sent": trace.sent,
            "retry_pending": trace.handed_back,
        }
        return self.flavor.response(
            parts.status,
            parts.headers,
            parts.body,
            http_version=parts.http_version,
            reason=parts.reason,
            request=request,
            extensions={"intentlog": info},
        )

    def _not_sent(self, exc: BaseException, plan: RequestPlan, trace: _Trace) -> NotSent:
        trace.not_sent = exc
        return NotSent(_scrubbed(exc, plan.secrets))


class SyncTransportCore(_Core):
    """An ``httpx`` transport (sync) whose every request is an effect in ``task``'s record."""

    def handle_request(self, request: Any) -> Any:
        request.read()
        plan = self._plan(request)
        scope, make_key = self._scope(plan)
        named = current_key(self.stream) is not None
        digest = plan.canonical.digest
        n = self._occurrences.take(scope, digest)
        key = make_key(n)
        trace = _Trace()
        done = False
        try:
            plan = self._keyed(request, plan, key, named)
            data = self._protocol(plan, key, trace, functools.partial(self._exchange, request, plan, trace))
            done = not trace.handed_back
        finally:
            if not done:
                self._occurrences.release(scope, digest, n)
        return self._response(data, request, plan, key, trace)

    def _exchange(self, request: Any, plan: RequestPlan, trace: _Trace) -> _Raw:
        try:
            response = self.inner.handle_request(request)
        except self.flavor.not_sent as exc:
            raise self._not_sent(exc, plan, trace) from exc
        try:
            body = b"".join(response.stream)  # as it came off the wire: no content decoding
        finally:
            response.close()
        return _Raw(
            response.status_code, list(response.headers.raw), body, response.http_version, response.reason_phrase
        )

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> SyncTransportCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncTransportCore(_Core):
    """An ``httpx`` async transport whose every request is an effect in ``task``'s record."""

    async def handle_async_request(self, request: Any) -> Any:
        import anyio.to_thread

        await request.aread()
        plan = self._plan(request)
        scope, make_key = self._scope(plan)  # the key block is a contextvar: read it on the loop
        named = current_key(self.stream) is not None
        digest = plan.canonical.digest
        n = self._occurrences.take(scope, digest)
        key = make_key(n)
        trace = _Trace()
        done = False
        try:
            plan = await anyio.to_thread.run_sync(self._keyed, request, plan, key, named)
            data = await anyio.to_thread.run_sync(
                functools.partial(
                    self._protocol, plan, key, trace, functools.partial(self._exchange, request, plan, trace)
                )
            )
            done = not trace.handed_back
        finally:
            if not done:
                self._occurrences.release(scope, digest, n)
        return self._response(data, request, plan, key, trace)

    def _exchange(self, request: Any, plan: RequestPlan, trace: _Trace) -> _Raw:
        """Called in the worker thread: run the async exchange on the event loop and wait for it."""
        import anyio.from_thread

        return anyio.from_thread.run(self._exchange_async, request, plan, trace)

    async def _exchange_async(self, request: Any, plan: RequestPlan, trace: _Trace) -> _Raw:
        import anyio

        # Shielded: once attempt.started is durable the exchange runs to its end (bounded by
        # the request's own timeouts), so a cancelled caller still gets its paid-for answer
        # recorded instead of an unknown effect; the cancellation lands right after.
        with anyio.CancelScope(shield=True):
            try:
                response = await self.inner.handle_async_request(request)
            except self.flavor.not_sent as exc:
                raise self._not_sent(exc, plan, trace) from exc
            try:
                body = b"".join([chunk async for chunk in response.stream])
            finally:
                await response.aclose()
        return _Raw(
            response.status_code, list(response.headers.raw), body, response.http_version, response.reason_phrase
        )

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> AsyncTransportCore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
