"""Retention: bounded records, and cleanup that never eats evidence still needed.

``plan_gc`` says what garbage collection would delete and why; ``apply_gc`` re-plans under
the ledger's gc lock and carries out exactly that plan. Mark and sweep, streams first:

* **Tasks expire by age** -- ``now`` minus the latest timestamp *inside* the stream
  (DESIGN §4 rule 8: never a file mtime, which a git checkout resets) -- **or by size**:
  while streams and objects together exceed ``max_size``, the oldest eligible tasks go
  first.
* **Never deleted**: a task with an unresolved external effect (see :func:`_protected`),
  a task marked with :func:`keep`, a task open for writing (its writer lock is held), a
  task active within the grace period, a stream that cannot be read completely or dated.
  A plan that would leave no task stream at all is refused.
* **Blobs**: every artifact referenced by a retained stream is kept (a ``{"digest",
  "size"}`` ref, or any ``blake3:<64 hex>`` string anywhere in event data, to be safe); an
  unreferenced blob is deleted only once its mtime is older than the grace period (a
  writer may have stored it and not yet appended its event; a re-put refreshes the mtime).
  Bytes that ride inline in an expiring stream but are referred to by a retained one are
  first copied into ``objects/`` (*evacuated*), so nothing kept loses its bytes.
* **Incomplete scans**: a stream that cannot be read completely (a bad line that is not
  an incomplete last line, an I/O error, a stray name in ``tasks/``) or more distinct
  digests than ``max_tracked`` make the scan explicitly incomplete: the plan says so and no
  blob is deleted, because references are unknown.

The scan streams every file once (:class:`~intentlog.eventlog.reader.StreamScan`); memory
grows with the number of tasks and of distinct digests (32 bytes each, as dict keys), never
with the number of events.

What an apply deletes is recorded *before* it deletes anything, in ``<ledger>/gc.jsonl``:
a hash-chained stream in the task stream format (appended by the same durable writer), a
``gc.started`` event listing every task (with its head digest) and blob it is about to
delete, then a ``gc.finished`` event with what was actually done. An auditor can tell
deletion from loss; ``verify`` still passes on everything kept.

Concurrency (DESIGN §4 rules 3 and 5): the whole apply -- and :func:`keep` -- hold an
exclusive ``flock`` on ``<ledger>/gc.lock``. Each expired stream is deleted while holding
its task's writer lock, after checking the file did not change since the plan; a task a
writer reopened in between is skipped and its references kept. A blob is first *moved*
into ``tmp/`` and its mtime compared with the planned one: a writer that re-put it in the
meantime refreshed it (then it is moved back), and a writer that comes later finds it gone
and stores it again. Moved blobs left by a crash are put back by the next apply.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import orjson

from ._args import check_count, check_seconds
from ._digest import DIGEST_PREFIX
from ._fsutil import check_real_dir, fsync_dir, makedirs_durable, open_dir_nofollow, open_nofollow, publish_bytes
from .artifacts.inline import inline_bytes
from .errors import ArtifactError, GcRefused, IntentlogError, LedgerError, TaskBusy, UsageError, WrongType
from .eventlog.format import check_task_id
from .eventlog.lock import WriterLock
from .eventlog.reader import StreamScan
from .eventlog.writer import StreamWriter
from .projections.operator import OperatorFold
from .projections.status import AWAITING_APPROVAL, INTERRUPTED, PAUSED_FOR_REVIEW, TaskStatus, status_of
from .projections.workstate import WorkStateFold
from .refs import DIGEST_BYTES_RE, INLINE, KEEP, walk

if TYPE_CHECKING:
    from .ledger import Ledger

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_MAX_AGE",
    "DEFAULT_MAX_SIZE",
    "GC_LOG",
    "GC_LOCK",
    "KEEP_FILE",
    "ExpiredBlob",
    "ExpiredTask",
    "Evacuation",
    "GcPlan",
    "GcPolicy",
    "GcRefused",
    "GcResult",
    "KeepMark",
    "KeptTask",
    "apply_gc",
    "format_duration",
    "format_size",
    "keep",
    "kept_tasks",
    "parse_duration",
    "parse_size",
    "plan_gc",
    "resolve_policy",
    "unkeep",
]

DEFAULT_MAX_AGE: Final = 30 * 86400.0
DEFAULT_MAX_SIZE: Final = 500 << 20
DEFAULT_GRACE: Final = 3600.0
#: Above this many distinct digests the scan stops tracking references (about 130 bytes
#: each in memory) and declares itself incomplete: no blob is deleted.
MAX_TRACKED: Final = 4_000_000

GC_LOG: Final = "gc.jsonl"
GC_LOCK: Final = "gc.lock"
KEEP_FILE: Final = "keep.json"
KEEP_FORMAT: Final = "intentlog-keep/1"
PLAN_VERSION: Final = "intentlog-gc-plan/1"
CONFIG_KEY: Final = "retention"

_TS_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\Z")
_TS_FORMAT: Final = "%Y-%m-%dT%H:%M:%S.%fZ"
_MOVED_RE = re.compile(r"\.gc\.([0-9a-f]{64})\.[0-9a-f]+\.moved\Z")
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CHUNK = 1 << 20
_NEVER: Final = -1  # a digest held or referenced by a task that is never deleted


# -- durations and sizes ---------------------------------------------------------------

_DURATION_UNITS: Final = {
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
}
_SIZE_UNITS: Final = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_NUMBER_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*\Z")
_UNLIMITED: Final = frozenset({"none", "off", "unlimited"})


def parse_duration(
    text: str | float | _dt.timedelta, *, what: str = "duration", allow_none: bool = False
) -> float | None:
    """Seconds from ``"30d"``, ``"12h"``, ``"90m"``, ``"45s"``, ``"2w"`` (a number is seconds).

    ``"none"`` (or ``"off"``) means no limit and is accepted only with ``allow_none``.
    Raises :class:`UsageError` naming ``what`` and the accepted forms.
    """
    if isinstance(text, _dt.timedelta):
        seconds = text.total_seconds()
    elif isinstance(text, bool):
        raise UsageError(f"{what}: expected a duration such as 30d, 12h or 90m, not {text!r}")
    elif isinstance(text, (int, float)):
        seconds = float(text)
    elif isinstance(text, str):
        if allow_none and text.strip().lower() in _UNLIMITED:
            return None
        m = _NUMBER_RE.match(text)
        unit = m.group(2).lower() if m else ""
        if m is None or unit not in _DURATION_UNITS:
            hint = " (add a unit: s, m, h, d or w)" if m is not None and not unit else ""
            extra = "; 'none' for no limit" if allow_none else ""
            raise UsageError(f"{what}: {text!r} is not a duration such as 30d, 12h, 90m or 45s{hint}{extra}")
        seconds = float(m.group(1)) * _DURATION_UNITS[unit]
    else:
        raise UsageError(f"{what}: expected a duration such as 30d, 12h or 90m, not {type(text).__name__}")
    if not seconds >= 0 or seconds == float("inf"):
        raise UsageError(f"{what}: must be a finite, non-negative duration, not {text!r}")
    return seconds


def parse_size(text: str | int, *, what: str = "size", allow_none: bool = False) -> int | None:
    """Bytes from ``"500MiB"``, ``"2GiB"``, ``"10MB"``, ``"4096"`` (binary and decimal units).

    ``"none"`` means no limit and is accepted only with ``allow_none``. Raises
    :class:`UsageError` naming ``what`` and the accepted forms.
    """
    if isinstance(text, bool):
        raise UsageError(f"{what}: expected a size such as 500MiB, 2GiB or 10MB, not {text!r}")
    if isinstance(text, int):
        n = float(text)
    elif isinstance(text, str):
        if allow_none and text.strip().lower() in _UNLIMITED:
            return None
        m = _NUMBER_RE.match(text)
        if m is None or m.group(2).lower() not in _SIZE_UNITS:
            extra = "; 'none' for no limit" if allow_none else ""
            raise UsageError(
                f"{what}: {text!r} is not a size such as 500MiB, 2GiB, 10MB or 4096 "
                f"(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB){extra}"
            )
        n = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    else:
        raise UsageError(f"{what}: expected a size such as 500MiB or 2GiB, not {type(text).__name__}")
    if n < 0:
        raise UsageError(f"{what}: must not be negative, not {text!r}")
    return int(n)


def format_duration(seconds: float | None) -> str:
    """``2592000`` → ``"30d"``; ``93600`` → ``"1d 2h"``; None → ``"none"``."""
    if seconds is None:
        return "none"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            parts.append(f"{s // size}{unit}")
            s %= size
    return " ".join(parts[:2])


def format_size(n: int | None) -> str:
    """``524288000`` → ``"500 MiB"``; None → ``"none"``."""
    if n is None:
        return "none"
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            text = f"{value:.1f}".removesuffix(".0")
            return f"{text} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


# -- policy ----------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class GcPolicy:
    """Limits: ``max_age`` seconds of inactivity, ``max_size`` bytes, ``grace`` seconds (None: no limit)."""

    max_age: float | None = DEFAULT_MAX_AGE
    max_size: int | None = DEFAULT_MAX_SIZE
    grace: float = DEFAULT_GRACE

    def to_json(self) -> dict[str, Any]:
        return {"max_age": self.max_age, "max_size": self.max_size, "grace": self.grace}

    def render(self) -> str:
        return (
            f"max age {format_duration(self.max_age)}, max size {format_size(self.max_size)}, "
            f"grace {format_duration(self.grace)}"
        )


def resolve_policy(
    ledger: Ledger,
    *,
    max_age: str | float | _dt.timedelta | None = None,
    max_size: str | int | None = None,
    grace: str | float | _dt.timedelta | None = None,
) -> GcPolicy:
    """The policy in force: each argument given, else ``intentlog.json``'s ``retention``, else the default.

    ``intentlog.json`` may hold ``{"retention": {"max_age": "30d", "max_size": "500MiB",
    "grace": "1h"}}`` (any subset). Raises :class:`UsageError` for a malformed value,
    naming where it came from.
    """
    config = ledger.marker.get(CONFIG_KEY, {})
    if not isinstance(config, dict) or not all(k in ("max_age", "max_size", "grace") for k in config):
        raise UsageError(
            f"{ledger.root / 'intentlog.json'}: {CONFIG_KEY!r} must be an object with any of max_age, max_size, "
            f'grace, such as {{"max_age": "30d", "max_size": "500MiB", "grace": "1h"}}; got {config!r}'
        )
    where = f"{ledger.root / 'intentlog.json'} {CONFIG_KEY}"
    age: float | None = DEFAULT_MAX_AGE
    size: int | None = DEFAULT_MAX_SIZE
    grace_s: float | None = DEFAULT_GRACE
    if max_age is not None:
        age = parse_duration(max_age, what="max age", allow_none=True)
    elif "max_age" in config:
        value = _config_value(config["max_age"], f"{where}.max_age")
        age = parse_duration(value, what=f"{where}.max_age", allow_none=True)
    if max_size is not None:
        size = parse_size(max_size, what="max size", allow_none=True)
    elif "max_size" in config:
        size_value = _config_size(config["max_size"], f"{where}.max_size")
        size = parse_size(size_value, what=f"{where}.max_size", allow_none=True)
    if grace is not None:
        grace_s = parse_duration(grace, what="grace")
    elif "grace" in config:
        grace_s = parse_duration(_config_value(config["grace"], f"{where}.grace"), what=f"{where}.grace")
    return GcPolicy(max_age=age, max_size=size, grace=grace_s if grace_s is not None else DEFAULT_GRACE)


def _config_value(value: object, where: str) -> str | float:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UsageError(f'{where}: expected a string such as "30d", not {value!r}')
    return value


def _config_size(value: object, where: str) -> str | int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UsageError(f'{where}: expected a string such as "500MiB", not {value!r}')
    return value


# -- what is protected -----------------------------------------------------------------

#: Operator states that hold a task's stream: a person must act on it first.
_HOLDING_STATES: Final = frozenset({PAUSED_FOR_REVIEW, AWAITING_APPROVAL})


def _protected(st: TaskStatus) -> str | None:
    """Why no policy may delete this task's stream, or None.

    The one rule, derived from the task's operator state (:func:`intentlog.projections.status.status_of`,
    the projection ``tasks`` and ``status`` show), so gc never disagrees with them:

    * **paused for review** or **awaiting approval**: a person decides, from this record
      (an unknown effect, a failed call, a served call whose response is lost, a failed
      checkpoint, an undecided approval); the detail names the command that decides it;
    * **interrupted with an external effect at stake**: an unresolved call whose provider
      effect is unknown (a resend accepted but not made) or happened but not yet turned
      into a result (observed, interpreted): without the stream, re-running would pay twice.

    Everything else may expire by age or size: queued, interrupted with no external
    effect yet, awaiting acceptance, complete, and **failed** -- an operator gave the task
    up (``intentlog fail TASK``), which is how a task paused on a failed call is released.
    """
    if st.state in _HOLDING_STATES:
        return f"{st.state}: {st.reason}; next: {st.next_step}"
    if st.state != INTERRUPTED:
        return None
    ws = st.work
    for cid in ws.unresolved:
        pending = ws.calls.get(cid)
        if pending is not None and pending.provider_effect in ("unknown", "happened"):
            return (
                f"interrupted with a paid-for effect at stake: {cid} (key {pending.key!r}) is "
                f"{pending.stage.replace('_', ' ')}, provider effect {pending.provider_effect}; next: {st.next_step}"
            )
    return None


# -- keep marks ------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class KeepMark:
    """An operator's mark that a task must never be collected (``keep.json``)."""

    task: str
    since: str
    note: str | None

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "since": self.since, "note": self.note}


