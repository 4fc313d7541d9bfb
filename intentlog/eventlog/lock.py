"""One writer per task (DESIGN §4 rule 5): an exclusive ``flock`` held for a handle's life.

filelock's ``UnixFileLock`` is named explicitly: a soft lock file would survive a
``SIGKILL`` and lock everyone out, while ``flock`` is released by the kernel when the
process dies. The holder writes its pid into the lock file so that a refused writer can
say who holds it. filelock costs ~40 ms to import, so it is imported on first use.
"""

from __future__ import annotations

import inspect
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TaskBusy

if TYPE_CHECKING:
    from filelock import UnixFileLock

__all__ = ["WriterLock"]


class WriterLock:
    def __init__(self, path: Path, task_id: str) -> None:
        self.path = path
        self.task_id = task_id
        self._lock: UnixFileLock | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def acquire(self, wait: float) -> None:
        """Take the lock, waiting up to ``wait`` seconds, else raise :class:`TaskBusy`."""
        if self._lock is not None:
            return
        import filelock

        kwargs: dict[str, Any] = {"timeout": wait, "thread_local": False, "is_singleton": False}
        if "fallback_to_soft" in inspect.signature(filelock.UnixFileLock.__init__).parameters:
            kwargs["fallback_to_soft"] = False  # never a soft lock file: it would outlive a SIGKILL
        lock = filelock.UnixFileLock(str(self.path), **kwargs)
        try:
            lock.acquire()
        except filelock.Timeout as exc:
            raise TaskBusy(self.task_id, str(self.path), self._holder()) from exc
        self._lock = lock
        pid = f"{os.getpid()}\n".encode()
        fd = os.open(self.path, os.O_WRONLY)
        try:
            # write first, then cut: a refused writer never reads an empty file in between
            os.pwrite(fd, pid, 0)
            os.ftruncate(fd, len(pid))
        finally:
            os.close(fd)

    def _holder(self) -> int | None:
        for _ in range(5):
            try:
                first = self.path.read_text().split("\n", 1)[0].strip()
                if first:
                    return int(first)
            except (OSError, ValueError):
                return None
            time.sleep(0.01)
        return None

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release(force=True)
