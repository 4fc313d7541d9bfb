"""The folder's gc.jsonl read as the store's is: a gc killed before it touched a stream excuses no swap of it.

A gc run records ``gc.started`` (every task it is about to delete) before it deletes
anything. Killed right after, it deleted nothing; a sealed stream swapped for another one
afterwards must then be a ``heads`` ERROR, not excused as ``deleted_by_gc``: a swap is
excused only by a run that recorded its end (``gc.finished`` naming the task).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner

import intentlog
from intentlog.checker import verify_path
from intentlog.cli import main
from intentlog.retention import apply_gc, keep

LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=60)

KILLED = """
    import datetime as dt, os, signal, sys
    import intentlog
    from intentlog.retention import apply_gc, folder
    def killed(*args):
        os.kill(os.getpid(), signal.SIGKILL)  # gc.started is durable; no stream touched yet
    folder._delete_stream = killed
    apply_gc(intentlog.open(sys.argv[1]), now=dt.datetime.fromisoformat(sys.argv[2]))
"""


def ledger_with_t(root: Path) -> None:
    with intentlog.open(root) as ledger:
        for i in range(3):
            ledger.task("t").append("note", {"amount": 100 + i})
        ledger.task("stays").append("note", {})
    keep(intentlog.open(root), "stays")


def swap_t(root: Path) -> None:
    """Replace t's stream by hand with another stream of the same name (the writer itself refuses to)."""
    other = root.parent / "other"
    with intentlog.open(other) as ledger:
        ledger.task("t").append("note", {"amount": 999999})
    (root / "tasks" / "t.jsonl").write_bytes((other / "tasks" / "t.jsonl").read_bytes())


def test_a_killed_gc_that_touched_nothing_excuses_no_swap(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    ledger_with_t(root)
    env = dict(os.environ, PYTHONPATH=str(Path(intentlog.__file__).parent.parent))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED), str(root), LATER.isoformat()], env=env)
    assert proc.returncode == -9
    assert b'"gc.started"' in (root / "gc.jsonl").read_bytes()
    assert CliRunner().invoke(main, ["--root", str(root), "seal"]).exit_code == 0
    swap_t(root)
    report = verify_path(root)
    assert not report.ok
    assert [p.code for p in report.problems if p.task == "t" and p.severity == "error"] == ["heads"]


def test_a_finished_gc_still_excuses_a_new_stream_under_the_id(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    ledger_with_t(root)
    assert CliRunner().invoke(main, ["--root", str(root), "seal"]).exit_code == 0
    assert apply_gc(intentlog.open(root), now=LATER).deleted == ("t",)
    with intentlog.open(root) as ledger:
        ledger.task("t").append("note", {"amount": 999999})
    report = verify_path(root)
    assert report.ok, [p.to_json() for p in report.problems]
    assert "deleted_by_gc" in [p.code for p in report.problems if p.task == "t"]
