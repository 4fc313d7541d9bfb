"""The replay checker (DESIGN §7): re-derive everything offline and compare it with the disk.

:func:`verify_path` (or :func:`verify_ledger`) reads a ledger and reports, without
changing anything -- no write, no lock, no quarantine:

* per stream: parse, ``seq`` and ``prev`` of every line (exact bytes, DESIGN §4 rule 6),
  torn tails, and a whole last line that does not chain (a suspect tail);
* per event: its shape and its place in the identity graph, both from the one registry
  in :mod:`intentlog.projections.schema`;
* every referenced artifact: present in ``objects/`` or inline in some event, and its
  bytes hash to its digest; files a repair moved to ``quarantine/``, likewise;
* workspace files recorded by ``artifact.recorded`` whose bytes changed since capture
  (severity ``changed``: the evidence is intact, the world moved on);
* ``heads.json`` from :func:`intentlog.heads.seal`, the only way to see a truncated tail
  (a hash chain cannot, DESIGN §4 rule 7);
* orphan blobs in ``objects/`` (``info``: harmless, garbage collection removes them).

Memory is bounded: streams are read line by line and files hashed in fixed-size chunks;
what grows is one entry per call, per referenced digest and per recorded locator, never
per byte. The heads.json format lives here too (pure encode/decode) so that the checker
never imports the code that writes it.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import orjson
from blake3 import blake3

from .._args import check_names, check_path
from .._digest import DIGEST_PREFIX, digest_bytes, is_digest
from ..artifacts.inline import inline_bytes
from ..errors import ArtifactError, DigestMismatch, LedgerError, NotALedger, NotSerializable, UsageError
from ..eventlog.format import FORMAT, TASK_CREATED, check_kind, check_task_id, is_reserved
from ..eventlog.reader import iter_lines
from ..refs import CHECK, CHECK_REFS, walk
from .schema import FILE, TaskGraph, check_shape, is_ref, rule_for

if TYPE_CHECKING:
    from ..ledger import Ledger

__all__ = [
    "CHANGED",
    "ERROR",
    "HEADS_FILE",
    "HEADS_FORMAT",
    "INFO",
    "VERIFY_VERSION",
    "Problem",
    "StreamHead",
    "VerifyReport",
    "decode_heads",
    "encode_heads",
    "find_links",
    "read_heads_at",
    "retired_by_gc",
    "verify_ledger",
    "verify_path",
]

VERIFY_VERSION: Final = "intentlog-verify/1"
ERROR: Final = "error"
CHANGED: Final = "changed"
INFO: Final = "info"
_SEVERITIES: Final = (ERROR, CHANGED, INFO)

HEADS_FILE: Final = "heads.json"
HEADS_FORMAT: Final = "intentlog-heads/1"

#: Problems listed per stream before the rest are only counted (a garbage file must not
#: make the report grow with its bytes).
MAX_PROBLEMS_PER_TASK: Final = 200
#: Bytes read per chunk when hashing a file; one buffer of this size is reused.
CHUNK_SIZE: Final = 4 << 20
#: From this size on, files are hashed with BLAKE3's multithreaded mode.
_THREADED_MIN: Final = 512 << 10

_KEYS: Final = frozenset({"data", "kind", "prev", "seq", "ts"})
#: The fields of a ref itself (a kind whose data is its own ref, artifact.recorded, carries them).
_REF_KEYS: Final = frozenset({"digest", "size", "media_type", "inline", "inline_b64"})
_TS_RE: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\Z")
_O_FLAGS: Final = (
    os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
)

Progress = Callable[[str, int, int], None]


# -- the report -------------------------------------------------------------------------


def _abbr(digest: object) -> str:
    """``blake3:ab12cd34ef56…`` for messages; full digests go in the ``digest`` field."""
    return f"{digest[:19]}…" if isinstance(digest, str) and is_digest(digest) else repr(digest)


@final
@dataclass(frozen=True, slots=True)
class Problem:
    """One thing found wrong (or worth knowing), and where.

    ``severity`` is ``error`` (evidence is damaged or inconsistent), ``changed`` (a
    recorded workspace file no longer matches its capture) or ``info`` (never a failure).
    ``code`` is a short stable slug (see docs/verify.md).
    """

    severity: str
    code: str
    message: str
    task: str | None = None
    seq: int | None = None
    line: int | None = None
    digest: str | None = None
    locator: str | None = None

    def where(self) -> str:
        if self.severity == CHANGED and self.locator is not None:
            return f"workspace file {self.locator}"
        if self.task is not None:
            out = f"tasks/{self.task}.jsonl"
            if self.line is not None:
                out += f" line {self.line}"
            if self.seq is not None:
                out += f" (seq {self.seq})" if self.line is not None else f" seq {self.seq}"
            return out
        if self.locator is not None:
            return self.locator
        if self.digest is not None:
            hexd = self.digest[len(DIGEST_PREFIX) :]
            return f"objects/{hexd[:2]}/{hexd[2:14]}…"
        return "ledger"

    def render(self) -> str:
        return f"{self.severity}: {self.where()}: {self.message} [{self.code}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "code": self.code,
            "task": self.task,
            "seq": self.seq,
            "line": self.line,
            "digest": self.digest,
            "locator": self.locator,
            "message": self.message,
        }


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


@final
@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What :func:`verify_path` found. ``ok``: no ``error`` and no ``changed`` problem.

    ``problems`` lists errors first, then ``changed``, then ``info``; within each, in the
    order found (stream by stream, line by line, then artifacts, workspace files, orphans).
    """

    root: str
    problems: tuple[Problem, ...]
    tasks: int
    events: int
    artifacts: int  # distinct artifacts whose bytes were checked (objects and inline)
    bytes_hashed: int  # bytes of artifacts, quarantined and workspace files hashed

    @property
    def ok(self) -> bool:
        return not any(p.severity in (ERROR, CHANGED) for p in self.problems)

    @property
    def exit_code(self) -> int:
        """0 when nothing is wrong, 1 when something is (``info`` never fails)."""
        return 0 if self.ok else 1

    def count(self, severity: str) -> int:
        return sum(1 for p in self.problems if p.severity == severity)

    def by_code(self, code: str) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.code == code)

    def summary(self) -> str:
        counts = ", ".join(f"{self.count(s)} {s}" for s in _SEVERITIES)
        verdict = "OK" if self.ok else "PROBLEMS"
        return (
            f"{verdict}: {self.tasks} task(s), {self.events} event(s), {self.artifacts} artifact(s) checked, "
            f"{_size(self.bytes_hashed)} hashed; {counts}"
        )

    def render(self) -> str:
        """Human-readable: one line per problem, then a summary line."""
        return "\n".join([*(p.render() for p in self.problems), self.summary()]) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERIFY_VERSION,
            "root": self.root,
            "ok": self.ok,
            "counts": {
                "tasks": self.tasks,
                "events": self.events,
                "artifacts": self.artifacts,
                "bytes_hashed": self.bytes_hashed,
                **{s: self.count(s) for s in _SEVERITIES},
            },
            "problems": [p.to_json() for p in self.problems],
        }