def _keep_path(ledger: Ledger) -> Path:
    return ledger.root / KEEP_FILE


def kept_tasks(ledger: Ledger) -> dict[str, KeepMark]:
    """The tasks marked with :func:`keep`, by id. Raises :class:`IntentlogError` for a damaged ``keep.json``."""
    path = _keep_path(ledger)
    try:
        with os.fdopen(open_nofollow(path, os.O_RDONLY | _O_NONBLOCK, what="the keep marks (keep.json)"), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # a FIFO would block the read forever
                raise IntentlogError(f"{path}: is not a regular file; restore keep.json from git or a copy")
            raw = f.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise IntentlogError(f"{path}: cannot be read ({exc.strerror or exc}); check its permissions") from exc
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise IntentlogError(f"{path}: not valid JSON ({exc}); restore it from git or a copy") from exc
    tasks = obj.get("tasks") if isinstance(obj, dict) and obj.get("format") == KEEP_FORMAT else None
    if not isinstance(tasks, dict):
        raise IntentlogError(
            f'{path}: expected {{"format": "{KEEP_FORMAT}", "tasks": {{...}}}}; restore it from git or a copy'
        )
    out: dict[str, KeepMark] = {}
    for tid, mark in tasks.items():
        if not isinstance(mark, dict):
            raise IntentlogError(f"{path}: the mark of task {tid!r} is not an object; restore it from git or a copy")
        note = mark.get("note")
        out[tid] = KeepMark(tid, str(mark.get("since", "")), note if isinstance(note, str) else None)
    return out


def _write_keep(ledger: Ledger, marks: Mapping[str, KeepMark]) -> None:
    body = {
        "format": KEEP_FORMAT,
        "tasks": {t: {"since": m.since, "note": m.note} for t, m in sorted(marks.items())},
    }
    data = orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    makedirs_durable(ledger.tmp_dir)
    publish_bytes(data, _keep_path(ledger), tmp_dir=ledger.tmp_dir, replace=True, mode=0o644)


def keep(ledger: Ledger, task_id: str, note: str | None = None, *, wait: float = 30.0) -> KeepMark:
    """Mark ``task_id`` so that no gc policy deletes it; durable when this returns.

    The mark lives in ``<ledger>/keep.json`` (replaced atomically), not in the task's
    stream: it is an operator decision about the record, not part of it. Marking again
    replaces the note. Takes the gc lock (waiting up to ``wait`` seconds), so a mark and a
    running gc never interleave. Raises :class:`InvalidTaskId` or :class:`UsageError` (no
    such task) before touching the disk; :class:`GcRefused` if a gc holds the lock.
    """
    check_task_id(task_id)
    check_seconds(wait, "wait")
    if note is not None and not isinstance(note, str):
        raise UsageError(f"a keep note must be a string, not {type(note).__name__}")
    if not ledger.stream_path(task_id).exists():
        raise UsageError(f"no task {task_id!r} in {ledger.root}; see 'intentlog tasks'")
    with _gc_lock(ledger, wait=wait):
        marks = kept_tasks(ledger)
        mark = KeepMark(task_id, _format_ts(_utcnow()), note)
        marks[task_id] = mark
        _write_keep(ledger, marks)
    return mark


def unkeep(ledger: Ledger, task_id: str, *, wait: float = 30.0) -> bool:
    """Remove the keep mark of ``task_id``; False if it had none (then nothing is written)."""
    check_task_id(task_id)
    check_seconds(wait, "wait")
    with _gc_lock(ledger, wait=wait):
        marks = kept_tasks(ledger)
        if marks.pop(task_id, None) is None:
            return False
        _write_keep(ledger, marks)
    return True


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
    """A task the plan keeps, and why (``rule``: protected, keep, busy, unreadable, undated, grace, young)."""

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
    """

    now: _dt.datetime
    policy: GcPolicy
    expired: tuple[ExpiredTask, ...]
    kept: tuple[KeptTask, ...]
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
        return {
            "version": PLAN_VERSION,
            "now": _format_ts(self.now),
            "policy": self.policy.to_json(),
            "expired": [t.to_json() for t in self.expired],
            "kept": [t.to_json() for t in self.kept],
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
        lines = [
            f"gc plan at {_format_ts(self.now)}"
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
        notable = [t for t in self.kept if t.rule != "young"]
        young = len(self.kept) - len(notable)
        lines.append(f"keep {len(self.kept)} task(s):")
        for k in notable:
            lines.append(f"  {k.task}  [{k.rule}] {k.detail}")
        if young:
            lines.append(f"  {young} task(s) within the age limit and the size cap")
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)


# -- scanning --------------------------------------------------------------------------


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _format_ts(when: _dt.datetime) -> str:
    return when.astimezone(_dt.timezone.utc).strftime(_TS_FORMAT)


def _parse_ts(text: str) -> _dt.datetime:
    return _dt.datetime.strptime(text, _TS_FORMAT).replace(tzinfo=_dt.timezone.utc)


def _check_now(now: _dt.datetime | None) -> _dt.datetime:
    if now is None:
        return _utcnow()
    if not isinstance(now, _dt.datetime) or now.tzinfo is None or now.utcoffset() is None:
        raise UsageError(f"now must be a timezone-aware datetime, not {now!r}")
    return now.astimezone(_dt.timezone.utc)


def _collect(data: Any, refs: set[bytes], held: set[bytes]) -> None:
    """Every digest named anywhere in ``data`` (refs and bare strings, keys too) into ``refs``;
    the digests of payloads riding inline into ``held`` (the :data:`~intentlog.refs.KEEP` walk)."""
    for digest, ref in walk(data, KEEP):
        key = bytes.fromhex(digest[len(DIGEST_PREFIX) :])
        refs.add(key)
        if ref is not None:
            held.add(key)


def _digests_in_file_tail(path: Path, offset: int, out: set[bytes]) -> None:
    """Digests named in the raw bytes from ``offset`` on (an incomplete last line), chunk by chunk."""
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        carry = b""
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            buf = carry + chunk
            for m in DIGEST_BYTES_RE.finditer(buf):
                out.add(bytes.fromhex(m.group(1).decode()))
            carry = buf[-(len(DIGEST_PREFIX) + 63) :]


def _lock_held(lock_path: Path) -> bool:
    """True when a writer holds the task's ``flock``; creates and writes nothing.

    The probe takes the lock for an instant: a writer opening the task at that very
    moment with ``wait=0`` would see :class:`TaskBusy`. Only tasks otherwise eligible
    for deletion (idle past the grace period) are probed.
    """
    try:
        fd = os.open(lock_path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell (a link, no permission): treat it as held
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True  # held (EWOULDBLOCK), or flock unsupported here: treat it as held
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _ident(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(slots=True)
class _TaskInfo:
    task: str
    size: int = 0
    ident: tuple[int, int, int] = (0, 0, 0)
    head: str | None = None
    stream: str | None = None
    events: int = 0
    last_ts: str | None = None
    last_dt: _dt.datetime | None = None
    rule: str | None = None  # why it is never deleted; None: eligible
    detail: str = ""
    state: str | None = None  # the operator state (None: the stream could not be read)


@dataclass(slots=True)
class _Scan:
    """What one pass over the tasks learned (memory: per task, and per distinct digest)."""

    infos: list[_TaskInfo] = field(default_factory=list)
    # digest -> index of the eligible task that refers to it with the latest sort key, or _NEVER
    refs: dict[bytes, int] = field(default_factory=dict)
    # digest -> the same, over tasks that carry its bytes inline
    held: dict[bytes, int] = field(default_factory=dict)
    incomplete: list[str] = field(default_factory=list)
    stream_names: int = 0
    stream_bytes: int = 0
    tracking: bool = True


def _later(scan: _Scan, a: int, b: int) -> bool:
    """Is task ``b`` deleted no earlier than task ``a`` (both eligible indices)?"""
    ia, ib = scan.infos[a], scan.infos[b]
    return (ib.last_dt, ib.task) >= (ia.last_dt, ia.task)


def _note_digests(scan: _Scan, table: dict[bytes, int], digests: set[bytes], index: int, *, limit: int) -> None:
    eligible = scan.infos[index].rule is None
    for d in digests:
        cur = table.get(d)
        if cur is None:
            if len(scan.refs) + len(scan.held) >= limit:
                scan.tracking = False
                scan.incomplete.append(
                    f"more than {limit} distinct digests: references are not tracked in full within the memory "
                    "budget (max_tracked)"
                )
                scan.refs.clear()
                scan.held.clear()
                return
            table[d] = index if eligible else _NEVER
        elif cur != _NEVER and (not eligible or _later(scan, cur, index)):
            table[d] = index if eligible else _NEVER


#: ``progress(what, done, total)``: a terminal's progress line.
Progress = Callable[[str, int, int], None]


def _scan_tasks(
    ledger: Ledger,
    now: _dt.datetime,
    policy: GcPolicy,
    marks: Mapping[str, KeepMark],
    *,
    limit: int,
    progress: Progress | None = None,
) -> _Scan:
    scan = _Scan()
    try:
        names = sorted(e.name for e in os.scandir(ledger.tasks_dir) if e.name.endswith(".jsonl"))
    except FileNotFoundError:
        names = []
    except OSError as exc:
        raise IntentlogError(f"cannot list {ledger.tasks_dir}: {exc.strerror or exc}; check its permissions") from exc
    scan.stream_names = len(names)
    for done, name in enumerate(names, start=1):
        if progress is not None:
            progress("streams", done, len(names))
        tid = name[: -len(".jsonl")]
        try:
            check_task_id(tid)
        except ValueError:
            scan.incomplete.append(f"tasks/{name} is not named like a task stream; move it out of tasks/")
            with contextlib.suppress(OSError):
                scan.stream_bytes += os.stat(ledger.tasks_dir / name).st_size
            continue
        info = _TaskInfo(tid)
        index = len(scan.infos)
        scan.infos.append(info)
        refs: set[bytes] = set()
        held: set[bytes] = set()
        readable = _scan_one(ledger, info, refs, held, scan)
        scan.stream_bytes += info.size
        if not readable:
            continue  # refs unknown: recorded as incomplete
        _classify(ledger, info, now, policy, marks)
        if scan.tracking:
            _note_digests(scan, scan.refs, refs, index, limit=limit)
        if scan.tracking:
            _note_digests(scan, scan.held, held, index, limit=limit)
    return scan


def _scan_one(ledger: Ledger, info: _TaskInfo, refs: set[bytes], held: set[bytes], scan: _Scan) -> bool:
    """Read one stream: size, identity, head, latest timestamp, protection, digests. False if unreadable."""
    path = ledger.tasks_dir / f"{info.task}.jsonl"
    where = f"tasks/{info.task}.jsonl"
    try:
        before = os.stat(path)
        info.size = before.st_size
        s = StreamScan(path)
        fold = WorkStateFold(info.task)
        ops = OperatorFold()
        latest: str | None = None
        for ev in s:
            fold.apply(ev)
            ops.apply(ev)
            if ev.seq == 0 and isinstance(ev.data.get("stream"), str):
                info.stream = ev.data["stream"]
            if _TS_RE.match(ev.ts) and (latest is None or ev.ts > latest):
                latest = ev.ts
            _collect(ev.data, refs, held)
        p = s.problem
        if p is not None and p.incomplete:
            _digests_in_file_tail(path, p.offset, refs)  # an append that never returned: keep what it names
        after = os.stat(path)
    except OSError as exc:
        info.rule, info.detail = "unreadable", f"cannot be read: {exc.strerror or exc}"
        scan.incomplete.append(f"{where}: cannot be read ({exc.strerror or exc})")
        return False
    except LedgerError as exc:  # a link or a special file at the stream's name: never read, kept
        info.rule, info.detail = "unreadable", f"cannot be read: {exc}"
        scan.incomplete.append(f"{where}: cannot be read ({exc})")
        return False
    if p is not None and not p.incomplete:
        info.rule, info.detail = "unreadable", f"line {p.line}: {p.reason}; run 'intentlog verify'"
        scan.incomplete.append(f"{where} line {p.line}: {p.reason}")
        return False
    info.ident = _ident(after)
    info.size = after.st_size
    info.head = s.head
    info.events = s.count
    info.last_ts = latest
    ws = fold.result()
    st = status_of(info.task, ws, ops.result(ws))
    info.state = st.state
    if _ident(before) != _ident(after):
        info.rule, info.detail = "busy", "it changed while it was read (a writer is appending)"
        return True
    protected = _protected(st)
    if protected is not None:
        info.rule, info.detail = "protected", protected
    return True


def _classify(
    ledger: Ledger, info: _TaskInfo, now: _dt.datetime, policy: GcPolicy, marks: Mapping[str, KeepMark]
) -> None:
    """Decide whether a readable task may be deleted at all (``info.rule`` None) or why not."""
    if info.rule is not None:
        return
    mark = marks.get(info.task)
    if mark is not None:
        info.rule = "keep"
        info.detail = f"marked by 'intentlog keep' at {mark.since}" + (f": {mark.note}" if mark.note else "")
        return
    if info.last_ts is None:
        info.rule, info.detail = "undated", "no event carries a timestamp to date it by"
        return
    try:
        info.last_dt = _parse_ts(info.last_ts)
    except ValueError:
        info.rule, info.detail = "undated", f"its latest timestamp {info.last_ts!r} is not a real date"
        return
    idle = (now - info.last_dt).total_seconds()
    if idle < policy.grace:
        info.rule = "grace"
        info.detail = f"last activity {info.last_ts}, within the grace period ({format_duration(policy.grace)})"
        return
    if _lock_held(ledger.tasks_dir / f"{info.task}.jsonl.lock"):
        info.rule, info.detail = "busy", "open for writing: a process holds its writer lock"


@dataclass(slots=True)
class _Candidate:
    rank: int  # 0: referenced by no task; k: freed once the k oldest eligible tasks are deleted
    digest: str
    size: int
    mtime_ns: int
    in_grace: bool


def plan_gc(
    ledger: Ledger,
    *,
    max_age: str | float | _dt.timedelta | None = None,
    max_size: str | int | None = None,
    grace: str | float | _dt.timedelta | None = None,
    now: _dt.datetime | None = None,
    max_tracked: int = MAX_TRACKED,
    progress: Progress | None = None,
) -> GcPlan:
    """Plan a garbage collection of ``ledger``; deletes nothing, writes nothing.

    ``progress(what, done, total)`` is called after each stream is scanned (a terminal's
    progress line; it must not raise).

    Policy values not given come from ``intentlog.json`` (``retention``), else the
    defaults (30d, 500MiB, 1h); see :func:`resolve_policy`. ``now`` (an aware datetime)
    replaces the clock, for tests and for an apply that must match a preview. Raises
    :class:`UsageError` for a malformed policy; a damaged ``keep.json`` makes the plan
    refused. See the module docstring for the rules.
    """
    max_tracked = check_count(max_tracked, "max_tracked")
    policy = resolve_policy(ledger, max_age=max_age, max_size=max_size, grace=grace)
    return _plan(ledger, policy, _check_now(now), max_tracked=max_tracked, progress=progress)


def _check_layout(ledger: Ledger) -> None:
    """The folders gc lists, reads, moves and deletes in are real folders, never links (:class:`LinkRefused`)."""
    for path, what in (
        (ledger.tasks_dir, "task streams"),
        (ledger.root / "objects", "artifact objects (objects/)"),
        (ledger.tmp_dir, "staging files (tmp/)"),
        (ledger.quarantine_dir, "quarantined bytes (quarantine/)"),
    ):
        try:
            check_real_dir(path, what=what)
        except NotADirectoryError as exc:
            raise IntentlogError(f"{path}: {exc.strerror}; move it aside and run gc again") from exc


def _plan(
    ledger: Ledger, policy: GcPolicy, now: _dt.datetime, *, max_tracked: int, progress: Progress | None = None
) -> GcPlan:
    _check_layout(ledger)
    refused: str | None = None
    try:
        marks = kept_tasks(ledger)
    except IntentlogError as exc:
        marks = {}
        refused = f"{exc}; which tasks are kept is unknown, so nothing may be deleted"
    scan = _scan_tasks(ledger, now, policy, marks, limit=max_tracked, progress=progress)
    incomplete = tuple(scan.incomplete)

    # the deletion order: eligible tasks, oldest last activity first (ties by id)
    eligible = sorted(
        (i for i, t in enumerate(scan.infos) if t.rule is None),
        key=lambda i: (scan.infos[i].last_dt, scan.infos[i].task),
    )
    rank = {idx: r for r, idx in enumerate(eligible, start=1)}
    cutoff = None if policy.max_age is None else now - _dt.timedelta(seconds=policy.max_age)
    by_age = 0
    if cutoff is not None:
        while by_age < len(eligible) and scan.infos[eligible[by_age]].last_dt < cutoff:  # type: ignore[operator]
            by_age += 1

    # the objects: sizes, grace, and the rank at which each becomes unreferenced
    candidates: list[_Candidate] = []
    freed_at = [0] * (len(eligible) + 1)
    object_bytes = 0
    now_ns = int(now.timestamp() * 1e9)
    grace_ns = int(policy.grace * 1e9)
    for digest, size, mtime_ns in _iter_objects(ledger):
        object_bytes += size
        key = bytes.fromhex(digest[len(DIGEST_PREFIX) :])
        owner = scan.refs.get(key)
        if owner == _NEVER:
            continue
        r = 0 if owner is None else rank[owner]
        in_grace = now_ns - mtime_ns < grace_ns
        candidates.append(_Candidate(r, digest, size, mtime_ns, in_grace))
        if not in_grace and not incomplete:
            freed_at[r] += size

    # how many tasks go: all expired by age, then the oldest eligible until under the cap
    before = scan.stream_bytes + object_bytes
    after = before - sum(freed_at[: by_age + 1]) - sum(scan.infos[i].size for i in eligible[:by_age])
    k = by_age
    if policy.max_size is not None:
        while after > policy.max_size and k < len(eligible):
            k += 1
            after -= scan.infos[eligible[k - 1]].size + freed_at[k]

    expired: list[ExpiredTask] = []
    for n, idx in enumerate(eligible[:k]):
        t = scan.infos[idx]
        idle = format_duration((now - t.last_dt).total_seconds())  # type: ignore[operator]
        if n < by_age:
            why = "age"
            detail = f"last activity {t.last_ts}, {idle} ago: older than max age {format_duration(policy.max_age)}"
        else:
            why, detail = (
                "size",
                (
                    f"last activity {t.last_ts}, {idle} ago: among the oldest while the ledger exceeds "
                    f"max size {format_size(policy.max_size)}"
                ),
            )
        expired.append(
            ExpiredTask(
                t.task, why, detail, t.last_ts or "", t.size, t.head, t.events, t.stream, t.ident, state=t.state
            )
        )
    gone = {t.task for t in expired}
    kept: list[KeptTask] = []
    for t in scan.infos:
        if t.task in gone:
            continue
        if t.rule is None:
            kept.append(KeptTask(t.task, "young", f"last activity {t.last_ts}", t.size, t.last_ts, t.state))
        else:
            kept.append(KeptTask(t.task, t.rule, t.detail, t.size, t.last_ts, t.state))

    blobs: list[ExpiredBlob] = []
    in_grace_n = in_grace_bytes = 0
    for c in candidates:
        if c.rank > k:
            continue
        if c.in_grace:
            in_grace_n += 1
            in_grace_bytes += c.size
        elif not incomplete:
            blobs.append(ExpiredBlob(c.digest, c.size, c.mtime_ns))
    blobs.sort(key=lambda b: b.digest)

    evacuate = _plan_evacuations(ledger, scan, expired, k, rank, incomplete=bool(incomplete))

    notes: list[str] = []
    final_after = before - sum(t.size for t in expired) - sum(b.size for b in blobs) + sum(e.size for e in evacuate)
    if policy.max_size is not None and final_after > policy.max_size:
        notes.append(
            f"the ledger stays above max size {format_size(policy.max_size)} ({format_size(final_after)}): "
            "the rest is protected, kept, open, in its grace period, or unknown to an incomplete scan"
        )
    if refused is None and (expired or blobs) and len(expired) >= scan.stream_names:
        if scan.stream_names == 0:
            refused = (
                f"the ledger has no task stream: deleting its {len(blobs)} blob(s) would keep nothing, and an "
                "empty tasks/ may mean lost streams; restore them from a copy or git, or delete the folder by hand"
            )
        else:
            refused = (
                f"this plan would delete every task stream ({len(expired)}) and keep nothing: a wrong clock or "
                "a policy too tight? Mark a task with 'intentlog keep', or loosen --max-age / --max-size"
            )
    return GcPlan(
        now=now,
        policy=policy,
        expired=tuple(expired),
        kept=tuple(kept),
        blobs=tuple(blobs),
        evacuate=tuple(evacuate),
        bytes_before=before,
        stream_bytes=scan.stream_bytes,
        object_bytes=object_bytes,
        blobs_in_grace=in_grace_n,
        blob_bytes_in_grace=in_grace_bytes,
        incomplete=incomplete,
        refused=refused,
        notes=tuple(notes),
    )


def _iter_objects(ledger: Ledger) -> Iterator[tuple[str, int, int]]:
    """``(digest, size, mtime_ns)`` of every object, streaming (ArtifactError on a listing failure)."""
    store = ledger.artifacts
    for digest in store.iter_digests():
        try:
            st = os.lstat(store.path_for(digest))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ArtifactError(f"cannot stat the object {digest}: {exc.strerror or exc}") from exc
        if stat.S_ISREG(st.st_mode):
            yield digest, st.st_size, st.st_mtime_ns


def _inline_payloads(path: Path, fd: int | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``(digest, ref)`` carrying inline bytes in a stream's trusted events (read via ``fd`` if given)."""
    for ev in StreamScan(path, fd=fd):
        for digest, ref in walk(ev.data, INLINE):
            if ref is not None:
                yield digest, ref


def _plan_evacuations(
    ledger: Ledger, scan: _Scan, expired: list[ExpiredTask], k: int, rank: Mapping[int, int], *, incomplete: bool
) -> list[Evacuation]:
    """Inline payloads of expiring streams that a kept stream still needs, and nothing else holds.

    Needed: a retained task refers to the digest (or, when the scan is incomplete, any
    task might). Held elsewhere: a retained task carries it inline too, or it is in
    ``objects/``.
    """
    if not expired:
        return []

    def survives(owner: int | None) -> bool:
        return owner is not None and (owner == _NEVER or rank[owner] > k)

    out: list[Evacuation] = []
    chosen: set[str] = set()
    for t in expired:
        path = ledger.tasks_dir / f"{t.task}.jsonl"
        try:
            payloads = list(_evacuation_candidates(path))
        except OSError:
            continue  # the apply re-checks each stream under its lock
        for digest, size in payloads:
            if digest in chosen:
                continue
            key = bytes.fromhex(digest[len(DIGEST_PREFIX) :])
            needed = incomplete or not scan.tracking or survives(scan.refs.get(key))
            if not needed or (scan.tracking and survives(scan.held.get(key))):
                continue
            if ledger.artifacts.path_for(digest).exists():
                continue
            chosen.add(digest)
            out.append(Evacuation(digest, size, t.task))
    return out


def _evacuation_candidates(path: Path) -> Iterator[tuple[str, int]]:
    seen: set[str] = set()
    for digest, ref in _inline_payloads(path):
        size = ref.get("size")
        if digest not in seen and isinstance(size, int) and not isinstance(size, bool):
            seen.add(digest)
            yield digest, size


# -- applying --------------------------------------------------------------------------


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

    @property
    def exact(self) -> bool:
        return not self.skipped and not self.restored and len(self.blobs_deleted) == len(self.plan.blobs)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_json(),
            "deleted": list(self.deleted),
            "skipped": [{"task": t, "reason": r} for t, r in self.skipped],
            "blobs_deleted": len(self.blobs_deleted),
            "restored": list(self.restored),
            "evacuated": list(self.evacuated),
            "bytes_freed": self.bytes_freed,
            "exact": self.exact,
            "log": None if self.log_seq is None else {"file": GC_LOG, "seq": self.log_seq},
        }

    def render(self) -> str:
        lines = [self.plan.render(preview=False), ""]
        if self.plan.empty:
            lines.append("nothing to delete")
            return "\n".join(lines)
        lines.append(
            f"deleted {len(self.deleted)} task stream(s) and {len(self.blobs_deleted)} blob(s), "
            f"freed {format_size(self.bytes_freed)}; recorded in {GC_LOG} (seq {self.log_seq})"
        )
        for t, why in self.skipped:
            lines.append(f"skipped {t}: {why}")
        if self.restored:
            lines.append(f"{len(self.restored)} blob(s) were stored again while gc ran and were kept")
        return "\n".join(lines)


