"""A bundle's own files: names and formats, their pure encoders, and the hashes of a bundle's files."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import orjson
from blake3 import blake3

from .._internal.digest import DIGEST_PREFIX
from ..errors import (
    UsageError,
)
from ..projections.workstate import WorkState

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

CHUNK: Final = 1 << 20
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
    return (Path(__file__).parent.parent / VERIFIER_FILE).read_bytes()


def digest_of(data: bytes) -> str:
    return DIGEST_PREFIX + blake3(data).hexdigest()


def object_rel(digest: str) -> str:
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


def walk_files(root: Path) -> list[tuple[str, bool]]:
    """(relative posix path, is a folder) of everything below ``root``, sorted; links are not followed."""
    out: list[tuple[str, bool]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        out.extend((prefix + d, True) for d in dirnames)
        out.extend((prefix + f, False) for f in filenames)
    out.sort()
    return out


def hash_path(path: Path) -> tuple[str, int]:
    h = blake3()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return DIGEST_PREFIX + h.hexdigest(), size


def file_hashes(bundle: str | os.PathLike[str]) -> dict[str, tuple[str, int]]:
    """``(digest, size)`` of every file of a bundle folder but ``hashes.json``, by sorted relative path.

    Raises :class:`UsageError` for a symbolic link or a special file (a bundle holds neither).
    """
    root = Path(bundle)
    out: dict[str, tuple[str, int]] = {}
    for rel, is_dir in walk_files(root):
        path = root / rel
        if path.is_symlink() or not (is_dir or path.is_file()):
            raise UsageError(f"{path} is a symbolic link or a special file; a bundle holds only files and folders")
        if not is_dir and rel != HASHES_FILE:
            out[rel] = hash_path(path)
    return out