# -- heads.json: the format (written by intentlog.heads.seal) ------------------------


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


def encode_heads(heads: Mapping[str, StreamHead]) -> bytes:
    """Deterministic bytes: sorted keys, two-space indent (readable in a git diff), final newline."""
    obj = {"format": HEADS_FORMAT, "hash": "blake3", "tasks": {t: h.to_json() for t, h in heads.items()}}
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


def read_heads_at(root: str | os.PathLike[str]) -> dict[str, StreamHead] | None:
    """The heads sealed in ``root/heads.json``; None when there is none.

    Raises :class:`LedgerError` when it cannot be read, is malformed, or is a symbolic
    link or not a regular file (never read through: a seal must be the ledger's own file).
    """
    path = Path(root) / HEADS_FILE
    try:
        data = _read_regular(path)
    except FileNotFoundError:
        return None
    except _NotRegular as exc:
        raise LedgerError(
            f"{path} is {exc}, so it was not read: a seal is a file of the ledger itself; replace it with the "
            "committed heads.json (git checkout) or run 'intentlog seal'"
        ) from exc
    except OSError as exc:
        raise LedgerError(f"{path}: cannot be read ({exc.strerror or exc}); check its permissions") from exc
    return decode_heads(data, where=str(path))


# -- gc.jsonl: what garbage collection deleted on purpose (written by intentlog.retention) --

GC_LOG: Final = "gc.jsonl"


@final
@dataclass(frozen=True, slots=True)
class GcDeletion:
    """A task stream that gc recorded deleting: which stream, its head and length, when."""

    task: str
    stream: str | None
    head: str | None
    events: int
    ts: str  # the gc.started event's timestamp
    seq: int  # the gc.started event's seq in gc.jsonl
    finished: bool  # a gc.finished confirmed it (False: that run was interrupted)

    def matches(self, sealed: StreamHead) -> bool:
        """Did the stream gc deleted contain the sealed head? (same stream, sealed event within it)"""
        if sealed.stream != self.stream or sealed.seq >= self.events:
            return False
        return sealed.seq < self.events - 1 or sealed.head == self.head


def read_gc_deletions(root: Path) -> tuple[dict[str, GcDeletion], str | None]:
    """The deletions recorded in ``root/gc.jsonl`` (latest per task), and what is wrong with the log, if anything.

    The log is a hash-chained stream: a line that fails its checks (other than an
    incomplete last line) makes the whole log untrusted, and then no deletion is excused.
    """
    from ..eventlog.reader import StreamScan

    path = root / GC_LOG
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"{GC_LOG} cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return {}, f"{GC_LOG} is a symbolic link or not a regular file, so it was not read"
    out: dict[str, GcDeletion] = {}
    scan = StreamScan(path)
    try:
        for ev in scan:
            if ev.kind == "gc.started":
                for t in ev.data.get("tasks") or []:
                    if isinstance(t, dict) and isinstance(t.get("task"), str) and type(t.get("events")) is int:
                        stream, head = t.get("stream"), t.get("head")
                        out[t["task"]] = GcDeletion(
                            t["task"],
                            stream if isinstance(stream, str) else None,
                            head if isinstance(head, str) else None,
                            t["events"],
                            ev.ts,
                            ev.seq,
                            False,
                        )
            elif ev.kind == "gc.finished":
                started = ev.data.get("started")
                for name in ev.data.get("deleted") or []:
                    d = out.get(name) if isinstance(name, str) else None
                    if d is not None and d.seq == started:
                        out[name] = replace(d, finished=True)
                for skipped in ev.data.get("skipped") or []:
                    left = skipped.get("task") if isinstance(skipped, dict) else None
                    if isinstance(left, str) and left in out and out[left].seq == started:
                        del out[left]  # left in place after all
    except OSError as exc:
        return {}, f"{GC_LOG} cannot be read ({exc.strerror or exc})"
    p = scan.problem
    if p is not None and not p.incomplete:
        return {}, f"{GC_LOG} line {p.line}: {p.reason}"
    return out, None


def retired_by_gc(root: str | os.PathLike[str], task: str, sealed: StreamHead) -> bool:
    """True when a trusted ``gc.jsonl`` records deleting exactly the stream ``heads.json`` seals for ``task``.

    The seal then binds only a stream with that stream id (gc may have left it in place
    after all); a stream created under the id afterwards is a new task, not a rewrite.
    """
    deleted, problem = read_gc_deletions(Path(root))
    d = deleted.get(task)
    return problem is None and d is not None and d.matches(sealed)


# -- reading files, read-only -----------------------------------------------------------
#
# The store's own helpers live beside its writing code (artifacts/store.py imports the
# atomic-write helper); the checker keeps its import graph free of writers, so it names,
# lists and hashes objects with the few read-only lines below.

_SHARD_RE: Final = re.compile(r"[0-9a-f]{2}\Z")
_NAME_RE: Final = re.compile(r"[0-9a-f]{62}\Z")


