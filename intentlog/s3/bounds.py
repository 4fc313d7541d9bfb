"""The bound every seal on a store puts on a stream, as its writer checks it before an append.

A folder's writer reads ``heads.json`` when it opens and refuses a stream that contradicts
it (:mod:`intentlog.eventlog.damage`). On a store the seals are the numbered objects
``heads/NNNNNNNNNNNN.json`` (:mod:`intentlog.s3.seals`), each a lower bound: a stream is
checked against the furthest head *any* seal recorded for it (:func:`furthest_heads`).
:class:`SealReader` lists them once per call (one LIST, the folder's one read of
``heads.json`` per open) and gets only the seal objects it has not read before: a seal is
created once with ``If-None-Match: *`` and never replaced, so its bytes are kept by key
and size (another size under the same key is read again).

:func:`seal_refusal` judges a stream's bytes against its bound exactly as the folder's
writer does -- fewer events than sealed ("events were cut from its end"), another digest
at the sealed seq ("the stream was rewritten"), another stream id, a stream gone while
sealed -- and returns the :class:`~intentlog.errors.CorruptStream` to raise (None: the
stream is within its bound). A ``stream.repaired`` that accepted damage against exactly
this seal lifts it, as in a folder. Reads only.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Final

import orjson

from ..errors import CorruptStream, LedgerError
from ..eventlog.format import TASK_CREATED
from ..eventlog.remote import events_in
from ..heads.codec import StreamHead, decode_heads
from .client import ObjectClient

__all__ = ["ACCEPTED", "SEALS", "Bound", "SealReader", "furthest_heads", "seal_key", "seal_number", "seal_refusal"]

#: The folder holding the numbered seal objects.
SEALS: Final = "heads"
_WIDTH: Final = 12
_DIGITS: Final = frozenset("0123456789")
#: ``stream.repaired``'s ``accepted`` values, as :data:`intentlog.eventlog.damage.ACCEPTED` (not imported from
#: there: that module reaches the folder writer's file helpers, which the checker must never reach)
ACCEPTED: Final = ("damage", "damage+resend")

#: A task's bound: where the seal that recorded it is, and the head it recorded.
Bound = tuple[str, StreamHead]


def seal_number(key: str) -> int | None:
    """The seal number a key names: exactly 12 ASCII digits then ``.json``, else None (not a seal)."""
    name = key.rsplit("/", 1)[-1]
    stem = name[: -len(".json")] if name.endswith(".json") else ""
    return int(stem) if len(stem) == _WIDTH and set(stem) <= _DIGITS else None


def seal_key(number: int) -> str:
    return f"{SEALS}/{number:0{_WIDTH}d}.json"


def furthest_heads(seals: Sequence[tuple[str, bytes]]) -> tuple[dict[str, Bound], list[str]]:
    """For each task the furthest head any seal recorded (and where), and what is wrong with the seals.

    ``seals`` are ``(where, heads.json bytes)`` in number order; see
    :func:`intentlog.s3.seals.combine_seals`, which is this without the where.
    """
    furthest: dict[str, Bound] = {}
    seen: dict[tuple[str, int], Bound] = {}
    problems: list[str] = []
    for where, data in seals:
        try:
            heads = decode_heads(data, where=where)
        except LedgerError as exc:
            problems.append(str(exc))
            continue
        follows = _follows(data)
        for task, h in heads.items():
            first = furthest.get(task)
            if first is not None and first[1].stream != h.stream and follows.get(task) == first[1].stream:
                first = None  # a new stream under the id, sealed after gc deleted the one bound before
                seen = {k: v for k, v in seen.items() if k[0] != task}
            same = seen.get((task, h.seq))
            if first is not None and first[1].stream != h.stream:
                problems.append(
                    f"{where} seals task {task!r} as stream {h.stream!r} but {first[0]} sealed it as stream "
                    f"{first[1].stream!r}: the seals contradict each other; restore the stream and seals from a copy"
                )
                continue
            if same is not None and same[1].head != h.head:
                problems.append(
                    f"{where} seals task {task!r} at seq {h.seq} as {h.head} but {same[0]} sealed seq {h.seq} as "
                    f"{same[1].head}: the seals contradict each other; restore the stream and the seals from a copy"
                )
                continue
            seen.setdefault((task, h.seq), (where, h))
            if first is None or h.seq > first[1].seq:
                furthest[task] = (where, h)
    return furthest, problems


def _follows(data: bytes) -> dict[str, str]:
    """By task, the stream id a seal says its stream follows (``after``: gc deleted that one; well-formed only)."""
    tasks = orjson.loads(data).get("tasks")
    if type(tasks) is not dict:
        return {}
    return {t: h["after"] for t, h in tasks.items() if type(h) is dict and type(h.get("after")) is str}


class SealReader:
    """The seals on one store, listed on every :meth:`bounds` call, each seal object got once."""

    def __init__(self, client: ObjectClient) -> None:
        self.client = client
        self._bytes: dict[tuple[str, int], bytes] = {}
        self._last: tuple[tuple[tuple[str, int], ...], dict[str, Bound]] | None = None
        self._mutex = threading.Lock()

    def bounds(self) -> dict[str, Bound]:
        """Every task's bound (one LIST; a GET per seal not read before). ``LedgerError`` for a bad seal."""
        listed = tuple(
            sorted(((k, size) for k, size in self.client.scan(SEALS) if seal_number(k) is not None), key=_by_number)
        )
        with self._mutex:
            if self._last is not None and self._last[0] == listed:
                return self._last[1]
        found = []
        for key, size in listed:
            data = self._bytes.get((key, size))
            if data is None:
                got = self.client.get(key)
                if got is None:
                    continue  # deleted since the listing: it bounds nothing now
                data = got
                with self._mutex:
                    self._bytes[(key, size)] = data
            found.append((self.client.describe(key), data))
        heads, problems = furthest_heads(found)
        if problems:
            raise LedgerError(f"{problems[0]}; nothing was written")
        with self._mutex:
            self._last = (listed, heads)
        return heads