class _GcLock:
    def __init__(self, ledger: Ledger, wait: float) -> None:
        self._lock = WriterLock(ledger.root / GC_LOCK, "gc")
        self._wait = check_seconds(wait, "wait")

    def __enter__(self) -> None:
        try:
            self._lock.acquire(self._wait)
        except TaskBusy as exc:
            who = f"process {exc.holder_pid}" if exc.holder_pid else "another process"
            raise GcRefused(
                f"{exc.path} is held by {who}: a gc or a keep is running; wait for it to finish and run again"
            ) from exc

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _gc_lock(ledger: Ledger, *, wait: float) -> _GcLock:
    return _GcLock(ledger, wait)


def apply_gc(
    ledger: Ledger,
    plan: GcPlan | None = None,
    *,
    max_age: str | float | _dt.timedelta | None = None,
    max_size: str | int | None = None,
    grace: str | float | _dt.timedelta | None = None,
    now: _dt.datetime | None = None,
    wait: float = 0.0,
    max_tracked: int = MAX_TRACKED,
) -> GcResult:
    """Re-plan under the ledger's gc lock and carry out exactly that plan.

    With ``plan`` (a preview from :func:`plan_gc`), the re-plan uses the preview's policy
    and clock and must delete exactly what the preview said, else :class:`GcRefused`
    ("the ledger changed since the preview") and nothing is deleted. Without it, the
    policy arguments (or ``intentlog.json``, or the defaults) and ``now`` are used.

    Before deleting anything, ``gc.started`` -- every task and blob about to go -- is
    durable in ``gc.jsonl``; then streams go (each under its writer lock), then blobs;
    then ``gc.finished``. Raises :class:`GcRefused` for a refused plan or when another gc
    holds the lock (after ``wait`` seconds).
    """
    if plan is not None and not isinstance(plan, GcPlan):
        raise WrongType(f"plan must be a GcPlan from plan_gc(), not {type(plan).__name__} {plan!r}")
    wait = check_seconds(wait, "wait")
    max_tracked = check_count(max_tracked, "max_tracked")
    if plan is not None and (max_age is not None or max_size is not None or grace is not None or now is not None):
        raise UsageError("pass either a preview plan or policy arguments to apply_gc, not both")
    policy = (
        plan.policy if plan is not None else resolve_policy(ledger, max_age=max_age, max_size=max_size, grace=grace)
    )
    when = plan.now if plan is not None else _check_now(now)
    with _gc_lock(ledger, wait=wait):
        _restore_moved(ledger)
        current = _plan(ledger, policy, when, max_tracked=max_tracked)
        if plan is not None and current.deletions() != plan.deletions():
            raise GcRefused(
                f"the ledger changed since the preview: it would now delete {len(current.expired)} task(s) and "
                f"{len(current.blobs)} blob(s), the preview said {len(plan.expired)} and {len(plan.blobs)}; "
                "re-run the preview and apply that"
            )
        if current.refused is not None:
            raise GcRefused(f"gc refused: {current.refused}")
        if current.empty:
            return GcResult(current, (), (), (), (), (), 0, None)
        return _carry_out(ledger, current)


