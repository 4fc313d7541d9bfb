"""The commit a git work tree's HEAD names, read from ``.git`` itself (git is never run).

Follows what git itself reads: the nearest ``.git`` from a folder upwards (a folder, or a
file ``gitdir: PATH`` in a linked work tree or a submodule), its ``HEAD`` (a commit id, or
``ref: refs/...``), the ref as a loose file (in the work tree's own git folder, then in the
common one a ``commondir`` file names) or a line of ``packed-refs``. Reads only; returns
None where there is no repository, no commit yet, or anything it cannot read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

__all__ = ["git_revision"]

_SHA: Final = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")  # SHA-1, or SHA-256 repositories
_MAX_LINKS: Final = 8  # symbolic refs followed at most (git's own limit is 5)


def _read(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(4096).strip()
    except (OSError, UnicodeDecodeError):
        return None


def _git_dir(folder: Path, stop: Path | None) -> Path | None:
    for d in (folder, *folder.parents):
        dot = d / ".git"
        if dot.is_dir():
            return dot
        if dot.is_file():
            text = _read(dot)
            if text is not None and text.startswith("gitdir:"):
                target = Path(text.removeprefix("gitdir:").strip())
                return target if target.is_absolute() else (d / target)
            return None
        if stop is not None and d == stop:
            return None
    return None


def _ref(git_dir: Path, common: Path, name: str) -> str | None:
    for base in (git_dir, common):
        value = _read(base / name)
        if value is not None:
            return value
    for line in _packed_lines(common / "packed-refs"):
        sha, _, ref = line.partition(" ")
        if ref.strip() == name and _SHA.match(sha):
            return sha
    return None


def _packed_lines(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f if not line.startswith(("#", "^"))]
    except (OSError, UnicodeDecodeError):
        return []


def git_revision(folder: str | Path | None = None, *, stop: str | Path | None = None) -> str | None:
    """The commit id HEAD names in the git work tree holding ``folder`` (default: the current folder).

    ``stop``: look for ``.git`` no higher than this folder. None when there is no
    repository, HEAD names a branch with no commit yet, or ``.git`` cannot be read.
    """
    start = Path(folder if folder is not None else ".").resolve()
    git_dir = _git_dir(start, Path(stop).resolve() if stop is not None else None)
    if git_dir is None:
        return None
    common_text = _read(git_dir / "commondir")
    common = (git_dir / common_text) if common_text else git_dir
    head = _read(git_dir / "HEAD")
    for _ in range(_MAX_LINKS):
        if head is None:
            return None
        if _SHA.match(head):
            return head
        if not head.startswith("ref:"):
            return None
        name = head.removeprefix("ref:").strip()
        if not name.startswith("refs/") or ".." in name.split("/"):
            return None
        head = _ref(git_dir, common, name)
    return None
