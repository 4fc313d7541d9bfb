"""The heads.json format: :class:`StreamHead`, its deterministic bytes, and reading it back (read-only).

:func:`intentlog.heads.seal` writes it; the checker and export read it with these
functions and never import the writer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, final

import orjson

from .._internal.digest import is_digest
from .._internal.regular import NotRegular, read_regular
from ..errors import LedgerError
from ..eventlog.format import check_task_id

__all__ = [
    "GC_KEY",
    "HEADS_FILE",
    "HEADS_FORMAT",
    "Bound",
    "StreamHead",
    "decode_gc_head",
    "decode_heads",
    "encode_heads",
    "furthest_heads",
    "read_heads_at",
]

HEADS_FILE: Final = "heads.json"
HEADS_FORMAT: Final = "intentlog-heads/1"
#: the top-level key of the gc log's head (a store's seal anchors its gc log as it anchors the streams)
GC_KEY: Final = "gc"


@final
@dataclass(frozen=True, slots=True)
class StreamHead:
    """A stream as sealed: its id (``task.created`` data.stream), last seq, head digest, event count."""

    stream: str
    seq: int
    head: str
    events: int

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "seq": self.seq, "head": self.head, "events": self.events}


def encode_heads(
    heads: Mapping[str, StreamHead], gc: StreamHead | None = None, after: Mapping[str, str] | None = None
) -> bytes:
    """Deterministic bytes: sorted keys, two-space indent (readable in a git diff), final newline.

    ``gc``: the gc log's head, kept under :data:`GC_KEY` (readers that know only the tasks ignore it).
    ``after``: by task, the stream id an earlier seal bound that gc deleted, so this one, another
    stream under the id, follows it (a store's seals are never replaced: :mod:`intentlog.s3.bounds`).
    """
    tasks = {t: h.to_json() | ({"after": after[t]} if after and t in after else {}) for t, h in heads.items()}
    obj: dict[str, Any] = {"format": HEADS_FORMAT, "hash": "blake3", "tasks": tasks}
    if gc is not None:
        obj[GC_KEY] = gc.to_json()
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


def decode_heads(data: bytes, *, where: str = HEADS_FILE) -> dict[str, StreamHead]:
    """Parse heads.json bytes; :class:`LedgerError` naming the first thing malformed."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise LedgerError(f"{where}: not valid JSON ({exc}); run 'intentlog seal' to write it again") from exc
    if type(obj) is not dict or obj.get("format") != HEADS_FORMAT or type(obj.get("tasks")) is not dict:
        raise LedgerError(f"{where}: not a {HEADS_FORMAT} file with a 'tasks' object; run 'intentlog seal'")
    out: dict[str, StreamHead] = {}
    for task, h in obj["tasks"].items():
        ok = (
            type(h) is dict
            and type(h.get("stream")) is str
            and type(h.get("seq")) is int
            and h["seq"] >= 0
            and is_digest(h.get("head"))
            and h.get("events") == h["seq"] + 1
        )
        try:
            check_task_id(task)
        except ValueError:
            ok = False
        if not ok:
            raise LedgerError(
                f"{where}: the entry for task {task!r} is not {{stream, seq, head, events = seq + 1}}; "
                "restore heads.json from git or run 'intentlog seal'"
            )
        out[task] = StreamHead(h["stream"], h["seq"], h["head"], h["events"])
    return out


def decode_gc_head(data: bytes, *, where: str = HEADS_FILE) -> StreamHead | None:
    """The gc log's head a seal recorded (None: it recorded none); :class:`LedgerError` when malformed."""
    decode_heads(data, where=where)
    h = orjson.loads(data).get(GC_KEY)
    if h is None:
        return None
    if not (
        type(h) is dict
        and type(h.get("stream")) is str
        and type(h.get("seq")) is int
        and h["seq"] >= 0
        and is_digest(h.get("head"))
        and h.get("events") == h["seq"] + 1
    ):
        raise LedgerError(f"{where}: the gc log's head is not {{stream, seq, head, events = seq + 1}}")
    return StreamHead(h["stream"], h["seq"], h["head"], h["events"])


def read_heads_at(root: str | os.PathLike[str]) -> dict[str, StreamHead] | None:
    """The heads sealed in ``root/heads.json``; None when there is none.

    Raises :class:`LedgerError` when it cannot be read, is malformed, or is a symbolic
    link or not a regular file (never read through: a seal must be the ledger's own file).
    """
    path = Path(root) / HEADS_FILE
    try:
        data = read_regular(path)
    except FileNotFoundError:
        return None
    except NotRegular as exc:
        raise LedgerError(
            f"{path} is {exc}, so it was not read: a seal is a file of the ledger itself; replace it with the "
            "committed heads.json (git checkout) or run 'intentlog seal'"
        ) from exc
    except OSError as exc:
        raise LedgerError(f"{path}: cannot be read ({exc.strerror or exc}); check its permissions") from exc
    return decode_heads(data, where=str(path))


#: A task's bound: where the seal that recorded it is, and the head it recorded.
Bound = tuple[str, StreamHead]


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
