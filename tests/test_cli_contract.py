"""The command line's contract: one operator state, strict irreversible commands, exit codes, pipes, hints.

Every test reads the record back from disk (the folder's bytes) or runs the CLI as a
separate process where the behaviour depends on it (a closed pipe).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import intentlog
from intentlog.cli import main
from intentlog.projections.status import TASK_NEXT_OPERATIONS
from intentlog.retention import plan_gc
from intentlog.views import STATES, resolve_prefix

ROOT = Path(__file__).resolve().parents[1]
EXE = str(Path(sys.executable).with_name("intentlog"))


def cli(root: Path, *args: str, env: dict[str, str] | None = None, color: bool = False) -> Any:
    return CliRunner().invoke(main, ["--root", str(root), *args], catch_exceptions=False, env=env, color=color)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file's bytes under ``folder`` (lock files included: nothing may be written at all)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _boom(_: object) -> bytes:
    raise TimeoutError("read timed out")


# -- histories through the public API ----------------------------------------------------

OPS = st.lists(
    st.sampled_from(
        ["ok", "unknown", "fail_call", "fail_task", "accept", "not_served", "approval", "approve", "bad_checkpoint"]
    ),
    max_size=5,
)


def build(root: Path, task: str, ops: list[str], *, session: bool = False) -> None:
    """Drive one task through ``ops`` with the library, as a script and an operator would."""
    ledger = intentlog.open(root)
    t = ledger.task(task)
    if session:
        ledger.session(task).turn({"messages": [{"role": "user", "content": "hi"}]}, send=lambda r: b"hello")
    n = 0
    for op in ops:
        n += 1
        ws = t.work_state()
        unknown = [c for c in ws.calls.values() if c.stage == "effect_unknown"]
        try:
            if op == "ok":
                t.effect(f"k{n}", {"n": n}, send=lambda r: b"x")
            elif op == "unknown":
                t.effect(f"k{n}", {"n": n}, send=_boom)
            elif op == "fail_call" and unknown:
                t.fail(unknown[0].call_id, "lost")
            elif op == "not_served" and unknown:
                t.reconcile(unknown[0].call_id, "not_served")
            elif op == "fail_task" and t.exists():
                t.fail_task("given up")
            elif op == "accept" and t.exists():
                t.accept()
            elif op == "approval":
                t.request_approval(f"a{n}", "ok?", binds="blake3:" + "ab" * 32)
            elif op == "approve":
                for a in t.status().awaiting_approvals:
                    t.decide(a.approval_id, "approve", request_hash=a.binding)
            elif op == "bad_checkpoint":
                t.checkpoint("review", status="failed")
        except intentlog.IntentlogError:
            pass  # a refusal is part of the history too
    if not t.exists():
        t.append("note", {"n": 0})
    t.close()


def states(root: Path) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """The state each view names per task: tasks --json, status --json, and gc's plan."""
    table = {r["task"]: r["state"] for r in json.loads(cli(root, "tasks", "--json").output)}
    status = {tid: json.loads(cli(root, "status", tid, "--json").output)["state"] for tid in table}
    plan = plan_gc(intentlog.open(root), max_age="none").to_json()
    gc = {e["task"]: e["state"] for e in [*plan["expired"], *plan["kept"]]}
    return table, status, gc


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, session=st.booleans())
def test_tasks_status_and_gc_name_the_same_state(
    tmp_path_factory: pytest.TempPathFactory, ops: list[str], session: bool
) -> None:
    """For generated task histories, `tasks --json`, `status --json` and the gc plan name one state of a fixed set."""
    root = tmp_path_factory.mktemp("L") / "ledger"
    build(root, "t", ops, session=session)
    table, status, gc = states(root)
    assert table == status == gc, (ops, table, status, gc)
    assert set(table.values()) <= set(STATES)
    row = json.loads(cli(root, "tasks", "--json").output)[0]
    st_ = json.loads(cli(root, "status", "t", "--json").output)
    assert row["next_operation"] == st_["next_operation"]
    assert row["next_operation"] in TASK_NEXT_OPERATIONS


def test_session_task_table_agrees_with_status(tmp_path: Path) -> None:
    """An accepted session turn: complete with nothing next in both views (the table said 'check and accept')."""
    root = tmp_path / "L"
    build(root, "chat", [], session=True)
    row = json.loads(cli(root, "tasks", "--json").output)[0]
    st_ = json.loads(cli(root, "status", "chat", "--json").output)
    assert row["state"] == st_["state"] == "complete"
    assert row["next_operation"] == st_["next_operation"] == "none"


