"""Evidence bundles: a task's record, exported for an auditor who trusts neither the producer nor intentlog.

:func:`export_bundle` writes a folder (and, or, a deterministic tar) holding

* ``intentlog.json``, ``tasks/<id>.jsonl`` (each stream copied byte for byte) and
  ``objects/..`` (every blob the streams reference; small payloads stay inline), plus
  ``quarantine/..`` files that a ``stream.repaired`` names: the bundle is a valid ledger
  folder, so :func:`intentlog.projections.verify.verify_path` reads it directly;
* ``heads.json``: the head of every exported stream (a truncated stream is visible);
* ``states.json``: the work state the library projects for each task;
* ``receipts/<name>``: provider receipt logs, when given;
* ``README.md`` for the auditor, ``verify_bundle.py`` (the standalone verifier, which
  imports only the standard library and ``blake3`` and shares no code with intentlog),
  ``.gitattributes`` (``-text``: git must never rewrite a hashed byte) and
  ``hashes.json``, the digest and size of every other file.

A bundle is deterministic: no clock is read and nothing about the export run (time,
user, host, path) is written, so exporting the same record twice gives byte-identical
files and bundles diff cleanly in git.

Export reads streams without a lock, as every reader does, and refuses rather than
exports partial evidence: a stream with a torn tail or damage in the middle
(:class:`~intentlog.errors.CorruptStream`), a stream that no longer holds the head the
ledger's ``heads.json`` sealed, a referenced blob that is missing
(:class:`~intentlog.errors.ArtifactMissing`) or corrupt
(:class:`~intentlog.errors.DigestMismatch`). It builds the bundle in a temporary folder
beside the target and renames it into place, so a crash leaves no half bundle under the
target's name; every file is fsynced before it gets its name.

:func:`check_bundle` is the library's own check of a bundle: the replay checker over it
as a ledger, plus what only a bundle has -- every stream ends at its sealed head,
``states.json`` equals the library's projection of the streams, every receipt is covered
by a recorded ``attempt.started``, and every file matches ``hashes.json``.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, final

import orjson
from blake3 import blake3

from . import __version__
from ._args import check_names, check_path, check_paths
from ._digest import DIGEST_PREFIX, is_digest
from ._fsutil import fsync_dir, makedirs_durable, publish_chunks
from .artifacts.inline import inline_bytes
from .errors import (
    ArtifactError,
    ArtifactMissing,
    CorruptStream,
    DigestMismatch,
    LedgerError,
    NotALedger,
    UsageError,
)
from .eventlog.format import FORMAT, TASK_CREATED, check_task_id
from .eventlog.reader import StreamScan
from .projections.verify import (
    ERROR,
    HEADS_FILE,
    INFO,
    Problem,
    StreamHead,
    VerifyReport,
    decode_heads,
    encode_heads,
    find_links,
    read_heads_at,
    retired_by_gc,
    verify_path,
)
from .projections.workstate import WorkState, work_state
from .refs import EXPORT, EXPORT_INLINE, walk

__all__ = [
    "BUNDLE_FORMAT",
    "CHECKED_CALL_FIELDS",
    "CHECKED_COMPILATION_FIELDS",
    "CHECKED_TASK_FIELDS",
    "HASHES_FILE",
    "HASHES_FORMAT",
    "README_FILE",
    "RECEIPTS_DIR",
    "STATES_FILE",
    "STATES_FORMAT",
    "TAR_ROOT",
    "VERIFIER_FILE",
    "ExportResult",
    "check_bundle",
    "encode_hashes",
    "encode_states",
    "export_bundle",
    "file_hashes",
    "verifier_source",
]

BUNDLE_FORMAT: Final = "intentlog-bundle/1"
STATES_FILE: Final = "states.json"
STATES_FORMAT: Final = "intentlog-states/1"
HASHES_FILE: Final = "hashes.json"
HASHES_FORMAT: Final = "intentlog-bundle-hashes/1"
README_FILE: Final = "README.md"
VERIFIER_FILE: Final = "verify_bundle.py"
RECEIPTS_DIR: Final = "receipts"
MARKER_FILE: Final = "intentlog.json"
#: The one folder a bundle's tar holds: ``tar xf b.tar`` gives ``intentlog-bundle/``.
TAR_ROOT: Final = "intentlog-bundle"

_MARKER: Final = orjson.dumps({"format": FORMAT, "hash": "blake3"}, option=orjson.OPT_SORT_KEYS) + b"\n"
_GITATTRIBUTES: Final = (
    b"# an intentlog evidence bundle: hashes cover exact bytes; never rewrite line endings\n* -text\n"
)
_RECEIPT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_QUARANTINE_FILE: Final = re.compile(r"quarantine/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_CHUNK: Final = 1 << 20
_FILE_MODE: Final = 0o644
_DIR_MODE: Final = 0o755
_JSON: Final = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2

Progress = Callable[[str, int, int], None]

#: The fields of ``states.json`` that both verifiers re-derive from the events and compare
#: (the independent ``verify_bundle.py`` compares exactly these too). The rest -- reasons,
#: timestamps, offered inventories, anomalies -- explains; a difference there is ``info``.
CHECKED_TASK_FIELDS: Final = ("version", "next_operation", "unresolved", "accepted", "events", "last_seq")
CHECKED_CALL_FIELDS: Final = (
    "key",
    "stage",
    "next_operation",
    "provider_effect",
    "duplicate_effect_risk",
    "attempts",
    "request_hash",
    "resumes",
    "superseded_by",
)
CHECKED_COMPILATION_FIELDS: Final = ("stage", "next_operation", "required", "missing")


def verifier_source() -> bytes:
    """The bytes of the standalone verifier this intentlog ships (copied into every bundle)."""
    return (Path(__file__).parent / VERIFIER_FILE).read_bytes()


def _digest_of(data: bytes) -> str:
    return DIGEST_PREFIX + blake3(data).hexdigest()


def _object_rel(digest: str) -> str:
    hexd = digest[len(DIGEST_PREFIX) :]
    return f"objects/{hexd[:2]}/{hexd[2:]}"


# -- the bundle's own files: pure encoders ------------------------------------------------


def encode_states(states: Mapping[str, WorkState]) -> bytes:
    """``states.json``: each task's work state as the library projects it; sorted keys, final newline."""
    doc = {"format": STATES_FORMAT, "tasks": {t: ws.to_json() for t, ws in states.items()}}
    return orjson.dumps(doc, option=_JSON) + b"\n"


