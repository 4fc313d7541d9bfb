"""Checkpoints with labelled partial output, and the git revision and changed files captured on request.

``task.checkpoint(phase, outputs={label: ...}, partial=True)`` records each output as
evidence carrying its label, status ``partial``; ``git=FOLDER`` records what git itself
says of that work tree (checked against ``git rev-parse`` and ``git status``). Bad input is
refused before anything is stored.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.checkpoints import PARTIAL, checkpoint_diff, git_changes

ENV = {
    **os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
}  # fmt: skip


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=True).stdout.strip()


def _files(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "src").mkdir(parents=True)
    _git(r, "init", "-q", "-b", "main")
    for name in ("a.txt", "b.txt", "src/c.py", "old.txt"):
        (r / name).write_text(name)
    _git(r, "add", ".")
    _git(r, "commit", "-q", "-m", "one")
    (r / "a.txt").write_text("changed")  # modified, not staged
    (r / "src" / "new.py").write_text("new")  # untracked, in a folder
    (r / "b.txt").unlink()  # deleted
    _git(r, "mv", "old.txt", "renamed.txt")  # a rename: both names
    (r / "ignored.log").write_text("x")
    (r / ".gitignore").write_text("*.log\n")  # untracked itself; what it ignores is not listed
    return r


def test_labelled_partial_outputs_are_recorded_as_evidence_with_their_labels(tmp_path: Path) -> None:
    """Each output is a ref with its label; the checkpoint is partial; the record reads back the same."""
    with intentlog.open(tmp_path / "led") as led:
        t = led.task("t")
        t.checkpoint("drafting", evidence=[b"plan"], outputs={"chapter-1.md": b"# One", "chapter-2.md": b"# Tw"},
                     partial=True)  # fmt: skip
        t.checkpoint("drafting", outputs={"chapter-1.md": b"# One", "chapter-2.md": b"# Two"})
    with intentlog.open(tmp_path / "led", create=False) as led:
        first, second = led.task("t").checkpoints()
        ev = next(e for e in led.task("t").events() if e.kind == "task.checkpoint")
    assert ev.data["partial"] is True and ev.data["status"] == PARTIAL
    assert [e.get("label") for e in ev.data["evidence"]] == [None, "chapter-1.md", "chapter-2.md"]
    assert first.partial and first.status == "partial" and first.verified
    assert {k: v["digest"] for k, v in first.outputs.items()} == {
        "chapter-1.md": digest_bytes(b"# One"), "chapter-2.md": digest_bytes(b"# Tw"),
    }  # fmt: skip
    assert not second.partial and second.status == "accepted"
    assert list(second.outputs) == ["chapter-1.md", "chapter-2.md"]
    assert [e["label"] for e in first.record.to_json()["evidence"][1:]] == ["chapter-1.md", "chapter-2.md"]
    d = checkpoint_diff(first, second)
    assert d.status == ("partial", "accepted") and d.evidence_added == (digest_bytes(b"# Two"),)
    with intentlog.open(tmp_path / "led", create=False) as led:
        st = led.task("t").status()
    assert st.checkpoint is not None and st.checkpoint.seq == second.seq


def test_git_capture_records_what_git_says_of_the_work_tree(repo: Path, tmp_path: Path) -> None:
    """``git=FOLDER``: the revision is rev-parse HEAD's, the changed files what git status lists (a rename: both)."""
    want = ["a.txt", "b.txt", ".gitignore", "old.txt", "renamed.txt", "src/new.py"]
    seen = git_changes(repo / "src")
    assert seen.revision == _git(repo, "rev-parse", "HEAD")
    assert list(seen.changed_files) == sorted(want)
    with intentlog.open(tmp_path / "led") as led:
        led.task("t").checkpoint("built", git=repo)
    with intentlog.open(tmp_path / "led", create=False) as led:
        cp = led.task("t").latest_checkpoint()
    assert cp is not None and cp.revision == _git(repo, "rev-parse", "HEAD")
    assert list(cp.changed_files) == sorted(want)


def test_git_capture_with_the_current_folder(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``git=True`` reads the work tree holding the current folder."""
    monkeypatch.chdir(repo)
    with intentlog.open(tmp_path / "led") as led:
        led.task("t").checkpoint("built", git=True)
        cp = led.task("t").latest_checkpoint()
    assert cp is not None and cp.revision == _git(repo, "rev-parse", "HEAD") and "a.txt" in cp.changed_files


def test_bad_checkpoint_input_is_refused_and_nothing_is_written(repo: Path, tmp_path: Path) -> None:
    """Outside a work tree, both capture and explicit fields, a bad label or outputs: UsageError, bytes unchanged."""
    plain = tmp_path / "plain"
    plain.mkdir()
    root = tmp_path / "led"
    with intentlog.open(root) as led:
        t = led.task("t")
        t.append("note.x", {})
        before = _files(root)
        bad: list[dict[str, object]] = [
            {"git": plain, "outputs": {"x": b"big" * 5000}},
            {"git": repo, "revision": "abc"},
            {"git": repo, "changed_files": ["a.txt"]},
            {"outputs": {"": b"x"}},
            {"outputs": {1: b"x"}},
            {"outputs": [b"x"]},
            {"outputs": {"digest": "blake3:" + "0" * 64, "size": 1}},
            {"partial": "yes"},
        ]
        for kw in bad:
            with pytest.raises(intentlog.UsageError) as info:
                t.checkpoint("p", **kw)  # type: ignore[arg-type]
            if kw.get("git") == plain:
                assert str(plain) in str(info.value) and "revision=" in str(info.value)
    assert _files(root) == before


def test_the_checkpoints_doc_example_runs(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/checkpoints.md's example runs in a git work tree and leaves the checkpoints it describes."""
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "checkpoints.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    monkeypatch.chdir(repo)
    scope: dict[str, object] = {}
    exec(compile(code.group(1), "docs/checkpoints.md", "exec"), scope)
    with intentlog.open(repo / "evidence", create=False) as led:
        cps = led.task("book").checkpoints()
    assert [(c.phase, c.status, c.partial) for c in cps] == [
        ("outline", "accepted", False), ("drafting", "partial", True), ("drafted", "accepted", False),
    ]  # fmt: skip
    assert cps[2].revision == _git(repo, "rev-parse", "HEAD") and "a.txt" in cps[2].changed_files
