"""Exporting a bundle: copy the streams byte for byte, every blob they reference, states, hashes, a tar."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tarfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Protocol, final

import orjson

from .._internal.args import check_names, check_path, check_paths
from .._internal.digest import is_digest
from .._internal.fsutil import fsync_dir, makedirs_durable, publish_chunks
from ..artifacts.inline import inline_bytes
from ..checker.report import INFO, VerifyReport
from ..checker.seams import LedgerReads
from ..checker.state import Progress
from ..errors import (
    ArtifactError,
    ArtifactMissing,
    CorruptStream,
    LedgerError,
    UsageError,
)
from ..eventlog.format import FORMAT, TASK_CREATED, check_task_id
from ..eventlog.reader import StreamScan
from ..heads.codec import HEADS_FILE, StreamHead, encode_heads
from ..ledgerreads import open_reads
from ..projections.workstate import WorkState, work_state
from ..refs import EXPORT, walk
from ..report import REPORT_FILE
from .check import check_bundle
from .files import (
    HASHES_FILE,
    MARKER_FILE,
    README_FILE,
    RECEIPTS_DIR,
    STATES_FILE,
    TAR_ROOT,
    VERIFIER_FILE,
    encode_hashes,
    encode_states,
    file_hashes,
    object_rel,
    verifier_source,
    walk_files,
)
from .page import report_page
from .readme import readme_text
from .source import check_marker, inline_in, read_range, refuse_links
from .staging import STAGING_SUFFIX, check_out, holds_bundle, remove_stale, same_bytes

_LINK_KINDS: Final = frozenset({"task.spawned", "backlog.item_added"})  # records linking streams (graph_links)
_MARKER: Final = orjson.dumps({"format": FORMAT, "hash": "blake3"}, option=orjson.OPT_SORT_KEYS) + b"\n"
_GITATTRIBUTES: Final = (
    b"# an intentlog evidence bundle: hashes cover exact bytes; never rewrite line endings\n* -text\n"
)
_RECEIPT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_QUARANTINE_FILE: Final = re.compile(r"quarantine/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_FILE_MODE: Final = 0o644
_DIR_MODE: Final = 0o755


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
    def __init__(self, reads: LedgerReads, staging: Path, sealed: Mapping[str, StreamHead]) -> None:
        #: what the ledger is read through (a folder, or the storage seams)
        self.reads = reads
        self.staging = staging
        self.sealed = sealed
        self.refs: dict[str, _Wanted] = {}
        self.inline: set[str] = set()
        self.bare: dict[str, str] = {}
        self.quarantined: dict[str, tuple[str, int, str]] = {}  # rel -> (digest, size, where)
        self.heads: dict[str, StreamHead] = {}
        self.states: dict[str, WorkState] = {}
        #: the streams a link in an exported stream is judged against (a child's parent; a child item's parent and task)
        self.linked: set[str] = set()

    def publish(self, rel: str, chunks: Iterable[bytes]) -> None:
        dest = self.staging / rel
        makedirs_durable(dest.parent)
        if not publish_chunks(chunks, dest, tmp_dir=self.staging, mode=_FILE_MODE):
            raise UsageError(f"{rel} is written twice into the bundle")  # pragma: no cover - paths are unique

    # -- streams ----------------------------------------------------------------------

    def stream(self, task: str) -> None:
        """Copy the task's stream as stored, then scan the copy: only a whole, sealed-consistent stream is kept."""
        rel = f"tasks/{task}.jsonl"
        src = self.reads.stream_where(task)
        self.publish(rel, self.reads.stream_chunks(task))
        sealed = self.sealed.get(task)
        scan = StreamScan(self.staging / rel)
        stream_id: str | None = None
        at_sealed: str | None = None
        for ev in scan:
            if ev.seq == 0:
                if ev.kind != TASK_CREATED or type(ev.data.get("stream")) is not str:
                    raise CorruptStream(src, 1, "the stream does not begin with task.created; not exported")
                stream_id = ev.data["stream"]
            if sealed is not None and ev.seq == sealed.seq:
                at_sealed = ev.digest
            self.collect(task, ev.seq, ev.kind, ev.data)
        p = scan.problem
        if p is not None:
            what = "a torn tail (an append that never returned)" if p.torn else "damage followed by event lines"
            raise CorruptStream(
                src,
                p.line,
                f"{p.reason}: {what}; a bundle carries whole streams only, so this task was not exported",
                hint="opening the task for writing moves a torn tail to quarantine/ and records stream.repaired "
                "(then export again); damage in the middle needs the file restored from a copy or git. "
                "If a writer is appending right now, export again",
            )
        if scan.last is None or scan.head is None or stream_id is None:
            raise CorruptStream(src, 1, "the stream is empty; not exported")
        retired = sealed is not None and self.reads.retired(task, sealed)
        if sealed is not None and sealed.stream != stream_id and retired:
            sealed = None  # gc deleted the sealed stream (its gc log says so); this one is a new task
        if sealed is not None and (sealed.stream != stream_id or at_sealed != sealed.head):
            raise LedgerError(
                f"{src}: the ledger's heads.json sealed seq {sealed.seq} of stream {sealed.stream} as "
                f"{sealed.head}, but the stream no longer holds that event (truncated, replaced or rewritten); "
                "not exported: a bundle must not re-anchor evidence its seal contradicts. Run 'intentlog verify'"
            )
        self.heads[task] = StreamHead(stream_id, scan.last.seq, scan.head, scan.count)
        self.states[task] = work_state(StreamScan(self.staging / rel), task_id=task)

    def collect(self, task: str, seq: int, kind: str, data: dict[str, Any]) -> None:
        """Every ref (checked inline bytes, or a digest whose blob must be exported), bare digest and repair file."""
        where = f"tasks/{task}.jsonl seq {seq} ({kind})"
        if kind in _LINK_KINDS and type(data.get("parent")) is str:
            self.linked.add(data["parent"])
            if kind == "backlog.item_added" and type(data.get("task")) is str:
                self.linked.add(data["task"])  # a child item: its link is judged against the child's record too
        walked: Any = data
        if kind == "stream.repaired":
            q = data.get("quarantined")
            if type(q) is dict and type(q.get("file")) is str and is_digest(q.get("digest")):
                self.quarantined[q["file"]] = (q["digest"], q.get("size", -1), where)
            walked = [v for k, v in data.items() if k != "quarantined"]
        for digest, ref in walk(walked, EXPORT):
            if ref is not None:
                self.ref(ref, where)
            else:
                self.bare.setdefault(digest, where)

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
            for digest, data in inline_in(self.reads, other_tasks, set(pending)).items():
                self.publish(object_rel(digest), (data,))
                del pending[digest]
        for digest, wanted in pending.items():
            raise ArtifactMissing(digest, f"{wanted.where}; it is neither in objects/ nor inline in any stream")
        for digest, where in self.bare.items():
            if digest not in self.refs:
                self.copy_object(digest, None, where)
        for rel, (digest, size, where) in sorted(self.quarantined.items()):
            if _QUARANTINE_FILE.match(rel) is None:
                raise ArtifactError(f"{where}: stream.repaired names {rel!r}, not a file in quarantine/; not exported")
            chunks = self.reads.file_chunks(rel, digest, size)
            if chunks is None:
                raise ArtifactMissing(digest, f"{where}, which moved a torn tail to {rel}: that file is gone")
            self.publish(rel, chunks)

    def copy_object(self, digest: str, size: int | None, where: str) -> bool:
        """Copy one blob if the ledger has it, checking every byte on the way; False if it has not."""
        rel = object_rel(digest)
        if (self.staging / rel).exists():
            return True
        chunks = self.reads.object_chunks(digest, size, where)
        if chunks is None:
            return False
        self.publish(rel, chunks)
        return True


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


