"""``git_revision``: the commit a work tree's HEAD names, read from ``.git`` without running git.

Checked against ``git rev-parse HEAD`` on real repositories: a branch (a loose ref, then a
packed one), a detached HEAD, a linked work tree (``.git`` is a file), a sub-folder; None
outside any repository. A checkpoint records it as its ``revision`` when asked.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import intentlog
from intentlog.checkpoints import git_revision

ENV = {
    **os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@x", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
}  # fmt: skip


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    (r / "a.txt").write_text("one")
    _git(r, "add", "a.txt")
    _git(r, "commit", "-q", "-m", "one")
    return r


def test_a_branch_head_loose_then_packed(repo: Path) -> None:
    assert git_revision(repo) == _git(repo, "rev-parse", "HEAD")
    (repo / "sub").mkdir()
    assert git_revision(repo / "sub") == _git(repo, "rev-parse", "HEAD")
    _git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert git_revision(repo) == _git(repo, "rev-parse", "HEAD")


def test_a_detached_head_and_a_linked_work_tree(repo: Path, tmp_path: Path) -> None:
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "a.txt").write_text("two")
    _git(repo, "commit", "-q", "-am", "two")
    _git(repo, "checkout", "-q", first)
    assert git_revision(repo) == first
    _git(repo, "checkout", "-q", "main")
    _git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"))
    assert (tmp_path / "wt" / ".git").is_file()
    assert git_revision(tmp_path / "wt") == _git(tmp_path / "wt", "rev-parse", "HEAD")


def test_no_repository_no_revision_and_an_unborn_branch_none(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    assert git_revision(tmp_path / "plain", stop=tmp_path) is None
    (tmp_path / "empty").mkdir()
    _git(tmp_path / "empty", "init", "-q", "-b", "main")
    assert git_revision(tmp_path / "empty") is None


def test_a_checkpoint_records_the_revision_read(repo: Path, tmp_path: Path) -> None:
    with intentlog.open(tmp_path / "led") as led:
        t = led.task("t")
        t.checkpoint("built", revision=git_revision(repo))
        assert t.latest_checkpoint() is not None
        assert t.latest_checkpoint().revision == _git(repo, "rev-parse", "HEAD")  # type: ignore[union-attr]
