"""Exit codes match docs/cli.md (1: refused or not found; 2: malformed usage) and error lines say each thing once."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import intentlog
from intentlog._internal.procs import exit_text
from intentlog.cli import main


def cli(root: Path, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["--root", str(root), *args])
    return r.exit_code, r.output


@pytest.fixture
def backlog_root(tmp_path: Path) -> Path:
    root = tmp_path / "ledger"
    ledger = intentlog.open(root, create=True)
    ledger.backlog("b").add("x", {"n": 1})
    ledger.close()
    return root


@pytest.mark.parametrize(
    ("item", "code", "says"),
    [
        ("nope", 1, "has no item 'nope'"),  # no such item: not found (exit 1)
        ("x", 1, "is not blocked"),  # never run, so nothing to unblock: refused (exit 1)
        ("../x", 2, "item id"),  # a malformed id: usage (exit 2)
    ],
)
def test_unblock_exit_codes(backlog_root: Path, item: str, code: int, says: str) -> None:
    before = sorted((p.name, p.read_bytes()) for p in (backlog_root / "tasks").iterdir() if p.is_file())
    got, out = cli(backlog_root, "unblock", "b", item)
    assert got == code and says in out, out
    after = sorted((p.name, p.read_bytes()) for p in (backlog_root / "tasks").iterdir() if p.is_file())
    assert after == before  # nothing written


def test_log_of_a_call_the_task_lacks_is_not_found(tmp_path: Path) -> None:
    """log T --call call-99 names the missing call and exits 1 instead of printing nothing and exiting 0."""
    root = tmp_path / "ledger"
    ledger = intentlog.open(root, create=True)
    ledger.task("t").effect("k", {"p": 1}, lambda r: b"{}")
    ledger.close()
    code, out = cli(root, "log", "t", "--call", "call-99")
    assert code == 1 and "has no call 'call-99'" in out, out
    code, out = cli(root, "log", "t", "--call", "call-1")
    assert code == 0 and "attempt.observed" in out, out


def test_no_ledger_says_init_once(tmp_path: Path) -> None:
    """The error for a folder without a ledger offers 'intentlog init' once (for that folder), then --root."""
    code, out = cli(tmp_path / "none", "tasks")
    assert code == 1 and out.count(" init ") == 1 and "--root PATH" in out, out
    assert f"intentlog --root {tmp_path / 'none'} init" in out


@pytest.mark.parametrize(
    ("exitcode", "text"),
    [(-9, "was killed by SIGKILL"), (-15, "was killed by SIGTERM"), (3, "exited with status 3"), (0, "status 0")],
)
def test_a_worker_death_is_said_by_its_signal(exitcode: int, text: str) -> None:
    assert text in exit_text(exitcode)


def test_a_worker_not_yet_reaped_is_not_said_to_have_exited() -> None:
    assert "(None)" not in exit_text(None) and "not exited" in exit_text(None)


def test_merge_from_a_folder_that_is_no_ledger_does_not_offer_init(tmp_path: Path) -> None:
    """merge names SRC as the problem (exit 1) and never suggests creating a ledger, least of all at --root."""
    (tmp_path / "src").mkdir()
    code, out = cli(tmp_path / "elsewhere", "merge", str(tmp_path / "src"), str(tmp_path / "dst"))
    assert code == 1 and "init" not in out.replace(str(tmp_path), "") and "ledger to merge from" in out, out
    assert not (tmp_path / "dst").exists() and not (tmp_path / "elsewhere").exists()


def test_the_no_ledger_hint_runs_as_pasted(tmp_path: Path) -> None:
    """The init the error offers, run as pasted from another folder, creates the ledger the command wanted."""
    import shlex
    import subprocess
    import sys

    target = tmp_path / "a ledger"
    code, out = cli(target, "tasks")
    assert code == 1
    init = out.split("create it with: ")[1].split(" -- ")[0]
    argv = shlex.split(init)
    assert argv[0] == "intentlog"
    here = tmp_path / "here"
    here.mkdir()
    env = {"PYTHONPATH": str(Path(intentlog.__file__).resolve().parent.parent), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "intentlog.cli", *argv[1:]], cwd=here, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert (target / "intentlog.json").is_file()


def test_root_after_the_command_says_where_it_goes(tmp_path: Path) -> None:
    """'status T --root E' is malformed usage (exit 2) that names where --root goes."""
    r = CliRunner().invoke(main, ["status", "t", "--root", str(tmp_path)])
    assert r.exit_code == 2 and "goes before the command: intentlog --root PATH status" in r.stderr, r.output


@pytest.mark.parametrize(
    "argv", [["status", "t", "--bogus", "--json"], ["status", "--json"], ["status", "t", "--json", "--root", "x"]]
)
def test_an_option_parse_error_honours_json(tmp_path: Path, argv: list[str]) -> None:
    """Under --json a usage error click meets while parsing also prints {"error", "exit_code": 2} on stdout, once."""
    import json

    r = CliRunner().invoke(main, ["--root", str(tmp_path), *argv])
    assert r.exit_code == 2
    got = json.loads(r.stdout)
    assert got["exit_code"] == 2 and got["error"], r.stdout
