"""One event per line: the stream format of DESIGN §3.

A line is compact JSON with sorted keys ``data, kind, prev, seq, ts`` and a trailing
``\\n``. ``prev`` is the digest of the previous line's exact bytes (``null`` on line 0),
so an edit, deletion, reordering or splice breaks the chain and is visible offline.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import time
from typing import Any, Final, NamedTuple, final

import orjson

from .._internal.digest import digest_bytes, is_digest
from ..errors import InvalidTaskId, NotSerializable
from .canonical import dumps

__all__ = [
    "EVENT_KEYS",
    "FORMAT",
    "RESERVED_PREFIXES",
    "TASK_CREATED",
    "TASK_ID_RE",
    "Event",
    "LineError",
    "check_kind",
    "check_task_id",
    "encode_line",
    "is_reserved",
    "new_stream_id",
    "parse_line",
    "parse_utc",
    "utc_now",
]

FORMAT: Final = "intentlog/1"
TASK_CREATED: Final = "task.created"
#: What a task id may be: a stream's name in every storage.
TASK_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_KIND_RE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*\Z")
#: The keys of every stored event object, exactly.
EVENT_KEYS: Final = frozenset({"data", "kind", "prev", "seq", "ts"})

#: Namespaces only intentlog itself writes; ``Task.append`` refuses them.
RESERVED_PREFIXES: Final = (
    "task.",
    "stream.",
    "call.",
    "attempt.",
    "effect.",
    "context.",
    "artifact.",
    "session.",
    "approval.",
)


def is_reserved(kind: str) -> bool:
    """Kinds in intentlog's own namespaces (``call.``, ``attempt.`` …), which scripts cannot append."""
    return kind.startswith(RESERVED_PREFIXES)


def check_task_id(task_id: object) -> str:
    """Return ``task_id`` if it is a valid task id, else raise :class:`InvalidTaskId`."""
    if not isinstance(task_id, str) or TASK_ID_RE.match(task_id) is None:
        raise InvalidTaskId(task_id)
    return task_id


def check_kind(kind: object) -> str:
    """Event kinds are dotted lowercase words (``call.manifest``, ``note``)."""
    if not isinstance(kind, str) or _KIND_RE.match(kind) is None:
        raise NotSerializable(
            f"event kind {kind!r} must be dotted lowercase words such as 'note' or 'call.manifest'",
            path="kind",
        )
    return kind


_last_second: list[Any] = [None, ""]  # the last whole second formatted, and its text


def utc_now() -> str:
    """UTC with microseconds, ``2026-11-30T02:04:05.123456Z`` (the second's text is cached)."""
    secs, rem = divmod(time.time_ns(), 1_000_000_000)
    cache = _last_second
    if cache[0] != secs:
        cache[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
        cache[0] = secs
    return f"{cache[1]}.{rem // 1000:06d}Z"


#: how ``ts`` is written (:func:`utc_now`) and read back (:func:`parse_utc`)
TS_FORMAT: Final = "%Y-%m-%dT%H:%M:%S.%fZ"


def parse_utc(ts: str) -> _dt.datetime:
    """A recorded ``ts`` as an aware UTC datetime; ``ValueError`` (``TypeError``: not a str) when it is not one."""
    return _dt.datetime.strptime(ts, TS_FORMAT).replace(tzinfo=_dt.timezone.utc)


def new_stream_id() -> str:
    return os.urandom(16).hex()


@final
class Event(NamedTuple):
    """One recorded event, as read back or as just appended (immutable).

    ``digest`` is the BLAKE3 digest of the event's exact line bytes; the next event's
    ``prev`` equals it. A named tuple, because reads build one per line and a tuple is
    the cheapest immutable object Python makes.
    """

    seq: int
    kind: str
    ts: str
    prev: str | None
    data: dict[str, Any]
    digest: str

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "kind": self.kind, "ts": self.ts, "prev": self.prev, "data": self.data}


def encode_line(kind: str, data_json: bytes, prev: str | None, seq: int, ts: str) -> bytes:
    """Assemble the canonical line from its parts (keys already in sorted order)."""
    return b"".join(
        (
            b'{"data":',
            data_json,
            b',"kind":',
            orjson.dumps(kind),
            b',"prev":',
            b"null" if prev is None else orjson.dumps(prev),
            b',"seq":',
            str(seq).encode(),
            b',"ts":',
            orjson.dumps(ts),
            b"}\n",
        )
    )


def encode_data(data: object) -> bytes:
    """Canonical JSON of event data, or :class:`NotSerializable` naming the bad path.

    Data nested past :data:`~intentlog.eventlog.canonical.MAX_DEPTH` is refused by
    :func:`~intentlog.eventlog.canonical.dumps` before any recursive walk (never a ``RecursionError``).
    """
    if not isinstance(data, dict):
        raise NotSerializable(f"event data must be a dict, not {type(data).__name__}", path="data")
    return dumps(data)


class LineError(Exception):
    """Internal: why one line failed its checks (turned into a public error by the caller)."""

    def __init__(self, reason: str, *, parsed: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.parsed = parsed


def parse_line(line: bytes, expected_seq: int, expected_prev: str | None) -> Event:
    """Parse and check one complete line (with its ``\\n``) against the chain so far."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise LineError(f"not valid JSON ({exc})", parsed=False) from exc
    if type(obj) is not dict or obj.keys() != EVENT_KEYS:
        raise LineError("not an event object with exactly data, kind, prev, seq, ts", parsed=False)
    seq = obj["seq"]
    kind = obj["kind"]
    prev = obj["prev"]
    data = obj["data"]
    ts = obj["ts"]
    if type(seq) is not int or type(kind) is not str or type(data) is not dict or type(ts) is not str:
        raise LineError("an event field has the wrong type", parsed=True)
    if seq != expected_seq:
        raise LineError(f"seq is {seq} but {expected_seq} was expected", parsed=True)
    if prev != expected_prev:
        if expected_prev is None:
            raise LineError(f"prev is {prev!r} but the first line must have prev null", parsed=True)
        if prev is not None and not is_digest(prev):
            raise LineError(f"prev {prev!r} is not a digest", parsed=True)
        raise LineError(f"prev is {prev} but the previous line hashes to {expected_prev}", parsed=True)
    return Event(seq, kind, ts, prev, data, digest_bytes(line))