def _carry_out(ledger: Ledger, plan: GcPlan) -> GcResult:
    log = StreamWriter(
        path=ledger.root / GC_LOG,
        task_id="gc",
        quarantine_dir=ledger.quarantine_dir,
        tmp_dir=ledger.tmp_dir,
        in_root=True,
    )
    makedirs_durable(ledger.tmp_dir)
    log.open(wait=10.0)
    try:
        started = log.append(
            "gc.started",
            {
                "now": _format_ts(plan.now),
                "policy": plan.policy.to_json(),
                "tasks": [t.to_json() for t in plan.expired],
                "blobs": {
                    "count": len(plan.blobs),
                    "bytes": plan.blob_bytes_freed,
                    "digests": [b.digest for b in plan.blobs],
                },
                "evacuate": [e.digest for e in plan.evacuate],
                "bytes_before": plan.bytes_before,
                "bytes_freed": plan.bytes_freed,
                "bytes_after": plan.bytes_after,
                "incomplete": list(plan.incomplete),
            },
        )
        evac = {e.digest for e in plan.evacuate}
        deleted: list[str] = []
        skipped: list[tuple[str, str]] = []
        evacuated: list[str] = []
        try:
            for t in plan.expired:
                why = _delete_stream(ledger, t, evac, evacuated)
                if why is None:
                    deleted.append(t.task)
                else:
                    skipped.append((t.task, why))
            blobs = list(plan.blobs)
            if skipped:
                blobs = _spare_referenced(ledger, [t for t, _ in skipped], blobs)
            blobs_deleted, restored = _delete_blobs(ledger, blobs)
        except OSError as exc:
            raise IntentlogError(
                f"gc stopped after deleting {len(deleted)} task stream(s): {exc.strerror or exc} "
                f"({exc.filename or ledger.root}); {GC_LOG} seq {started.seq} lists what it set out to delete; "
                "fix the cause and run gc again (blobs moved aside are put back first)"
            ) from exc
        gone, moved = set(deleted), set(evacuated)
        sizes = {b.digest: b.size for b in plan.blobs}
        freed = sum(t.size for t in plan.expired if t.task in gone)
        freed += sum(sizes[d] for d in blobs_deleted)
        freed -= sum(e.size for e in plan.evacuate if e.digest in moved)
        finished = log.append(
            "gc.finished",
            {
                "started": started.seq,
                "deleted": deleted,
                "skipped": [{"task": t, "reason": r} for t, r in skipped],
                "blobs_deleted": len(blobs_deleted),
                "restored": restored,
                "evacuated": evacuated,
                "bytes_freed": freed,
            },
        )
    finally:
        log.close()
    return GcResult(
        plan,
        tuple(deleted),
        tuple(skipped),
        tuple(blobs_deleted),
        tuple(restored),
        tuple(evacuated),
        freed,
        finished.seq,
    )


