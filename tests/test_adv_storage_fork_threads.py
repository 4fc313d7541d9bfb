"""Fork while other threads write: the child reads (works), and never writes through the parent.

The parent holds the task's lock and has a thread appending in a loop (so its mutex is
often held at the instant of the fork). The child reads the task's events, the artifact
store and verifies the ledger; its write is refused with TaskBusy; the parent's stream
stays one valid chain.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from strategies import check_chain

import intentlog
from intentlog.projections.verify import verify_path


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_during_appends_child_reads_and_is_refused_for_writing(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led = intentlog.open(root)
    t = led.task("t")
    ref = led.artifacts.put(b"payload" * 1000)
    t.append("note", {"ref": {"digest": ref.digest, "size": ref.size}})
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            t.append("tick", {})

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for th in threads:
        th.start()
    results = []
    try:
        for _ in range(5):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report by exit code, never raise into pytest
                code = 0
                try:
                    os.close(r)
                    child = intentlog.open(root, create=False)
                    n = sum(1 for _ in child.task("t").events())
                    if n < 2 or child.artifacts.get(ref.digest) != b"payload" * 1000:
                        code = 3
                    verify_path(root)  # reading while the parent writes: no exception
                    try:
                        child.task("t").append("child", {})
                        code = 4  # wrote while the parent holds the lock
                    except intentlog.TaskBusy:
                        pass
                    try:
                        t.append("inherited", {})  # the parent's handle, inherited
                        code = 5
                    except intentlog.TaskBusy:
                        pass
                    os.write(w, str(n).encode())
                except BaseException:
                    code = 6
                os._exit(code)
            os.close(w)
            _, status = os.waitpid(pid, 0)
            out = os.read(r, 64)
            os.close(r)
            results.append((os.waitstatus_to_exitcode(status), out))
    finally:
        stop.set()
        for th in threads:
            th.join()
    assert all(code == 0 for code, _ in results), results
    t.append("after", {})
    led.close()
    kinds = [e["kind"] for e in check_chain(root / "tasks" / "t.jsonl")]
    assert "child" not in kinds and "inherited" not in kinds
    assert kinds[-1] == "after"
    assert verify_path(root).ok