def _object_rel(digest: str) -> str:
    """``objects/<2 hex>/<62 hex>`` for a well-formed digest."""
    hexd = digest[len(DIGEST_PREFIX) :]
    return f"objects/{hexd[:2]}/{hexd[2:]}"


def _iter_objects(root: Path) -> Iterator[tuple[str, int]]:
    """``(digest, size)`` of every object file, shard by shard; memory bounded by one shard's listing."""
    objects = root / "objects"
    try:
        shards = sorted(
            e.name for e in os.scandir(objects) if _SHARD_RE.match(e.name) and e.is_dir(follow_symlinks=False)
        )
    except FileNotFoundError:
        return
    for shard in shards:
        try:
            entries = sorted(
                (e.name, e.stat(follow_symlinks=False).st_size)
                for e in os.scandir(objects / shard)
                if _NAME_RE.match(e.name) and e.is_file(follow_symlinks=False)
            )
        except FileNotFoundError:
            continue
        for name, size in entries:
            yield DIGEST_PREFIX + shard + name, size


def _relative(path: object) -> str | None:
    """``path`` in normal posix form if it stays inside its folder (lexically), else None."""
    if type(path) is not str or "\x00" in path or path.startswith("/"):
        return None
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts) or None


class _NotRegular(Exception):
    pass


