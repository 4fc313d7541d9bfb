"""A forked child cannot write with its parent's handle (real ``os.fork`` and multiprocessing).

Before the fix a child appending through an inherited handle wrote seqs the parent wrote
too, and the task stayed CorruptStream for good. Now the child's handle reopens and takes
the lock properly: TaskBusy while the parent holds it; the stream verifies after, with
no duplicate seq; and a child closing its inherited handle leaves the parent's lock held.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import pytest
from strategies import check_chain

import intentlog
from intentlog.projections.verify import verify_path

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _in_child(action: str, task: intentlog.Task, out: Path) -> None:
    """Run in the forked child: try ``action`` with the inherited handle, write what happened."""
    try:
        if action == "append":
            task.append("note", {"from": "child"})
        elif action == "close":
            task.close()
        out.write_text("ok")
    except intentlog.TaskBusy as exc:
        out.write_text(f"TaskBusy {exc.holder_pid}")
    except BaseException as exc:
        out.write_text(f"{type(exc).__name__}: {exc}")


def _fork(action: str, task: intentlog.Task, out: Path) -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            _in_child(action, task, out)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def _seqs(path: Path) -> list[int]:
    return [e["seq"] for e in check_chain(path)]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads alive (pytest's)
def test_a_forked_child_is_refused_while_the_parent_holds_the_lock(tmp_path: Path) -> None:
    led = intentlog.open(tmp_path / "l")
    t = led.task("f")
    t.append("note", {"from": "parent", "i": 0})
    out = tmp_path / "child.txt"
    _fork("append", t, out)
    assert out.read_text() == f"TaskBusy {os.getpid()}"
    t.append("note", {"from": "parent", "i": 1})
    t.close()
    events = check_chain(t.path)
    assert [e["data"].get("from") for e in events] == [None, "parent", "parent"], "the child wrote nothing"
    assert _seqs(t.path) == [0, 1, 2]
    assert verify_path(tmp_path / "l").ok


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_child_closing_its_inherited_handle_does_not_unlock_the_parent(tmp_path: Path) -> None:
    led = intentlog.open(tmp_path / "l")
    t = led.task("f")
    t.append("note", {"i": 0})
    out = tmp_path / "child.txt"
    _fork("close", t, out)
    assert out.read_text() == "ok"
    # another process is still refused: the parent's lock survived the child's close
    import subprocess

    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import intentlog,sys; intentlog.open(sys.argv[1]).task('f').append('note', {})",
            str(tmp_path / "l"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "TaskBusy" in proc.stderr
    t.append("note", {"i": 1})  # and the parent's handle still writes
    t.close()
    assert _seqs(t.path) == [0, 1, 2]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_child_after_the_parent_closed_takes_the_lock_properly(tmp_path: Path) -> None:
    """The transparent reopen: once the parent has closed, the child's inherited handle writes after the parent."""
    led = intentlog.open(tmp_path / "l")
    t = led.task("f")
    t.append("note", {"from": "parent"})
    t.close()
    out = tmp_path / "child.txt"
    _fork("append", t, out)
    assert out.read_text() == "ok"
    t.append("note", {"from": "parent again"})
    t.close()
    assert [e["data"].get("from") for e in check_chain(t.path)] == [None, "parent", "child", "parent again"]
    assert verify_path(tmp_path / "l").ok


def _mp_child(task: intentlog.Task, out: str) -> None:
    _in_child("append", task, Path(out))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_multiprocessing_fork_children_are_refused(tmp_path: Path) -> None:
    """The fork start method (the Linux default before 3.14): every child is refused, no duplicate seq."""
    led = intentlog.open(tmp_path / "l")
    t = led.task("f")
    t.append("note", {"from": "parent"})
    ctx = multiprocessing.get_context("fork")
    outs = [tmp_path / f"child{i}.txt" for i in range(3)]
    procs = [ctx.Process(target=_mp_child, args=(t, str(o))) for o in outs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert [o.read_text() for o in outs] == [f"TaskBusy {os.getpid()}"] * 3
    t.append("note", {"from": "parent"})
    t.close()
    assert _seqs(t.path) == [0, 1, 2]
    assert verify_path(tmp_path / "l").ok
