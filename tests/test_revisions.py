"""``ledger.revisions(path)`` and ``intentlog revisions``: every recorded revision of a workspace file.

The same scenario on a folder and on a ledger on the store (a real SeaweedFS): two tasks
record one file as it changes; the listing names each revision's task, seq, ts, digest
and size in record order, marks bytes recorded again, and reads nothing but the record.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import s3_server
from click.testing import CliRunner

import intentlog
from intentlog import OutsideWorkspace, Revision, Revisions
from intentlog._internal.digest import digest_bytes
from intentlog.cli import main

REPO = Path(intentlog.__file__).resolve().parent.parent


def _files(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


@pytest.fixture(params=["folder", "store"])
def where(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Where the ledger lives: a folder, or ``s3://`` on the run's SeaweedFS."""
    if request.param == "folder":
        yield str(tmp_path / "led")
    else:
        yield s3_server.ledger_url(monkeypatch)


def _record_three(where: str, work: Path) -> list[str]:
    """t1 records v1, t2 records v2, t1 records v2 again: the digests, in that order."""
    (work / "out").mkdir(parents=True)
    target = work / "out" / "chapter.md"
    target.write_bytes(b"v1")
    with intentlog.open(where, workspace=work) as led:
        led.task("t1").record_artifact("out/chapter.md", producer="writer")
        target.write_bytes(b"v2")
        led.task("t2").record_artifact("out/chapter.md")
        led.task("t1").record_artifact("out/chapter.md")
    return [digest_bytes(b"v1"), digest_bytes(b"v2"), digest_bytes(b"v2")]


def test_revisions_list_every_recording_of_a_path_in_record_order(where: str, tmp_path: Path) -> None:
    """Each revision names its task, seq, ts, digest and size; bytes recorded again are not 'changed'."""
    work = tmp_path / "work"
    digests = _record_three(where, work)
    with intentlog.open(where, create=False, workspace=work) as led:
        found = led.revisions("out/chapter.md")
        assert isinstance(found, Revisions) and all(isinstance(r, Revision) for r in found)
        assert [(r.task, r.seq) for r in found] == [("t1", 1), ("t2", 1), ("t1", 2)]
        assert [r.digest for r in found] == digests and [r.size for r in found] == [2, 2, 2]
        assert [r.changed for r in found] == [True, True, False]
        assert found[0].producer == "writer" and found.problems == ()
        assert [r.ts for r in found] == sorted(r.ts for r in found)
        events = {(r.task, r.seq): led.task(r.task).events() for r in found}
        for r in found:  # each one is the record's own event
            ev = next(e for e in events[(r.task, r.seq)] if e.seq == r.seq)
            assert ev.kind == "artifact.recorded" and ev.ts == r.ts and ev.data["digest"] == r.digest
        only = led.revisions("./out//chapter.md", task="t1")
        assert [(r.task, r.seq, r.changed) for r in only] == [("t1", 1, True), ("t1", 2, True)]
        assert list(led.revisions(work / "out" / "chapter.md")) == list(found)  # an absolute path inside it
        assert list(led.revisions("out/never.md")) == []


def test_a_path_outside_the_workspace_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """A path that climbs out of the workspace raises OutsideWorkspace; the ledger's bytes are unchanged."""
    work = tmp_path / "work"
    _record_three(str(tmp_path / "led"), work)
    before = _files(tmp_path / "led")
    with intentlog.open(tmp_path / "led", create=False, workspace=work) as led:
        for bad in ("../secret", str(tmp_path / "elsewhere" / "x.md"), "/etc/passwd"):
            with pytest.raises(OutsideWorkspace):
                led.revisions(bad)
        with pytest.raises(intentlog.InvalidTaskId):
            led.revisions("out/chapter.md", task="../t1")
    assert _files(tmp_path / "led") == before


def test_one_unreadable_stream_is_named_and_the_others_still_listed(tmp_path: Path) -> None:
    """A stream that cannot be read is a problem beside the revisions the others record, never a silent gap."""
    work = tmp_path / "work"
    _record_three(str(tmp_path / "led"), work)
    stream = tmp_path / "led" / "tasks" / "t2.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    stream.write_bytes(lines[0] + b"{not json}\n" + lines[1])  # a bad line followed by good ones
    with intentlog.open(tmp_path / "led", create=False, workspace=work) as led:
        found = led.revisions("out/chapter.md")
    assert [r.task for r in found] == ["t1", "t1"]
    assert [t for t, _ in found.problems] == ["t2"] and "line 2" in found.problems[0][1]
    r = CliRunner().invoke(main, ["--root", str(tmp_path / "led"), "revisions", "out/chapter.md"])
    assert r.exit_code == 1 and "t2: " in r.stderr and r.stdout.count("t1") == 2, r.output


def test_the_cli_lists_revisions_with_the_show_prefix_and_its_hint_runs_as_pasted(tmp_path: Path) -> None:
    """``intentlog revisions PATH``: a table, then a 'show' command that prints the latest bytes as pasted."""
    work = tmp_path / "work"
    root = tmp_path / "led"
    digests = _record_three(str(root), work)
    r = CliRunner().invoke(main, ["--root", str(root), "revisions", "out/chapter.md"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[0].split()[:3] == ["#", "task", "seq"]
    assert digests[0][:19] in lines[1] and "writer" in lines[1]
    assert lines[3].split()[1:3] == ["t1", "2"] and "(same)" in lines[3]
    hint = lines[-1].removeprefix("latest bytes: ")
    assert hint.startswith(f"intentlog --root {root} show "), hint
    import shlex

    env = {k: v for k, v in os.environ.items() if k != "INTENTLOG_ROOT"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", *shlex.split(hint)[1:]],
        cwd=tmp_path, env=env, capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == b"v2", done.stderr

    j = CliRunner().invoke(main, ["--root", str(root), "revisions", "out/chapter.md", "--task", "t2", "--json"])
    assert j.exit_code == 0, j.output
    out = orjson.loads(j.output)
    assert out["path"] == "out/chapter.md" and out["problems"] == []
    assert [(x["task"], x["seq"], x["digest"], x["size"], x["changed"]) for x in out["revisions"]] == [
        ("t2", 1, digests[1], 2, True)
    ]
    none = CliRunner().invoke(main, ["--root", str(root), "revisions", "out/none.md"])
    assert none.exit_code == 0 and "no revisions of out/none.md" in none.output
    missing = CliRunner().invoke(main, ["--root", str(root), "revisions", "out/chapter.md", "--task", "nope"])
    assert missing.exit_code == 1
    outside = CliRunner().invoke(main, ["--root", str(root), "revisions", "../x", "--json"])
    assert outside.exit_code == 1 and orjson.loads(outside.stdout)["exit_code"] == 1
    assert "outside" in outside.stderr
