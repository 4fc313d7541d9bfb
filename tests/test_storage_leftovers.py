"""Staging files left by killed puts are removed by the next store that puts (real SIGKILLs).

Before the fix every put killed mid-copy left a ``tmp/put.*.staged`` file (or the atomic
writer's temp file) behind for good: 35 files of up to 64 MB after 51 kills. Their names
carry the pid that made them; the first put of a store in a process removes those whose
maker is dead, and says how many in ``store.swept``. A live process's staging is kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import intentlog
from intentlog import ArtifactStore

CHILD = """
import sys, intentlog
store = intentlog.open(sys.argv[1]).artifacts
while True:
    store.put_file(sys.argv[2])
"""


def _kill_mid_put(root: Path, big: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(big)])
    tmp = root / "tmp"
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if any(n.startswith(("put.", ".put.")) for n in os.listdir(tmp)):
                break
            time.sleep(0.002)
        else:
            raise AssertionError("the child never staged a put")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_staging_left_by_killed_puts_is_swept_by_the_next_put(tmp_path: Path) -> None:
    root = tmp_path / "l"
    intentlog.open(root)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(1 << 20) * 24)
    for _ in range(3):
        _kill_mid_put(root, big)
    left = sorted(os.listdir(root / "tmp"))
    assert left, "the kills left staging behind (the defect this test pins)"

    # a live process's staging must survive the sweep
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        mine = root / "tmp" / f"put.{live.pid}.{'ab' * 8}.staged"
        mine.write_bytes(b"in flight")
        ours = root / "tmp" / f"put.{os.getpid()}.{'cd' * 8}.staged"
        ours.write_bytes(b"ours, in flight")
        store = intentlog.open(root).artifacts
        assert store.swept is None
        store.put(b"a small put")
        assert store.swept == len(left)
        assert sorted(os.listdir(root / "tmp")) == sorted([mine.name, ours.name])
    finally:
        live.kill()
        live.wait()
    # an explicit sweep, now that the other process is gone
    assert ArtifactStore(root).sweep_staging() == 1
    assert os.listdir(root / "tmp") == [ours.name]
    assert intentlog.open(root).artifacts.put_file(big).size == big.stat().st_size
