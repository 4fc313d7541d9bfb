"""Five seeded corruptions of case 1's exported bundle, each to be rejected by meaning alone.

Each is applied to its own copy under ``corruptions/``; the verifier checks every copy
with the bundle's byte inventory (``hashes.json``) bypassed, so only what the events,
states and receipts mean can catch it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import orjson

from .plan import CORRUPTIONS

__all__ = ["seed_corruptions"]

TASK = "chapter-16"


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _edit(b: Path) -> None:
    p = b / "tasks" / f"{TASK}.jsonl"
    lines = _lines(p)
    lines[2] = lines[2].replace(b"review-p7", b"review-p8")
    p.write_bytes(b"".join(lines))


def _remove(b: Path) -> None:
    p = b / "tasks" / f"{TASK}.jsonl"
    lines = _lines(p)
    del lines[3]
    p.write_bytes(b"".join(lines))


def _artifact(b: Path) -> None:
    objs = sorted(q for q in (b / "objects").rglob("*") if q.is_file()) if (b / "objects").exists() else []
    if objs:
        objs[0].write_bytes(objs[0].read_bytes() + b" ")
        return
    # every payload rides inline: change the inline bytes of the response, keeping the line's digest claims
    p = b / "tasks" / f"{TASK}.jsonl"
    lines = _lines(p)
    for i, line in enumerate(lines):
        if b'"attempt.observed"' in line and b"accept" in line:
            lines[i] = line.replace(b"accept", b"reject", 1)
            break
    p.write_bytes(b"".join(lines))


def _state(b: Path) -> None:
    p = b / "states.json"
    doc = orjson.loads(p.read_bytes())
    for call in doc["tasks"][TASK]["calls"].values():
        call["stage"] = "effect_unknown" if call.get("stage") == "completed" else "completed"
        break
    p.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))


def _receipt(b: Path) -> None:
    p = next((b / "receipts").glob("*.jsonl"))
    forged = {"body_hash": "blake3:" + "ab" * 32, "client": "forged", "idempotency_key": "review-p7", "n": 2}
    with open(p, "ab") as f:
        f.write(orjson.dumps(forged, option=orjson.OPT_SORT_KEYS) + b"\n")


_APPLY: dict[str, Callable[[Path], None]] = {
    "an edited event": _edit,
    "a removed event": _remove,
    "a changed artifact": _artifact,
    "a state claim that contradicts its events": _state,
    "a receipt with no recorded attempt": _receipt,
}


def seed_corruptions(root: Path, bundle: Path) -> list[tuple[str, Path]]:
    """Copy ``bundle`` once per corruption under ``root/corruptions/`` and corrupt each copy."""
    out = []
    for i, what in enumerate(CORRUPTIONS, start=1):
        dest = root / "corruptions" / f"c{i}"
        shutil.copytree(bundle, dest)
        _APPLY[what](dest)
        out.append((what, dest))
    return out
