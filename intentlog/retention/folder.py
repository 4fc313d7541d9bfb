"""Retention's storage in a ledger folder: ``tasks/``, ``objects/``, ``keep.json``, ``gc.jsonl`` under ``gc.lock``.

:class:`FolderGc` is the folder's :class:`~intentlog.retention.storage.GcStorage`.

* **The lock** is an exclusive ``flock`` on ``<ledger>/gc.lock`` (it dies with its holder).
* **Keep marks** are ``keep.json``, replaced atomically under the lock.
* **The record** is ``gc.jsonl``, a hash-chained stream in the task stream format, appended
  by the same durable writer.
* **A stream** is deleted while holding its task's writer lock, after checking the file
  (inode, size, mtime) did not change since the plan; a task a writer reopened in between
  is skipped. Its lock file is unlinked after it, still held: a writer waiting on that file
  finds it gone once it has the lock and locks the file at the path instead.
* **A blob** is first *moved* into ``tmp/`` and its mtime compared with the planned one: a
  writer that re-put it in the meantime refreshed it (then it is moved back), and a writer
  that comes later finds it gone and stores it again. Moved blobs left by a crash are put
  back by the next apply's sweep.

Every list, move and unlink goes through descriptors on the real folders: a folder swapped
for a link is never followed (:class:`~intentlog.errors.LinkRefused`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import secrets
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

from .._internal.args import check_seconds
from .._internal.digest import DIGEST_PREFIX
from .._internal.fsutil import (
    check_real_dir,
    fsops,
    fsync_dir,
    makedirs_durable,
    open_dir_nofollow,
    open_nofollow,
    publish_bytes,
)
from ..artifacts import ArtifactStore
from ..errors import ArtifactError, GcRefused, IntentlogError, TaskBusy
from ..eventlog.lock import WriterLock
from ..eventlog.reader import StreamScan
from ..eventlog.writer import StreamWriter
from ..refs import INLINE, walk
from .policy import GC_LOCK, GC_LOG, KEEP_FILE, KEEP_FORMAT, GcPolicy
from .report import ExpiredBlob, ExpiredTask
from .rules import KeepMark
from .scan import O_CLOEXEC, O_NOFOLLOW, Progress, Scan, collect_digests, digests_in_file_tail, file_ident, scan_tasks
from .storage import Evacuate

__all__ = ["FolderGc", "FolderLedger", "gc_lock"]

_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_MOVED_RE = re.compile(r"\.gc\.([0-9a-f]{64})\.[0-9a-f]+\.moved\Z")


class FolderLedger(Protocol):
    """The folders of a ledger (:class:`intentlog.Ledger`) retention works in."""

    @property
    def root(self) -> Path: ...

    @property
    def tasks_dir(self) -> Path: ...

    @property
    def tmp_dir(self) -> Path: ...

    @property
    def quarantine_dir(self) -> Path: ...

    @property
    def artifacts(self) -> ArtifactStore: ...


class FolderGc:
    """:class:`~intentlog.retention.storage.GcStorage` over a ledger folder (see the module doc)."""

    def __init__(self, ledger: FolderLedger) -> None:
        self.ledger = ledger

    @property
    def where(self) -> str:
        return str(self.ledger.root)

    def check_layout(self) -> None:
        """The folders gc lists, reads, moves and deletes in are real folders, never links (:class:`LinkRefused`)."""
        ledger = self.ledger
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

    def keep_marks(self) -> dict[str, KeepMark]:
        return read_keep(self.ledger.root / KEEP_FILE)

    def has_task(self, task: str) -> bool:
        return (self.ledger.tasks_dir / f"{task}.jsonl").exists()

    def scan(
        self,
        now: _dt.datetime,
        policy: GcPolicy,
        marks: Mapping[str, KeepMark],
        *,
        limit: int,
        progress: Progress | None,
        preview: bool,
    ) -> Scan:
        # a preview may take unchanged streams from the view cache's index; the plan apply carries out reads them all
        return scan_tasks(self.ledger, now, policy, marks, limit=limit, progress=progress, use_index=preview)

    def objects(self) -> Iterator[tuple[str, int, int, int]]:
        """Every object and its mtime, streaming (``ArtifactError`` on a listing failure); no touches in a folder."""
        store = self.ledger.artifacts
        for digest in store.iter_digests():
            try:
                st = os.lstat(store.path_for(digest))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise ArtifactError(f"cannot stat the object {digest}: {exc.strerror or exc}") from exc
            if stat.S_ISREG(st.st_mode):
                yield digest, st.st_size, st.st_mtime_ns, 0

    def inline_payloads(self, task: str) -> Iterator[tuple[str, dict[str, Any]]]:
        return inline_payloads(self.ledger.tasks_dir / f"{task}.jsonl")

    def has_object(self, digest: str) -> bool:
        return self.ledger.artifacts.path_for(digest).exists()

    @contextlib.contextmanager
    def locked(self, *, wait: float, take_over_after: float | None = None) -> Iterator[FolderSession]:
        session = FolderSession(self.ledger)
        with gc_lock(self.ledger, wait=wait):
            try:
                yield session
            finally:
                session.close()


def inline_payloads(path: Path, fd: int | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``(digest, ref)`` carrying inline bytes in a stream's trusted events (read via ``fd`` if given)."""
    for ev in StreamScan(path, fd=fd):
        for digest, ref in walk(ev.data, INLINE):
            if ref is not None:
                yield digest, ref


