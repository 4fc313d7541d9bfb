"""Recording workspace files as artifacts, by a locator relative to the workspace.

A locator is what a task records to say *which* file it read or wrote: a relative posix
path, so the record stays meaningful when the workspace is copied elsewhere. A locator
that names anything outside the workspace -- absolute, escaping with ``..``, or leading
out through a symbolic link -- is refused with :class:`OutsideWorkspace` before anything
is read or stored.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path, PurePosixPath

from ..errors import ArtifactError, OutsideWorkspace
from .store import ArtifactStore, Ref, put_fd

__all__ = ["capture_locator", "normalize_locator"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def normalize_locator(locator: str, workspace: str) -> str:
    """The locator in normal posix form (``./a//b/../c`` -> ``a/c``), refusing escapes.

    Purely lexical: touches nothing. ``workspace`` is used only in error messages.
    """
    if not isinstance(locator, str):
        raise TypeError(f"a locator is a str, not {type(locator).__name__}")
    if "\x00" in locator:
        raise ArtifactError(f"locator {locator!r} contains a NUL byte")
    pure = PurePosixPath(locator)
    if pure.is_absolute():
        raise OutsideWorkspace(locator, workspace)
    parts: list[str] = []
    for part in pure.parts:
        if part == "..":
            if not parts:
                raise OutsideWorkspace(locator, workspace)
            parts.pop()
        elif part != ".":
            parts.append(part)
    if not parts:
        raise ArtifactError(f"locator {locator!r} names the workspace {workspace} itself; name a file inside it")
    return "/".join(parts)


def _open_inside(root: Path, rel: Path) -> int:
    """Open ``root/rel`` for reading, never following a link, so a path swapped for a
    symlink between the containment check and the open fails instead of escaping.

    ``rel`` is the resolved, link-free relative path; each component is opened relative
    to its parent directory's descriptor with ``O_NOFOLLOW``.
    """
    dir_fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        *dirs, name = rel.parts
        for part in dirs:
            next_fd = os.open(part, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = next_fd
        return os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def capture_locator(
    store: ArtifactStore,
    workspace: str | os.PathLike[str],
    locator: str,
    *,
    media_type: str | None = None,
) -> tuple[str, Ref]:
    """Store the file ``workspace/locator``; return (normalised locator, its Ref).

    Refuses, before reading or storing anything, a locator that is absolute, escapes
    with ``..``, or resolves -- following symbolic links -- outside the workspace
    (:class:`OutsideWorkspace`). A missing or unreadable file, or one that is not a regular
    file, raises :class:`ArtifactError` naming the locator and the workspace. When this
    returns, the bytes are durable in the store (see :meth:`ArtifactStore.put_file`).
    """
    ws_text = os.fspath(workspace)
    normal = normalize_locator(locator, ws_text)
    try:
        ws_root = Path(ws_text).resolve(strict=True)
    except FileNotFoundError as exc:
        raise ArtifactError(f"cannot record {locator!r}: the workspace {ws_text} does not exist") from exc
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop on Python < 3.13
        raise ArtifactError(f"cannot record {locator!r}: cannot resolve the workspace {ws_text}: {exc}") from exc
    if not ws_root.is_dir():
        raise ArtifactError(f"cannot record {locator!r}: the workspace {ws_text} is not a directory")
    try:
        target = (ws_root / normal).resolve(strict=False)
    except (OSError, RuntimeError) as exc:
        raise ArtifactError(f"cannot record {locator!r} in the workspace {ws_text}: cannot resolve it: {exc}") from exc
    if target == ws_root:
        raise ArtifactError(f"locator {locator!r} leads to the workspace {ws_text} itself; name a file inside it")
    if not target.is_relative_to(ws_root):
        raise OutsideWorkspace(locator, ws_text)
    try:
        fd = _open_inside(ws_root, target.relative_to(ws_root))
    except FileNotFoundError as exc:
        raise ArtifactError(
            f"cannot record {locator!r}: no such file in the workspace {ws_text}; "
            "check the locator (it is relative to the workspace)"
        ) from exc
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            reason = "a path component changed into a link or a file while it was being opened"
        else:
            reason = exc.strerror or type(exc).__name__
        raise ArtifactError(f"cannot record {locator!r} in the workspace {ws_text}: {reason}") from exc
    try:
        ref = put_fd(store, fd, source=f"{normal} (workspace {ws_text})", media_type=media_type)
    finally:
        os.close(fd)
    return normal, ref
