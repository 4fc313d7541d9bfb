"""Child tasks: the parent link is recorded before the child exists; a re-run never spawns twice nor loses one.

The ground truth of "ran once" is a marker file outside the ledger; the crash between a
child's work and its result is a real SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import s3_server

import intentlog
from intentlog.errors import NotSerializable, UsageError
from intentlog.idioms import children as children_mod
from intentlog.projections.idioms import CHILD_SPAWNED, JOINED, RETURNED, SPAWNED


def _kinds(task: intentlog.Task) -> list[str]:
    return [ev.kind for ev in task.events()]


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and "lock" not in p.name}


def test_the_link_is_recorded_before_the_child_exists_and_a_re_run_creates_it(
    ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash after the parent's record, before the child's stream: the re-run creates the child, one link."""

    def crash(*args: object) -> None:
        raise RuntimeError("crashed before the child existed")

    with intentlog.open(ledger_root) as ledger:
        with monkeypatch.context() as m:
            m.setattr(children_mod, "_create", crash)
            with pytest.raises(RuntimeError, match="crashed"):
                ledger.task("p").spawn("c1", {"doc": 1})
        assert CHILD_SPAWNED in _kinds(ledger.task("p")) and not ledger.task("c1").exists()
    with intentlog.open(ledger_root) as ledger:
        parent = ledger.task("p")
        child = parent.spawn("c1", {"doc": 1})
        assert _kinds(parent).count(CHILD_SPAWNED) == 1
        assert [ev.data for ev in child.events() if ev.kind == SPAWNED] == [{"parent": "p", "payload": {"doc": 1}}]


def test_a_re_run_never_spawns_twice_and_refusals_write_nothing(ledger: intentlog.Ledger) -> None:
    """The same id again: nothing recorded. Another payload, a foreign task, itself, non-JSON: refused, bytes kept."""
    parent = ledger.task("p")
    parent.spawn("c1", {"doc": 1})
    ledger.task("other").value("v", lambda: 1)
    ledger.close()
    before = _files(ledger.root)
    with intentlog.open(ledger.root) as again:
        parent = again.task("p")
        parent.spawn("c1", {"doc": 1})
        with pytest.raises(UsageError, match="another payload"):
            parent.spawn("c1", {"doc": 2})
        with pytest.raises(UsageError, match="not spawned by 'p'"):
            parent.spawn("other")
        with pytest.raises(UsageError, match="cannot spawn itself"):
            parent.spawn("p")
        with pytest.raises(NotSerializable, match="not exact JSON"):
            parent.spawn("c2", {1, 2})
        with pytest.raises(intentlog.InvalidTaskId):
            parent.spawn("../c")
    assert _files(ledger.root) == before


def test_join_names_the_blocked_children_then_returns_every_result(ledger: intentlog.Ledger) -> None:
    """Pending: ChildrenPending names each blocked child, state and next step. All returned: results, joined once."""
    parent = ledger.task("p")
    parent.spawn("c1", run=lambda child: {"summary": "one"})
    parent.spawn("c2", {"doc": 2})
    with pytest.raises(intentlog.ChildrenPending) as got:
        parent.join()
    assert [c for c, _, _ in got.value.blocked] == ["c2"]
    assert "task.finish" in got.value.blocked[0][2]
    assert JOINED not in _kinds(parent)
    ledger.task("c2").finish({"summary": "two"})
    assert ledger.task("c2").finish("ignored") == {"summary": "two"}  # the first result counts
    assert parent.join() == {"c1": {"summary": "one"}, "c2": {"summary": "two"}}
    assert parent.join(["c2"]) == {"c2": {"summary": "two"}}
    assert parent.join() == {"c1": {"summary": "one"}, "c2": {"summary": "two"}}
    assert _kinds(parent).count(JOINED) == 2  # one per children list joined, not one per join
    with pytest.raises(UsageError, match="never spawned"):
        parent.join(["c9"])


PARENT = textwrap.dedent(
    """
    import sys
    import intentlog
    root, marker, mode = sys.argv[1], sys.argv[2], sys.argv[3]

    def summarise(child):
        with open(marker, "a") as f:
            f.write(child.id + "\\n")
        if mode == "hang" and child.id == "sum-2":
            print("running", flush=True)
            sys.stdin.read()  # never answered: the parent process is killed here
        return {"summary": child.id.upper()}

    with intentlog.open(root) as ledger:
        parent = ledger.task("p")
        for i in (1, 2, 3):
            parent.spawn(f"sum-{i}", {"doc": i}, run=summarise)
        print(parent.join(), flush=True)
    """
)


def test_a_parent_killed_while_a_child_runs_re_runs_only_the_unfinished_children(
    ledger_root: Path, tmp_path: Path
) -> None:
    """SIGKILL inside child 2's work: the re-run skips child 1 (returned), runs child 2 again, runs child 3."""
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, ledger_root, marker, "hang"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "running\n"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    again = subprocess.run(
        [sys.executable, "-c", PARENT, ledger_root, marker, "go"], capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stderr
    assert "'sum-3': {'summary': 'SUM-3'}" in again.stdout
    assert marker.read_text().split() == ["sum-1", "sum-2", "sum-2", "sum-3"]
    with intentlog.open(ledger_root) as ledger:
        parent = ledger.task("p")
        assert _kinds(parent).count(CHILD_SPAWNED) == 3 and _kinds(parent).count(JOINED) == 1
        for i in (1, 2, 3):
            assert _kinds(ledger.task(f"sum-{i}")).count(RETURNED) == 1
    from intentlog.checker import verify_path

    assert verify_path(ledger_root).ok


def test_children_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an s3:// ledger (a real SeaweedFS): spawn, a child finished by another handle, join."""
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        parent = ledger.task("p")
        parent.spawn("c1", {"doc": 1}, run=lambda child: child.value("n", lambda: 41) + 1)
        parent.spawn("c2", {"doc": 2})
        with pytest.raises(intentlog.ChildrenPending):
            parent.join()
    with intentlog.open(url, create=False) as ledger:
        ledger.task("c2").finish(7)
    with intentlog.open(url, create=False) as ledger:
        parent = ledger.task("p")
        parent.spawn("c1", {"doc": 1})
        assert parent.join() == {"c1": 42, "c2": 7}
        assert _kinds(parent).count(CHILD_SPAWNED) == 2


def test_a_child_that_returns_between_the_joins_two_reads_is_joined_not_called_done_without_result(
    ledger: intentlog.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain join reads each child, then the backlog a child was sent to. A child that returns in between (its
    task's result first, then its backlog records it done) is joined with its result on the next read, never
    reported "done in backlog ... with no result"."""
    parent = ledger.task("p")
    parent.spawn("c", {"n": 1}, backlog="kids")  # added to the backlog at once: nothing runs it here
    real = children_mod.children_there

    def child_returns_meanwhile(events: object, items: object) -> Any:
        monkeypatch.setattr(children_mod, "children_there", real)
        kid = ledger.task("c")
        kid.finish({"done": True})  # the child's own result, then its backlog's record of it
        kid.close()
        return {"c"}, {"c": None}, {}  # as the backlog's record read now says: an item of it, done

    monkeypatch.setattr(children_mod, "children_there", child_returns_meanwhile)
    assert parent.join(wait=60.0) == {"c": {"done": True}}
    assert [e.kind for e in parent.events()][-1] == JOINED