def test_a_failed_call_is_released_by_giving_the_task_up(tmp_path: Path) -> None:
    """gc holds a task paused on a failed call, names the command that releases it, and lets it go once given up."""
    root = tmp_path / "L"
    build(root, "t", ["unknown", "fail_call"])
    plan = plan_gc(intentlog.open(root), max_age="0s", grace="0s").to_json()
    (kept,) = [k for k in plan["kept"] if k["task"] == "t"]
    assert kept["rule"] == "protected" and kept["state"] == "paused for review"
    assert "intentlog fail t --reason" in kept["detail"]
    r = cli(root, "fail", "t", "--reason", "lost for good")
    assert r.exit_code == 0, r.output
    build(root, "other", ["ok"])  # a plan that keeps nothing is refused: keep one young task
    plan = plan_gc(intentlog.open(root), max_age="0s", grace="0s").to_json()
    assert [e["task"] for e in plan["expired"] if e["task"] == "t"] == ["t"]
    assert json.loads(cli(root, "status", "t", "--json").output)["state"] == "failed"
    assert json.loads(cli(root, "tasks", "--json").output)[1]["next_operation"] == "none"


def test_damaged_streams_get_a_column_not_the_state(tmp_path: Path) -> None:
    """A torn tail and an unreadable stream are marked in 'stream'; 'state' stays a fixed word; rows stay narrow."""
    root = tmp_path / "L"
    for tid in ("a", "b", "c"):
        build(root, tid, ["ok"])
    with open(root / "tasks" / "b.jsonl", "ab") as f:
        f.write(b'{"data":')
    lines = (root / "tasks" / "c.jsonl").read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"seq":2', b'"seq":9')
    (root / "tasks" / "c.jsonl").write_bytes(b"\n".join(lines))
    r = cli(root, "tasks", "--json")
    rows = {x["task"]: x for x in json.loads(r.stdout)}
    assert rows["a"]["stream"] == "ok" and rows["a"]["problem"] is None
    assert rows["b"]["stream"] == "torn tail" and rows["b"]["state"] == "awaiting acceptance"
    assert rows["c"]["stream"] == "unreadable" and rows["c"]["state"] == "unreadable"
    assert "seq is 9" in rows["c"]["problem"]
    table = cli(root, "tasks").stdout.splitlines()
    assert max(len(x) for x in table) < 140, table
    assert cli(root, "status", "c").exit_code == 1


# -- strict irreversible commands --------------------------------------------------------------


def test_conflicting_reconcile_outcomes_exit_2_and_write_nothing(tmp_path: Path) -> None:
    """--served --not-served used to record the last flag; now it is a usage error and the folder is unchanged."""
    root = tmp_path / "L"
    build(root, "t", ["unknown"])
    before = snapshot(root)
    for flags in (["--served", "--not-served"], ["--not-served", "--resend"], ["--served", "--resend", "--not-served"]):
        r = cli(root, "reconcile", "t", "call-1", *flags)
        assert r.exit_code == 2, r.output
        assert "conflict" in r.output
    assert snapshot(root) == before


@pytest.mark.parametrize("history", [["unknown"], ["ok", "accept"], ["ok", "fail_task"], []])
def test_accept_refuses_when_there_is_nothing_to_accept(tmp_path: Path, history: list[str]) -> None:
    """accept exits 1 and writes nothing for unresolved calls, an accepted task, a given-up task, an empty one."""
    root = tmp_path / "L"
    build(root, "t", history)
    before = snapshot(root)
    r = cli(root, "accept", "t")
    assert r.exit_code == 1, r.output
    assert "nothing to accept" in r.output
    assert snapshot(root) == before


def test_accept_still_accepts_what_awaits_acceptance(tmp_path: Path) -> None:
    """The refusal is exact: a task awaiting acceptance is accepted, with the event printed as JSON."""
    root = tmp_path / "L"
    build(root, "t", ["ok"])
    r = cli(root, "accept", "t", "--json")
    assert r.exit_code == 0, r.output
    ev = json.loads(r.stdout)
    assert ev["kind"] == "task.accepted" and ev["task"] == "t" and ev["dry_run"] is False
    assert ev["digest"] in (root / "tasks" / "t.jsonl").read_text() or ev["seq"] > 0
    assert json.loads(cli(root, "status", "t", "--json").output)["state"] == "complete"


