"""A synthetic model provider that keeps its own fsync'd receipt log.

The ledger's claims are checked against something the ledger did not write: every
request the provider receives is appended (and fsynced) to ``receipts.jsonl`` *before*
the provider works on it, so a process killed while the provider holds the request
still leaves the receipt behind — as a real provider's bill would.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import orjson

from .._internal.digest import digest_bytes
from .._internal.fsutil import write_all
from ..eventlog.canonical import canonicalize

__all__ = ["SyntheticProvider", "read_receipts"]


class SyntheticProvider:
    """``send(request) -> bytes``; ``hold`` seconds pass between the receipt and the answer."""

    def __init__(self, receipts: str | os.PathLike[str], *, hold: float = 0.0, label: str = "") -> None:
        self.receipts = Path(receipts)
        self.hold = hold
        self.label = label

    def send(self, request: Any) -> bytes:
        body = canonicalize(request).data
        receipt = {
            "body_hash": digest_bytes(body),
            "key": request.get("idempotency_key") if isinstance(request, dict) else None,
            "pid": os.getpid(),
            "label": self.label,
        }
        fd = os.open(self.receipts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            write_all(fd, orjson.dumps(receipt, option=orjson.OPT_SORT_KEYS) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        if self.hold:
            time.sleep(self.hold)
        model = request.get("model") if isinstance(request, dict) else None
        return orjson.dumps(
            {"model": model, "review": f"reviewed {len(body)} request bytes", "verdict": "accept"},
            option=orjson.OPT_SORT_KEYS,
        )


def read_receipts(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every receipt in the log (an absent log means the provider saw nothing)."""
    p = Path(path)
    if not p.exists():
        return []
    return [orjson.loads(line) for line in p.read_bytes().splitlines() if line.strip()]