def _delete_stream(ledger: Ledger, t: ExpiredTask, evac: set[str], evacuated: list[str]) -> str | None:
    """Delete one expired stream under its writer lock; the reason it was left in place, or None."""
    path = ledger.tasks_dir / f"{t.task}.jsonl"
    lock_path = path.with_name(path.name + ".lock")
    lock = WriterLock(lock_path, t.task)
    check_real_dir(ledger.tasks_dir, what="task streams")  # the lock file is written there
    try:
        lock.acquire(0)
    except TaskBusy as exc:
        return f"a writer opened it after the plan ({exc.holder_pid or 'unknown pid'})"
    try:
        tasks_fd = open_dir_nofollow(ledger.tasks_dir, what="task streams")
    except FileNotFoundError:
        lock.release()
        return "its stream vanished after the plan"
    except BaseException:
        lock.release()
        raise
    try:
        try:
            sfd = os.open(path.name, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=tasks_fd)
        except FileNotFoundError:
            return "its stream vanished after the plan"
        except OSError as exc:
            return f"its stream cannot be opened without following a link ({exc.strerror or exc})"
        try:
            if _ident(os.fstat(sfd)) != t.ident:
                return "it changed after the plan"
            if evac:
                why = _evacuate(ledger, path, sfd, evac, evacuated)
                if why is not None:
                    return why
        finally:
            os.close(sfd)
        os.unlink(path.name, dir_fd=tasks_fd)
        # the lock file stays: unlinking it while a writer waits on it would let a third
        # process lock a fresh file of the same name, and two writers would hold "the" lock
        os.fsync(tasks_fd)
        return None
    finally:
        os.close(tasks_fd)
        lock.release()


