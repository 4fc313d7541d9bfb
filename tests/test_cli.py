"""The command line: every command and option, --json parsed, errors and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import intentlog
from intentlog.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, root: Path | None = None, input: bytes | None = None):
    runner = CliRunner()
    argv = (["--root", str(root)] if root is not None else []) + list(args)
    return runner.invoke(main, argv, input=input, catch_exceptions=False)


def _unknown_task(ledger_root: Path) -> None:
    """A task whose only call started and was never observed: effect unknown."""
    ledger = intentlog.open(ledger_root)
    t = ledger.task("t")

    def boom(_: object) -> bytes:
        raise TimeoutError("read timed out")

    with pytest.raises(intentlog.EffectUnknown):
        t.effect("k1", {"q": 1}, send=boom)
    t.close()


def _done_task(ledger_root: Path, task: str = "done") -> None:
    ledger = intentlog.open(ledger_root)
    t = ledger.task(task)
    t.effect("k1", {"q": 1}, send=lambda r: b'{"ok": true}', interpret=json.loads)
    t.append("note", {"phase": "reviewing"})
    t.close()


def test_init_creates_the_layout(tmp_path: Path) -> None:
    """init creates the folder with its marker, .gitignore and .gitattributes."""
    r = run("init", root=tmp_path / "ev")
    assert r.exit_code == 0, r.output
    for name in ("intentlog.json", ".gitignore", ".gitattributes", "tasks", "objects"):
        assert (tmp_path / "ev" / name).exists()
    assert "-text" in (tmp_path / "ev" / ".gitattributes").read_text()


def test_root_from_environment(tmp_path: Path) -> None:
    """Without --root the INTENTLOG_ROOT variable names the ledger."""
    runner = CliRunner()
    r = runner.invoke(main, ["init"], env={"INTENTLOG_ROOT": str(tmp_path / "envroot")})
    assert r.exit_code == 0
    assert (tmp_path / "envroot" / "intentlog.json").exists()


def test_read_commands_on_a_missing_ledger_exit_1_without_creating_it(tmp_path: Path) -> None:
    """Reading a ledger that is not there is one clear line and exit 1, and creates nothing."""
    r = run("tasks", root=tmp_path / "nope")
    assert r.exit_code == 1
    assert "no ledger here" in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "nope").exists()


def test_tasks_lists_each_task(tmp_path: Path) -> None:
    """tasks shows one row per task with its state and next operation, also as JSON."""
    _done_task(tmp_path / "ev")
    _unknown_task(tmp_path / "ev")
    r = run("tasks", "--json", root=tmp_path / "ev")
    assert r.exit_code == 0
    rows = {row["task"]: row for row in json.loads(r.output)}
    assert rows["done"]["state"] == "awaiting acceptance"
    assert rows["done"]["next_operation"] == "check and accept"
    assert rows["t"]["state"] == "paused for review"
    assert rows["t"]["next_operation"] == "reconcile effect"
    text = run("tasks", root=tmp_path / "ev").output
    assert "done" in text and "reconcile effect" in text


def test_status_names_the_unresolved_action_and_the_command(tmp_path: Path) -> None:
    """status says which call, which key, what is at risk and the reconcile command."""
    _unknown_task(tmp_path / "ev")
    r = run("status", "t", root=tmp_path / "ev")
    assert r.exit_code == 0
    assert "call-1 (key 'k1') effect unknown" in r.output
    assert "duplicate" in r.output
    assert f"intentlog --root {tmp_path / 'ev'} reconcile t call-1 --not-served" in r.output
    j = json.loads(run("status", "t", "--json", root=tmp_path / "ev").output)
    assert j["state"] == "paused for review"
    assert j["work_state"]["calls"]["call-1"]["stage"] == "effect_unknown"


def test_status_shows_phase_and_last_outcome(tmp_path: Path) -> None:
    """The phase comes from the latest event carrying one; the last outcome is the last completion."""
    _done_task(tmp_path / "ev")
    j = json.loads(run("status", "done", "--json", root=tmp_path / "ev").output)
    assert j["phase"] == "reviewing"
    assert j["last_outcome"].startswith("call-1 (key 'k1') completed")
    assert j["next_step"].endswith(" accept done") and "--root" in j["next_step"]


def test_status_of_a_missing_task(tmp_path: Path) -> None:
    """An unknown task is refused with one line (exit 1); a malformed id is a usage error (exit 2)."""
    run("init", root=tmp_path / "ev")
    r = run("status", "ghost", root=tmp_path / "ev")
    assert r.exit_code == 1 and "no task 'ghost'" in r.output
    r = run("status", "../etc", root=tmp_path / "ev")
    assert r.exit_code == 2 and "invalid task id" in r.output


def test_log_filters(tmp_path: Path) -> None:
    """log prints events; --kind, --call and --since filter; --json gives one object per line."""
    _done_task(tmp_path / "ev")
    out = run("log", "done", root=tmp_path / "ev").output
    assert "task.created" in out and "call.completed" in out
    lines = run("log", "done", "--json", "--kind", "attempt.started", root=tmp_path / "ev").output.splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["attempt.started"]
    lines = run("log", "done", "--json", "--call", "call-1", root=tmp_path / "ev").output.splitlines()
    assert {json.loads(x)["data"]["call"] for x in lines} == {"call-1"}
    lines = run("log", "done", "--json", "--since", "5", root=tmp_path / "ev").output.splitlines()
    assert min(json.loads(x)["seq"] for x in lines) == 5


def test_log_follow_stops_after_idle_timeout(tmp_path: Path) -> None:
    """--follow keeps reading and stops after --timeout idle seconds."""
    _done_task(tmp_path / "ev")
    r = run("log", "done", "--follow", "--timeout", "0.3", "--json", root=tmp_path / "ev")
    assert r.exit_code == 0
    assert len(r.output.splitlines()) == 8


def test_show_writes_artifact_bytes(tmp_path: Path) -> None:
    """show writes exactly the stored bytes, found inline or in objects/."""
    ledger = intentlog.open(tmp_path / "ev")
    big = bytes(range(256)) * 100
    ref = ledger.artifacts.put(big)
    t = ledger.task("t")
    t.effect("k", {"q": 1}, send=lambda r: b"small response")
    t.close()
    assert run("show", ref.digest, root=tmp_path / "ev").stdout_bytes == big
    small = t.work_state().calls["call-1"].response
    assert small is not None
    assert run("show", small["digest"], root=tmp_path / "ev").stdout_bytes == b"small response"
    r = run("show", "blake3:nothex", root=tmp_path / "ev")
    assert r.exit_code == 2 and "invalid digest" in r.output


def test_reconcile_not_served_then_resume(tmp_path: Path) -> None:
    """reconcile --not-served is recorded and makes the next attempt safe."""
    _unknown_task(tmp_path / "ev")
    r = run("reconcile", "t", "call-1", "--not-served", "--note", "not in usage log", root=tmp_path / "ev")
    assert r.exit_code == 0, r.output
    ws = intentlog.open(tmp_path / "ev").task("t").work_state()
    assert ws.calls["call-1"].stage == "reconciled_not_served"
    assert ws.calls["call-1"].next_operation == "start next attempt"


def test_reconcile_served_with_evidence(tmp_path: Path) -> None:
    """reconcile --served --evidence FILE records the bytes; the call continues as observed."""
    _unknown_task(tmp_path / "ev")
    ev = tmp_path / "resp.json"
    ev.write_bytes(b'{"ok": 1}')
    r = run("reconcile", "t", "call-1", "--served", "--evidence", str(ev), root=tmp_path / "ev")
    assert r.exit_code == 0, r.output
    ws = intentlog.open(tmp_path / "ev").task("t").work_state()
    assert ws.calls["call-1"].stage == "observed"


def test_reconcile_usage_errors_exit_2(tmp_path: Path) -> None:
    """No outcome, or evidence without --served, is a usage error (exit 2) and writes nothing."""
    _unknown_task(tmp_path / "ev")
    stream = tmp_path / "ev" / "tasks" / "t.jsonl"
    before = stream.read_bytes()
    assert run("reconcile", "t", "call-1", root=tmp_path / "ev").exit_code == 2
    f = tmp_path / "x"
    f.write_bytes(b"x")
    assert run("reconcile", "t", "call-1", "--not-served", "--evidence", str(f), root=tmp_path / "ev").exit_code == 2
    assert stream.read_bytes() == before


def test_reconcile_refused_on_a_completed_call(tmp_path: Path) -> None:
    """Reconciling a call that is not unknown is refused (exit 1) and appends nothing."""
    _done_task(tmp_path / "ev")
    stream = tmp_path / "ev" / "tasks" / "done.jsonl"
    before = stream.read_bytes()
    r = run("reconcile", "done", "call-1", "--not-served", root=tmp_path / "ev")
    assert r.exit_code == 1 and "nothing to reconcile" in r.output
    r = run("reconcile", "done", "call-9", "--not-served", root=tmp_path / "ev")
    assert r.exit_code == 1 and "no call 'call-9'" in r.output
    assert stream.read_bytes() == before


def test_fail_and_accept(tmp_path: Path) -> None:
    """fail records call.failed for an unresolved call; accept records task.accepted."""
    _unknown_task(tmp_path / "ev")
    assert run("fail", "t", "call-1", "--reason", "gave up", "--by", "ops", root=tmp_path / "ev").exit_code == 0
    _done_task(tmp_path / "ev")
    assert run("accept", "done", "--by", "alice", root=tmp_path / "ev").exit_code == 0
    ledger = intentlog.open(tmp_path / "ev")
    assert ledger.task("t").work_state().calls["call-1"].stage == "failed"
    ws = ledger.task("done").work_state()
    assert ws.accepted and ws.next_operation == "none"
    assert run("accept", "ghost", root=tmp_path / "ev").exit_code == 1


def test_verify_and_seal(tmp_path: Path) -> None:
    """verify passes a clean ledger (exit 0, JSON ok) and fails a tampered one (exit 1); seal writes heads.json."""
    _done_task(tmp_path / "ev")
    assert run("seal", root=tmp_path / "ev").exit_code == 0
    assert (tmp_path / "ev" / "heads.json").exists()
    r = run("verify", "--json", root=tmp_path / "ev")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["ok"] is True
    stream = tmp_path / "ev" / "tasks" / "done.jsonl"
    data = stream.read_bytes().replace(b'"k1"', b'"k2"', 1)
    stream.write_bytes(data)
    r = run("verify", root=tmp_path / "ev")
    assert r.exit_code == 1
    assert "done" in r.output


def test_every_command_is_documented() -> None:
    """Each command appears in README.md or docs/cli.md and has an example in its help."""
    docs = (ROOT / "README.md").read_text() + (ROOT / "docs" / "cli.md").read_text()
    for name, cmd in main.commands.items():
        assert f"intentlog {name}" in docs or f"  {name}" in docs, name
        assert "Example" in (cmd.help or ""), name


def test_installed_entry_point_runs(tmp_path: Path) -> None:
    """The installed console script runs in a subprocess and maps errors to exit codes."""
    exe = Path(sys.executable).with_name("intentlog")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "intentlog.cli"]
    env = dict(os.environ, INTENTLOG_ROOT=str(tmp_path / "ev"))
    assert subprocess.run([*cmd, "init"], env=env, capture_output=True).returncode == 0
    p = subprocess.run([*cmd, "status", "nope"], env=env, capture_output=True, text=True)
    assert p.returncode == 1
    assert p.stderr.startswith("intentlog: error:") and "Traceback" not in p.stderr
    p = subprocess.run([*cmd, "no-such-command"], env=env, capture_output=True, text=True)
    assert p.returncode == 2


def test_reads_do_not_write_and_writes_work_on_a_git_clone(tmp_path: Path) -> None:
    """A clone without the empty folders git drops: reads create nothing, operator writes still work."""
    _unknown_task(tmp_path / "ev")
    for sub in ("tmp", "quarantine", "objects", "cache"):  # cache/ is in .gitignore: a clone never has it
        path = tmp_path / "ev" / sub
        if path.exists() and not any(path.rglob("*")):
            path.rmdir()
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    for args in (["tasks"], ["status", "t"], ["log", "t"], ["verify"]):
        assert run(*args, root=tmp_path / "ev").exit_code == 0, args
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    evidence = tmp_path / "resp.bin"
    evidence.write_bytes(b"x" * 10_000)
    r = run("reconcile", "t", "call-1", "--served", "--evidence", str(evidence), root=tmp_path / "ev")
    assert r.exit_code == 0, r.output
    ws = intentlog.open(tmp_path / "ev", create=False).task("t").work_state()
    assert ws.calls["call-1"].stage == "observed"
    assert run("verify", root=tmp_path / "ev").exit_code == 0
