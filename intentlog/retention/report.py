"""The plan and the result of a gc, and how they print (text and JSON)."""

from __future__ import annotations

import datetime as _dt
import secrets
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, final

import orjson

from .policy import GC_LOG, PLAN_VERSION, GcPolicy, format_size, format_ts

#: How ``gc --json`` prints: the bytes :func:`iter_json` yields are these of the whole document.
JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS


# -- the plan --------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class ExpiredTask:
    """A task whose stream the plan deletes. ``reason`` is ``"age"`` or ``"size"``.

    ``stream`` (the id in its ``task.created``), ``head`` (the last event's digest) and
    ``events`` identify exactly which stream went, for ``heads.json`` and auditors.
    """

    task: str
    reason: str
    detail: str
    last_activity: str
    size: int
    head: str | None
    events: int
    stream: str | None = None
    ident: tuple[int, int, int] = field(default=(0, 0, 0), compare=False, repr=False)  # st_ino, st_size, mtime_ns
    state: str | None = field(default=None, compare=False)  # the operator state, as 'intentlog tasks' shows it
    #: the task of its unit deleted before it (an inbox's task, an unjoined child's parent): if that one is
    #: skipped, this one stays with it
    after: str | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "reason": self.reason,
            "detail": self.detail,
            "last_activity": self.last_activity,
            "size": self.size,
            "head": self.head,
            "events": self.events,
            "stream": self.stream,
            "state": self.state,
        }


@final
@dataclass(frozen=True, slots=True)
class KeptTask:
    """A task the plan keeps, and why (``rule``: protected, keep, backlog, busy, unreadable, undated, grace,
    young, unit: kept with its task or its inbox, children: kept with its parent or a child it has not joined)."""

    task: str
    rule: str
    detail: str
    size: int
    last_activity: str | None
    state: str | None = None  # the operator state, as 'intentlog tasks' shows it (None: unreadable)

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "rule": self.rule,
            "detail": self.detail,
            "size": self.size,
            "last_activity": self.last_activity,
            "state": self.state,
        }


@final
@dataclass(frozen=True, slots=True)
class ExpiredBlob:
    """An unreferenced object past its grace period, which the plan deletes."""

    digest: str
    size: int
    mtime_ns: int = field(default=0, compare=False, repr=False)
    touches: int = field(default=0, compare=False, repr=False)  # on a store: writers' touches the plan saw

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "size": self.size}


@final
@dataclass(frozen=True, slots=True)
class Evacuation:
    """Bytes riding inline in an expiring stream that a kept stream needs: copied to ``objects/`` first."""

    digest: str
    size: int
    task: str

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "size": self.size, "task": self.task}


