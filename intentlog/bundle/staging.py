"""The export's target: refused when it holds something else, built beside it, stale leftovers removed."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from blake3 import blake3

from .._internal.digest import DIGEST_PREFIX
from .._internal.fsutil import fsync_dir
from .._internal.procs import pid_alive
from ..errors import (
    UsageError,
)
from .files import HASHES_FILE, file_hashes, hash_path

STAGING_SUFFIX: Final = ".export"
_STALE_STAGING: Final = re.compile(r"\.(.+)\.(\d+)\.[0-9a-f]{8}\.export\Z")
_STALE_TMP: Final = re.compile(r"\.(.+)\.(\d+)\.[0-9a-f]{12}\.tmp\Z")


def check_out(out_path: Path) -> None:
    """Refuse a folder target that exists and can hold no bundle; an existing bundle is compared at the end."""
    if out_path.is_symlink():
        raise UsageError(f"{out_path} is a symbolic link; name a new folder for the bundle")
    if not out_path.exists():
        return
    if not out_path.is_dir():
        raise UsageError(f"{out_path} exists and is not a folder; name a new folder for the bundle")
    if any(out_path.iterdir()) and not (out_path / HASHES_FILE).is_file():
        raise UsageError(f"{out_path} exists and is not an empty folder; name a new folder for the bundle")


def holds_bundle(out_path: Path, staging: Path) -> bool:
    """Does the existing ``out_path`` hold exactly the bundle just built in ``staging``? (False if it is empty.)"""
    try:
        if not any(out_path.iterdir()):
            return False  # an empty folder: the rename gives it the bundle
        theirs = (out_path / HASHES_FILE).read_bytes()
        return theirs == (staging / HASHES_FILE).read_bytes() and file_hashes(out_path) == file_hashes(staging)
    except (OSError, UsageError):
        return False


def same_bytes(path: Path, chunks: Iterable[bytes]) -> bool:
    """Does the regular file ``path`` hold exactly the bytes of ``chunks``?"""
    mine = blake3()
    for chunk in chunks:
        mine.update(chunk)
    try:
        theirs, _ = hash_path(path)
    except OSError:
        return False
    return theirs == DIGEST_PREFIX + mine.hexdigest()




def remove_stale(targets: Sequence[Path]) -> list[str]:
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
            if staging is not None and e.is_dir(follow_symlinks=False) and not pid_alive(int(staging.group(2))):
                shutil.rmtree(e.path, ignore_errors=True)
            elif (
                tmp is not None
                and tmp.group(1) in tar_names
                and e.is_file(follow_symlinks=False)
                and not pid_alive(int(tmp.group(2)))
            ):
                os.unlink(e.path)
            else:
                continue
            removed.append(e.path)
        if len(removed) > before:
            fsync_dir(folder)
    return removed


#: What export reads below the ledger root: none of it may be (or lie behind) a link.