class _HasReads(Protocol):
    def reads(self) -> LedgerReads: ...


def export_bundle(
    root: str | os.PathLike[str] | _HasReads,
    tasks: Sequence[str] | None = None,
    *,
    out: str | os.PathLike[str] | None = None,
    tar: str | os.PathLike[str] | None = None,
    receipts: Sequence[str | os.PathLike[str]] = (),
    check: bool = True,
    progress: Progress | None = None,
) -> ExportResult:
    """Export ``tasks`` (default: every task) of the ledger at ``root`` as an evidence bundle.

    The streams an exported link is judged against come too, transitively: a child's
    parent, a backlog child item's child and parent (``ExportResult.tasks`` names them).

    ``root`` is a ledger folder, ``s3://bucket/prefix`` (a ledger on an object store, read
    through its seams with the standard AWS settings: nothing is written there; the bundle
    is a local folder or tar like any other), or an open :class:`~intentlog.Ledger` (read
    through its own storage). Either way the ledger is read through one
    :class:`~intentlog.checker.seams.LedgerReads`, so both storages export alike.

    ``out`` is a folder that must not exist or be empty; ``tar`` a file that must not
    exist (a plain, deterministic tar of one folder, ``intentlog-bundle/``); give either
    or both. ``receipts`` are provider receipt logs (JSON lines naming each request by a
    ``body_hash`` or an ``idempotency_key``: :mod:`intentlog.bundle.receipts`), copied
    byte for byte into ``receipts/`` under their file names. With ``check`` the
    library's checker (:func:`check_bundle`) runs over the result, which is kept either way
    (``ExportResult.ok`` says whether it passed). ``progress(phase, done, total)`` is called
    as streams are copied and the bundle is checked (for a progress line on a terminal).

    Refused before anything is written: no target, an invalid task id or a task without a
    stream (:class:`UsageError`, :class:`~intentlog.errors.InvalidTaskId`), a target that
    exists, a root that is not a ledger (:class:`NotALedger`). Refused while building,
    leaving nothing under the target's name: :class:`CorruptStream`, :class:`LedgerError`
    (the ledger's seal contradicts a stream), :class:`ArtifactMissing`,
    :class:`DigestMismatch` (see the module docstring).
    """
    if out is None and tar is None:
        raise UsageError("say where the bundle goes: a folder (out), a tar file (tar), or both")
    if isinstance(root, (str, os.PathLike)) or not callable(getattr(root, "reads", None)):
        check_path(root, "root")  # a location, or refused as the wrong type
    task_list = check_names(tasks, "tasks")
    names = sorted({check_task_id(t) for t in task_list}) if task_list else None
    out_path = check_path(out, "out") if out is not None else None
    tar_path = check_path(tar, "tar") if tar is not None else None
    receipts = check_paths(receipts, "receipts")
    if out_path is not None:
        check_out(out_path)
    if tar_path is not None and (tar_path.is_symlink() or (tar_path.exists() and not tar_path.is_file())):
        raise UsageError(f"{tar_path} exists and is not a file; name a new file for the tar")
    logs = _receipt_names(receipts)
    reads = open_reads(root) if isinstance(root, (str, os.PathLike)) else root.reads()
    refuse_links(reads)
    check_marker(reads)
    present = reads.names()
    if names is None:
        names = present
        if not names:
            raise UsageError(f"{reads.tasks_where} holds no task to export")
    for t in names:
        if t not in present:
            raise UsageError(f"no task {t!r} in {reads.tasks_where}; 'intentlog tasks' lists the tasks there")
    heads, wrong = reads.heads()
    if wrong:
        raise LedgerError(wrong[0])
    sealed = heads or {}

    anchor = out_path if out_path is not None else tar_path
    if anchor is None:  # pragma: no cover - checked above
        raise UsageError("no target")
    makedirs_durable(anchor.absolute().parent)
    if tar_path is not None:
        makedirs_durable(tar_path.absolute().parent)
    removed = remove_stale([p for p in (out_path, tar_path) if p is not None])
    kept: list[str] = []
    staging = anchor.absolute().parent / f".{anchor.name}.{os.getpid()}.{secrets.token_hex(4)}{STAGING_SUFFIX}"
    os.mkdir(staging)
    try:
        ex = _Exporter(reads, staging, sealed)
        names = list(names)
        done: set[str] = set()
        while len(done) < len(names):
            # a link carries the streams it is judged against (transitively): a child its parent, a child item both
            for t in names:
                if t not in done:
                    done.add(t)
                    ex.stream(t)
                    if progress is not None:
                        progress("streams", len(done), len(names))
            names += sorted(p for p in ex.linked if p in present and p not in done and p not in names)
        names.sort()
        ex.objects([t for t in present if t not in set(names)])
        for name, path in logs.items():
            ex.publish(f"{RECEIPTS_DIR}/{name}", read_range(path, path.stat().st_size, follow=True))
        ex.publish(MARKER_FILE, (_MARKER,))
        ex.publish(".gitattributes", (_GITATTRIBUTES,))
        ex.publish(HEADS_FILE, (encode_heads(ex.heads),))
        ex.publish(STATES_FILE, (encode_states(ex.states),))
        ex.publish(README_FILE, (readme_text(ex.heads, ex.states, sorted(logs)),))
        ex.publish(VERIFIER_FILE, (verifier_source(),))
        ex.publish(REPORT_FILE, (_report(staging),))
        files = file_hashes(staging)
        ex.publish(HASHES_FILE, (encode_hashes(files),))
        size = sum(n for _, n in files.values()) + (staging / HASHES_FILE).stat().st_size
        bundle_dir = staging
        if out_path is not None:
            if holds_bundle(out_path, staging):
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
        report = check_bundle(bundle_dir, progress=progress) if check else None
        if report is not None and out_path is None and tar_path is not None:
            report = replace(report, root=str(tar_path))
        if tar_path is not None:
            if tar_path.exists() and same_bytes(tar_path, _tar_chunks(bundle_dir)):
                kept.append(str(tar_path))
            elif not publish_chunks(
                _tar_chunks(bundle_dir), tar_path, tmp_dir=tar_path.absolute().parent, mode=_FILE_MODE
            ):
                raise UsageError(f"{tar_path} exists and holds another tar (or appeared meanwhile); name a new file")
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return ExportResult(out_path, tar_path, tuple(names), len(files) + 1, size, report, tuple(removed), tuple(kept))


def _report(staging: Path) -> bytes:
    """``report.html``, with the library's check of the bundle in it.

    The check is :func:`check_bundle` without the inventory (``hashes.json`` does not exist
    yet, and it lists this file). The report is derived, never evidence: both verifiers
    check its bytes against ``hashes.json`` like every other file, and the library's check
    renders it again from the bundle and compares.
    """
    return report_page(staging, check_bundle(staging, inventory=False))


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
    for rel, is_dir in walk_files(bundle):
        path = bundle / rel
        size = 0 if is_dir else path.stat().st_size
        block = header(f"{TAR_ROOT}/{rel}", size=size, is_dir=is_dir)
        total += len(block)
        yield block
        if is_dir:
            continue
        n = 0
        for chunk in read_range(path, size):
            n += len(chunk)
            yield chunk
        pad = -n % tarfile.BLOCKSIZE
        total += n + pad
        yield b"\0" * pad
    end = b"\0" * (2 * tarfile.BLOCKSIZE)
    total += len(end)
    yield end
    yield b"\0" * (-total % tarfile.RECORDSIZE)