def _dry_cases(root: Path) -> list[list[str]]:
    build(root, "u", ["unknown"])
    build(root, "d", ["ok"])
    build(root, "p", ["approval"])
    return [
        ["reconcile", "u", "call-1", "--not-served"],
        ["reconcile", "u", "call-1", "--resend", "--note", "x"],
        ["fail", "u", "call-1", "--reason", "x"],
        ["fail", "d", "--reason", "x"],
        ["accept", "d"],
        ["approve", "p", "a1", "--by", "alice"],
        ["reject", "p", "a1", "--by", "bob"],
        ["fork", "d", "--from", "call-1", "--as", "d2"],
    ]


def test_every_writing_command_has_a_dry_run_that_writes_nothing(tmp_path: Path) -> None:
    """--dry-run prints the event the command would append (text and JSON) and leaves every byte as it was."""
    root = tmp_path / "L"
    cases = _dry_cases(root)
    before = snapshot(root)
    for argv in cases:
        r = cli(root, *argv, "--dry-run")
        assert r.exit_code == 0, (argv, r.output)
        assert "would append" in r.output and "nothing was written" in r.output
        j = cli(root, *argv, "--dry-run", "--json")
        ev = json.loads(j.stdout)
        assert ev["dry_run"] is True and ev["kind"].split(".")[0] in ("effect", "call", "task", "approval")
        assert snapshot(root) == before, argv
    # and without --dry-run the same commands do write (so the test can fail)
    r = cli(root, "reconcile", "u", "call-1", "--not-served", "--json")
    assert json.loads(r.stdout)["kind"] == "effect.reconciled"
    assert snapshot(root) != before


# -- exit codes: one rule for every command -------------------------------------------------------

BLANK = "blake3:" + "0" * 64


def _matrix(root: Path) -> list[tuple[list[str], int]]:
    """(argv, expected exit) for every command: ok, not found (1), malformed (2)."""
    build(root, "u", ["unknown"])
    build(root, "d", ["ok"])
    build(root, "p", ["approval"])
    out = root.parent / "out"
    return [
        (["init"], 0),
        (["tasks"], 0),
        (["status", "d"], 0),
        (["status", "nope"], 1),
        (["status", "../x"], 2),
        (["log", "d"], 0),
        (["log", "nope"], 1),
        (["log", "a/b"], 2),
        (["log", "d", "--since", "x"], 2),
        (["show", BLANK], 1),
        (["show", "blake3:zz"], 2),
        (["show", "abc"], 2),
        (["verify"], 1),  # u has an unknown effect? no: verify reports problems only; see below
        (["verify", "nope"], 1),
        (["verify", "a/b"], 2),
        (["seal"], 0),
        (["export", "nope", "--out", str(out / "1")], 1),
        (["export", "a/b", "--out", str(out / "2")], 2),
        (["export", "d"], 2),
        (["reconcile", "u", "call-1"], 2),
        (["reconcile", "u", "call-1", "--served", "--not-served"], 2),
        (["reconcile", "nope", "call-1", "--not-served"], 1),
        (["reconcile", "u", "call-9", "--not-served"], 1),
        (["reconcile", "u", "call-1", "--served", "--evidence", str(root / "missing")], 1),
        (["fail", "nope", "--reason", "x"], 1),
        (["fail", "u", "call-9", "--reason", "x"], 1),
        (["fail", "u"], 2),
        (["approve", "p", "zz"], 1),
        (["approve", "nope", "a1"], 1),
        (["approve", "p", "a1", "--hash", "nothex"], 2),
        (["reject", "p", "zz"], 1),
        (["fork", "d", "--from", "call-9"], 1),
        (["fork", "nope", "--from", "call-1"], 1),
        (["fork", "d"], 2),
        (["accept", "nope"], 1),
        (["accept", "u"], 1),
        (["accept", "d", "--wait", "-1"], 2),
        (["gc"], 0),
        (["gc", "--max-age", "soon"], 2),
        (["keep", "nope"], 1),
        (["keep", "d"], 0),
        (["keep", "--remove"], 2),
        (["tasks", "--bogus"], 2),
    ]


