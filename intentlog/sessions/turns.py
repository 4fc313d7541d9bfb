"""A session's turns: :class:`Turn` (one turn as the record has it) and :class:`Asked` (a turn being asked).

:mod:`intentlog.sessions` asks and replays turns; this module holds what a turn *is*, so
the synchronous and the awaitable ways of asking one share it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import orjson

from ..effects.intent import decode_text

if TYPE_CHECKING:
    from .._internal.types import Send
    from ..effects.options import EffectOptions
    from ..projections.workstate import CallState

__all__ = ["TURN_PREFIX", "Asked", "Turn"]

TURN_PREFIX: Final = "turn-"


@final
class Turn:
    """One turn of a session as the record has it: request messages, response, acceptance.

    ``turn_id`` (``turn-<n>``) is the call's key; ``call_id`` its latest call. ``messages``
    are the refs of the request's messages, in order. ``response`` is the exact bytes answered
    (None until observed); ``result`` the interpreted value, if an interpreter ran.
    ``accepted``: a checkpoint accepted it (``checkpoint``: that checkpoint's seq).
    ``replayed``: returned from the record, nothing was sent by this call.
    """

    __slots__ = (
        "_load",
        "accepted",
        "call_id",
        "checkpoint",
        "encoding",
        "messages",
        "number",
        "replayed",
        "request_hash",
        "response",
        "result",
        "session",
        "stage",
        "turn_id",
    )

    def __init__(
        self,
        *,
        session: str,
        number: int,
        state: CallState,
        messages: tuple[Mapping[str, Any], ...],
        response: bytes | None,
        accepted: bool,
        checkpoint: int | None,
        replayed: bool,
        load: Callable[[Mapping[str, Any]], bytes],
    ) -> None:
        self.session = session
        self.number = number
        self.turn_id = f"{TURN_PREFIX}{number}"
        self.call_id = state.call_id
        self.stage = state.stage
        self.request_hash = state.request_hash
        self.messages = messages
        self.response = response
        self.encoding = state.encoding
        result = state.result
        self.result: Any = result.get("value") if isinstance(result, dict) and "value" in result else None
        if isinstance(result, dict) and isinstance(result.get("value_ref"), Mapping):  # a large value, in objects/
            import orjson

            self.result = orjson.loads(load(result["value_ref"]))
        self.accepted = accepted
        self.checkpoint = checkpoint
        self.replayed = replayed
        self._load = load

    def __repr__(self) -> str:
        flag = "accepted" if self.accepted else self.stage
        return f"<Turn {self.turn_id} of {self.session!r} ({self.call_id}, {flag})>"

    @property
    def key(self) -> str:
        return self.turn_id

    @property
    def completed(self) -> bool:
        return self.stage == "completed"

    @property
    def text(self) -> str | None:
        """The response as text: the very ``str`` a text-returning ``send`` gave; bytes not UTF-8 decode with
        ``surrogateescape`` (so ``text.encode("utf-8", "surrogateescape") == response``)."""
        return decode_text(self.response, self.encoding) if self.response is not None else None

    def message_bytes(self) -> list[bytes]:
        """Each request message's canonical bytes, as recorded (timestamps dropped, credentials redacted)."""
        return [self._load(ref) for ref in self.messages]

    def message_values(self) -> list[Any]:
        """Each request message, as the JSON value recorded (the canonical form of what was sent)."""

        return [orjson.loads(b) for b in self.message_bytes()]


@final
class Asked:
    """One turn being asked: its number, options, the request as built and split, whether it was sent."""

    def __init__(self, number: int, options: EffectOptions, send: Send) -> None:
        self.number = number
        self.key = f"{TURN_PREFIX}{number}"
        self.options = options
        self.send = send
        self.value: Any = None
        self.build: Any = None
        self.refs: list[dict[str, Any]] | None = None
        self.payloads: dict[str, bytes] = {}
        self.secrets: frozenset[str] = frozenset()
        self.sent = False

    @property
    def extra(self) -> dict[str, Any] | None:
        return {"messages": self.refs} if self.refs is not None else None

    def send_sync(self, _envelope: Any) -> bytes | str:
        """What the protocol sends: the request as given (the envelope is only what is hashed)."""
        self.sent = True
        return self.send(self.value)

    async def send_async(self, _envelope: Any) -> bytes | str:
        self.sent = True
        if inspect.iscoroutinefunction(self.send):
            return await self.send(self.value)  # type: ignore[no-any-return]
        answer = await asyncio.to_thread(self.send, self.value)  # a plain send may block: off the loop
        return await answer if inspect.isawaitable(answer) else answer