# -- keep.json -------------------------------------------------------------------------


def read_keep(path: Path) -> dict[str, KeepMark]:
    """The marks in ``keep.json`` at ``path``, by task; :class:`IntentlogError` when it is damaged."""
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


def _write_keep(ledger: FolderLedger, marks: Mapping[str, KeepMark]) -> None:
    body = {
        "format": KEEP_FORMAT,
        "tasks": {t: {"since": m.since, "note": m.note} for t, m in sorted(marks.items())},
    }
    data = orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    makedirs_durable(ledger.tmp_dir)
    publish_bytes(data, ledger.root / KEEP_FILE, tmp_dir=ledger.tmp_dir, replace=True, mode=0o644)


# -- the gc lock -----------------------------------------------------------------------


class _GcLock:
    def __init__(self, ledger: FolderLedger, wait: float) -> None:
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


def gc_lock(ledger: FolderLedger, *, wait: float) -> _GcLock:
    """The folder's gc lock (``gc.lock``): held by an apply and by a keep, refused (:class:`GcRefused`) when held."""
    return _GcLock(ledger, wait)


# -- what an apply does under the lock --------------------------------------------------


class FolderSession:
    """:class:`~intentlog.retention.storage.GcSession` of a folder: made and closed under ``gc.lock``."""

    def __init__(self, ledger: FolderLedger) -> None:
        self.ledger = ledger
        self._log: StreamWriter | None = None

    @property
    def where(self) -> str:
        return str(self.ledger.root)

    @property
    def log_file(self) -> str:
        return GC_LOG

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def mark(self, mark: KeepMark) -> None:
        marks = read_keep(self.ledger.root / KEEP_FILE)
        marks[mark.task] = mark
        _write_keep(self.ledger, marks)

    def release(self, task: str) -> bool:
        marks = read_keep(self.ledger.root / KEEP_FILE)
        if marks.pop(task, None) is None:
            return False
        _write_keep(self.ledger, marks)
        return True

    def sweep(self) -> None:
        _restore_moved(self.ledger)

    def append(self, kind: str, data: dict[str, Any]) -> int:
        if self._log is None:
            ledger = self.ledger
            log = StreamWriter(
                path=ledger.root / GC_LOG,
                task_id="gc",
                quarantine_dir=ledger.quarantine_dir,
                tmp_dir=ledger.tmp_dir,
                in_root=True,
            )
            makedirs_durable(ledger.tmp_dir)
            log.open(wait=10.0)
            self._log = log
        return self._log.append(kind, data).seq

    def delete_streams(
        self,
        expired: Sequence[ExpiredTask],
        started: int,
        evacuate: Evacuate,
        deleted: list[str],
        skipped: list[tuple[str, str]],
    ) -> None:
        for t in expired:
            why = _delete_stream(self.ledger, t, evacuate)
            if why is None:
                deleted.append(t.task)
            else:
                skipped.append((t.task, why))

    def put_object(self, data: bytes) -> None:
        self.ledger.artifacts.put(data)

    def references(self, task: str, refs: set[bytes]) -> bool:
        path = self.ledger.tasks_dir / f"{task}.jsonl"
        held: set[bytes] = set()
        try:
            s = StreamScan(path)
            for ev in s:
                collect_digests(ev.data, refs, held)
            if s.problem is not None:
                if not s.problem.incomplete:
                    return False
                digests_in_file_tail(path, s.problem.offset, refs)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True

    def delete_objects(self, blobs: Sequence[ExpiredBlob], started: int) -> tuple[list[str], list[str]]:
        return _delete_blobs(self.ledger, blobs)


