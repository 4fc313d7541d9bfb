"""Every hint a user sees is a complete command that runs as pasted: flags, ``--root`` and quoting included.

The hints are collected where a person meets them -- the exception a script catches, and
``status --json`` -- for a set of states, and each is run as a shell would run it
(``shlex.split``), from a folder that is not the ledger's. Words in capitals are the only
parts a hint leaves to fill in (a response file, a name, a reason); the test fills them.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import intentlog
from intentlog import EffectUnknown
from intentlog._internal.commands import command, complete, hint_root, reconcile_step

REQ = {"model": "m", "prompt": "p"}
REPO = Path(intentlog.__file__).resolve().parent.parent
# a command a hint offers: from "intentlog " up to the next ", or ", ";" or ")" that ends it
_CMD_RE = re.compile(r"intentlog (?:[^,;)]|,(?! or ))+")


def lost(request: Any) -> bytes:
    raise ConnectionResetError("the connection dropped after the request was written")


def _fill(cmd: str, tmp: Path) -> list[str]:
    """``cmd`` split as a shell splits it, its capitalised placeholders filled, run through this interpreter."""
    argv = shlex.split(cmd)
    assert argv[0] == "intentlog", cmd
    evidence = tmp / "response.json"
    evidence.write_bytes(b'{"v": 1}')
    fill = {"RESPONSE_FILE": str(evidence), "TEXT": "checked by hand", "NAME": "ops", "WHY": "checked by hand"}
    return [sys.executable, "-m", "intentlog.cli", *(fill.get(a, a) for a in argv[1:])]


def _run(cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "INTENTLOG_ROOT"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(_fill(cmd, cwd), cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _events(root: Path, kind: str, task: str = "t") -> list[dict[str, Any]]:
    return [e.data for e in intentlog.open(root).task(task).events() if e.kind == kind]


def _unknown_effect(root: Path) -> EffectUnknown:
    """A script's call whose send failed after the request may have left: the exception it catches."""
    ledger = intentlog.open(root, create=True)
    task = ledger.task("t")
    with pytest.raises(EffectUnknown) as info:
        task.effect("k", REQ, lost)
    task.close()
    return info.value


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working folder that holds no ledger: a hint must name its ``--root`` to work from here."""
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.delenv("INTENTLOG_ROOT", raising=False)
    yield here


@pytest.mark.parametrize("decision", [0, 1], ids=["not-served", "served"])
def test_an_effect_unknown_hint_runs_as_pasted_from_another_folder(
    tmp_path: Path, elsewhere: Path, decision: int
) -> None:
    """The exception a script catches names the complete decisions, --root (quoted) included; each, pasted, exits 0
    and records its outcome."""
    root = tmp_path / "my ledgers" / "run 1"  # a space: the --root must be quoted to run as pasted
    exc = _unknown_effect(root)
    assert len(exc.commands) == 2 and all(c in str(exc) for c in exc.commands)
    cmd = exc.commands[decision]
    assert f"--root {shlex.quote(str(root))} reconcile t {exc.call_id}" in cmd
    done = _run(cmd, elsewhere)
    assert done.returncode == 0, done.stderr
    outcome = ("not_served", "served")[decision]
    assert [d["outcome"] for d in _events(root, "effect.reconciled")] == [outcome]
    assert intentlog.open(root).task("t").status().next_operation != "reconcile effect"


def test_at_the_default_root_the_hint_needs_no_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script on ./.intentlog gets hints without --root, and they run in that folder as pasted."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("INTENTLOG_ROOT", raising=False)
    exc = _unknown_effect(Path(".intentlog"))
    assert exc.commands[0] == f"intentlog reconcile t {exc.call_id} --not-served"
    done = _run(exc.commands[0], tmp_path)
    assert done.returncode == 0, done.stderr
    assert [d["outcome"] for d in _events(tmp_path / ".intentlog", "effect.reconciled")] == ["not_served"]


def test_status_json_and_the_exception_offer_the_same_commands(tmp_path: Path, elsewhere: Path) -> None:
    """status --json's next step (through the CLI) and the exception are built by the one function: same commands."""
    root = tmp_path / "ledger"
    exc = _unknown_effect(root)
    shown = _run(command(str(root), "status", "t", "--json"), elsewhere)
    assert shown.returncode == 0, shown.stderr
    step = orjson.loads(shown.stdout)["next_step"]
    assert _CMD_RE.findall(step) == list(exc.commands)