@final
@dataclass(frozen=True, slots=True)
class GcPlan:
    """What a gc would delete, what it keeps and why, and the sizes before and after.

    Pure data: making a plan deletes nothing. ``refused`` says why it must not be carried
    out; ``incomplete`` lists why references are not fully known (then ``blobs`` is empty).
    ``kept`` is a sequence read as it is iterated (from :func:`plan_gc`, a view over the
    scan's records, not held in memory); :meth:`iter_json` and :meth:`iter_render` write
    the plan as they go.
    """

    now: _dt.datetime
    policy: GcPolicy
    expired: tuple[ExpiredTask, ...]
    kept: Sequence[KeptTask]
    blobs: tuple[ExpiredBlob, ...]
    evacuate: tuple[Evacuation, ...]
    bytes_before: int
    stream_bytes: int
    object_bytes: int
    blobs_in_grace: int
    blob_bytes_in_grace: int
    incomplete: tuple[str, ...]
    refused: str | None
    notes: tuple[str, ...]

    @property
    def stream_bytes_freed(self) -> int:
        return sum(t.size for t in self.expired)

    @property
    def blob_bytes_freed(self) -> int:
        return sum(b.size for b in self.blobs)

    @property
    def bytes_evacuated(self) -> int:
        return sum(e.size for e in self.evacuate)

    @property
    def bytes_freed(self) -> int:
        """Net bytes freed: streams and blobs deleted, less the inline bytes evacuated to ``objects/``."""
        return self.stream_bytes_freed + self.blob_bytes_freed - self.bytes_evacuated

    @property
    def bytes_after(self) -> int:
        return self.bytes_before - self.bytes_freed

    @property
    def empty(self) -> bool:
        """True when the plan deletes nothing."""
        return not self.expired and not self.blobs

    def deletions(self) -> tuple[tuple[tuple[str, int, str | None], ...], tuple[tuple[str, int], ...]]:
        """What the plan deletes, as compared between a preview and the re-plan of an apply."""
        return (
            tuple((t.task, t.size, t.head) for t in self.expired),
            tuple((b.digest, b.size) for b in self.blobs),
        )

    def to_json(self) -> dict[str, Any]:
        return self._json(kept=[t.to_json() for t in self.kept])

    def iter_json(self) -> Iterator[bytes]:
        """The bytes of ``orjson.dumps(self.to_json(), option=JSON_OPTIONS)``, the kept tasks one by one."""
        hole = _Hole()
        return hole.fill(self._json(kept=hole.marker), (t.to_json() for t in self.kept))

    def _json(self, *, kept: Any) -> dict[str, Any]:
        return {
            "version": PLAN_VERSION,
            "now": format_ts(self.now),
            "policy": self.policy.to_json(),
            "expired": [t.to_json() for t in self.expired],
            "kept": kept,
            "blobs": [b.to_json() for b in self.blobs],
            "evacuate": [e.to_json() for e in self.evacuate],
            "bytes": {
                "before": self.bytes_before,
                "streams": self.stream_bytes,
                "objects": self.object_bytes,
                "streams_freed": self.stream_bytes_freed,
                "blobs_freed": self.blob_bytes_freed,
                "evacuated": self.bytes_evacuated,
                "freed": self.bytes_freed,
                "after": self.bytes_after,
            },
            "blobs_in_grace": {"count": self.blobs_in_grace, "bytes": self.blob_bytes_in_grace},
            "incomplete": list(self.incomplete),
            "refused": self.refused,
            "notes": list(self.notes),
        }

    def render(self, *, preview: bool = True) -> str:
        """The plan for a person: what goes, why, what stays and why, the sizes."""
        return "\n".join(self.iter_render(preview=preview))

    def iter_render(self, *, preview: bool = True) -> Iterator[str]:
        """The lines of :meth:`render`, produced as the kept tasks are read."""
        lines = [
            f"gc plan at {format_ts(self.now)}"
            + (" (preview: nothing was deleted; --apply carries it out)" if preview else ""),
            f"policy    {self.policy.render()}",
            f"size      {format_size(self.bytes_before)} now (streams {format_size(self.stream_bytes)}, "
            f"objects {format_size(self.object_bytes)}), {format_size(self.bytes_after)} after; "
            f"frees {format_size(self.bytes_freed)}",
        ]
        if self.refused:
            lines.append(f"REFUSED   {self.refused}")
        for reason in self.incomplete:
            lines.append(f"INCOMPLETE {reason}")
        if self.incomplete:
            lines.append("          references are unknown, so no blob is deleted")
        lines.append("")
        if self.expired:
            lines.append(f"expire {len(self.expired)} task(s), {format_size(self.stream_bytes_freed)}:")
            for t in self.expired:
                lines.append(f"  {t.task}  [{t.reason}] {t.detail}; {format_size(t.size)}")
        else:
            lines.append("expire no task")
        grace = (
            f"; {self.blobs_in_grace} more ({format_size(self.blob_bytes_in_grace)}) wait out the grace period"
            if self.blobs_in_grace
            else ""
        )
        lines.append(f"delete {len(self.blobs)} unreferenced blob(s), {format_size(self.blob_bytes_freed)}{grace}")
        if self.evacuate:
            lines.append(
                f"copy {len(self.evacuate)} inline payload(s) that kept tasks refer to into objects/ "
                f"({format_size(self.bytes_evacuated)})"
            )
        lines.append(f"keep {len(self.kept)} task(s):")
        yield from lines
        young = 0
        for k in self.kept:
            if k.rule == "young":
                young += 1
            else:
                yield f"  {k.task}  [{k.rule}] {k.detail}"
        if young:
            yield f"  {young} task(s) within the age limit and the size cap"
        for note in self.notes:
            yield f"note: {note}"