def _delete_stream(ledger: FolderLedger, t: ExpiredTask, evacuate: Evacuate) -> str | None:
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
            sfd = os.open(path.name, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC, dir_fd=tasks_fd)
        except FileNotFoundError:
            return "its stream vanished after the plan"
        except OSError as exc:
            return f"its stream cannot be opened without following a link ({exc.strerror or exc})"
        try:
            if file_ident(os.fstat(sfd)) != t.ident:
                return "it changed after the plan"
            why = evacuate(t.task, inline_payloads(path, sfd))
            if why is not None:
                return why
        finally:
            os.close(sfd)
        fsops.unlink(path.name, dir_fd=tasks_fd)
        # the stream is gone: its lock file goes too, while still held. A writer that opened it
        # before this and waits on its flock finds, once it has it, that the file is no longer at
        # the path, and locks the one there (WriterLock.acquire), so no two writers hold "the" lock.
        if lock.is_current(dir_fd=tasks_fd):
            with contextlib.suppress(FileNotFoundError):
                fsops.unlink(lock_path.name, dir_fd=tasks_fd)
        fsops.fsync(tasks_fd)
        return None
    finally:
        os.close(tasks_fd)
        lock.release()


def _moved_name(digest: str) -> str:
    return f".gc.{digest[len(DIGEST_PREFIX) :]}.{secrets.token_hex(6)}.moved"


def _delete_blobs(ledger: FolderLedger, blobs: Sequence[ExpiredBlob]) -> tuple[list[str], list[str]]:
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
                    fsops.rename(name, aside, src_dir_fd=shard_fd, dst_dir_fd=tmp_fd)
                except FileNotFoundError:
                    continue  # gone already (moved to quarantine by a check): nothing to do
                st = os.stat(aside, dir_fd=tmp_fd, follow_symlinks=False)
                if st.st_mtime_ns != b.mtime_ns or st.st_size != b.size:
                    # a writer stored it again since the plan: it is wanted
                    with contextlib.suppress(FileExistsError):  # stored again meanwhile: same bytes
                        fsops.link(aside, name, src_dir_fd=tmp_fd, dst_dir_fd=shard_fd, follow_symlinks=False)
                    fsops.unlink(aside, dir_fd=tmp_fd)
                    restored.append(b.digest)
                    continue
                fsops.unlink(aside, dir_fd=tmp_fd)
                deleted.append(b.digest)
            for fd in shards.values():
                if fd is not None:
                    fsops.fsync(fd)
            fsops.fsync(tmp_fd)
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
        fsops.link(aside, dest)
    except FileExistsError:
        pass  # stored again meanwhile: the new copy has the same bytes
    else:
        fsync_dir(dest.parent)
    fsops.unlink(aside)


def _restore_moved(ledger: FolderLedger) -> None:
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
