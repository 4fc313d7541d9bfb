"""The command line as a careless user and a script meet it: fork past an unknown effect,
dry runs that tell the truth, and ``--json`` that parses on the error path too.

Each test reads the record back from disk or runs a hint exactly as printed.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import intentlog
from intentlog.cli import main


def cli(root: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["--root", str(root), *args], catch_exceptions=False)


def run_hint(line: str) -> Any:
    argv = shlex.split(line)
    assert argv[0] == "intentlog", line
    return CliRunner().invoke(main, argv[1:], catch_exceptions=False)


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes | None]]:
    """Every entry under ``folder``: inode, mtime and (for files) bytes; lock files and folders too."""
    out: dict[str, tuple[int, int, bytes | None]] = {}
    for p in sorted([folder, *folder.rglob("*")]):
        s = p.lstat()
        out[str(p)] = (s.st_ino, s.st_mtime_ns, p.read_bytes() if p.is_file() else None)
    return out


def _ok(_: object) -> bytes:
    return b'{"ok": 1}'


def _lost(_: object) -> bytes:
    raise TimeoutError("read timed out")


@pytest.fixture
def unknown(tmp_path: Path) -> Path:
    """A ledger whose task 'u' has one call (call-1) whose effect is unknown."""
    root = tmp_path / "ledger"
    with intentlog.open(root) as led, led.task("u") as t, pytest.raises(intentlog.EffectUnknown):
        t.effect("k", {"q": 1}, _lost)
    return root


def _sends_again(root: Path, task: str) -> int:
    sent: list[object] = []
    with intentlog.open(root) as led, led.task(task) as t:
        t.effect("k", {"q": 1}, lambda r: sent.append(r) or b"{}")
    return len(sent)


def test_fork_past_an_unknown_effect_is_refused_with_a_hint_that_runs(unknown: Path) -> None:
    before = snapshot(unknown)
    r = cli(unknown, "fork", "u", "--from", "call-1", "--as", "u2")
    assert r.exit_code == 1
    assert snapshot(unknown) == before
    hints = [h for h in (s.strip() for s in r.stderr.split("'")) if h.startswith("intentlog ") and " fork " in h]
    assert hints, r.stderr  # the refusal names the command that accepts the risk
    done = run_hint(hints[0])
    assert done.exit_code == 0, done.output
    forked = [e for e in intentlog.open(unknown).task("u2").events() if e.kind == "task.forked"]
    assert forked[0].data["accept_risk"] is True
    assert forked[0].data["unknown"] == ["call-1"]


def test_fork_accept_risk_flag_is_recorded_and_json(unknown: Path) -> None:
    r = cli(unknown, "fork", "u", "--from", "call-1", "--as", "u2", "--accept-risk", "--json")
    assert r.exit_code == 0, r.output
    ev = json.loads(r.stdout)
    assert ev["kind"] == "task.forked" and ev["data"]["accept_risk"] is True
    on_disk = [e for e in intentlog.open(unknown).task("u2").events() if e.kind == "task.forked"]
    assert on_disk[0].data == ev["data"]


def test_accept_risk_records_no_risk_when_there_is_none(tmp_path: Path) -> None:
    """No unknown effect is dropped: the flag changes nothing, and no risk is recorded."""
    root = tmp_path / "ledger"
    with intentlog.open(root) as led, led.task("t") as t:
        t.effect("k", {"q": 1}, _ok)
    before = snapshot(root)
    r = cli(root, "fork", "t", "--from", "call-1", "--accept-risk")
    assert r.exit_code == 0, r.output
    forked = next(e for e in intentlog.open(root).task("t.fork-1").events() if e.kind == "task.forked")
    assert "accept_risk" not in forked.data  # no unknown effect dropped: no risk recorded
    assert snapshot(root).keys() - before.keys()


def test_fork_dry_run_names_the_task_a_real_fork_creates(tmp_path: Path) -> None:
    root = tmp_path / "ledger"
    with intentlog.open(root) as led:
        with led.task("t") as t:
            t.effect("k", {"q": 1}, _ok)
        led.fork("t", "call-1")  # t.fork-1 exists now
    before = snapshot(root)
    dry = json.loads(cli(root, "fork", "t", "--from", "call-1", "--dry-run", "--json").stdout)
    assert snapshot(root) == before
    real = json.loads(cli(root, "fork", "t", "--from", "call-1", "--json").stdout)
    assert dry["task"] == real["task"] == "t.fork-2"
    assert dry["data"]["upto_seq"] == real["data"]["upto_seq"]


ERRORS = [
    ("fork", "u", "--from", "call-1", "--as", "u2"),
    ("fork", "u", "--from", "call-9"),
    ("reconcile", "u", "call-9", "--served"),
    ("accept", "u"),
    ("approve", "u", "nope"),
    ("status", "nope"),
    ("log", "nope"),
    ("fail", "nope", "--reason", "x"),
    ("fail", "u", "call-9", "--reason", "x"),
    ("reject", "u", "nope", "--note", "x"),
    ("repair", "nope"),
    ("show", "blake3:" + "0" * 64),
]


@pytest.mark.parametrize("argv", ERRORS, ids=[" ".join(a) for a in ERRORS])
def test_json_errors_parse(unknown: Path, argv: tuple[str, ...]) -> None:
    """A script that asked for JSON gets JSON on stdout when a command fails, naming the error and exit code."""
    before = snapshot(unknown)
    r = cli(unknown, *argv, "--json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 1
    assert doc["error"] and doc["error"] in r.stderr
    assert snapshot(unknown) == before


USAGE_ERRORS = [
    ("reconcile", "u", "call-1", "--served", "--not-served"),
    ("reconcile", "u", "call-1"),
    ("status", "bad/id"),
    ("show", "zz"),
]


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=[" ".join(a) for a in USAGE_ERRORS])
def test_json_usage_errors_parse(unknown: Path, argv: tuple[str, ...]) -> None:
    """Malformed usage met inside a command (conflicting flags, a malformed id) is exit 2, and JSON too."""
    before = snapshot(unknown)
    r = cli(unknown, *argv, "--json")
    assert r.exit_code == 2, r.output
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2 and doc["error"]
    assert snapshot(unknown) == before


def test_a_dry_run_is_refused_where_the_real_command_is(unknown: Path) -> None:
    """A sealed stream cut at its end refuses writers; the dry run must say so too, not 'would append'."""
    with intentlog.open(unknown) as led, led.task("u") as t:
        t.append("user.note", {"n": 1})
    assert cli(unknown, "seal").exit_code == 0
    stream = unknown / "tasks" / "u.jsonl"
    stream.write_bytes(b"".join(stream.read_bytes().splitlines(keepends=True)[:-1]))  # cut after the seal
    before = snapshot(unknown)
    dry = cli(unknown, "reconcile", "u", "call-1", "--not-served", "--dry-run")
    assert snapshot(unknown) == before
    real = cli(unknown, "reconcile", "u", "call-1", "--not-served")
    assert real.exit_code == 1
    assert dry.exit_code == real.exit_code, dry.output
    assert "would append" not in dry.output