def _by_number(item: tuple[str, int]) -> int:
    return seal_number(item[0]) or 0


def seal_refusal(where: str, data: bytes | None, bound: Bound) -> CorruptStream | None:
    """What a writer must refuse of the stream ``data`` (None: gone) sealed by ``bound``; None when it may write.

    The same judgement and the same message shape as a folder's writer gives against
    ``heads.json``, naming the seal object that recorded the bound.
    """
    seal_where, seal = bound
    said = f"{seal_where} seals seq {seal.seq} with head {seal.head}"
    hint = (
        "a crash cannot cause this, so it is never repaired automatically and the task is refused for writing; "
        "run 'intentlog verify --root URL', then restore the stream's segments from a copy (intentlog merge)"
    )
    if data is None:
        return CorruptStream(
            where, 1, f"the stream is gone but {said} of stream {seal.stream}: it was lost or moved, and "
            "re-creating it would repeat its effects", hint=hint,
        )  # fmt: skip
    stream_id: str | None = None
    at_seal: str | None = None
    count = 0
    accepted = {"seq": seal.seq, "head": seal.head}
    for ev in events_in(data, where):
        if ev.seq == 0 and ev.kind == TASK_CREATED:
            sid = ev.data.get("stream")
            stream_id = sid if isinstance(sid, str) else None
        if ev.seq == seal.seq:
            at_seal = ev.digest
        if ev.kind == "stream.repaired" and ev.data.get("accepted") in ACCEPTED and ev.data.get("seal") == accepted:
            return None  # damage against exactly this seal was accepted, knowingly
        count = ev.seq + 1
    if count <= seal.seq:
        reason = f"the stream holds {count} trusted events but {said}: events were cut from its end"
        return CorruptStream(where, count + 1, reason, hint=hint)
    if at_seal != seal.head:
        reason = f"the event at seq {seal.seq} hashes to {at_seal} but {said}: the stream was rewritten"
        return CorruptStream(where, seal.seq + 1, reason, hint=hint)
    if stream_id != seal.stream:
        return CorruptStream(where, 1, f"its stream id is {stream_id} but {said} of stream {seal.stream}", hint=hint)
    return None