def test_exit_codes_follow_one_rule_and_every_hint_runs(tmp_path: Path) -> None:
    """0 ok, 1 refused or not found, 2 malformed; every hint an error prints runs as printed, never a usage error."""
    root = tmp_path / "L"
    hints: list[str] = []
    for argv, want in _matrix(root):
        r = cli(root, *argv)
        if argv == ["verify"]:
            want = r.exit_code if r.exit_code in (0, 1) else -1
        assert r.exit_code == want, (argv, r.exit_code, r.output)
        assert "Traceback" not in r.output
        hints += re.findall(r"'(intentlog [^']+)'", r.stderr if r.exit_code else "")
    hints = sorted(set(hints))
    assert any("--root" in h for h in hints), hints  # the ledger is not the default: hints name it
    for h in hints:
        argv = shlex.split(h)
        assert argv[0] == "intentlog"
        r = CliRunner().invoke(main, argv[1:], catch_exceptions=False)
        assert r.exit_code != 2, (h, r.output)


def test_no_ledger_says_how_to_point_at_one(tmp_path: Path) -> None:
    """Without a ledger the error names --root and INTENTLOG_ROOT (exit 1), and writes nothing."""
    r = cli(tmp_path / "none", "tasks")
    assert r.exit_code == 1
    assert "--root" in r.stderr and "INTENTLOG_ROOT" in r.stderr
    assert not (tmp_path / "none").exists()
    r = cli(tmp_path / "none", "verify")
    assert r.exit_code == 1 and "INTENTLOG_ROOT" in r.stderr


# -- pipes, colour, help --------------------------------------------------------------------------


def test_a_closed_pipe_ends_quietly_as_git_does(tmp_path: Path) -> None:
    """`intentlog log T | head -1` prints one line, nothing on stderr, and exits 141 (SIGPIPE's status), as git."""
    root = tmp_path / "L"
    ledger = intentlog.open(root)
    t = ledger.task("t")
    for i in range(3000):
        t.append("note", {"i": i, "pad": "x" * 80})
    t.close()
    cmd = f"set -o pipefail; {shlex.quote(EXE)} --root {shlex.quote(str(root))} log t | head -1"
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert p.stdout.count("\n") == 1
    assert p.stderr == "", p.stderr
    assert p.returncode == 141