def _open_regular(path: Path) -> int:
    """A read-only descriptor of the regular file ``path``: never follows a final link, never blocks on a FIFO.

    Raises FileNotFoundError, :class:`_NotRegular` (a link, a folder, a device), or OSError.
    """
    try:
        fd = os.open(path, _O_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _NotRegular("a symbolic link") from exc
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _NotRegular("not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_regular(path: Path) -> bytes:
    """All bytes of a small regular file, read without following a link (see :func:`_open_regular`)."""
    with os.fdopen(_open_regular(path), "rb") as f:
        return f.read()


def _iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of every line of the regular file ``path`` (the last may lack its newline).

    Raises :class:`_NotRegular` when ``path`` is a link or not a regular file, before
    anything is read (the shared reader reads what passes; the ledger walk already
    reported every link, and nothing under one reaches here).
    """
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _NotRegular("a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file")
    return iter_lines(path)


def find_links(root: str | os.PathLike[str]) -> dict[str, str]:
    """Every symbolic link inside the folder ``root``: relative posix path -> where it points.

    Walks without following any link (a linked folder is reported, not entered); folders
    that cannot be listed are skipped. Memory: one folder's listing at a time, plus the links.
    """
    base = Path(root)
    found: dict[str, str] = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(base / rel if rel else base) as it:
                entries = sorted((e.name, e.is_symlink(), e.is_dir(follow_symlinks=False)) for e in it)
        except OSError:
            continue
        for name, is_link, is_dir in entries:
            child = f"{rel}/{name}" if rel else name
            if is_link:
                try:
                    found[child] = os.readlink(base / child)
                except OSError:
                    found[child] = "?"
            elif is_dir:
                stack.append(child)
    return dict(sorted(found.items()))


def _through_link(rel: str, links: Mapping[str, str]) -> str | None:
    """The link on the way to ``rel`` (``rel`` itself or a folder above it), or None."""
    if not links:
        return None
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        head = "/".join(parts[:i])
        if head in links:
            return head
    return None


def _hash_file(path: Path, buf: bytearray) -> tuple[str, int]:
    """BLAKE3 of a regular file in fixed-size chunks (never follows a final symlink, never blocks on a FIFO).

    Raises FileNotFoundError, :class:`_NotRegular`, or OSError.
    """
    fd = _open_regular(path)
    try:
        st = os.fstat(fd)
        h = blake3(max_threads=blake3.AUTO) if st.st_size >= _THREADED_MIN else blake3()
        view = memoryview(buf)
        total = 0
        while True:
            n = os.readv(fd, [view])
            if not n:
                break
            h.update(view[:n])
            total += n
        view.release()
        return DIGEST_PREFIX + h.hexdigest(), total
    finally:
        os.close(fd)


#: Where Linux lists the file locks held: read to see a live writer without touching its lock.
PROC_LOCKS: Final = "/proc/locks"


def _lock_holder(lock_path: Path) -> int | None:
    """The pid holding an exclusive ``flock`` on ``lock_path`` per :data:`PROC_LOCKS`; None if none (or unknown).

    Never takes, blocks on or follows a link to the lock: a checker takes no lock. Where
    there is no ``/proc/locks`` nothing is seen, and an incomplete last line is reported
    as a torn tail.
    """
    try:
        st = os.lstat(lock_path)
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 12345 fe:00:2148833 0 EOF" (blocked waiters are marked "->")
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[3] == "WRITE" and parts[5] == dev:
            try:
                return int(parts[4])
            except ValueError:
                return -1
    return None


# -- the checker ---------------------------------------------------------------------


@dataclass(slots=True)
class _Need:
    """A digest some event refers to without carrying its bytes: first reference, how many."""

    size: int
    task: str
    seq: int
    line: int
    label: str
    refs: int = 1


@dataclass(slots=True)
class _Capture:
    """The latest ``artifact.recorded`` of one workspace locator."""

    ts: str
    digest: str
    size: int
    task: str
    seq: int
    line: int


@dataclass(slots=True)
class _QuarantineFile:
    file: str
    digest: str
    size: int
    task: str
    seq: int
    line: int


@dataclass(slots=True)
class _Stream:
    """What the checker learns about one stream while reading it."""

    task: str
    last_seq: int = -1
    stream_id: str | None = None
    sealed_seq: int | None = None
    at_sealed: str | None = None
    listed: int = 0
    suppressed: int = 0


_UNKNOWN: Final = object()


class _Checker:
    def __init__(self, root: Path, workspace: Path | None, progress: Progress | None) -> None:
        self.root = root
        self.workspace = workspace
        self.progress = progress
        self.problems: list[Problem] = []
        self.events = 0
        self.bytes_hashed = 0
        self.checked = 0
        self.inline: dict[str, int] = {}  # digest -> size, bytes checked where they ride
        self.needs: dict[str, _Need] = {}
        self.bare: dict[str, tuple[str, int, int]] = {}  # digest -> first (task, seq, line)
        self.bad_inline: dict[str, tuple[str, int]] = {}  # digest -> (task, line) of a corrupt inline copy
        self.captures: dict[str, _Capture] = {}
        self.quarantined: list[_QuarantineFile] = []
        self.buf = bytearray(CHUNK_SIZE)
        self._stream: _Stream | None = None
        self.links: dict[str, str] = {}

    # -- reporting ---------------------------------------------------------------------

    def add(self, severity: str, code: str, message: str, **where: Any) -> None:
        s = self._stream
        if s is not None and where.get("task") == s.task:
            if s.listed >= MAX_PROBLEMS_PER_TASK:
                s.suppressed += 1
                return
            s.listed += 1
        self.problems.append(Problem(severity, code, message, **where))

    def _tick(self, phase: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(phase, done, total)

    # -- the ledger folder -------------------------------------------------------------

    def check_links(self) -> None:
        """Every symbolic link in the ledger is a problem, and nothing is read through one (issue 12 item 1)."""
        try:
            self.links = find_links(self.root)
        except OSError as exc:  # pragma: no cover - find_links skips what it cannot list
            self.add(ERROR, "io", f"cannot walk the ledger: {exc}")
            return
        for rel, target in self.links.items():
            self.add(
                ERROR, "link", f"{rel} is a symbolic link (to {target!r}): a ledger holds only its own files and "
                "folders, so nothing was read through it; replace it with the real file (from a copy or git) "
                "or remove it", locator=rel,
            )

    def blocked(self, rel: str) -> bool:
        """True when ``rel`` is or lies under a link (already reported): it must not be read."""
        return _through_link(rel, self.links) is not None

    def check_marker(self) -> None:
        path = self.root / "intentlog.json"
        if self.blocked("intentlog.json"):
            return
        try:
            marker = orjson.loads(_read_regular(path))
        except (OSError, _NotRegular, orjson.JSONDecodeError) as exc:
            self.add(ERROR, "ledger", f"intentlog.json cannot be read ({exc}); is this a ledger folder?")
            return
        if type(marker) is not dict or marker.get("format") != FORMAT:
            self.add(ERROR, "ledger", f"intentlog.json does not declare format {FORMAT!r}: {marker!r}")

    def list_tasks(self) -> list[str]:
        if self.blocked("tasks"):
            return []
        try:
            entries = sorted(e.name for e in os.scandir(self.root / "tasks") if e.name.endswith(".jsonl"))
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.add(ERROR, "io", f"cannot list tasks/: {exc.strerror or exc}; check the folder's permissions")
            return []
        out = []
        for name in entries:
            task = name[: -len(".jsonl")]
            try:
                out.append(check_task_id(task))
            except ValueError:
                self.add(INFO, "stray", f"tasks/{name} is not named like a task stream; it was not checked")
        return out

    # -- one stream --------------------------------------------------------------------

    def check_stream(self, task: str, sealed: StreamHead | None) -> _Stream:
        s = _Stream(task, sealed_seq=sealed.seq if sealed is not None else None)
        if self.blocked(f"tasks/{task}.jsonl"):
            return s  # reported as a link; a linked stream is never read
        self._stream = s
        try:
            self._read_stream(s)
        except _NotRegular as exc:
            self.add(ERROR, "link", f"the stream is {exc}, so it was not read", task=task)
        except OSError as exc:
            self.add(ERROR, "io", f"cannot read the stream: {exc.strerror or exc}", task=task)
        self._stream = None
        if s.suppressed:
            self.problems.append(
                Problem(INFO, "more", f"{s.suppressed} more problem(s) in this stream were not listed", task=task)
            )
        if sealed is not None:
            self._compare_head(s, sealed)
        return s

    def _read_stream(self, s: _Stream) -> None:
        task = s.task
        graph = TaskGraph(task)
        expected_seq: int | None = 0
        expected_prev: object = None
        bad_run: tuple[int, int, str] | None = None  # first unparseable line: (line, offset, reason)
        last_line = 0
        last_break: int | None = None  # index in problems of a chain/seq break on the latest line
        first = True
        for lineno, (offset, raw) in enumerate(_iter_lines(self._path(task)), start=1):
            last_line = lineno
            last_break = None
            if not raw.endswith(b"\n"):  # only ever the last line
                holder = self._writer(task) if bad_run is None else None
                if holder is not None:
                    self.add(
                        INFO,
                        "in_flight",
                        f"the last line is incomplete ({len(raw)} bytes so far), and a live process (pid {holder}) "
                        "holds the task's writer lock: an append in flight, not damage; verify again once it is done",
                        task=task,
                        line=lineno,
                    )
                    break
                start = bad_run or (lineno, offset, "")
                bad_run = None
                self.add(
                    ERROR,
                    "torn_tail",
                    f"the last line is incomplete ({len(raw)} bytes without a newline): an append that never "
                    f"returned, as a crash leaves it{_torn_from(start, lineno)}; opening the task for writing "
                    "moves it to quarantine/",
                    task=task,
                    line=start[0],
                )
                break
            try:
                obj: Any = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                obj, why = None, f"not valid JSON ({exc})"
            else:
                why = "not an event object"
            if type(obj) is not dict or type(obj.get("seq")) is not int or "kind" not in obj:
                if bad_run is None:
                    bad_run = (lineno, offset, why)
                expected_seq, expected_prev = None, _UNKNOWN
                continue
            if bad_run is not None:
                self.add(
                    ERROR,
                    "parse",
                    f"{bad_run[2]}, and event lines follow it (line {lineno}): damage in the middle of the stream, "
                    "never repaired automatically; restore the file from a copy or git",
                    task=task,
                    line=bad_run[0],
                )
                bad_run = None
            seq: int = obj["seq"]
            digest = digest_bytes(raw)
            if not _is_envelope(obj):
                self.add(
                    ERROR,
                    "parse",
                    "not an event: an event is an object with exactly data (object), kind, prev, seq, ts",
                    task=task,
                    line=lineno,
                    seq=seq,
                )
                expected_seq, expected_prev = seq + 1, digest
                continue
            before = len(self.problems)
            self._check_link(task, lineno, seq, obj["prev"], expected_seq, expected_prev)
            if len(self.problems) > before:
                last_break = before
            expected_seq, expected_prev = seq + 1, digest
            self.events += 1
            s.last_seq = max(s.last_seq, seq)
            if seq == s.sealed_seq and s.at_sealed is None:
                s.at_sealed = digest
            kind: str = obj["kind"]
            data: dict[str, Any] = obj["data"]
            if first:
                first = False
                if kind != TASK_CREATED:
                    self.add(
                        ERROR, "graph", f"the first event is {kind}, not task.created", task=task, line=lineno, seq=seq
                    )
                elif type(data.get("stream")) is str:
                    s.stream_id = data["stream"]
            self._check_event(graph, task, lineno, seq, kind, obj["ts"], data)
        if bad_run is not None:
            self.add(
                ERROR,
                "torn_tail",
                f"{bad_run[2]}{_torn_from(bad_run, last_line)}, and nothing event-like follows: a torn tail "
                "(a crash mid-append, or garbage after power loss); opening the task for writing moves it "
                "to quarantine/",
                task=task,
                line=bad_run[0],
            )
        elif last_break is not None and last_break < len(self.problems):
            p = self.problems[last_break]
            self.problems[last_break] = replace(
                p,
                message=p.message + "; it is the last line: a suspect tail (written without a valid link), "
                "which the next writer moves to quarantine/",
            )
        if last_line == 0:
            self.add(ERROR, "graph", "the stream is empty: it has no task.created", task=task)
        for seq, f in graph.finish():
            self.add(f.severity, f.code, f.message, task=task, seq=seq)

    def _check_link(
        self, task: str, lineno: int, seq: int, prev: object, expected_seq: int | None, expected_prev: object
    ) -> None:
        seq_ok = expected_seq is None or seq == expected_seq
        prev_ok = expected_prev is _UNKNOWN or prev == expected_prev
        if not seq_ok and expected_seq is not None:
            if seq > expected_seq:
                what = (
                    f"seq is {seq} but {expected_seq} was expected: {seq - expected_seq} event(s) missing "
                    "before this line, or lines moved"
                )
            else:
                what = f"seq is {seq} but {expected_seq} was expected: an event repeated or moved"
            if not prev_ok:
                what += f"; its prev ({_abbr(prev)}) does not match line {lineno - 1} either"
            self.add(ERROR, "seq", what, task=task, line=lineno, seq=seq)
        elif not prev_ok:
            if expected_prev is None:
                what = f"prev is {_abbr(prev)} but the first line must have prev null"
            else:
                what = (
                    f"prev is {_abbr(prev)} but line {lineno - 1} hashes to {_abbr(expected_prev)}: line {lineno - 1} "
                    "was changed, or this line was not written after it; restore the file from a copy or git"
                )
            self.add(ERROR, "chain", what, task=task, line=lineno, seq=seq)

    def _compare_head(self, s: _Stream, sealed: StreamHead) -> None:
        where = {"task": s.task, "seq": sealed.seq}
        if s.stream_id != sealed.stream and s.stream_id is not None and retired_by_gc(self.root, s.task, sealed):
            self.add(
                INFO,
                "deleted_by_gc",
                f"heads.json sealed stream {sealed.stream!r}, which gc deleted ({GC_LOG} records it); this stream "
                f"({s.stream_id!r}) was created after that under the same id; run 'intentlog seal' to anchor it",
                digest=sealed.head,
                **where,
            )
        elif s.stream_id != sealed.stream:
            self.add(
                ERROR,
                "heads",
                f"the stream id is {s.stream_id!r} but heads.json sealed {sealed.stream!r}: the stream was replaced "
                "(or recreated after a repair quarantined all of it); restore it from a copy or git",
                **where,
            )
        elif s.last_seq < sealed.seq:
            self.add(
                ERROR,
                "truncated",
                f"the stream ends at seq {s.last_seq} but heads.json sealed seq {sealed.seq} ({sealed.events} events): "
                f"{sealed.seq - s.last_seq} event(s) were cut from its tail; restore the file from a copy or git",
                digest=sealed.head,
                **where,
            )
        elif s.at_sealed != sealed.head:
            self.add(
                ERROR,
                "heads",
                f"the event at seq {sealed.seq} hashes to {_abbr(s.at_sealed)} but heads.json sealed "
                f"{_abbr(sealed.head)}: the stream was rewritten after the seal",
                digest=sealed.head,
                **where,
            )

    # -- one event ---------------------------------------------------------------------

    def _check_event(
        self, graph: TaskGraph, task: str, lineno: int, seq: int, kind: str, ts: str, data: dict[str, Any]
    ) -> None:
        at = {"task": task, "line": lineno, "seq": seq}
        try:
            check_kind(kind)
        except NotSerializable:
            self.add(ERROR, "shape", f"event kind {kind!r} is not dotted lowercase words", **at)
        if _TS_RE.match(ts) is None:
            self.add(ERROR, "shape", f"ts {ts!r} is not UTC like 2026-11-30T02:04:05.123456Z", **at)
        rule = rule_for(kind)
        if rule is None:
            if is_reserved(kind):
                self.add(
                    INFO,
                    "unknown_kind",
                    f"{kind} is in intentlog's own namespace but this checker has no rule for it "
                    "(written by a newer intentlog?); only its refs were checked",
                    **at,
                )
            self._scan(data, task, seq, lineno, kind)
            return
        findings = check_shape(rule, data)
        if not findings and rule.graph is not None:
            graph.extra["ts"] = ts  # rules that judge time (a provider dedup window) read the event's own ts
            findings.extend(rule.graph(graph, seq, data))
        for finding in findings:
            self.add(finding.severity, finding.code, f"{kind}: {finding.message}", **at)
        for name in rule.refs:
            if is_ref(data.get(name)):
                self._ref(data[name], task, seq, lineno, f"{kind} {name}")
        if rule.self_ref and is_ref(data):
            self._ref(data, task, seq, lineno, kind)
        for name in rule.scan:
            if name in data:
                self._scan(data[name], task, seq, lineno, f"{kind} {name}")
        for name, value in data.items():  # refs anywhere else, unknown fields included, are checked too
            known = name in rule.refs or name in rule.scan or name in rule.files
            known = known or (rule.self_ref and name in _REF_KEYS)
            if not known and type(value) in (dict, list):
                self._scan(value, task, seq, lineno, f"{kind} {name}", bare=False)
        for name in rule.files:
            if FILE.check(data.get(name)):
                f = data[name]
                self.quarantined.append(_QuarantineFile(f["file"], f["digest"], f["size"], task, seq, lineno))
        if rule.locator is not None and not findings:
            self._capture(data, rule.locator, ts, task, seq, lineno)

    def _capture(self, data: dict[str, Any], field: str, ts: str, task: str, seq: int, lineno: int) -> None:
        loc = _relative(data[field])
        if loc is None:
            self.add(
                ERROR, "shape", f"{field} {data[field]!r} is not a path inside the workspace", task=task, seq=seq,
                line=lineno,
            )
            return
        prior = self.captures.get(loc)
        if prior is None or ts >= prior.ts:
            self.captures[loc] = _Capture(ts, data["digest"], data["size"], task, seq, lineno)

    def _ref(self, ref: dict[str, Any], task: str, seq: int, lineno: int, label: str) -> None:
        at = {"task": task, "seq": seq, "line": lineno}
        digest: str = ref["digest"]
        size: int = ref["size"]
        try:
            data = inline_bytes(ref)
        except DigestMismatch as exc:
            self.add(
                ERROR,
                "artifact_corrupt",
                f"{label}: the bytes carried inline hash to {_abbr(exc.actual)} or differ in size, but the ref says "
                f"{digest} ({size} bytes): the event was edited; restore the stream from a copy or git",
                digest=digest,
                **at,
            )
            self.bad_inline.setdefault(digest, (task, lineno))
            return
        except ArtifactError as exc:
            self.add(ERROR, "ref", f"{label}: {exc}", digest=digest, **at)
            return
        if data is not None:
            self.bytes_hashed += len(data)
            if digest not in self.inline:
                self.inline[digest] = size
                self.checked += 1
            return
        need = self.needs.get(digest)
        if need is None:
            self.needs[digest] = _Need(size, task, seq, lineno, label)
            return
        need.refs += 1
        if need.size != size:
            self.add(
                ERROR,
                "ref",
                f"{label}: the ref to {digest} says {size} bytes, but {need.label} at tasks/{need.task}.jsonl "
                f"line {need.line} says {need.size}",
                digest=digest,
                **at,
            )

    def _scan(self, value: Any, task: str, seq: int, lineno: int, label: str, *, bare: bool = True) -> None:
        """Search values for refs (checked) and, with ``bare``, bare digests (informational), without recursion."""
        for digest, ref in walk(value, CHECK if bare else CHECK_REFS):
            if ref is not None:
                self._ref(ref, task, seq, lineno, f"{label}: a ref in the data")
            elif digest not in self.bare:
                self.bare[digest] = (task, seq, lineno)

    # -- bytes -------------------------------------------------------------------------

    def check_artifacts(self, other_tasks: Sequence[str]) -> None:
        missing: list[str] = []
        total = len(self.needs)
        for i, (digest, need) in enumerate(self.needs.items(), start=1):
            at = {"task": need.task, "seq": need.seq, "line": need.line, "digest": digest}
            more = f" (and {need.refs - 1} more reference(s))" if need.refs > 1 else ""
            if digest in self.inline:
                if self.inline[digest] != need.size:
                    self.add(
                        ERROR, "ref", f"{need.label}: the ref to {digest} says {need.size} bytes, but the bytes "
                        f"carried inline elsewhere are {self.inline[digest]}", **at,
                    )
                self._tick("artifacts", i, total)
                continue
            rel = _object_rel(digest)
            link = _through_link(rel, self.links)
            if link is not None:
                self.add(ERROR, "link", f"{need.label}: {rel} lies behind the link {link}, so its bytes were not "
                         "read; restore the real object", locator=link, **at)
                self._tick("artifacts", i, total)
                continue
            try:
                actual, size = _hash_file(self.root / rel, self.buf)
            except FileNotFoundError:
                missing.append(digest)
                continue
            except _NotRegular as exc:
                self.add(ERROR, "artifact_corrupt", f"{need.label}: {rel} is {exc}, not an object; move it aside "
                         "and restore the bytes", **at)
                continue
            except OSError as exc:
                self.add(ERROR, "io", f"{need.label}: cannot read {rel}: {exc.strerror or exc}", **at)
                continue
            finally:
                self._tick("artifacts", i, total)
            self.bytes_hashed += size
            self.checked += 1
            if actual != digest:
                self.add(
                    ERROR,
                    "artifact_corrupt",
                    f"{need.label}: {rel} hashes to {actual} ({size} bytes), not {digest}{more}: the object is "
                    "corrupt; restore it from a copy (opening it for writing would quarantine it)",
                    **at,
                )
            elif size != need.size:
                self.add(
                    ERROR, "ref", f"{need.label}: the ref to {digest} says {need.size} bytes but the object holds "
                    f"{size}: the event was edited", **at,
                )
        if missing and other_tasks:
            self._inline_elsewhere(set(missing), other_tasks)
        for digest in missing:
            if digest in self.inline:
                continue
            need = self.needs[digest]
            more = f" (and {need.refs - 1} more reference(s))" if need.refs > 1 else ""
            if digest in self.bad_inline:
                task, line = self.bad_inline[digest]
                self.add(
                    ERROR, "artifact_corrupt", f"{need.label}: the only copy of {digest} rides inline at "
                    f"tasks/{task}.jsonl line {line}, where it is corrupt{more}; restore the stream from a copy or git",
                    task=need.task, seq=need.seq, line=need.line, digest=digest,
                )
                continue
            self.add(
                ERROR,
                "artifact_missing",
                f"{need.label}: {digest} ({need.size} bytes) is neither in objects/ nor inline in any event{more}; "
                "restore objects/ from a copy or git",
                task=need.task, seq=need.seq, line=need.line, digest=digest,
            )

    def _inline_elsewhere(self, wanted: set[str], tasks: Sequence[str]) -> None:
        """With a task filter, a blob may still ride inline in a stream not being checked: look there."""
        for task in tasks:
            if self.blocked(f"tasks/{task}.jsonl"):
                continue
            try:
                for _, raw in _iter_lines(self._path(task)):
                    if not wanted:
                        return
                    if b'"inline' not in raw:
                        continue
                    try:
                        obj = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        continue
                    stack = [obj]
                    while stack:
                        v = stack.pop()
                        if type(v) is dict:
                            d = v.get("digest")
                            if d in wanted and is_ref(v):
                                try:
                                    data = inline_bytes(v)
                                except ArtifactError:
                                    data = None
                                if data is not None:
                                    wanted.discard(d)
                                    self.inline[d] = len(data)
                                    self.bytes_hashed += len(data)
                                    self.checked += 1
                            stack.extend(v.values())
                        elif type(v) is list:
                            stack.extend(v)
            except (OSError, _NotRegular):
                continue

    def check_quarantined(self) -> None:
        for q in self.quarantined:
            at = {"task": q.task, "seq": q.seq, "line": q.line, "digest": q.digest, "locator": q.file}
            rel = _relative(q.file) or ""
            if not rel.startswith("quarantine/"):
                self.add(ERROR, "shape", f"stream.repaired names {q.file!r}, which is not a file in quarantine/", **at)
                continue
            if self.blocked(rel):
                continue  # reported as a link
            try:
                actual, size = _hash_file(self.root / rel, self.buf)
            except FileNotFoundError:
                self.add(
                    ERROR, "artifact_missing", f"the repaired tail was moved to {rel}, which is gone: the evidence "
                    "of what the crash left is lost; restore quarantine/ from a copy or git", **at,
                )
                continue
            except (_NotRegular, OSError) as exc:
                self.add(ERROR, "io", f"cannot read {rel}: {exc}", **at)
                continue
            self.bytes_hashed += size
            if actual != q.digest or size != q.size:
                self.add(
                    ERROR, "artifact_corrupt", f"{rel} hashes to {_abbr(actual)} ({size} bytes) but stream.repaired "
                    f"recorded {q.digest} ({q.size} bytes); restore it from a copy or git", **at,
                )

    def check_unrecorded_quarantine(self) -> None:
        """Files in quarantine/ that no stream.repaired names: worth knowing, never a failure."""
        named = {_relative(q.file) for q in self.quarantined}
        if self.blocked("quarantine"):
            return
        try:
            names = sorted(os.listdir(self.root / "quarantine"))
        except (FileNotFoundError, NotADirectoryError):
            return
        for name in names:
            rel = f"quarantine/{name}"
            if rel in named:
                continue
            if name.endswith(".corrupt"):
                why = "an object the store found corrupt and moved aside (its good bytes were put back or are missing)"
            else:
                why = (
                    "bytes moved aside by a repair whose stream.repaired was never written (a crash mid-repair), "
                    "or from a stream since deleted"
                )
            self.add(INFO, "unrecorded_quarantine", f"{rel}: {why}; keep it as evidence", locator=rel)

    def check_captures(self) -> None:
        if not self.captures:
            return
        ws = self.workspace
        try:
            ws_root = ws.resolve(strict=True) if ws is not None else None
        except (OSError, RuntimeError):
            ws_root = None
        if ws_root is None or not ws_root.is_dir():
            self.add(
                INFO, "workspace", f"the workspace {ws} is not a folder here, so {len(self.captures)} recorded "
                "file(s) were not compared with their capture; pass the workspace to compare them",
            )
            return
        total = len(self.captures)
        for i, (loc, c) in enumerate(self.captures.items(), start=1):
            self._tick("workspace", i, total)
            at = {"task": c.task, "seq": c.seq, "line": c.line, "digest": c.digest, "locator": loc}
            recorded = f"recorded as {_abbr(c.digest)} ({c.size} bytes) at tasks/{c.task}.jsonl line {c.line}"
            try:
                target = (ws_root / loc).resolve(strict=False)
            except (OSError, RuntimeError) as exc:
                self.add(CHANGED, "changed_since_capture", f"cannot be resolved ({exc}); {recorded}", **at)
                continue
            if not target.is_relative_to(ws_root):
                self.add(CHANGED, "changed_since_capture", f"now leads outside the workspace through a link, so it "
                         f"was not read; {recorded}", **at)
                continue
            try:
                actual, size = _hash_file(target, self.buf)
            except FileNotFoundError:
                self.add(CHANGED, "changed_since_capture", f"is gone; {recorded}. The stored bytes are intact: "
                         f"'intentlog show {c.digest}' prints them", **at)
                continue
            except (_NotRegular, OSError) as exc:
                self.add(CHANGED, "changed_since_capture", f"cannot be read ({exc}); {recorded}", **at)
                continue
            self.bytes_hashed += size
            if actual != c.digest:
                self.add(
                    CHANGED, "changed_since_capture", f"changed since capture: it now hashes to {_abbr(actual)} "
                    f"({size} bytes), {recorded}; record it again if the change is intended", **at,
                )

    def check_bare(self) -> None:
        for digest, (task, seq, line) in self.bare.items():
            if digest in self.needs or digest in self.inline:
                continue
            rel = _object_rel(digest)
            if not self.blocked(rel) and not (self.root / rel).exists():
                self.add(
                    INFO, "bare_digest", f"the data names {digest}, which is not stored; a bare digest string is "
                    "only informational: refer to stored bytes with a {digest, size} ref to have them checked",
                    task=task, seq=seq, line=line, digest=digest,
                )

    def check_orphans(self) -> None:
        if self.blocked("objects"):
            return
        try:
            for digest, size in _iter_objects(self.root):
                if digest in self.needs or digest in self.inline or digest in self.bare:
                    continue
                self.add(
                    INFO, "orphan_blob", f"{size} bytes referenced by no event: harmless (an interrupted run leaves "
                    "them); garbage collection removes them after a grace period", digest=digest,
                )
        except OSError as exc:
            self.add(ERROR, "io", f"cannot list objects/: {exc.strerror or exc}; check the folder's permissions")

    def _path(self, task: str) -> Path:
        return self.root / "tasks" / f"{task}.jsonl"

    def _writer(self, task: str) -> int | None:
        """The pid holding ``task``'s writer lock, probed without taking it; None when none is seen."""
        return _lock_holder(self.root / "tasks" / f"{task}.jsonl.lock")


def _is_envelope(obj: dict[str, Any]) -> bool:
    """Exactly the five event keys, each of its type (seq was checked by the caller)."""
    return (
        obj.keys() == _KEYS
        and type(obj["kind"]) is str
        and type(obj["data"]) is dict
        and type(obj["ts"]) is str
        and (obj["prev"] is None or type(obj["prev"]) is str)
    )


def _torn_from(start: tuple[int, int, str], last: int) -> str:
    if start[0] == last:
        return ""
    return f" (lines {start[0]}-{last} from byte {start[1]})"


def verify_path(
    root: str | os.PathLike[str],
    tasks: Sequence[str] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check the ledger (or exported bundle) at ``root``; changes nothing, takes no lock.

    ``tasks`` limits the stream checks to those tasks (orphan blobs are then not looked
    for: that needs every stream). ``workspace`` is what ``artifact.recorded`` locators
    are relative to (default: the parent of ``root``, as for :func:`intentlog.open`).
    ``progress(phase, done, total)`` is called as streams, artifacts and workspace files
    are checked. Raises :class:`NotALedger` when ``root`` is not a folder,
    :class:`InvalidTaskId` or :class:`UsageError` for a named task that has no stream
    (and was never sealed); everything found wrong is in the report, not raised.
    """
    root_path = check_path(root, "root")
    tasks = check_names(tasks, "tasks")
    if not root_path.is_dir():
        raise NotALedger(str(root_path), "is not a folder; pass the ledger root (the folder holding intentlog.json)")
    ws = Path(workspace) if workspace is not None else root_path.absolute().parent
    checker = _Checker(root_path, ws, progress)
    checker.check_links()
    checker.check_marker()
    try:
        heads = {} if checker.blocked(HEADS_FILE) else read_heads_at(root_path)  # a linked seal: reported, unread
    except LedgerError as exc:
        checker.add(ERROR, "heads", str(exc))
        heads = {}
    present = checker.list_tasks()
    if tasks is None:
        selected = present
    else:
        selected = []
        for t in tasks:
            check_task_id(t)
            if t not in present and (heads is None or t not in heads):
                raise UsageError(f"no task {t!r} in {root_path / 'tasks'}; 'intentlog tasks' lists the tasks there")
            if t not in selected:
                selected.append(t)
    sealed = heads is not None
    if heads is None:
        checker.add(
            INFO, "heads", "no heads.json: a truncated tail cannot be detected (a hash chain cannot see one); "
            "run 'intentlog seal' and commit heads.json to anchor the streams",
        )
        heads = {}
    present_set = set(present)
    checked = [t for t in selected if t in present_set]
    for i, task in enumerate(checked, start=1):
        checker.check_stream(task, heads.get(task))
        if sealed and task not in heads:
            checker.add(INFO, "unsealed", "not in heads.json (written after the last seal): its tail is not anchored; "
                        "run 'intentlog seal'", task=task)
        checker._tick("streams", i, len(checked))
    gc_deleted, gc_problem = read_gc_deletions(root_path)
    if gc_problem is not None:
        checker.add(
            ERROR, "gc_log", f"{gc_problem}: which streams garbage collection deleted cannot be trusted; "
            "restore gc.jsonl from a copy or git",
        )
    for task in selected if tasks is not None else sorted(heads):
        if task not in present_set and task in heads:
            h = heads[task]
            d = gc_deleted.get(task)
            if d is not None and d.matches(h):
                end = "" if d.finished else "; that gc run did not record its end (interrupted)"
                checker.add(
                    INFO, "deleted_by_gc", f"deleted by gc at {d.ts} ({GC_LOG} seq {d.seq}), not lost: heads.json "
                    f"sealed it at seq {h.seq}, and the stream gc deleted held {d.events} events ending at "
                    f"{_abbr(d.head)}{end}; run 'intentlog seal' to drop it from heads.json",
                    task=task, seq=h.seq, digest=h.head,
                )
                continue
            checker.add(
                ERROR, "heads", f"heads.json sealed this task at seq {h.seq} ({h.events} events), but its stream is "
                "gone; restore it from a copy or git", task=task, seq=h.seq, digest=h.head,
            )
    others = [t for t in present if t not in set(checked)]
    checker.check_artifacts(others)
    checker.check_quarantined()
    checker.check_captures()
    checker.check_bare()
    if tasks is None:
        checker.check_orphans()
        checker.check_unrecorded_quarantine()
    return VerifyReport(
        root=str(root_path),
        # errors first, then changed, then info; in the order found within each
        problems=tuple(sorted(checker.problems, key=lambda p: _SEVERITIES.index(p.severity))),
        tasks=len(checked),
        events=checker.events,
        artifacts=checker.checked,
        bytes_hashed=checker.bytes_hashed,
    )


def verify_ledger(
    ledger: Ledger, tasks: Sequence[str] | None = None, *, progress: Progress | None = None
) -> VerifyReport:
    """:func:`verify_path` over an open :class:`~intentlog.ledger.Ledger` and its workspace."""
    return verify_path(ledger.root, tasks, workspace=ledger.workspace, progress=progress)

