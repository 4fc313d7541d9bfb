"""``intentlog run``: a live progress line on a terminal only, a summary naming what needs a person, exit 3.

The terminal is a real pseudo-terminal (:mod:`pty`); the test waits for what the line shows
while one item's send is held at a gate, never for a time.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from backlog_steps import open_gate, wait_at_gate

import intentlog
from intentlog.cli.progress import EXIT_NEEDS_PERSON, progress_line, summary

TESTS = Path(__file__).parent

STEPS = '''
import backlog_steps

def mixed(task, payload):
    """An item with "approval" asks a person first (it blocks); the others send through the gate."""
    if payload.get("approval"):
        return backlog_steps.approval_step(task, payload)
    return backlog_steps.step(task, payload)
'''

LIMIT = 60.0  # a bound on a hang, never a step of the test


def _setup(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    root = tmp_path / "led"
    with intentlog.open(root) as led:
        b = led.backlog("pb")
        b.add("a", {"item": "a", "effects": 1})
        b.add("b", {"item": "b", "approval": True})
    (tmp_path / "mixsteps.py").write_text(STEPS, encoding="utf-8")
    gate = tmp_path / "gate"
    gate.mkdir()
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(TESTS), env.get("PYTHONPATH", "")]),
        BACKLOG_RECEIPTS=str(tmp_path / "receipts.jsonl"), BACKLOG_SLEEP="0", BACKLOG_GATE=str(gate),
        BACKLOG_GATE_KEYS="a:0",
    )  # fmt: skip
    env.pop("NO_COLOR", None)
    return root, gate, env


def _cmd(root: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "intentlog.cli", "--root", str(root), "run", "pb", "--step", "mixsteps:mixed",
        "--workers", "2", "--until-idle", *extra,
    ]  # fmt: skip


class _Pty:
    """A child whose stdin, stdout and stderr are one pseudo-terminal; what it wrote, read as it comes."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        import pty

        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(cmd, env=env, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
        os.close(slave)
        self.seen = b""

    def read_until(self, found: bytes | None) -> bytes:
        """Read until ``found`` is in what was read (None: until the child closed the terminal)."""
        deadline = time.monotonic() + LIMIT
        while found is None or found not in self.seen:
            assert time.monotonic() < deadline, f"never saw {found!r} in {self.seen!r}"
            ready, _, _ = select.select([self.master], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every copy of the terminal's other end is closed
                chunk = b""
            if not chunk:
                assert found is None, f"the terminal closed before {found!r}: {self.seen!r}"
                return self.seen
            self.seen += chunk
        return self.seen

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        os.close(self.master)


def test_on_a_terminal_a_live_line_shows_counts_rate_and_in_flight_then_the_summary_names_the_command(
    tmp_path: Path,
) -> None:
    """While an item is held the line shows it running; the end names the approval and exits 3."""
    root, gate, env = _setup(tmp_path)
    term = _Pty(_cmd(root, "--quota", "calls=100/60s"), env)
    try:
        wait_at_gate(str(gate), "a:0")
        seen = term.read_until(b"running: 1")
        line = seen.rsplit(b"\r", 1)[-1]  # the line as last redrawn
        assert b"pb " in line and b"done/min" in line and b"quota ok" in line, seen
        assert b"\x1b[K" in seen  # redrawn in place
        open_gate(str(gate))
        out = term.read_until(None).decode()
        assert term.proc.wait(timeout=LIMIT) == EXIT_NEEDS_PERSON, out
    finally:
        open_gate(str(gate))
        term.close()
    text = out.replace("\r\n", "\n")
    assert "awaiting approval: 1 done: 1" in text
    assert "1 item(s) need a person:" in text
    assert f"intentlog --root {root} approve pb.item.b go" in text, text
    assert f"intentlog --root {root} backlog pb" in text
    # the summary starts on a line of its own: the progress line was erased before it
    assert "\r\x1b[Kawaiting approval: 1 done: 1" in out.replace("\r\n", "\n"), out


def test_in_a_pipe_no_progress_is_drawn_and_the_exit_status_still_says_a_person_is_needed(tmp_path: Path) -> None:
    root, gate, env = _setup(tmp_path)
    open_gate(str(gate))
    r = subprocess.run(_cmd(root), env=env, capture_output=True, text=True, timeout=LIMIT)
    assert r.returncode == EXIT_NEEDS_PERSON, r.stderr
    assert "\r" not in r.stderr + r.stdout and "\x1b" not in r.stderr + r.stdout
    assert r.stderr == ""
    assert r.stdout.splitlines()[0] == "awaiting approval: 1 done: 1"
    assert "approve pb.item.b go" in r.stdout


def test_with_json_on_a_terminal_only_json_is_written_and_the_exit_status_is_the_same(tmp_path: Path) -> None:
    root, gate, env = _setup(tmp_path)
    open_gate(str(gate))
    term = _Pty(_cmd(root, "--json"), env)
    try:
        out = term.read_until(None).decode()
        code = term.proc.wait(timeout=LIMIT)
    finally:
        term.close()
    assert code == EXIT_NEEDS_PERSON, out
    assert "\x1b" not in out
    view = json.loads(out.replace("\r\n", "\n"))
    assert view["counts"]["done"] == 1 and view["counts"]["awaiting approval"] == 1


def test_a_run_where_every_item_is_done_exits_0_with_no_person_named(tmp_path: Path) -> None:
    root = tmp_path / "led"
    with intentlog.open(root) as led:
        led.backlog("ok").add("a", {"item": "a", "effects": 1})
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]), BACKLOG_RECEIPTS=str(tmp_path / "r")
    )
    cmd = [sys.executable, "-m", "intentlog.cli", "--root", str(root), "run", "ok", "--step", "backlog_steps:step"]
    r = subprocess.run([*cmd, "--until-idle"], env=env, capture_output=True, text=True, timeout=LIMIT)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done: 1\n"


def test_the_line_and_the_summary_escape_what_a_caller_wrote() -> None:
    """An item id or reason with a control character cannot move the cursor: it is shown escaped."""
    from intentlog.backlog import BacklogView
    from intentlog.backlog.model import ItemView

    row = ItemView("x\x1b[2J", "t", "blocked", "why\x07", "intentlog reconcile t call-1 --not-served", 0, None, 0,
                   None, None, None)  # fmt: skip
    view = BacklogView("pb", {"queued": 0, "blocked": 1, "done": 4}, [row], None, None)
    line = progress_line(view, done_at_start=1, elapsed=30.0, quotas=(), now=0.0)
    assert line == "pb blocked: 1 done: 4 | 6.0 done/min | 0:30"
    lines = summary(view, lambda s: s.replace("intentlog ", "intentlog --root R ", 1))
    assert lines[1] == "1 item(s) need a person:"
    assert lines[2] == "  x\\x1b[2J: blocked (why\\x07); intentlog --root R reconcile t call-1 --not-served"
    assert lines[3].endswith("intentlog --root R backlog pb")


@pytest.mark.parametrize("until", [None, 1000.0 + 75])
def test_the_line_shows_a_quota_that_waits_and_when_it_reopens(until: float | None) -> None:
    from intentlog.backlog import BacklogView

    view = BacklogView("pb", {"queued": 2}, [], {"quota": "calls=1/60s", "until": until, "reason": "full"}, None)
    line = progress_line(view, done_at_start=0, elapsed=0.0, quotas=("calls=1/60s",), now=1000.0)
    assert "quota calls=1/60s waiting" in line
    assert ("reopens in 1:15" in line) == (until is not None)