@final
@dataclass(frozen=True, slots=True)
class GcResult:
    """What an apply did: the plan it carried out, and any departure from it.

    ``skipped`` are expired tasks left in place because a writer reopened or changed them
    after the plan (their references were then kept too); ``restored`` are blobs a writer
    stored again while gc ran (moved back, not deleted). ``exact`` is True when the plan
    was carried out to the letter.
    """

    plan: GcPlan
    deleted: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    blobs_deleted: tuple[str, ...]
    restored: tuple[str, ...]
    evacuated: tuple[str, ...]
    bytes_freed: int
    log_seq: int | None
    #: where the run is recorded: ``gc.jsonl`` in a folder, the gc log's stream on a store
    log_file: str = field(default=GC_LOG, compare=False)

    @property
    def exact(self) -> bool:
        return not self.skipped and not self.restored and len(self.blobs_deleted) == len(self.plan.blobs)

    def to_json(self) -> dict[str, Any]:
        return self._json(self.plan.to_json())

    def iter_json(self) -> Iterator[bytes]:
        """The bytes of ``orjson.dumps(self.to_json(), option=JSON_OPTIONS)``, the plan's kept tasks one by one."""
        hole = _Hole()
        return hole.fill(self._json(self.plan._json(kept=hole.marker)), (t.to_json() for t in self.plan.kept))

    def _json(self, plan: dict[str, Any]) -> dict[str, Any]:
        return {
            "plan": plan,
            "deleted": list(self.deleted),
            "skipped": [{"task": t, "reason": r} for t, r in self.skipped],
            "blobs_deleted": len(self.blobs_deleted),
            "restored": list(self.restored),
            "evacuated": list(self.evacuated),
            "bytes_freed": self.bytes_freed,
            "exact": self.exact,
            "log": None if self.log_seq is None else {"file": self.log_file, "seq": self.log_seq},
        }

    def render(self) -> str:
        return "\n".join(self.iter_render())

    def iter_render(self) -> Iterator[str]:
        """The lines of :meth:`render`, produced as the plan's kept tasks are read."""
        yield from self.plan.iter_render(preview=False)
        lines = [""]
        if self.plan.empty:
            lines.append("nothing to delete")
            yield from lines
            return
        lines.append(
            f"deleted {len(self.deleted)} task stream(s) and {len(self.blobs_deleted)} blob(s), "
            f"freed {format_size(self.bytes_freed)}; recorded in {self.log_file} (seq {self.log_seq})"
        )
        for t, why in self.skipped:
            lines.append(f"skipped {t}: {why}")
        if self.restored:
            lines.append(f"{len(self.restored)} blob(s) were stored again while gc ran and were kept")
        yield from lines


class _Hole:
    """A one-off string that stands for a list in a document, so the list can be written item by item."""

    def __init__(self) -> None:
        self.marker = "\x00" + secrets.token_hex(16)

    def fill(self, doc: dict[str, Any], items: Iterable[dict[str, Any]]) -> Iterator[bytes]:
        """``doc``'s bytes with the list ``items`` where the marker is, indented as orjson would."""
        text = orjson.dumps(doc, option=JSON_OPTIONS)
        mark = orjson.dumps(self.marker)
        at = text.index(mark)
        line = text.rindex(b"\n", 0, at) + 1
        indent = len(text[line:at]) - len(text[line:at].lstrip(b" "))
        pad = b"\n" + b" " * (indent + 2)
        yield text[:at]
        sep = b"["
        for item in items:
            yield sep + pad + orjson.dumps(item, option=JSON_OPTIONS).replace(b"\n", pad)
            sep = b","
        yield b"[]" if sep == b"[" else b"\n" + b" " * indent + b"]"
        yield text[at + len(mark) :]