def encode_hashes(files: Mapping[str, tuple[str, int]]) -> bytes:
    """``hashes.json``: relative posix path -> ``{digest, size}`` for every file but itself."""
    listed = {rel: {"digest": d, "size": n} for rel, (d, n) in files.items() if rel != HASHES_FILE}
    return orjson.dumps({"format": HASHES_FORMAT, "hash": "blake3", "files": listed}, option=_JSON) + b"\n"


def _walk(root: Path) -> list[tuple[str, bool]]:
    """(relative posix path, is a folder) of everything below ``root``, sorted; links are not followed."""
    out: list[tuple[str, bool]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        out.extend((prefix + d, True) for d in dirnames)
        out.extend((prefix + f, False) for f in filenames)
    out.sort()
    return out


def _hash_path(path: Path) -> tuple[str, int]:
    h = blake3()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return DIGEST_PREFIX + h.hexdigest(), size


def file_hashes(bundle: str | os.PathLike[str]) -> dict[str, tuple[str, int]]:
    """``(digest, size)`` of every file of a bundle folder but ``hashes.json``, by sorted relative path.

    Raises :class:`UsageError` for a symbolic link or a special file (a bundle holds neither).
    """
    root = Path(bundle)
    out: dict[str, tuple[str, int]] = {}
    for rel, is_dir in _walk(root):
        path = root / rel
        if path.is_symlink() or not (is_dir or path.is_file()):
            raise UsageError(f"{path} is a symbolic link or a special file; a bundle holds only files and folders")
        if not is_dir and rel != HASHES_FILE:
            out[rel] = _hash_path(path)
    return out


# -- export ----------------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class ExportResult:
    """What :func:`export_bundle` wrote, and the library's check of it (None when not asked for)."""

    out: Path | None
    tar: Path | None
    tasks: tuple[str, ...]
    files: int
    size: int
    report: VerifyReport | None
    #: staging left by killed exports (of processes no longer alive), removed before this one
    removed: tuple[str, ...] = ()
    #: targets that already held exactly this bundle (a re-export after a killed one): kept as they were
    kept: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.report is None or self.report.ok

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def render(self) -> str:
        where = " and ".join(str(p) for p in (self.out, self.tar) if p is not None)
        lines = [f"exported {len(self.tasks)} task(s) ({', '.join(self.tasks)}): {self.files} files, {self.size} bytes"]
        lines.append(f"  to {where}")
        for p in self.kept:
            lines.append(f"  {p} already held exactly this bundle (an earlier export was interrupted): kept")
        if self.removed:
            lines.append(f"  removed {len(self.removed)} staging folder(s) or file(s) left by killed exports: "
                         + ", ".join(self.removed))
        if self.report is not None:
            lines.append(f"  library check: {self.report.summary()}")
            lines.extend(f"  {p.render()}" for p in self.report.problems if p.severity != INFO)
        folder = self.out if self.out is not None else Path(TAR_ROOT)
        lines.append(f"  an auditor runs: python {folder / VERIFIER_FILE} {folder}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out) if self.out is not None else None,
            "tar": str(self.tar) if self.tar is not None else None,
            "tasks": list(self.tasks),
            "files": self.files,
            "bytes": self.size,
            "ok": self.ok,
            "check": self.report.to_json() if self.report is not None else None,
            "removed": list(self.removed),
            "kept": list(self.kept),
        }


@dataclass(slots=True)
class _Wanted:
    """A digest the exported streams refer to: its size and the first place that does."""

    size: int
    where: str


class _Exporter:
    def __init__(self, root: Path, staging: Path, sealed: Mapping[str, StreamHead]) -> None:
        self.root = root
        self.staging = staging
        self.sealed = sealed
        self.refs: dict[str, _Wanted] = {}
        self.inline: set[str] = set()
        self.bare: dict[str, str] = {}
        self.quarantined: dict[str, tuple[str, int, str]] = {}  # rel -> (digest, size, where)
        self.heads: dict[str, StreamHead] = {}
        self.states: dict[str, WorkState] = {}

    def publish(self, rel: str, chunks: Iterable[bytes]) -> None:
        dest = self.staging / rel
        makedirs_durable(dest.parent)
        if not publish_chunks(chunks, dest, tmp_dir=self.staging, mode=_FILE_MODE):
            raise UsageError(f"{rel} is written twice into the bundle")  # pragma: no cover - paths are unique

    # -- streams ----------------------------------------------------------------------

    def stream(self, task: str) -> None:
        src = self.root / "tasks" / f"{task}.jsonl"
        sealed = self.sealed.get(task)
        scan = StreamScan(src)
        stream_id: str | None = None
        at_sealed: str | None = None
        for ev in scan:
            if ev.seq == 0:
                if ev.kind != TASK_CREATED or type(ev.data.get("stream")) is not str:
                    raise CorruptStream(str(src), 1, "the stream does not begin with task.created; not exported")
                stream_id = ev.data["stream"]
            if sealed is not None and ev.seq == sealed.seq:
                at_sealed = ev.digest
            self.collect(task, ev.seq, ev.kind, ev.data)
        p = scan.problem
        if p is not None:
            what = "a torn tail (an append that never returned)" if p.torn else "damage followed by event lines"
            raise CorruptStream(
                str(src),
                p.line,
                f"{p.reason}: {what}; a bundle carries whole streams only, so this task was not exported",
                hint="opening the task for writing moves a torn tail to quarantine/ and records stream.repaired "
                "(then export again); damage in the middle needs the file restored from a copy or git. "
                "If a writer is appending right now, export again",
            )
        if scan.last is None or scan.head is None or stream_id is None:
            raise CorruptStream(str(src), 1, "the stream is empty; not exported")
        if sealed is not None and sealed.stream != stream_id and retired_by_gc(self.root, task, sealed):
            sealed = None  # gc deleted the sealed stream (gc.jsonl says so); this one is a new task
        if sealed is not None and (sealed.stream != stream_id or at_sealed != sealed.head):
            raise LedgerError(
                f"{src}: the ledger's heads.json sealed seq {sealed.seq} of stream {sealed.stream} as "
                f"{sealed.head}, but the stream no longer holds that event (truncated, replaced or rewritten); "
                "not exported: a bundle must not re-anchor evidence its seal contradicts. Run 'intentlog verify'"
            )
        rel = f"tasks/{task}.jsonl"
        self.publish(rel, _read_range(src, scan.end))
        copy = StreamScan(self.staging / rel)
        state = work_state(copy, task_id=task)
        if copy.problem is not None or copy.head != scan.head or copy.count != scan.count:  # pragma: no cover
            raise CorruptStream(str(src), copy.count + 1, "the stream changed while it was copied; export again")
        self.heads[task] = StreamHead(stream_id, scan.last.seq, scan.head, scan.count)
        self.states[task] = state

    def collect(self, task: str, seq: int, kind: str, data: dict[str, Any]) -> None:
        """Every ref (checked inline bytes, or a digest whose blob must be exported), bare digest and repair file."""
        where = f"tasks/{task}.jsonl seq {seq} ({kind})"
        walked: Any = data
        if kind == "stream.repaired":
            q = data.get("quarantined")
            if type(q) is dict and type(q.get("file")) is str and is_digest(q.get("digest")):
                self.quarantined[q["file"]] = (q["digest"], q.get("size", -1), where)
            walked = [v for k, v in data.items() if k != "quarantined"]
        for found in walk(walked, EXPORT):
            if found.ref is not None:
                self.ref(found.ref, where)
            else:
                self.bare.setdefault(found.digest, where)

    def ref(self, ref: dict[str, Any], where: str) -> None:
        digest, size = ref["digest"], ref["size"]
        try:
            data = inline_bytes(ref)
        except ArtifactError as exc:
            raise ArtifactError(f"{where}: its inline payload of {digest} is corrupt ({exc}); not exported") from exc
        if data is not None:
            self.inline.add(digest)
        wanted = self.refs.get(digest)
        if wanted is None:
            self.refs[digest] = _Wanted(size, where)
        elif wanted.size != size:
            raise ArtifactError(
                f"{where}: a ref to {digest} says {size} bytes but {wanted.where} says {wanted.size}; not exported"
            )

    # -- bytes -----------------------------------------------------------------------

    def objects(self, other_tasks: Sequence[str]) -> None:
        pending: dict[str, _Wanted] = {}
        for digest, wanted in self.refs.items():
            if self.copy_object(digest, wanted.size, wanted.where):
                continue
            if digest not in self.inline:
                pending[digest] = wanted
        if pending:
            for digest, data in _inline_in(self.root, other_tasks, set(pending)).items():
                self.publish(_object_rel(digest), (data,))
                del pending[digest]
        for digest, wanted in pending.items():
            raise ArtifactMissing(digest, f"{wanted.where}; it is neither in objects/ nor inline in any stream")
        for digest, where in self.bare.items():
            if digest not in self.refs:
                self.copy_object(digest, None, where)
        for rel, (digest, size, where) in sorted(self.quarantined.items()):
            if _QUARANTINE_FILE.match(rel) is None:
                raise ArtifactError(f"{where}: stream.repaired names {rel!r}, not a file in quarantine/; not exported")
            src = self.root / rel
            if not os.path.lexists(src):
                raise ArtifactMissing(digest, f"{where}, which moved a torn tail to {rel}: that file is gone")
            self.publish(rel, _checked_copy(src, digest, size))

    def copy_object(self, digest: str, size: int | None, where: str) -> bool:
        """Copy one blob if the store has it, checking every byte on the way; False if it has not."""
        rel = _object_rel(digest)
        src = self.root / rel
        if not os.path.lexists(src):
            return False  # (a link is refused by the copy, which never reads through one)
        if not (self.staging / rel).exists():
            self.publish(rel, _checked_copy(src, digest, size, where=where))
        return True


_O_READ: Final = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def _open_no_link(path: Path) -> Any:
    """``path`` opened for reading as a regular file, never through a final link (:class:`LedgerError` names it)."""
    try:
        fd = os.open(path, _O_READ | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LedgerError(f"{path} is a symbolic link; export never copies through one: replace it with the "
                              "real file (from a copy or git), then export again") from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LedgerError(f"{path} is not a regular file; a bundle copies only files")
    return os.fdopen(fd, "rb")


def _read_range(path: Path, end: int, *, follow: bool = False) -> Iterator[bytes]:
    """The first ``end`` bytes of ``path`` (a stream's trusted lines; later appends are not read).

    Never through a link inside the ledger; ``follow`` for files the caller named (receipt logs).
    """
    with open(path, "rb") if follow else _open_no_link(path) as f:
        left = end
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:  # pragma: no cover - streams only grow while they are read
                raise CorruptStream(str(path), 0, f"the file is shorter than the {end} bytes just read; export again")
            left -= len(chunk)
            yield chunk


def _checked_copy(src: Path, digest: str, size: int | None, *, where: str | None = None) -> Iterator[bytes]:
    """``src`` in chunks; raises (so the copy is discarded) unless it hashes to ``digest`` with ``size`` bytes."""
    h = blake3()
    n = 0
    with _open_no_link(src) as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            n += len(chunk)
            yield chunk
    actual = DIGEST_PREFIX + h.hexdigest()
    if actual != digest:
        raise DigestMismatch(digest, actual, f"{src}" + (f" (referenced by {where})" if where else ""))
    if size is not None and n != size:
        raise ArtifactError(f"{src} holds {n} bytes but {where or 'its record'} says {size}; not exported")


def _inline_in(root: Path, tasks: Sequence[str], wanted: set[str]) -> dict[str, bytes]:
    """Blobs that ride inline only in streams not being exported (checked against their digest)."""
    found: dict[str, bytes] = {}
    for task in tasks:
        if not wanted:
            break
        for ev in StreamScan(root / "tasks" / f"{task}.jsonl"):
            for hit in walk(ev.data, EXPORT_INLINE):
                if not wanted:
                    break
                if hit.digest in wanted and hit.ref is not None:
                    try:
                        data = inline_bytes(hit.ref)
                    except ArtifactError:
                        data = None  # a corrupt copy: keep looking for a good one
                    if data is not None:
                        found[hit.digest] = data
                        wanted.discard(hit.digest)
    return found


def _receipt_names(receipts: Sequence[str | os.PathLike[str]]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for r in receipts:
        path = Path(r)
        if _RECEIPT_NAME.match(path.name) is None:
            raise UsageError(f"receipt log {path}: its file name must be letters, digits, '.', '_' or '-'")
        if path.name in out:
            raise UsageError(f"two receipt logs are named {path.name!r}; a bundle keeps them side by side by name")
        if not path.is_file():
            raise UsageError(f"receipt log {path} is not a file")
        out[path.name] = path
    return out


def _readme(heads: Mapping[str, StreamHead], states: Mapping[str, WorkState], receipts: Sequence[str]) -> bytes:
    verifier = _digest_of(verifier_source())
    rows = [f"| `{t}` | {h.events} | `{h.head}` | {states[t].next_operation} |" for t, h in sorted(heads.items())]
    logs = "\n".join(f"- `{RECEIPTS_DIR}/{name}`" for name in receipts) or "- none"
    text = f"""# intentlog evidence bundle

The record of {len(heads)} task(s), exported by intentlog {__version__} ({BUNDLE_FORMAT}). Every
event of each task is here, byte for byte as it was appended, with every artifact its
events refer to. Nothing in this folder depends on when or where it was exported.

| task | events | head (digest of the last line) | next operation |
|---|---|---|---|
{chr(10).join(rows)}

Provider receipt logs (written by the provider, not by intentlog):

{logs}

## Check it without trusting intentlog

`verify_bundle.py` is one file that imports only the Python standard library (3.10 or
newer) and the `blake3` package. It shares no code with intentlog: it re-derives every
state from the events and checks every byte. Read it before you run it; its BLAKE3
digest is `{verifier}` (compare with a copy from a source you trust).

    python -m venv venv && venv/bin/pip install blake3
    venv/bin/python verify_bundle.py .

It prints numbered claims, each `[PASS]` or `[FAIL]`, and exits 0 only when every one
passes. `--json` prints the claims and the states it re-derived; `--no-inventory` skips
the `hashes.json` check, to see what the meaning of the record alone proves.

With intentlog installed, its own checker must agree:

    intentlog verify --bundle .

## What is here

| file | what it is |
|---|---|
| `intentlog.json` | the ledger marker: the bundle is also a ledger folder |
| `tasks/<task>.jsonl` | one event per line; `prev` is the BLAKE3 digest of the line before |
| `objects/<2 hex>/<62 hex>` | artifact bytes, named by their BLAKE3 digest (small payloads ride inline in events) |
| `quarantine/` | bytes a crash left, moved aside by a repair that a `stream.repaired` event records |
| `heads.json` | each stream's id, last seq, head digest and event count: a cut tail is visible |
| `states.json` | what intentlog says each call and compilation is, and what is safe next |
| `receipts/` | provider receipt logs: every receipt must be covered by a recorded `attempt.started` |
| `hashes.json` | the digest and size of every other file |
| `verify_bundle.py` | the independent verifier |

A stream is exported only whole: intentlog refuses to export a stream with a torn tail
or damage, so a bundle never carries a partial record as if it were complete.
"""
    return text.encode("utf-8")


def export_bundle(
    root: str | os.PathLike[str],
    tasks: Sequence[str] | None = None,
    *,
    out: str | os.PathLike[str] | None = None,
    tar: str | os.PathLike[str] | None = None,
    receipts: Sequence[str | os.PathLike[str]] = (),
    check: bool = True,
) -> ExportResult:
    """Export ``tasks`` (default: every task) of the ledger at ``root`` as an evidence bundle.

    ``out`` is a folder that must not exist or be empty; ``tar`` a file that must not
    exist (a plain, deterministic tar of one folder, ``intentlog-bundle/``); give either
    or both. ``receipts`` are provider receipt logs (JSON lines with a ``body_hash``),
    copied byte for byte into ``receipts/`` under their file names. With ``check`` the
    library's checker (:func:`check_bundle`) runs over the result, which is kept either way
    (``ExportResult.ok`` says whether it passed).

    Refused before anything is written: no target, an invalid task id or a task without a
    stream (:class:`UsageError`, :class:`~intentlog.errors.InvalidTaskId`), a target that
    exists, a root that is not a ledger (:class:`NotALedger`). Refused while building,
    leaving nothing under the target's name: :class:`CorruptStream`, :class:`LedgerError`
    (the ledger's seal contradicts a stream), :class:`ArtifactMissing`,
    :class:`DigestMismatch` (see the module docstring).
    """
    if out is None and tar is None:
        raise UsageError("say where the bundle goes: a folder (out), a tar file (tar), or both")
    check_path(root, "root")
    task_list = check_names(tasks, "tasks")
    names = sorted({check_task_id(t) for t in task_list}) if task_list else None
    out_path = check_path(out, "out") if out is not None else None
    tar_path = check_path(tar, "tar") if tar is not None else None
    receipts = check_paths(receipts, "receipts")
    if out_path is not None:
        _check_out(out_path)
    if tar_path is not None and (tar_path.is_symlink() or (tar_path.exists() and not tar_path.is_file())):
        raise UsageError(f"{tar_path} exists and is not a file; name a new file for the tar")
    logs = _receipt_names(receipts)
    root_path = Path(root)
    _refuse_links(root_path)
    _check_marker(root_path)
    present = _task_ids(root_path)
    if names is None:
        names = present
        if not names:
            raise UsageError(f"{root_path / 'tasks'} holds no task to export")
    for t in names:
        if t not in present:
            raise UsageError(f"no task {t!r} in {root_path / 'tasks'}; 'intentlog tasks' lists the tasks there")
    sealed = read_heads_at(root_path) or {}

    anchor = out_path if out_path is not None else tar_path
    if anchor is None:  # pragma: no cover - checked above
        raise UsageError("no target")
    makedirs_durable(anchor.absolute().parent)
    if tar_path is not None:
        makedirs_durable(tar_path.absolute().parent)
    removed = _remove_stale([p for p in (out_path, tar_path) if p is not None])
    kept: list[str] = []
    staging = anchor.absolute().parent / f".{anchor.name}.{os.getpid()}.{secrets.token_hex(4)}{_STAGING_SUFFIX}"
    os.mkdir(staging)
    try:
        ex = _Exporter(root_path, staging, sealed)
        for t in names:
            ex.stream(t)
        ex.objects([t for t in present if t not in set(names)])
        for name, path in logs.items():
            ex.publish(f"{RECEIPTS_DIR}/{name}", _read_range(path, path.stat().st_size, follow=True))
        ex.publish(MARKER_FILE, (_MARKER,))
        ex.publish(".gitattributes", (_GITATTRIBUTES,))
        ex.publish(HEADS_FILE, (encode_heads(ex.heads),))
        ex.publish(STATES_FILE, (encode_states(ex.states),))
        ex.publish(README_FILE, (_readme(ex.heads, ex.states, sorted(logs)),))
        ex.publish(VERIFIER_FILE, (verifier_source(),))
        files = file_hashes(staging)
        ex.publish(HASHES_FILE, (encode_hashes(files),))
        size = sum(n for _, n in files.values()) + (staging / HASHES_FILE).stat().st_size
        bundle_dir = staging
        if out_path is not None:
            if _holds_bundle(out_path, staging):
                kept.append(str(out_path))  # an earlier export of the same record was killed after its rename
            else:
                try:
                    os.rename(staging, out_path)
                except OSError as exc:
                    raise UsageError(
                        f"{out_path} exists and holds another bundle (or appeared while this one was built); "
                        f"name a new folder ({exc.strerror or exc})"
                    ) from exc
                fsync_dir(out_path.absolute().parent)
            bundle_dir = out_path
        report = check_bundle(bundle_dir) if check else None
        if report is not None and out_path is None and tar_path is not None:
            report = replace(report, root=str(tar_path))
        if tar_path is not None:
            if tar_path.exists() and _same_bytes(tar_path, _tar_chunks(bundle_dir)):
                kept.append(str(tar_path))
            elif not publish_chunks(
                _tar_chunks(bundle_dir), tar_path, tmp_dir=tar_path.absolute().parent, mode=_FILE_MODE
            ):
                raise UsageError(f"{tar_path} exists and holds another tar (or appeared meanwhile); name a new file")
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return ExportResult(out_path, tar_path, tuple(names), len(files) + 1, size, report, tuple(removed), tuple(kept))


_STAGING_SUFFIX: Final = ".export"
_STALE_STAGING: Final = re.compile(r"\.(.+)\.(\d+)\.[0-9a-f]{8}\.export\Z")
_STALE_TMP: Final = re.compile(r"\.(.+)\.(\d+)\.[0-9a-f]{12}\.tmp\Z")


def _check_out(out_path: Path) -> None:
    """Refuse a folder target that exists and can hold no bundle; an existing bundle is compared at the end."""
    if out_path.is_symlink():
        raise UsageError(f"{out_path} is a symbolic link; name a new folder for the bundle")
    if not out_path.exists():
        return
    if not out_path.is_dir():
        raise UsageError(f"{out_path} exists and is not a folder; name a new folder for the bundle")
    if any(out_path.iterdir()) and not (out_path / HASHES_FILE).is_file():
        raise UsageError(f"{out_path} exists and is not an empty folder; name a new folder for the bundle")


def _holds_bundle(out_path: Path, staging: Path) -> bool:
    """Does the existing ``out_path`` hold exactly the bundle just built in ``staging``? (False if it is empty.)"""
    try:
        if not any(out_path.iterdir()):
            return False  # an empty folder: the rename gives it the bundle
        theirs = (out_path / HASHES_FILE).read_bytes()
        return theirs == (staging / HASHES_FILE).read_bytes() and file_hashes(out_path) == file_hashes(staging)
    except (OSError, UsageError):
        return False


def _same_bytes(path: Path, chunks: Iterable[bytes]) -> bool:
    """Does the regular file ``path`` hold exactly the bytes of ``chunks``?"""
    mine = blake3()
    for chunk in chunks:
        mine.update(chunk)
    try:
        theirs, _ = _hash_path(path)
    except OSError:
        return False
    return theirs == DIGEST_PREFIX + mine.hexdigest()


def _alive(pid: int) -> bool:
    """Is ``pid`` a live process (on this host)? Unknown counts as alive: nothing of it is removed."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _remove_stale(targets: Sequence[Path]) -> list[str]:
    """Remove what killed exports to these targets' folders left: staging folders, and temp tars of a target.

    Only names this module makes (``.<name>.<pid>.<8 hex>.export`` folders, and the temp
    ``.<tar name>.<pid>.<12 hex>.tmp`` of a tar being published) whose pid is no longer
    alive are removed, never through a link; the removed paths are returned (reported).
    """
    removed: list[str] = []
    tar_names = {t.name for t in targets}
    for folder in sorted({t.absolute().parent for t in targets}):
        before = len(removed)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            staging = _STALE_STAGING.match(e.name)
            tmp = _STALE_TMP.match(e.name)
            if staging is not None and e.is_dir(follow_symlinks=False) and not _alive(int(staging.group(2))):
                shutil.rmtree(e.path, ignore_errors=True)
            elif (
                tmp is not None
                and tmp.group(1) in tar_names
                and e.is_file(follow_symlinks=False)
                and not _alive(int(tmp.group(2)))
            ):
                os.unlink(e.path)
            else:
                continue
            removed.append(e.path)
        if len(removed) > before:
            fsync_dir(folder)
    return removed


#: What export reads below the ledger root: none of it may be (or lie behind) a link.
_READ_TOP: Final = frozenset({MARKER_FILE, HEADS_FILE, "tasks", "objects", "quarantine"})


def _refuse_links(root: Path) -> None:
    """:class:`LedgerError` naming the first link among what export reads; export never copies through one."""
    for rel, target in find_links(root).items():
        top = rel.split("/", 1)[0]
        if top in _READ_TOP and not (top == "tasks" and rel.endswith(".lock")):
            raise LedgerError(
                f"{root / rel} is a symbolic link (to {target!r}); export never copies through one, so nothing was "
                "exported. Replace it with the real file or folder (from a copy or git), then export again; "
                "'intentlog verify' lists every link in the ledger"
            )


def _check_marker(root: Path) -> None:
    try:
        marker = orjson.loads((root / MARKER_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise NotALedger(str(root), f"{MARKER_FILE} cannot be read ({exc}); pass the ledger root") from exc
    if type(marker) is not dict or marker.get("format") != FORMAT:
        raise NotALedger(str(root), f"{MARKER_FILE} does not declare format {FORMAT!r}")


def _task_ids(root: Path) -> list[str]:
    try:
        names = os.listdir(root / "tasks")
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        if n.endswith(".jsonl"):
            try:
                out.append(check_task_id(n[: -len(".jsonl")]))
            except ValueError:
                continue
    return sorted(out)


# -- the deterministic tar ----------------------------------------------------------------------


def _tar_chunks(bundle: Path) -> Iterator[bytes]:
    """A POSIX (pax) tar of ``bundle`` under ``intentlog-bundle/``: sorted entries, mtime 0, owner 0, fixed modes.

    Written as a stream of blocks (tarfile's own header encoder), so memory stays bounded.
    """
    total = 0

    def header(name: str, *, size: int, is_dir: bool) -> bytes:
        info = tarfile.TarInfo(name)
        info.size = size
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
        info.mode = _DIR_MODE if is_dir else _FILE_MODE
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")

    first = header(TAR_ROOT, size=0, is_dir=True)
    total += len(first)
    yield first
    for rel, is_dir in _walk(bundle):
        path = bundle / rel
        size = 0 if is_dir else path.stat().st_size
        block = header(f"{TAR_ROOT}/{rel}", size=size, is_dir=is_dir)
        total += len(block)
        yield block
        if is_dir:
            continue
        n = 0
        for chunk in _read_range(path, size):
            n += len(chunk)
            yield chunk
        pad = -n % tarfile.BLOCKSIZE
        total += n + pad
        yield b"\0" * pad
    end = b"\0" * (2 * tarfile.BLOCKSIZE)
    total += len(end)
    yield end
    yield b"\0" * (-total % tarfile.RECORDSIZE)


# -- the library's check of a bundle ----------------------------------------------------------


def check_bundle(
    bundle: str | os.PathLike[str], *, inventory: bool = True, progress: Progress | None = None
) -> VerifyReport:
    """The library's check of an exported bundle; changes nothing.

    :func:`~intentlog.projections.verify.verify_path` over the bundle as a ledger (with no
    workspace: recorded files are checked as the objects the bundle carries), plus:
    ``heads.json`` exists and every stream ends exactly at its sealed head (``bundle``);
    ``tasks/``, ``heads.json`` and ``states.json`` name the same tasks and ``states.json``
    equals this library's projection of each stream (``states``); every receipt in
    ``receipts/`` is covered by an ``attempt.started`` of a call whose manifest has its
    request hash (``receipts``); every file matches ``hashes.json`` and none is unlisted
    (``inventory``; skipped when ``inventory`` is false). Raises
    :class:`~intentlog.errors.NotALedger` when ``bundle`` is neither a folder nor a tar.

    ``bundle`` may also be the tar :func:`export_bundle` writes: it is extracted into a
    temporary folder (removed afterwards) member by member, refusing with
    :class:`~intentlog.errors.LedgerError` any member that is not a plain file or folder
    under ``intentlog-bundle/`` (absolute paths, ``..``, links, devices, duplicates) before
    anything of it is checked.
    """
    root = check_path(bundle, "bundle")
    if root.is_file():
        return _check_tar(root, inventory=inventory, progress=progress)
    no_workspace = root / ".no-workspace-in-a-bundle"
    report = verify_path(root, workspace=no_workspace, progress=progress)
    problems: list[Problem] = []
    for p in report.problems:
        if p.code == "workspace":
            p = replace(
                p,
                message="a bundle carries the bytes of recorded workspace files as objects (checked above), not the "
                "workspace itself, so they were not compared with any current file",
            )
        problems.append(p)
    problems.extend(_BundleCheck(root).run(inventory))
    order = {ERROR: 0, "changed": 1, INFO: 2}
    return replace(report, problems=tuple(sorted(problems, key=lambda p: order.get(p.severity, 3))))


_TAR_FILE_TYPES: Final = (tarfile.REGTYPE, tarfile.AREGTYPE)


def _check_tar(path: Path, *, inventory: bool, progress: Progress | None) -> VerifyReport:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="intentlog-bundle-") as tmp:
        inner = _extract_tar(path, Path(tmp))
        report = check_bundle(inner, inventory=inventory, progress=progress)
        shown = f"{path}:{TAR_ROOT}"
        problems = tuple(replace(p, message=p.message.replace(str(inner), shown)) for p in report.problems)
        return replace(report, root=str(path), problems=problems)


def _tar_member_path(name: str, where: Path) -> tuple[str, ...]:
    """The parts of a member name below ``intentlog-bundle/``; :class:`LedgerError` for anything else."""
    parts = tuple(name.rstrip("/").split("/"))
    if (
        name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or parts[0] != TAR_ROOT
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise LedgerError(
            f"{where}: the member {name!r} is not a plain path inside {TAR_ROOT}/ (absolute, '..', or elsewhere); "
            "the tar was not extracted: it is not a bundle export wrote"
        )
    return parts[1:]


def _open_tar(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:")
    except (OSError, tarfile.TarError) as exc:
        raise NotALedger(str(path), f"is neither a bundle folder nor a readable tar ({exc})") from exc


def _extract_tar(path: Path, dest: Path) -> Path:
    """Extract a bundle tar into ``dest`` safely and return the bundle folder (``dest/intentlog-bundle``)."""
    inner = dest / TAR_ROOT
    seen: set[tuple[str, ...]] = set()
    with _open_tar(path) as tf:
        while True:
            try:
                m = tf.next()
            except tarfile.TarError as exc:
                raise LedgerError(f"{path}: the tar is damaged ({exc}); it was not checked") from exc
            if m is None:
                break
            parts = _tar_member_path(m.name, path)
            if parts in seen:
                raise LedgerError(f"{path}: the member {m.name!r} appears twice; the tar was not checked")
            seen.add(parts)
            target = inner.joinpath(*parts)
            if m.type == tarfile.DIRTYPE:
                target.mkdir(parents=True, exist_ok=True)
                continue
            if m.type not in _TAR_FILE_TYPES:
                raise LedgerError(
                    f"{path}: the member {m.name!r} is a link or a special file; a bundle holds only files and "
                    "folders, so the tar was not checked"
                )
            if not parts:
                raise LedgerError(f"{path}: {TAR_ROOT} is a file, not a folder; the tar was not checked")
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tf.extractfile(m)
            if src is None:  # pragma: no cover - a regular member always has a file object
                raise LedgerError(f"{path}: the member {m.name!r} cannot be read")
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "wb") as out, src:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
    if not inner.is_dir():
        raise LedgerError(f"{path}: the tar holds no {TAR_ROOT}/ folder; it is not a bundle export wrote")
    return inner


class _BundleCheck:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.problems: list[Problem] = []

    def add(self, code: str, message: str, *, severity: str = ERROR, **where: Any) -> None:
        self.problems.append(Problem(severity, code, message, **where))

    def run(self, check_inventory: bool) -> list[Problem]:
        tasks = _task_ids(self.root)
        heads = self.heads()
        states = self.load(STATES_FILE, STATES_FORMAT)
        if heads is not None and sorted(heads) != tasks:
            self.add("bundle", f"heads.json seals {sorted(heads)} but tasks/ holds {tasks}", locator=HEADS_FILE)
        if states is not None and sorted(states) != tasks:
            self.add("states", f"states.json holds {sorted(states)} but tasks/ holds {tasks}", locator=STATES_FILE)
        projected: dict[str, WorkState] = {}
        for task in tasks:
            scan = StreamScan(self.root / "tasks" / f"{task}.jsonl")
            projected[task] = work_state(scan, task_id=task)
            h = heads.get(task) if heads is not None else None
            if h is not None and scan.problem is None and (scan.count != h.events or scan.head != h.head):
                self.add(
                    "bundle",
                    f"the stream has {scan.count} events ending at {scan.head}, but heads.json sealed "
                    f"{h.events} ending at {h.head}: a bundle's stream ends exactly at its sealed head",
                    task=task,
                )
            if states is not None and task in states:
                self.compare_states(task, states[task], projected[task])
        self.receipts(projected)
        if check_inventory:
            self.inventory()
        if (self.root / VERIFIER_FILE).is_file() and (self.root / VERIFIER_FILE).read_bytes() != verifier_source():
            self.add(
                "verifier",
                f"{VERIFIER_FILE} differs from the one intentlog {__version__} ships: read it before you run it",
                severity=INFO,
                locator=VERIFIER_FILE,
            )
        return self.problems

    def heads(self) -> dict[str, StreamHead] | None:
        path = self.root / HEADS_FILE
        try:
            return decode_heads(path.read_bytes(), where=str(path))
        except FileNotFoundError:
            self.add("bundle", "heads.json is missing: a bundle anchors every stream's head", locator=HEADS_FILE)
        except (OSError, LedgerError):
            pass  # verify_path reported it
        return None

    def load(self, rel: str, fmt: str) -> dict[str, Any] | None:
        try:
            doc = orjson.loads((self.root / rel).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            self.add("states", f"{rel} cannot be read ({exc})", locator=rel)
            return None
        if type(doc) is not dict or doc.get("format") != fmt or type(doc.get("tasks")) is not dict:
            self.add("states", f"{rel} is not a {fmt} file with a 'tasks' object", locator=rel)
            return None
        tasks: dict[str, Any] = doc["tasks"]
        return tasks

    def compare_states(self, task: str, claimed: Any, ws: WorkState) -> None:
        mine = orjson.loads(orjson.dumps(ws.to_json()))
        if claimed == mine:
            return
        if type(claimed) is not dict:
            self.add("states", "states.json's entry is not an object", task=task, locator=STATES_FILE)
            return
        diffs = [
            f"{f}: states.json says {claimed.get(f)!r:.80}, the events say {mine[f]!r:.80}"
            for f in CHECKED_TASK_FIELDS
            if claimed.get(f) != mine[f]
        ]
        for group, fields in (("calls", CHECKED_CALL_FIELDS), ("compilations", CHECKED_COMPILATION_FIELDS)):
            theirs: dict[str, Any] = claimed[group] if type(claimed.get(group)) is dict else {}
            for cid in sorted(set(mine[group]) | set(theirs)):
                a, b = mine[group].get(cid), theirs.get(cid)
                if a is None:
                    diffs.append(f"{cid}: states.json holds it, but no event records it")
                elif type(b) is not dict:
                    diffs.append(f"{cid}: states.json has no entry for it")
                else:
                    diffs.extend(
                        f"{cid} {k}: states.json says {b.get(k)!r:.80}, the events say {a.get(k)!r:.80}"
                        for k in fields
                        if a.get(k) != b.get(k)
                    )
        if diffs:
            self.add(
                "states",
                "states.json does not match the work state projected from the stream: " + "; ".join(diffs[:10]),
                task=task,
                locator=STATES_FILE,
            )
            return
        self.add(
            "states_detail",
            "states.json differs from this library's projection only in explanatory fields that neither verifier "
            "checks (reasons, timestamps, inventories, anomalies): read them with care",
            severity=INFO,
            task=task,
            locator=STATES_FILE,
        )

    def receipts(self, projected: Mapping[str, WorkState]) -> None:
        started: dict[str, int] = {}
        for ws in projected.values():
            for c in ws.calls.values():
                if c.request_hash is not None:
                    started[c.request_hash] = started.get(c.request_hash, 0) + c.attempts
        folder = self.root / RECEIPTS_DIR
        if not folder.is_dir():
            return
        for path in sorted(folder.iterdir()):
            rel = f"{RECEIPTS_DIR}/{path.name}"
            if path.is_symlink() or not path.is_file():
                self.add("receipts", f"{rel} is not a regular file", locator=rel)
                continue
            seen: dict[str, int] = {}
            for lineno, line in enumerate(path.read_bytes().splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    receipt = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    self.add("receipts", f"line {lineno} is not JSON ({exc})", locator=rel)
                    continue
                body = receipt.get("body_hash") if type(receipt) is dict else None
                if type(body) is not str or not is_digest(body):
                    self.add("receipts", f"line {lineno} has no body_hash digest", locator=rel)
                    continue
                seen[body] = seen.get(body, 0) + 1
                if seen[body] > started.get(body, 0):
                    self.add(
                        "receipts",
                        f"line {lineno}: receipt {seen[body]} of request {body}, but the record has "
                        f"{started.get(body, 0)} attempt.started of calls with that request hash: the provider saw "
                        "an effect no recorded attempt covers",
                        locator=rel,
                        digest=body,
                    )

    def inventory(self) -> None:
        path = self.root / HASHES_FILE
        try:
            doc = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            self.add("inventory", f"hashes.json cannot be read ({exc})", locator=HASHES_FILE)
            return
        if type(doc) is not dict or doc.get("format") != HASHES_FORMAT or type(doc.get("files")) is not dict:
            self.add("inventory", f"hashes.json is not a {HASHES_FORMAT} file", locator=HASHES_FILE)
            return
        listed: dict[str, Any] = doc["files"]
        try:
            present = file_hashes(self.root)
        except UsageError as exc:
            self.add("inventory", str(exc))
            return
        for rel in sorted(set(present) - set(listed)):
            self.add("inventory", "is in the bundle but not in hashes.json", locator=rel)
        for rel, entry in sorted(listed.items()):
            got = present.get(rel)
            want = (entry.get("digest"), entry.get("size")) if type(entry) is dict else None
            if got is None:
                self.add("inventory", "is listed in hashes.json but missing", locator=rel)
            elif got != want:
                self.add(
                    "inventory", f"hashes to {got[0]} ({got[1]} bytes), but hashes.json lists {want!r}", locator=rel
                )
