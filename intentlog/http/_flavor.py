"""The HTTP library a transport speaks: ``httpx`` or its fork ``httpx2``.

The two share one API but not one class tree: an ``httpx2`` client refuses ``httpx``
objects (Anthropic's SDK 2.x checks), and a response stream must subclass the stream
classes of the library whose client reads it. A :class:`Flavor` binds one library; the
library is imported only when a flavor for it is first asked for, so
``import intentlog.http`` needs neither.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any, Final, final

from ..errors import UsageError

__all__ = ["DEFAULT_LIB", "Flavor", "flavor", "sse_chunks"]

DEFAULT_LIB: Final = "httpx"
_KNOWN: Final = ("httpx", "httpx2")
_CHUNK: Final = 65_536

_LOCK = threading.Lock()
_CACHE: dict[str, Flavor] = {}


def sse_chunks(body: bytes, *, event_stream: bool) -> list[bytes]:
    """How a recorded body is handed out again: one chunk per server-sent event, else 64 KiB pieces.

    Joining the chunks always gives back ``body`` exactly.
    """
    if not body:
        return []
    if not event_stream:
        return [body[i : i + _CHUNK] for i in range(0, len(body), _CHUNK)]
    chunks: list[bytes] = []
    start = 0
    while start < len(body):
        ends = [i for i in (body.find(b"\n\n", start), body.find(b"\r\n\r\n", start)) if i >= 0]
        if not ends:
            chunks.append(body[start:])
            break
        end = min(ends)
        end += 4 if body.startswith(b"\r\n\r\n", end) else 2
        chunks.append(body[start:end])
        start = end
    return chunks


class _ReplayStreamBase:
    """A response body held in memory, handed out chunk by chunk (sync or async)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


@final
class Flavor:
    """One HTTP library: its module, its error classes, and stream/transport classes built on it."""

    def __init__(self, lib: ModuleType) -> None:
        self.lib = lib
        self.name: str = lib.__name__
        # errors that prove the request never left: no connection was ever made for it
        self.not_sent: tuple[type[BaseException], ...] = (
            lib.ConnectError,
            lib.ConnectTimeout,
            lib.PoolTimeout,
            lib.UnsupportedProtocol,
        )
        self._stream_class: type[Any] = type(
            "ReplayStream", (_ReplayStreamBase, lib.SyncByteStream, lib.AsyncByteStream), {"__module__": __name__}
        )
        self._classes: dict[tuple[type[Any], bool], type[Any]] = {}

    def __repr__(self) -> str:
        return f"<Flavor {self.name}>"

    def stream(self, body: bytes, *, event_stream: bool) -> Any:
        return self._stream_class(sse_chunks(body, event_stream=event_stream))

    def response(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        http_version: str,
        reason: str,
        request: Any,
        extensions: dict[str, Any],
    ) -> Any:
        content_type = b""
        for name, value in headers:
            if name.lower() == b"content-type":
                content_type = value.lower()
        ext = {
            "http_version": http_version.encode("ascii", "replace"),
            "reason_phrase": reason.encode("latin-1", "replace"),
        }
        ext.update(extensions)
        return self.lib.Response(
            status,
            headers=headers,
            stream=self.stream(body, event_stream=content_type.startswith(b"text/event-stream")),
            request=request,
            extensions=ext,
        )

    def default_transport(self, *, asynchronous: bool, **options: Any) -> Any:
        cls = self.lib.AsyncHTTPTransport if asynchronous else self.lib.HTTPTransport
        return cls(**options)

    def bind(self, core: type[Any], *, asynchronous: bool) -> type[Any]:
        """``core`` mixed into this library's ``BaseTransport`` (or ``AsyncBaseTransport``)."""
        base = self.lib.AsyncBaseTransport if asynchronous else self.lib.BaseTransport
        with _LOCK:
            cls = self._classes.get((core, asynchronous))
            if cls is None:
                cls = type(core.__name__, (core, base), {"__module__": core.__module__, "__doc__": core.__doc__})
                self._classes[(core, asynchronous)] = cls
            return cls


def flavor(lib: str | ModuleType | None = None) -> Flavor:
    """The flavor for ``lib``: ``"httpx"`` (default), ``"httpx2"`` or one of those modules."""
    name = DEFAULT_LIB if lib is None else lib if isinstance(lib, str) else getattr(lib, "__name__", "")
    if name not in _KNOWN:
        raise UsageError(f"lib must be 'httpx' or 'httpx2' (or the module), not {lib!r}")
    with _LOCK:
        found = _CACHE.get(name)
    if found is not None:
        return found
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise UsageError(f"intentlog.http needs the {name!r} package for lib={name!r}: pip install {name}") from exc
    made = Flavor(module)
    with _LOCK:
        return _CACHE.setdefault(name, made)
