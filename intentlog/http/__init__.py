"""A drop-in ``httpx`` transport that makes every request an effect (DESIGN §5).

::

    import openai, intentlog.http
    task = intentlog.open("evidence").task("nightly-summaries")
    client = openai.OpenAI(http_client=intentlog.http.client(task), max_retries=0)
    for doc in docs:
        with task.key(f"summary-{doc.id}"):          # optional: else hash + occurrence
            client.chat.completions.create(model="gpt-x", messages=[...])

Running the script again after a crash replays completed calls from the record (nothing
sent), sends only what provably never left, and raises
:class:`~intentlog.errors.EffectUnknown` for a call whose effect may have happened.

- :func:`client` / :func:`async_client` — an ``httpx`` (default) or ``httpx2``
  (``lib="httpx2"``, needed by ``anthropic`` 2.x; accepted by ``openai`` 3.x) client
  whose every request, proxy mounts included, goes through the transport.
- :func:`transport` / :func:`async_transport` — the transport alone, around any inner
  transport.
- :func:`replay` — offline replay from a record: no network, no writes; a request the
  record does not hold raises :class:`NotRecorded` (the pytest fixture is built on it).
- :func:`evidence` — response bytes for ``task.reconcile(call, "served", evidence=...)``.
- :func:`restart` — forget this process's occurrence counts, as a new process would.
- :func:`unknown_effect` — the :class:`~intentlog.errors.EffectUnknown` behind an SDK's
  exception (``anthropic`` wraps it in ``APIConnectionError``), or None.

What is hashed and stored is described in :mod:`intentlog.http._wire`; keys in
:mod:`intentlog.http._keys`; what the caller sees in :mod:`intentlog.http._transport`.
``docs/http.md`` has the recipes. This package imports ``httpx``/``httpx2`` only when a
client or transport for it is asked for; ``import intentlog`` never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, overload

from .._internal.types import spelled
from ..errors import EffectUnknown, UsageError
from ._flavor import flavor
from ._keys import occurrences
from ._replay import NotRecorded, Replay
from ._transport import (
    HTTP_DEFAULTS,
    AsyncTransportCore,
    HashKwargs,
    HttpKwargs,
    Options,
    Retryable,
    SyncTransportCore,
    check_task,
    default_retryable,
)
from ._wire import HASHED_HEADERS, REDACT_HEADERS, REDACT_QUERY, decode_response, evidence

if TYPE_CHECKING:
    from types import ModuleType

    import httpx
    import httpx2

    from .._internal.types import Unpack
    from ..dedup import ProviderDedup
    from ..stream import StreamSource

__all__ = [
    "HASHED_HEADERS",
    "REDACT_HEADERS",
    "REDACT_QUERY",
    "HashKwargs",
    "HttpKwargs",
    "NotRecorded",
    "Replay",
    "async_client",
    "async_transport",
    "client",
    "decode_response",
    "default_retryable",
    "evidence",
    "replay",
    "restart",
    "transport",
    "unknown_effect",
]

Lib = Literal["httpx", "httpx2"]


@spelled(HttpKwargs, HTTP_DEFAULTS)
def transport(
    task: StreamSource, *, inner: Any = None, lib: Lib | ModuleType | None = None, **options: Unpack[HttpKwargs]
) -> Any:
    """A sync transport of ``lib`` recording every request through it as an effect of ``task``.

    ``inner`` does the real exchange (default ``lib.HTTPTransport()``). ``hash_headers``
    adds request headers to the hashed ones (:data:`HASHED_HEADERS`); ``redact`` adds
    names (headers, query parameters, form fields, JSON keys) to the redacted ones;
    ``drop`` replaces the canonicaliser's dropped timestamp keys; ``retryable(status,
    headers)`` says which error responses are handed back as retry-pending failures
    rather than completing the call (default :func:`default_retryable`). ``dedup``: the
    provider's idempotency window (:class:`~intentlog.ProviderDedup`); with its ``header``
    (e.g. ``"Idempotency-Key"``) every attempt carries the call's key there, and an unknown
    effect inside the window is resent under that key without a person. The options
    (:class:`HttpKwargs`) are checked once, here, before anything is written.
    """
    fl = flavor(lib)
    opts = Options.of(options, HttpKwargs, "transport")
    core = fl.bind(SyncTransportCore, asynchronous=False)
    return core(
        task, inner=inner if inner is not None else fl.default_transport(asynchronous=False), flavor=fl, options=opts
    )


@spelled(HttpKwargs, HTTP_DEFAULTS)
def async_transport(
    task: StreamSource, *, inner: Any = None, lib: Lib | ModuleType | None = None, **options: Unpack[HttpKwargs]
) -> Any:
    """The async counterpart of :func:`transport` (default inner ``lib.AsyncHTTPTransport()``)."""
    fl = flavor(lib)
    opts = Options.of(options, HttpKwargs, "async_transport")
    core = fl.bind(AsyncTransportCore, asynchronous=True)
    return core(
        task, inner=inner if inner is not None else fl.default_transport(asynchronous=True), flavor=fl, options=opts
    )


def _interpose(cl: Any, wrap: Callable[[Any], Any]) -> Any:
    """Put intentlog between the client and every transport it built or was given.

    The client is built by its library exactly as without intentlog — default transport,
    ``verify``/``cert``/``http2``, proxies from ``proxy=`` or the environment
    (``HTTPS_PROXY``, ``NO_PROXY``), ``mounts=`` — and then each of those transports
    becomes the inner transport of an intentlog one, so no request bypasses the record.
    """
    inner = getattr(cl, "_transport", None)
    mounts = getattr(cl, "_mounts", None)
    if inner is None or not isinstance(mounts, dict):  # pragma: no cover - guards a change in httpx
        raise UsageError(f"cannot wrap the transports of {type(cl).__module__}.{type(cl).__name__}: pass transport=")
    cl._transport = wrap(inner)
    for pattern, mounted in list(mounts.items()):
        if mounted is not None:
            mounts[pattern] = wrap(mounted)
    return cl


@overload
def client(
    task: StreamSource,
    *,
    lib: Literal["httpx"] | None = None,
    inner: Any = None,
    hash_headers: Iterable[str] = (),
    redact: Iterable[str] = (),
    drop: Iterable[str] | None = None,
    retryable: Retryable | None = None,
    dedup: ProviderDedup | None = None,
    **kwargs: Any,
) -> httpx.Client: ...
@overload
def client(
    task: StreamSource,
    *,
    lib: Literal["httpx2"],
    inner: Any = None,
    hash_headers: Iterable[str] = (),
    redact: Iterable[str] = (),
    drop: Iterable[str] | None = None,
    retryable: Retryable | None = None,
    dedup: ProviderDedup | None = None,
    **kwargs: Any,
) -> httpx2.Client: ...
@overload
def client(
    task: StreamSource,
    *,
    lib: ModuleType,
    inner: Any = None,
    hash_headers: Iterable[str] = (),
    redact: Iterable[str] = (),
    drop: Iterable[str] | None = None,
    retryable: Retryable | None = None,
    dedup: ProviderDedup | None = None,
    **kwargs: Any,
) -> Any: ...
@spelled(HttpKwargs, HTTP_DEFAULTS, rest=True)
def client(task: StreamSource, *, lib: Lib | ModuleType | None = None, inner: Any = None, **kwargs: Any) -> Any:
    """A ``lib.Client`` (``httpx`` by default) whose every request is an effect of ``task``.

    Other keyword arguments go to the client (``base_url``, ``timeout``, ``headers``,
    ``verify``, ``proxy`` …), which builds its transports as it always does; ``inner``
    replaces its default transport (as ``transport=`` would, so environment proxies are
    then not used). Every transport the client ends up with — default, proxy mounts from
    ``proxy=`` or the environment, ``mounts=`` — is wrapped: no request bypasses the record.
    The options (:class:`HttpKwargs`) are taken out of the keyword arguments and checked once.
    """
    fl = flavor(lib)
    opts = Options.of(_options_in(kwargs), HttpKwargs, "client")
    core = fl.bind(SyncTransportCore, asynchronous=False)
    cl = fl.lib.Client(transport=inner, **kwargs)
    return _interpose(cl, lambda t: core(task, inner=t, flavor=fl, options=opts))


@overload
def async_client(
    task: StreamSource,
    *,
    lib: Literal["httpx"] | None = None,
    inner: Any = None,
    hash_headers: Iterable[str] = (),
    redact: Iterable[str] = (),
    drop: Iterable[str] | None = None,
    retryable: Retryable | None = None,
    dedup: ProviderDedup | None = None,
    **kwargs: Any,
) -> httpx.AsyncClient: ...
@overload
def async_client(
    task: StreamSource,
    *,
    lib: Literal["httpx2"],
    inner: Any = None,
    hash_headers: Iterable[str] = (),
    redact: Iterable[str] = (),
    drop: Iterable[str] | None = None,
    retryable: Retryable | None = None,
    dedup: ProviderDedup | None = None,
    **kwargs: Any,
) -> httpx2.AsyncClient: ...
@overload
def async_client(
    task: StreamSource,
    *,
    lib: ModuleType,
    inner: Any = None,
    hash_headers: Iterable[str] = (),
    redact: Iterable[str] = (),
    drop: Iterable[str] | None = None,
    retryable: Retryable | None = None,
    dedup: ProviderDedup | None = None,
    **kwargs: Any,
) -> Any: ...
@spelled(HttpKwargs, HTTP_DEFAULTS, rest=True)
def async_client(task: StreamSource, *, lib: Lib | ModuleType | None = None, inner: Any = None, **kwargs: Any) -> Any:
    """The async counterpart of :func:`client`: a ``lib.AsyncClient``."""
    fl = flavor(lib)
    opts = Options.of(_options_in(kwargs), HttpKwargs, "async_client")
    core = fl.bind(AsyncTransportCore, asynchronous=True)
    cl = fl.lib.AsyncClient(transport=inner, **kwargs)
    return _interpose(cl, lambda t: core(task, inner=t, flavor=fl, options=opts))


@spelled(HashKwargs, HTTP_DEFAULTS)
def replay(task: StreamSource, *, hint: str = "record it again", **options: Unpack[HashKwargs]) -> Replay:
    """Offline replay of ``task``'s record: ``replay(task).client()`` never touches the network or the disk.

    The hashing options (:class:`HashKwargs`) must be the ones the record was made with
    (``dedup`` too, when its header was part of the recorded requests).
    """
    return Replay(task, options=Options.of(options, HashKwargs, "replay"), hint=hint)


def restart(task: StreamSource) -> None:
    """Forget this process's occurrence counts for ``task``: the next requests map to the record from its start.

    A new process starts this way; call it to run a script's requests again inside one
    process (a test, a notebook cell run twice) and have them replay rather than send.
    """
    occurrences(check_task(task)).reset()


def _options_in(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the options (:class:`HttpKwargs`) out of a client factory's keyword arguments; the rest is the client's."""
    return {name: kwargs.pop(name) for name in HttpKwargs.__annotations__ if name in kwargs}


def unknown_effect(exc: BaseException) -> EffectUnknown | None:
    """The :class:`~intentlog.errors.EffectUnknown` that ``exc`` is or was caused by, else None.

    ``openai`` lets the transport's ``EffectUnknown`` through as it is; ``anthropic`` 2.x
    wraps every non-SDK exception in ``APIConnectionError`` (and retries it: harmless, each
    retry is the same unresolved call and raises ``EffectUnknown`` again without sending).
    ``except Exception as exc: if (unknown := intentlog.http.unknown_effect(exc)): ...``
    finds it either way.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, EffectUnknown):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