def _evacuate(ledger: Ledger, path: Path, fd: int, evac: set[str], evacuated: list[str]) -> str | None:
    """Copy the inline bytes a kept task needs out of the stream open at ``fd``; why not, or None."""
    for digest, ref in _inline_payloads(path, fd):
        if digest in evac and digest not in evacuated:
            try:
                data = inline_bytes(ref)
            except ArtifactError as exc:
                return (
                    f"it holds inline bytes of {digest} that a kept task needs, but they fail their check "
                    f"({exc})"
                )
            if data is None:  # pragma: no cover - _inline_payloads yields inline refs only
                continue
            try:
                ledger.artifacts.put(data)
            except ArtifactError as exc:
                return f"copying inline bytes of {digest} that a kept task needs into objects/ failed ({exc})"
            evacuated.append(digest)
    return None


def _spare_referenced(ledger: Ledger, tasks: list[str], blobs: list[ExpiredBlob]) -> list[ExpiredBlob]:
    """Drop from ``blobs`` every one that a skipped (so retained) stream refers to."""
    refs: set[bytes] = set()
    held: set[bytes] = set()
    for task in tasks:
        path = ledger.tasks_dir / f"{task}.jsonl"
        try:
            s = StreamScan(path)
            for ev in s:
                _collect(ev.data, refs, held)
            if s.problem is not None:
                if not s.problem.incomplete:
                    return []
                _digests_in_file_tail(path, s.problem.offset, refs)
        except FileNotFoundError:
            continue
        except OSError:
            return []
    return [b for b in blobs if bytes.fromhex(b.digest[len(DIGEST_PREFIX) :]) not in refs]


