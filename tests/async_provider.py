"""A synthetic async provider for the awaitable protocol's tests: every request it serves is in its own receipt log.

The receipt log is the outside world's record: one JSON line per request served, written
and fsynced (in a worker thread, off the event loop) *before* the answer is returned, so
a receipt exists for every request that may have had its effect, whatever happens to the
caller afterwards.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import threading
from pathlib import Path
from typing import Any


class AsyncProvider:
    """Answers ``{"echo": key}`` after ``latency`` seconds; ``receipts`` names the fsync'd log."""

    def __init__(self, receipts: Path, latency: float = 0.0) -> None:
        self.receipts = Path(receipts)
        self.latency = latency
        self._lock = threading.Lock()

    def _receipt(self, key: str) -> None:
        with self._lock:
            fd = os.open(self.receipts, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, (json.dumps({"key": key}) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    async def send(self, request: Any) -> bytes:
        key = request["key"]
        await asyncio.to_thread(self._receipt, key)  # served: the effect happened
        if self.latency:
            await asyncio.sleep(self.latency)
        return json.dumps({"echo": key}).encode()

    def counts(self) -> collections.Counter[str]:
        """How many receipts each key has."""
        if not self.receipts.exists():
            return collections.Counter()
        return collections.Counter(json.loads(line)["key"] for line in self.receipts.read_text().splitlines() if line)
