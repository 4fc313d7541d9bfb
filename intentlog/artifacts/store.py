"""The content-addressed artifact store (DESIGN §3; §4 rules 3, 6 and 8).

Every artifact is the exact bytes it was given, named by their BLAKE3 digest and kept at
``<ledger>/objects/<2 hex>/<62 hex>``. Guarantees:

* When :meth:`ArtifactStore.put` or :meth:`ArtifactStore.put_file` returns, the object's
  bytes and its directory entry are on stable storage (temp file in ``tmp/``, fsync,
  ``os.link`` into ``objects/`` -- which never overwrites -- then a directory fsync), so an
  event written afterwards never refers to a blob a crash could lose.
* Objects are never modified in place: they are read-only (0o444) and a corrupt one is
  moved to ``quarantine/``, never deleted.
* Putting content that is already stored is a cheap no-op after a size check and a
  re-hash of the stored object (one of the right size but other bytes is quarantined
  and replaced); it refreshes the object's mtime so a garbage-collection grace period
  starts again.
* Every read that returns bytes checks them against their name (:class:`DigestMismatch`).
* Every digest argument is validated before any path is built (:class:`InvalidDigest`).
* Nothing is read or written through a link: ``objects/``, its shard folders, ``tmp/``
  and ``quarantine/`` must be real folders and objects real files, else
  :class:`~intentlog.errors.LinkRefused` names the link.
* Staging files a killed put left in ``tmp/`` (their names carry the pid that made them)
  are removed by the store's first put in a process, once that pid is dead
  (:meth:`ArtifactStore.sweep_staging`).

Operating-system errors are translated here, once, into :class:`ArtifactError` (or
:class:`ArtifactMissing`) with a message saying what, where and what next.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

from .._internal.digest import DIGEST_PREFIX, check_digest
from .._internal.fsutil import check_real_dir, fsops, fsync_dir, makedirs_durable, publish_bytes, publish_chunks
from ..errors import ArtifactError, ArtifactMissing, DigestMismatch, WrongType
from .checked import CheckedObjectIO
from .hashing import CHUNK_SIZE, MMAP_WINDOW, THREADED_MIN, digest_of, hasher
from .hashing import hash_fd as _hash_fd  # called through this module's name (a test interposes on it)
from .listing import list_objects
from .protocol import ObjectStore
from .ref import Ref
from .staging import sweep_dead_staging
from .through import (
    exists_via,
    get_via,
    list_via,
    open_via,
    put_fd_via,
    put_via,
    size_via,
    verify_via,
)

# CHUNK_SIZE, MMAP_WINDOW and THREADED_MIN are hashing.py's, named here for their former readers
__all__ = ["CHUNK_SIZE", "MMAP_WINDOW", "THREADED_MIN", "ArtifactStore", "Ref", "put_fd"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_INSTALL_TRIES = 5
T = typing.TypeVar("T")


def _strerror(exc: OSError) -> str:
    return exc.strerror or exc.__class__.__name__



@typing.final
class ArtifactStore:
    """Bytes named by their BLAKE3 digest, under a ledger root (DESIGN §3, §4 rule 3).

    ``inline_lookup`` lets the ledger answer for small payloads that ride inline in events:
    it is called with a digest only when ``objects/`` lacks it, and whatever it returns is
    checked against the digest like a stored object.

    Readers never write: folders are created only when something is put.
    """

    __slots__ = ("_backend", "_inline_lookup", "_objects", "_quarantine", "_root", "_swept", "_tmp", "swept")

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        inline_lookup: Callable[[str], bytes | None] | None = None,
        objects: ObjectStore | None = None,
    ) -> None:
        #: another object storage to write and read through (artifacts/through.py); None: ``objects/``
        self._backend = objects
        self._root = Path(os.fspath(root)).absolute()
        self._objects = self._root / "objects"
        self._tmp = self._root / "tmp"
        self._quarantine = self._root / "quarantine"
        self._inline_lookup = inline_lookup
        self._swept = False
        #: How many stale staging files this store's sweep removed (None before it ran).
        self.swept: int | None = None

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self._root)!r})"

    @property
    def root(self) -> Path:
        """The ledger root the store lives in."""
        return self._root

    # -- names ---------------------------------------------------------------------------

    def path_for(self, digest: str) -> Path:
        """Where the object named ``digest`` lives (whether or not it exists)."""
        hexdigest = check_digest(digest)[len(DIGEST_PREFIX) :]
        return self._objects / hexdigest[:2] / hexdigest[2:]

    def iter_digests(self) -> Iterator[str]:
        """Every object in ``objects/``, shard by shard in sorted order.

        Streams: memory is bounded by one shard's listing. Names that are not object
        names (stray files) are skipped. Inline payloads are not included.
        """
        if self._backend is not None:
            yield from list_via(self._backend)
            return
        yield from list_objects(self._objects)

    # -- folders -------------------------------------------------------------------------

    def _check_folders(self, shard: Path | None = None) -> None:
        """objects/, the shard folder, tmp/ and quarantine/ must be real folders (or absent)."""
        check_real_dir(self._objects, what="objects (objects/)")
        if shard is not None:
            check_real_dir(shard, what="objects (a shard folder of objects/)")
        check_real_dir(self._tmp, what="staging files (tmp/)")
        check_real_dir(self._quarantine, what="quarantined bytes (quarantine/)")

    def _check_read(self, path: Path) -> None:
        """Before reading an object: its folders are real, never links leading elsewhere."""
        check_real_dir(self._objects, what="objects (objects/)")
        check_real_dir(path.parent, what="objects (a shard folder of objects/)")

    def sweep_staging(self) -> int:
        """Remove the staging files in ``tmp/`` whose creating process is dead; return how many.

        A put killed mid-copy leaves its staging file behind (up to the size of what it
        was storing). The name carries the maker's pid; files of live processes (this one
        included) are left alone. Runs once per store at its first put; call it yourself
        (``intentlog gc`` may) to sweep without putting. The count is kept in :attr:`swept`.
        """
        self.swept = sweep_dead_staging(self._tmp)
        return self.swept

    def _sweep_once(self) -> None:
        if self._swept:
            return
        self._swept = True
        try:
            self.sweep_staging()
        except OSError:
            pass  # leftovers only cost space; a put must not fail because of them

    # -- writing -------------------------------------------------------------------------

    def put(self, data: bytes, *, media_type: str | None = None) -> Ref:
        """Store ``data``; when this returns, the object is durable (see the module doc)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise WrongType(f"put() takes bytes, not {type(data).__name__}; encode text first (nothing was stored)")
        payload = bytes(data)
        if self._backend is not None:
            return put_via(self._backend, payload, media_type)
        digest = digest_of(payload)
        ref = Ref(digest, len(payload), media_type)
        path = self.path_for(digest)
        try:
            self._install(
                digest,
                len(payload),
                path,
                lambda: publish_bytes(payload, path, tmp_dir=self._tmp),
            )
        except OSError as exc:
            raise self._write_error(digest, path, exc) from exc
        return ref

    def put_file(self, path: str | os.PathLike[str], *, media_type: str | None = None) -> Ref:
        """Store a file's bytes, streaming: memory stays bounded whatever its size.

        The bytes are hashed while they are copied into a temp file (one pass), so the
        object always matches its name even if the source changes meanwhile.
        """
        source = os.fspath(path)
        try:
            # O_NONBLOCK: opening a FIFO must not hang; it is refused below.
            fd = os.open(source, os.O_RDONLY | _O_CLOEXEC | _O_NONBLOCK)
        except FileNotFoundError as exc:
            raise ArtifactError(f"cannot store {source}: no such file; check the path") from exc
        except OSError as exc:
            raise ArtifactError(
                f"cannot open {source} to store it: {_strerror(exc)}; check the path and permissions"
            ) from exc
        try:
            return self._put_fd(fd, source=source, media_type=media_type)
        finally:
            os.close(fd)

    def _put_fd(self, fd: int, *, source: str, media_type: str | None) -> Ref:
        """Store the bytes readable from ``fd`` (a regular file); used by put_file and records."""
        try:
            st = os.fstat(fd)
        except OSError as exc:
            raise ArtifactError(f"cannot stat {source}: {_strerror(exc)}") from exc
        if not stat.S_ISREG(st.st_mode):
            raise ArtifactError(f"cannot store {source}: not a regular file")
        if self._backend is not None:
            return put_fd_via(self._backend, fd, source=source, media_type=media_type)
        # Single-threaded on purpose: copying is bound by the write and the fsync. Measured
        # on 256 MiB (2 cores): read 16 ms, hash 42 ms, write 47 ms, fsync 70-100 ms; the
        # multithreaded hasher on 1 MiB chunks changed the total by less than the noise.
        h = hasher(0)
        total = 0

        def chunks() -> Iterator[bytes]:
            nonlocal total
            while True:
                try:
                    chunk = os.read(fd, CHUNK_SIZE)
                except OSError as exc:
                    raise ArtifactError(
                        f"reading {source} failed after {total} bytes: {_strerror(exc)}; nothing was stored"
                    ) from exc
                if not chunk:
                    return
                h.update(chunk)
                total += len(chunk)
                yield chunk

        staged = self._tmp / f"put.{os.getpid()}.{os.urandom(8).hex()}.staged"
        digest: str | None = None
        dest = staged
        try:
            try:
                makedirs_durable(self._tmp)
                self._check_folders()
                # The name depends on the bytes, so they are staged under a unique temp
                # name first (fsynced, read-only) and linked to their real name after.
                publish_chunks(chunks(), staged, tmp_dir=self._tmp)
                digest = DIGEST_PREFIX + h.hexdigest()
                dest = self.path_for(digest)
                self._install(digest, total, dest, lambda: self._link(staged, dest))
            finally:
                with contextlib.suppress(FileNotFoundError):
                    fsops.unlink(staged)
        except OSError as exc:
            raise self._write_error(digest, dest, exc, source=source) from exc
        return Ref(digest, total, media_type)

    def _link(self, staged: Path, dest: Path) -> bool:
        """Give a staged, fsynced file its object name; False if the name was taken."""
        try:
            fsops.link(staged, dest)
        except FileExistsError:
            return False
        fsync_dir(dest.parent)
        return True

    def _install(self, digest: str, size: int, path: Path, publish: Callable[[], bool]) -> None:
        """Make ``path`` hold ``size`` good bytes: keep a sound existing object, else publish.

        A racing writer that links the same content first is a success, as long as what it
        left hashes to ``digest`` (objects are linked only once complete and fsynced, so a
        sound one is never seen half-written). Anything else found at the name (wrong size
        or bytes, not a regular file) is moved to quarantine and the good bytes published
        in its place: a put that returns has stored its bytes.
        """
        self._check_folders(path.parent)
        self._sweep_once()
        for _ in range(_INSTALL_TRIES):
            try:
                st: os.stat_result | None = os.lstat(path)
            except FileNotFoundError:
                st = None
            if st is not None:
                if stat.S_ISREG(st.st_mode) and st.st_size == size and self._sound(path, digest, size):
                    if self._refresh(path):
                        return
                    continue  # moved away meanwhile: look again
                self._move_to_quarantine(path, st)
            makedirs_durable(self._tmp)
            makedirs_durable(path.parent)
            self._check_folders(path.parent)  # a link that appeared meanwhile is refused, not written through
            if publish():
                return
        raise ArtifactError(
            f"{path}: another process keeps replacing {digest} with an object of the wrong size; "
            "stop the other writers and run 'intentlog verify'"
        )

    def _sound(self, path: Path, digest: str, size: int) -> bool:
        """Does the object at ``path`` hash to ``digest``? (False also when it cannot be opened as a file.)"""
        try:
            fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
        except OSError:
            return False
        try:
            st = os.fstat(fd)
            return stat.S_ISREG(st.st_mode) and st.st_size == size and _hash_fd(fd, size) == digest
        except OSError:
            return False
        finally:
            os.close(fd)

    def _refresh(self, path: Path) -> bool:
        """The no-op put: restart the object's GC grace period and make its name durable.

        The directory fsync matters when the object was linked an instant ago by another
        process that has not yet synced the directory: our caller may write an event
        referring to it as soon as we return. On a clean directory it costs tens of µs.
        Returns False if the object vanished (another process quarantined it).
        """
        try:
            os.utime(path, follow_symlinks=False)  # a link swapped in meanwhile is never followed
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise ArtifactError(
                f"{path}: cannot refresh the object's mtime ({_strerror(exc)}), so garbage collection "
                "could remove it before an event refers to it; make the ledger folder writable"
            ) from exc
        fsync_dir(path.parent)
        return True

    def _move_to_quarantine(self, path: Path, seen: os.stat_result) -> Path | None:
        """Move a corrupt object aside (never delete it); None if someone else already did."""
        try:
            now = os.lstat(path)
        except FileNotFoundError:
            return None
        if (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino):
            return None  # already replaced by another process: leave its object alone
        makedirs_durable(self._quarantine)
        check_real_dir(self._quarantine, what="quarantined bytes (quarantine/)")
        dest = self._quarantine / f"blake3-{path.parent.name}{path.name}.{os.urandom(6).hex()}.corrupt"
        try:
            fsops.rename(path, dest)
        except FileNotFoundError:
            return None
        fsync_dir(self._quarantine)
        fsync_dir(path.parent)
        return dest

    def _write_error(self, digest: str | None, path: Path, exc: OSError, *, source: str | None = None) -> ArtifactError:
        what = " as ".join(w for w in (source, digest) if w)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            hint = "free some space"
        else:
            hint = "check that the ledger folder is writable"
        return ArtifactError(
            f"cannot store {what} at {path}: {_strerror(exc)}; {hint} and put it again (nothing partial was kept)"
        )

    # -- reading -------------------------------------------------------------------------

    def _open_object(self, digest: str, path: Path) -> int | None:
        """An fd on the object, None if absent; refuses anything but a regular file, and links."""
        self._check_read(path)
        try:
            fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ArtifactError(
                    f"{path}: is a symbolic link, not an object ({digest}); intentlog never "
                    "links inside objects/: move it aside and put the bytes again"
                ) from exc
            raise ArtifactError(
                f"cannot open {path} ({digest}): {_strerror(exc)}; check the ledger folder's permissions"
            ) from exc
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise ArtifactError(f"cannot stat {path} ({digest}): {_strerror(exc)}") from exc
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise ArtifactError(f"{path}: is not a regular file, so not an object ({digest}); move it aside")
        return fd

    def _backend_read(self, digest: str, read: Callable[[ObjectStore, str], T], inline: Callable[[bytes], T]) -> T:
        """``read`` through the backend; a missing object the ledger knows inline is answered from there."""
        if self._backend is None:  # pragma: no cover - callers check
            raise ArtifactError("no object storage behind this store")
        try:
            return read(self._backend, check_digest(digest))
        except ArtifactMissing:
            data = self._inline(digest)
            if data is None:
                raise
            return inline(data)

    def _inline(self, digest: str) -> bytes | None:
        """The inline payload the ledger knows for ``digest``, checked, or None."""
        if self._inline_lookup is None:
            return None
        data = self._inline_lookup(digest)
        if data is None:
            return None
        actual = digest_of(data)
        if actual != digest:
            raise DigestMismatch(digest, actual, "inline payload in an event")
        return bytes(data)

    def get(self, digest: str) -> bytes:
        """The object's bytes, checked against its digest (DigestMismatch; ArtifactMissing)."""
        if self._backend is not None:
            return self._backend_read(digest, get_via, lambda b: b)
        path = self.path_for(digest)
        fd = self._open_object(digest, path)
        if fd is None:
            inline = self._inline(digest)
            if inline is None:
                raise ArtifactMissing(digest)
            return inline
        try:
            with io.FileIO(fd, "rb", closefd=True) as f:
                data = f.readall()
        except OSError as exc:
            raise ArtifactError(f"reading {path} ({digest}) failed: {_strerror(exc)}") from exc
        actual = digest_of(data)
        if actual != digest:
            raise DigestMismatch(digest, actual, str(path))
        return data

    def open(self, digest: str) -> typing.BinaryIO:
        """A read-only binary file on the object, for streaming large artifacts.

        The bytes are hashed as they are read; as soon as a read reaches the end of the
        object the digest is checked and :class:`DigestMismatch` raised instead of
        returning the last bytes. Reading out of order (after ``seek``) is allowed: the
        check then re-hashes the object. Use it as a context manager.
        """
        if self._backend is not None:
            return self._backend_read(digest, open_via, io.BytesIO)
        path = self.path_for(digest)
        fd = self._open_object(digest, path)
        if fd is None:
            inline = self._inline(digest)
            if inline is None:
                raise ArtifactMissing(digest)
            return io.BytesIO(inline)
        try:
            size = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            raise ArtifactError(f"cannot stat {path} ({digest}): {_strerror(exc)}") from exc
        raw = CheckedObjectIO(fd, digest=digest, path=path, size=size)
        return io.BufferedReader(raw, buffer_size=64 << 10)

    def exists(self, digest: str) -> bool:
        """True if the object is in ``objects/`` or the ledger knows it inline (unchecked)."""
        if self._backend is not None and exists_via(self._backend, check_digest(digest)):
            return True
        if self._backend is not None:
            return self._inline_lookup is not None and self._inline_lookup(digest) is not None
        path = self.path_for(digest)
        self._check_read(path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return self._inline_lookup is not None and self._inline_lookup(digest) is not None
        except OSError as exc:
            raise ArtifactError(f"cannot stat {path} ({digest}): {_strerror(exc)}") from exc
        return stat.S_ISREG(st.st_mode)

    def size_of(self, digest: str) -> int:
        """The stored object's size in bytes (ArtifactMissing if absent)."""
        if self._backend is not None:
            return self._backend_read(digest, size_via, len)
        path = self.path_for(digest)
        self._check_read(path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            inline = self._inline_lookup(digest) if self._inline_lookup is not None else None
            if inline is None:
                raise ArtifactMissing(digest) from None
            return len(inline)
        except OSError as exc:
            raise ArtifactError(f"cannot stat {path} ({digest}): {_strerror(exc)}") from exc
        return st.st_size

    def verify(self, digest: str) -> bool:
        """Re-hash the stored object; True if sound.

        A corrupt object is moved to ``quarantine/`` (so a later put restores it) and
        :class:`DigestMismatch` is raised; :class:`ArtifactMissing` if it is absent. An
        inline payload is checked the same way but cannot be quarantined.
        """
        if self._backend is not None:
            return self._backend_read(digest, verify_via, lambda b: True)
        path = self.path_for(digest)
        fd = self._open_object(digest, path)
        if fd is None:
            if self._inline(digest) is None:
                raise ArtifactMissing(digest)
            return True
        try:
            st = os.fstat(fd)
            actual = _hash_fd(fd, st.st_size)
        except OSError as exc:
            raise ArtifactError(f"reading {path} ({digest}) failed: {_strerror(exc)}") from exc
        finally:
            os.close(fd)
        if actual == digest:
            return True
        try:
            moved = self._move_to_quarantine(path, st)
        except OSError as exc:
            raise ArtifactError(
                f"{path}: named {digest} but its bytes hash to {actual}, and moving it to "
                f"quarantine failed: {_strerror(exc)}; move it aside by hand and put the bytes again"
            ) from exc
        where = f"{path} (moved to {moved}; put the bytes again to restore it)" if moved else str(path)
        raise DigestMismatch(digest, actual, where)



def put_fd(store: ArtifactStore, fd: int, *, source: str, media_type: str | None) -> Ref:
    """Store the bytes of the open file ``fd`` (read from its start), durably; for the package's
    own readers of files (``records.capture_locator``), who have already opened and checked it."""
    return store._put_fd(fd, source=source, media_type=media_type)

