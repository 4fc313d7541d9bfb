"""The experiment's own records: durable JSON files, stream digests and the folder's hash inventory.

Every record is written whole or not at all (a temp file in the same folder, fsynced,
renamed, the folder fsynced), so a killed process never leaves half a record.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import blake3
import orjson

from .._internal.fsutil import fsync_dir, write_all

__all__ = [
    "INVENTORY",
    "INVENTORY_FORMAT",
    "VERIFICATION",
    "file_digest",
    "inventory",
    "stream_digest",
    "write_json",
]

INVENTORY = "inventory.json"
INVENTORY_FORMAT = "intentlog-demo-inventory/1"
VERIFICATION = "verification.json"  # the verifier's verdict, written after the inventory it checks


def write_json(path: Path, doc: Any) -> None:
    """Write ``doc`` as indented, key-sorted JSON at ``path``, atomically and durably."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def file_digest(path: Path) -> tuple[str, int]:
    """``("blake3:<hex>", size)`` of a file's bytes."""
    h = blake3.blake3()
    size = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return "blake3:" + h.hexdigest(), size


def stream_digest(path: Path) -> dict[str, Any]:
    """What a reader saw of a task stream: whole lines, the last line's digest, the file's digest."""
    data = path.read_bytes() if path.exists() else b""
    lines = data.splitlines(keepends=True)
    whole = [x for x in lines if x.endswith(b"\n")]
    return {
        "events": len(whole),
        "head": "blake3:" + blake3.blake3(whole[-1]).hexdigest() if whole else None,
        "file": "blake3:" + blake3.blake3(data).hexdigest(),
        "size": len(data),
    }


def inventory(root: Path) -> dict[str, Any]:
    """BLAKE3 and size of every file under ``root`` (but the inventory and the verdict themselves)."""
    files: dict[str, dict[str, Any]] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel in (INVENTORY, VERIFICATION) or p.is_dir():
            continue
        digest, size = file_digest(p)
        files[rel] = {"digest": digest, "size": size}
    return {"format": INVENTORY_FORMAT, "hash": "blake3", "files": files}