def _states(root: Path, tmp: Path) -> None:
    """Tasks in the states whose next step is an operator's command."""
    ledger = intentlog.open(root, create=True)
    with pytest.raises(EffectUnknown):
        ledger.task("unknown").effect("k", REQ, lost)
    ledger.task("done").effect("k", REQ, lambda r: b'{"v": 1}', interpret=orjson.loads)
    failed = ledger.task("failed")
    with pytest.raises(intentlog.CallFailed):
        failed.effect(
            "k", REQ, lambda r: (_ for _ in ()).throw(intentlog.ProviderFailure("400 bad request", retryable=False))
        )
    gated = ledger.task("gated")
    gated.request_approval("go", "Send it?", binds=gated.prepare("k", REQ))
    ledger.close()


def test_every_status_hint_runs_as_pasted(tmp_path: Path, elsewhere: Path) -> None:
    """For each state, every command status --json offers runs as pasted from another folder and exits 0."""
    root = tmp_path / "a ledger"
    _states(root, tmp_path)
    ran = 0
    for task in ("unknown", "done", "failed", "gated"):
        shown = _run(command(str(root), "status", task, "--json"), elsewhere)
        assert shown.returncode == 0, shown.stderr
        step = orjson.loads(shown.stdout)["next_step"]
        cmds = _CMD_RE.findall(step)
        assert cmds, step
        for cmd in cmds:
            assert cmd.startswith(f"intentlog --root {shlex.quote(str(root))} "), cmd
            if "fork" in cmd and "CALL" in cmd.split():
                continue  # names a call of the user's choosing
            # the first decision offered is run: it settles the task's question, so the others no longer apply
            before = (root / "tasks" / f"{task}.jsonl").read_bytes()
            done = _run(cmd, elsewhere)
            assert done.returncode == 0, (cmd, done.stderr)
            assert (root / "tasks" / f"{task}.jsonl").read_bytes() != before, cmd  # it recorded something
            ran += 1
            break
    assert ran == 4


def test_one_function_builds_every_command() -> None:
    """command() quotes each part; complete() gives every 'intentlog COMMAND' the root; reconcile_step uses both."""
    assert command("/a b", "reconcile", "t", "call-1", "--not-served") == (
        "intentlog --root '/a b' reconcile t call-1 --not-served"
    )
    assert complete("run: intentlog status t, or intentlog accept t", "/x") == (
        "run: intentlog --root /x status t, or intentlog --root /x accept t"
    )
    assert complete("intentlog status t", None) == "intentlog status t"
    assert "intentlog --root /x reconcile t call-2 --not-served" in reconcile_step("t", "call-2", "k", "/x")
    assert hint_root("s3://bucket/p") == "s3://bucket/p"


@pytest.mark.parametrize(("decision", "outcome"), [(0, "approve"), (1, "reject")])
def test_an_approval_pending_hint_runs_as_pasted(tmp_path: Path, elsewhere: Path, decision: int, outcome: str) -> None:
    """ApprovalPending names the complete approve and reject commands; each, pasted from elsewhere, is recorded."""
    root = tmp_path / "the ledger"
    ledger = intentlog.open(root, create=True)
    task = ledger.task("gated")
    task.request_approval("go", "Send it?", binds=task.prepare("k", REQ))
    with pytest.raises(intentlog.ApprovalPending) as info:
        task.effect("k", REQ, lost)
    ledger.close()
    cmds = info.value.commands
    assert len(cmds) == 2 and all(c in str(info.value) for c in cmds)
    assert cmds[decision].startswith(f"intentlog --root {shlex.quote(str(root))} {outcome} gated go")
    done = _run(cmds[decision], elsewhere)
    assert done.returncode == 0, done.stderr
    decided = _events(root, "approval.decided", "gated")
    assert [(d["decision"], d["by"]) for d in decided] == [(outcome, "ops")]


def test_a_refused_fork_names_the_complete_reconcile(tmp_path: Path, elsewhere: Path) -> None:
    """A fork refused for an unknown effect carries the decisions; the first, pasted, settles it and the fork goes."""
    root = tmp_path / "forks here"
    _unknown_effect(root)
    ledger = intentlog.open(root)
    with pytest.raises(EffectUnknown) as info:
        ledger.fork("t", "call-1", "t.v2")
    ledger.close()
    cmd = info.value.commands[0]
    assert cmd == f"intentlog --root {shlex.quote(str(root))} reconcile t call-1 --not-served" and cmd in str(
        info.value
    )
    done = _run(cmd, elsewhere)
    assert done.returncode == 0, done.stderr
    assert [d["outcome"] for d in _events(root, "effect.reconciled")] == ["not_served"]
    assert intentlog.open(root).fork("t", "call-1", "t.v2").id == "t.v2"