def _moved_name(digest: str) -> str:
    return f".gc.{digest[len(DIGEST_PREFIX) :]}.{secrets.token_hex(6)}.moved"


def _delete_blobs(ledger: Ledger, blobs: list[ExpiredBlob]) -> tuple[list[str], list[str]]:
    """Move each blob aside, check nobody refreshed it, then unlink it (or put it back)."""
    deleted: list[str] = []
    restored: list[str] = []
    if not blobs:
        return deleted, restored
    # every move and unlink goes through descriptors on the real folders: a folder swapped
    # for a link after the checks is never reached (LinkRefused instead)
    objects_fd = open_dir_nofollow(ledger.root / "objects", what="artifact objects (objects/)")
    shards: dict[str, int | None] = {}
    try:
        tmp_fd = open_dir_nofollow(ledger.tmp_dir, what="staging files (tmp/)")
        try:
            for b in blobs:
                hexd = b.digest[len(DIGEST_PREFIX) :]
                if hexd[:2] not in shards:
                    try:
                        shards[hexd[:2]] = open_dir_nofollow(
                            hexd[:2], what="artifact objects (a shard of objects/)", dir_fd=objects_fd
                        )
                    except FileNotFoundError:
                        shards[hexd[:2]] = None
                shard_fd = shards[hexd[:2]]
                if shard_fd is None:
                    continue
                name, aside = hexd[2:], _moved_name(b.digest)
                try:
                    os.rename(name, aside, src_dir_fd=shard_fd, dst_dir_fd=tmp_fd)
                except FileNotFoundError:
                    continue  # gone already (moved to quarantine by a check): nothing to do
                st = os.stat(aside, dir_fd=tmp_fd, follow_symlinks=False)
                if st.st_mtime_ns != b.mtime_ns or st.st_size != b.size:
                    # a writer stored it again since the plan: it is wanted
                    with contextlib.suppress(FileExistsError):  # stored again meanwhile: same bytes
                        os.link(aside, name, src_dir_fd=tmp_fd, dst_dir_fd=shard_fd, follow_symlinks=False)
                    os.unlink(aside, dir_fd=tmp_fd)
                    restored.append(b.digest)
                    continue
                os.unlink(aside, dir_fd=tmp_fd)
                deleted.append(b.digest)
            for fd in shards.values():
                if fd is not None:
                    os.fsync(fd)
            os.fsync(tmp_fd)
        finally:
            os.close(tmp_fd)
    finally:
        for fd in shards.values():
            if fd is not None:
                os.close(fd)
        os.close(objects_fd)
    return deleted, restored


def _put_back(aside: Path, dest: Path) -> None:
    try:
        os.link(aside, dest)
    except FileExistsError:
        pass  # stored again meanwhile: the new copy has the same bytes
    else:
        fsync_dir(dest.parent)
    os.unlink(aside)


def _restore_moved(ledger: Ledger) -> None:
    """Put back blobs a crashed apply moved aside and never decided on (always safe)."""
    try:
        names = [n for n in os.listdir(ledger.tmp_dir) if _MOVED_RE.match(n)]
    except FileNotFoundError:
        return
    for name in names:
        m = _MOVED_RE.match(name)
        if m is None:  # pragma: no cover - filtered above
            continue
        dest = ledger.artifacts.path_for(DIGEST_PREFIX + m.group(1))
        makedirs_durable(dest.parent)
        _put_back(ledger.tmp_dir / name, dest)
    if names:
        fsync_dir(ledger.tmp_dir)