def test_colour_only_when_asked_and_never_with_no_color(tmp_path: Path) -> None:
    """On a terminal the state is coloured; NO_COLOR turns every escape off; a pipe never gets one."""
    root = tmp_path / "L"
    build(root, "t", ["unknown"])
    assert "\x1b[" in cli(root, "status", "t", color=True).output
    assert "\x1b[" not in cli(root, "status", "t", color=True, env={"NO_COLOR": "1"}).output
    p = subprocess.run([EXE, "--root", str(root), "tasks"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "\x1b[" not in p.stdout


def test_help_shows_the_effective_default_root(tmp_path: Path) -> None:
    """--help shows INTENTLOG_ROOT when it is set, else ./.intentlog."""
    env = dict(os.environ, INTENTLOG_ROOT=str(tmp_path / "evidence"))
    p = subprocess.run([EXE, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert str(tmp_path / "evidence") in "".join(p.stdout.split())
    env.pop("INTENTLOG_ROOT")
    p = subprocess.run([EXE, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert ".intentlog" in p.stdout


def test_every_command_takes_json() -> None:
    """--json is on every command."""
    missing = [name for name, cmd in main.commands.items() if "as_json" not in {p.name for p in cmd.params}]
    assert missing == []


@pytest.mark.parametrize("command", ["status", "export", "verify"])
def test_task_ids_complete_from_the_ledger(tmp_path: Path, command: str) -> None:
    """Shell completion of TASK (and of export's and verify's TASK lists) gives the ledger's task ids."""
    root = tmp_path / "L"
    build(root, "alpha", ["ok"])
    build(root, "beta", ["ok"])
    words = f"intentlog --root {root} {command} a"
    env = dict(os.environ, _INTENTLOG_COMPLETE="bash_complete", COMP_WORDS=words, COMP_CWORD="4")
    p = subprocess.run([EXE], capture_output=True, text=True, env=env, timeout=60)
    assert "alpha" in p.stdout and "beta" not in p.stdout


# -- digests as people type them --------------------------------------------------------------------


def test_show_accepts_the_prefix_log_prints(tmp_path: Path) -> None:
    """The 12-hex prefix `log` prints (with its ellipsis) is enough for `show`; the bytes come back exact."""
    root = tmp_path / "L"
    ledger = intentlog.open(root)
    t = ledger.task("t")
    t.effect("k", {"q": 1}, send=lambda r: b"R" * 10000)  # a response large enough for objects/
    t.close()
    shown = re.findall(r"(blake3:[0-9a-f]{12})…", cli(root, "log", "t").output)
    assert shown
    outs = {cli(root, "show", d).stdout_bytes for d in shown}
    assert b"R" * 10000 in outs
    assert cli(root, "show", shown[0] + "…").exit_code == 0
    assert cli(root, "show", shown[0][len("blake3:") :]).exit_code == 0


def test_an_ambiguous_prefix_is_exit_2_listing_candidates(tmp_path: Path) -> None:
    """Two objects sharing a prefix: exit 2 and both full digests listed."""
    root = tmp_path / "L"
    intentlog.open(root)
    shard = root / "objects" / "ab"
    shard.mkdir(parents=True, exist_ok=True)
    names = ["cdef" + "0" * 58, "cdef" + "1" * 58]
    for n in names:
        (shard / n).write_bytes(b"x")
    r = cli(root, "show", "abcdef")
    assert r.exit_code == 2
    for n in names:
        assert "blake3:ab" + n in r.stderr
    assert resolve_prefix("blake3:abcd", ["blake3:abcd" + "0" * 60]) == "blake3:abcd" + "0" * 60


# -- issue 12 item 7: log never shows a traceback ---------------------------------------------------


def test_log_prints_user_data_shaped_like_a_ref_and_deep_nesting(tmp_path: Path) -> None:
    """A user dict with a non-string 'digest' and data nested 1,000 deep print, text and JSON, exit 0."""
    root = tmp_path / "L"
    ledger = intentlog.open(root)
    t = ledger.task("t")
    t.append("note", {"ref": {"digest": 5, "size": "big"}, "other": {"digest": None}})
    t.close()
    # a line nested 1,000 deep, chained as the writer would (the writer itself may refuse such data)
    from blake3 import blake3

    path = root / "tasks" / "t.jsonl"
    last = path.read_bytes().splitlines(keepends=True)[-1]
    seq = json.loads(last)["seq"] + 1
    prev = "blake3:" + blake3(last).hexdigest()
    data = '{"v":' + '{"d":' * 1000 + '"leaf"' + "}" * 1000 + "}"
    line = f'{{"data":{data},"kind":"deep","prev":"{prev}","seq":{seq},"ts":"2026-12-01T00:00:00.000000Z"}}\n'
    with open(path, "ab") as f:
        f.write(line.encode())
    for extra in ([], ["--json"]):
        r = cli(root, "log", "t", *extra)
        assert r.exit_code == 0, r.output
        assert "Traceback" not in r.output
        assert '"digest":5' in r.output.replace(" ", "")
        assert '"d":{"d":' in r.output.replace(" ", "")
    deep_json = json.loads(cli(root, "log", "t", "--json").stdout.splitlines()[-1])
    assert deep_json["kind"] == "deep" and deep_json["data_truncated"] is True


def test_a_busy_task_suggests_wait_and_the_hint_runs(tmp_path: Path) -> None:
    """While another process holds the writer lock, a writing command says --wait; running that hint is not exit 2."""
    root = tmp_path / "L"
    build(root, "t", ["ok"])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, intentlog; t = intentlog.open(sys.argv[1]).task('t'); t.append('note', {}); "
            "print('held', flush=True); time.sleep(30)",
            str(root),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = snapshot(root)
        r = cli(root, "fail", "t", "--reason", "x", "--wait", "0")
        assert r.exit_code == 1
        assert "--wait SECONDS" in r.stderr
        r = cli(root, "fail", "t", "--reason", "x", "--wait", "0.1")
        assert r.exit_code == 1 and "being written" in r.stderr
        r = cli(root, "accept", "t")
        assert r.exit_code == 1 and "running" in r.stderr
        assert snapshot(root) == before
    finally:
        holder.kill()
        holder.wait()


def test_gc_draws_progress_only_on_a_terminal(tmp_path: Path) -> None:
    """gc's scan draws a progress line on a terminal's stderr and none in a pipe."""
    import pty

    root = tmp_path / "L"
    for i in range(3):
        build(root, f"t{i}", ["ok"])
    primary, secondary = pty.openpty()
    p = subprocess.run([EXE, "--root", str(root), "gc"], stdout=subprocess.PIPE, stderr=secondary, timeout=60)
    os.close(secondary)
    drawn = os.read(primary, 65536).decode(errors="replace")
    os.close(primary)
    assert p.returncode == 0
    assert "gc: scanned streams: 3/3" in drawn
    piped = subprocess.run([EXE, "--root", str(root), "gc"], capture_output=True, text=True, timeout=60)
    assert "scanned" not in piped.stderr


def test_export_draws_progress_only_on_a_terminal(tmp_path: Path) -> None:
    """export draws a progress line on a terminal's stderr (streams copied, then the check) and none in a pipe."""
    import pty

    root = tmp_path / "L"
    for i in range(3):
        build(root, f"t{i}", ["ok"])
    primary, secondary = pty.openpty()
    p = subprocess.run(
        [EXE, "--root", str(root), "export", "--out", str(tmp_path / "b1")],
        stdout=subprocess.PIPE,
        stderr=secondary,
        timeout=120,
    )
    os.close(secondary)
    drawn = os.read(primary, 65536).decode(errors="replace")
    os.close(primary)
    assert p.returncode == 0
    assert "exporting streams: 3/3" in drawn
    piped = subprocess.run(
        [EXE, "--root", str(root), "export", "--out", str(tmp_path / "b2")], capture_output=True, text=True, timeout=120
    )
    assert piped.returncode == 0 and "exporting" not in piped.stderr


@pytest.mark.parametrize(
    "history",
    [["unknown"], ["unknown", "fail_call"], ["ok"], ["approval"], ["ok", "fail_task"], ["bad_checkpoint"], []],
)
def test_every_command_a_status_line_suggests_runs_as_printed(tmp_path: Path, history: list[str]) -> None:
    """Each 'intentlog ...' in status's next step, with --root filled in, runs and is never a usage error."""
    import shutil

    root = tmp_path / "L"
    build(root, "t", history)
    step = json.loads(cli(root, "status", "t", "--json").stdout)["next_step"]
    hints = [h.strip() for h in re.findall(r"intentlog [^,;()]*", step)]
    if history:
        assert hints, step
    for i, h in enumerate(hints):
        copy = tmp_path / f"copy{i}"
        shutil.copytree(root, copy)
        argv = shlex.split(h.replace(str(root), str(copy)))
        assert argv[:3] == ["intentlog", "--root", str(copy)], h
        if "--evidence" in argv:
            (tmp_path / "RESPONSE_FILE").write_bytes(b"{}")
            argv[argv.index("--evidence") + 1] = str(tmp_path / "RESPONSE_FILE")
        r = CliRunner().invoke(main, argv[1:], catch_exceptions=False)
        assert r.exit_code != 2, (h, r.output)


def test_export_of_300_tasks_prints_counts_and_human_sizes(tmp_path: Path) -> None:
    """The export summary scales: counts and a human size, at most five names, not a raw byte count."""
    root = tmp_path / "L"
    ledger = intentlog.open(root)
    for i in range(300):
        t = ledger.task(f"t{i:03d}")
        t.append("note", {"i": i})
        t.close()
    r = cli(root, "export", "--out", str(tmp_path / "b"), "--no-check")
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0]
    assert "exported 300 task(s)" in first and "(295 more)" in first
    assert re.search(r"\d+(\.\d+)? (KiB|MiB)", first), first
    assert "t299" not in r.stdout and not re.search(r"\d{5,} bytes", r.stdout)
    assert len(r.stdout) < 1000


def test_a_dry_run_never_follows_a_linked_stream(tmp_path: Path) -> None:
    """A stream that is a symbolic link is refused by --dry-run; the link's target is byte-identical after."""
    root = tmp_path / "L"
    build(root, "d", ["ok"])
    victim = tmp_path / "victim.txt"
    victim.write_bytes((root / "tasks" / "d.jsonl").read_bytes())
    (root / "tasks" / "d.jsonl").unlink()
    (root / "tasks" / "d.jsonl").symlink_to(victim)
    before = victim.read_bytes()
    r = cli(root, "accept", "d", "--dry-run")
    assert r.exit_code == 1 and "symbolic link" in r.stderr
    assert victim.read_bytes() == before
