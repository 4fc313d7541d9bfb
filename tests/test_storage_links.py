"""Links never lead outside the ledger (issue: a linked stream was truncated through its link).

For every place intentlog keeps files -- a stream, its lock file, ``tasks/``, ``tmp/``,
``quarantine/``, ``objects/``, a shard folder, an object -- a symbolic link there to a
victim outside the ledger is refused with :class:`~intentlog.LinkRefused` (or, for
artifacts, an :class:`~intentlog.ArtifactError` naming the link), and the victim stays
byte-identical whatever the writer, ``repair``, ``accept``, ``put`` and ``get`` do.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import intentlog
from intentlog import ArtifactError, IntentlogError, LinkRefused
from intentlog._internal.fsutil import check_real_dir, open_nofollow

VICTIM = b"precious bytes that are not the ledger's\n"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links as their target text), by relative path."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            out[rel] = b"->" + os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
    return out


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Outside the ledger: a file and a folder holding one file."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "victim.txt").write_bytes(VICTIM)
    return d


def _ledger(tmp_path: Path) -> intentlog.Ledger:
    led = intentlog.open(tmp_path / "ledger")
    t = led.task("v")
    t.append("note", {"i": 1})
    t.close()
    led.artifacts.put(b"an object")
    return led


def _relink(path: Path, target: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def _ops(led: intentlog.Ledger) -> dict[str, Callable[[], object]]:
    digest = "blake3:" + __import__("blake3").blake3(b"an object").hexdigest()
    return {
        "append": lambda: led.task("v").append("note", {"i": 2}),
        "new task": lambda: led.task("w").append("note", {"i": 1}),
        "events": lambda: list(led.task("v").events()),
        "repair": lambda: led.repair("v"),
        "repair --accept-damage": lambda: led.repair("v", accept_damage=True),
        "accept": lambda: led.task("v").accept(note="ok"),
        "put": lambda: led.artifacts.put(b"new bytes"),
        "put again": lambda: led.artifacts.put(b"an object"),
        "get": lambda: led.artifacts.get(digest),
        "verify object": lambda: led.artifacts.verify(digest),
    }


# (what is linked, to the victim file or its folder, which ops must be refused)
WRITER = {"append", "new task", "repair", "repair --accept-damage", "accept"}
PUTS = {"put", "put again"}
READS = {"get", "verify object"}
CASES = [
    ("tasks/v.jsonl", "file", {"append", "events", "repair", "repair --accept-damage", "accept"}),
    ("tasks/v.jsonl.lock", "file", {"append", "repair", "repair --accept-damage", "accept"}),
    ("tasks", "dir", WRITER | {"events"}),
    ("tmp", "dir", WRITER | PUTS),
    ("quarantine", "dir", WRITER | PUTS),
    ("objects", "dir", PUTS | READS),
    ("objects/SHARD", "dir", {"put again"} | READS),
    ("objects/SHARD/OBJ", "file", READS),
]


@pytest.mark.parametrize(("where", "kind", "refused"), CASES, ids=[c[0] for c in CASES])
def test_a_link_inside_the_ledger_is_refused_and_its_target_untouched(
    tmp_path: Path, victim: Path, where: str, kind: str, refused: set[str]
) -> None:
    led = _ledger(tmp_path)
    digest = led.artifacts.put(b"an object").digest
    hexd = digest.split(":")[1]
    rel = where.replace("SHARD", hexd[:2]).replace("OBJ", hexd[2:])
    link = led.root / rel
    _relink(link, victim / "victim.txt" if kind == "file" else victim)
    before = snapshot(victim)
    for name, op in _ops(led).items():
        if name in refused:
            with pytest.raises((LinkRefused, ArtifactError)) as info:
                op()
                pytest.fail(f"{name} was not refused through {rel}")
            assert str(link) in str(info.value) or link.name in str(info.value), f"{name}: names the link"
            assert "link" in str(info.value), name
        else:
            try:
                op()
            except IntentlogError as exc:
                # allowed to fail (e.g. nothing to read), never through the link
                assert not isinstance(exc, LinkRefused) or name in refused, f"{name}: {exc}"
        led.close()
        assert snapshot(victim) == before, f"{name} changed a file outside the ledger through {rel}"
        if name == "put again" and rel.count("/") == 2:
            # a link where an object should be is moved to quarantine/ (never followed) and the bytes put back
            assert not link.is_symlink() and link.read_bytes() == b"an object"
            assert any(p.is_symlink() for p in (led.root / "quarantine").iterdir())
            _relink(link, victim / "victim.txt")
        else:
            assert link.is_symlink(), f"{name} replaced the link instead of refusing it"


def test_a_linked_lock_file_is_refused_with_eloop_translated(tmp_path: Path, victim: Path) -> None:
    """The lock file is opened with O_NOFOLLOW: ELOOP becomes LinkRefused naming it; the victim is not locked."""
    led = _ledger(tmp_path)
    lock = led.root / "tasks" / "v.jsonl.lock"
    _relink(lock, victim / "victim.txt")
    with pytest.raises(LinkRefused, match=r"v\.jsonl\.lock: is a symbolic link where intentlog keeps a task's lock"):
        led.task("v").append("note", {})
    assert (victim / "victim.txt").read_bytes() == VICTIM


def test_the_shared_primitives(tmp_path: Path, victim: Path) -> None:
    """open_nofollow and check_real_dir: the primitives every layer (verify and export too) uses."""
    (tmp_path / "l").symlink_to(victim / "victim.txt")
    with pytest.raises(LinkRefused, match="a test file"):
        open_nofollow(tmp_path / "l", os.O_RDONLY, what="a test file")
    (tmp_path / "d").symlink_to(victim)
    with pytest.raises(LinkRefused):
        check_real_dir(tmp_path / "d", what="a test folder")
    assert check_real_dir(victim, what="x") is True
    assert check_real_dir(tmp_path / "missing", what="x") is False
    with pytest.raises(NotADirectoryError):
        check_real_dir(victim / "victim.txt", what="x")
