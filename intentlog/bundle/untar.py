"""Extracting a bundle's tar for checking: every header judged, and every size bounded, before a byte is written.

A bundle's tar holds plain files and folders under ``intentlog-bundle/``, and its
``hashes.json`` declares the size of every file. Extraction reads all headers first and
refuses the tar (:class:`~intentlog.errors.LedgerError`) when any member is unsafe to
write: an absolute path, ``..``, a path elsewhere, a repeated name, a link, a device, a
sparse member (GNU sparse 0.x and 1.0 pax keys ``GNU.sparse.*``, type ``S``: its holes
expand to any size on extraction), a file ``hashes.json`` does not list, or one larger
than it declares. Only then are the files written, each at most its declared size, so a
tar never makes the checker write more than its manifest says the bundle holds.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import Any, Final

import orjson

from ..errors import LedgerError, NotALedger
from .files import CHUNK, HASHES_FILE, TAR_ROOT

__all__ = ["extract_tar"]

_FILE_TYPES: Final = (tarfile.REGTYPE, tarfile.AREGTYPE)
#: hashes.json lists one line of about 170 bytes per file; this allows three times that.
_HASHES_PER_MEMBER: Final = 512
_HASHES_BASE: Final = 4096

_Members = list[tuple[tarfile.TarInfo, tuple[str, ...]]]


def _member_path(name: str, where: Path) -> tuple[str, ...]:
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


def is_sparse(m: tarfile.TarInfo) -> bool:
    """Whether a member is stored sparse (its holes would be written out as zeros on extraction)."""
    return (
        m.type == tarfile.GNUTYPE_SPARSE
        or m.sparse is not None
        or any(k.startswith("GNU.sparse.") for k in m.pax_headers)
    )


def _open(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:")
    except (OSError, tarfile.TarError) as exc:
        raise NotALedger(str(path), f"is neither a bundle folder nor a readable tar ({exc})") from exc


def _headers(tf: tarfile.TarFile, path: Path) -> _Members:
    """Every member with its parts below the bundle folder, each judged safe by its header alone."""
    out: _Members = []
    seen: set[tuple[str, ...]] = set()
    while True:
        try:
            m = tf.next()
        except tarfile.TarError as exc:
            raise LedgerError(f"{path}: the tar is damaged ({exc}); it was not checked") from exc
        if m is None:
            return out
        parts = _member_path(m.name, path)
        if parts in seen:
            raise LedgerError(f"{path}: the member {m.name!r} appears twice; the tar was not checked")
        seen.add(parts)
        if is_sparse(m):
            raise LedgerError(
                f"{path}: the member {m.name!r} is a sparse file (its holes would expand to {m.size} bytes when "
                "written); export never writes one, so the tar was not extracted or checked"
            )
        if m.type != tarfile.DIRTYPE and m.type not in _FILE_TYPES:
            raise LedgerError(
                f"{path}: the member {m.name!r} is a link or a special file; a bundle holds only files and "
                "folders, so the tar was not checked"
            )
        if m.type in _FILE_TYPES and not parts:
            raise LedgerError(f"{path}: {TAR_ROOT} is a file, not a folder; the tar was not checked")
        out.append((m, parts))


def _declared(tf: tarfile.TarFile, members: _Members, path: Path) -> dict[str, int]:
    """The size ``hashes.json`` declares for each file, read from the tar within a bound of its own."""
    found = [m for m, parts in members if parts == (HASHES_FILE,) and m.type in _FILE_TYPES]
    if not found:
        raise LedgerError(
            f"{path}: the tar holds no {TAR_ROOT}/{HASHES_FILE}, which declares every file's size; nothing was "
            "extracted: it is not a bundle export wrote"
        )
    m = found[0]
    bound = _HASHES_BASE + _HASHES_PER_MEMBER * len(members)
    if m.size > bound:
        raise LedgerError(
            f"{path}: {HASHES_FILE} is {m.size} bytes, more than a list of {len(members)} members needs "
            f"({bound}); nothing was extracted"
        )
    src = tf.extractfile(m)
    try:
        doc: Any = orjson.loads(src.read(bound + 1) if src is not None else b"")
    except orjson.JSONDecodeError as exc:
        raise LedgerError(f"{path}: {HASHES_FILE} is not JSON ({exc}); nothing was extracted") from exc
    files = doc.get("files") if type(doc) is dict else None
    if type(files) is not dict:
        raise LedgerError(f"{path}: {HASHES_FILE} lists no 'files'; nothing was extracted")
    sizes: dict[str, int] = {}
    for rel, entry in files.items():
        size = entry.get("size") if type(entry) is dict else None
        if type(size) is int and size >= 0:
            sizes[rel] = size
    return sizes


def _check_sizes(members: _Members, sizes: dict[str, int], path: Path) -> None:
    for m, parts in members:
        rel = "/".join(parts)
        if m.type not in _FILE_TYPES or rel == HASHES_FILE:
            continue
        want = sizes.get(rel)
        if want is None:
            raise LedgerError(
                f"{path}: the member {m.name!r} ({m.size} bytes) is not listed in {HASHES_FILE}; only what the "
                "bundle declares is extracted, so the tar was not checked"
            )
        if m.size > want:
            raise LedgerError(
                f"{path}: the member {m.name!r} holds {m.size} bytes, but {HASHES_FILE} declares {want}; only what "
                "the bundle declares is extracted, so the tar was not checked"
            )


def extract_tar(path: Path, dest: Path) -> Path:
    """Extract a bundle tar into ``dest`` and return the bundle folder (``dest/intentlog-bundle``).

    Every header is judged and every file size bounded by ``hashes.json`` before anything
    is written (see the module); :class:`LedgerError` refuses the tar, :class:`NotALedger`
    a file that is no tar.
    """
    inner = dest / TAR_ROOT
    with _open(path) as tf:
        members = _headers(tf, path)
        _check_sizes(members, _declared(tf, members, path), path)
        for m, parts in members:
            target = inner.joinpath(*parts)
            if m.type == tarfile.DIRTYPE:
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tf.extractfile(m)
            if src is None:  # pragma: no cover - a regular member always has a file object
                raise LedgerError(f"{path}: the member {m.name!r} cannot be read")
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            left = m.size
            with os.fdopen(fd, "wb") as out, src:
                while left > 0 and (chunk := src.read(min(CHUNK, left))):
                    out.write(chunk)
                    left -= len(chunk)
    if not inner.is_dir():
        raise LedgerError(f"{path}: the tar holds no {TAR_ROOT}/ folder; it is not a bundle export wrote")
    return inner
