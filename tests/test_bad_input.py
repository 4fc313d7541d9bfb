"""Bad input is refused before the disk is touched (STYLE 9, DESIGN §3).

Each case snapshots the whole folder (every entry, its size and hash) before and after
the refused call: the error must be the right one, say what and where, and leave every
byte as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from strategies import BAD_VALUES, check_chain, snapshot_tree

import intentlog
from intentlog import InvalidTaskId, NotALedger, NotSerializable, ReservedKind


def _unchanged(root: Path, action: Callable[[], Any], exc: type[BaseException], *words: str) -> BaseException:
    before = snapshot_tree(root)
    with pytest.raises(exc) as info:
        action()
    assert snapshot_tree(root) == before, "a refused call wrote something"
    for w in words:
        assert w in str(info.value), f"{w!r} not in {str(info.value)!r}"
    return info.value


@pytest.fixture(params=["new-task", "open-task"])
def task(request: pytest.FixtureRequest, ledger: intentlog.Ledger) -> intentlog.Task:
    """A task with no stream yet, or one whose writer is open (lock held, stream written)."""
    t = ledger.task("t")
    if request.param == "open-task":
        t.append("note", {"ok": True})
    return t


BAD_IDS: list[Any] = [
    "",
    "..",
    ".",
    "a/b",
    "../x",
    "x" * 129,
    "\x00",
    "a\x00",
    ".hidden",
    "-lead",
    "sp ace",
    "é",
    7,
    None,
    b"t",
]


@pytest.mark.parametrize("bad_id", BAD_IDS, ids=repr)
def test_bad_task_ids_are_refused_before_touching_the_disk(ledger: intentlog.Ledger, bad_id: Any) -> None:
    """ledger.task(bad id) raises InvalidTaskId (a ValueError) quoting the id and the allowed form; writes nothing."""
    err = _unchanged(ledger.root, lambda: ledger.task(bad_id).append("note", {}), InvalidTaskId, repr(bad_id), "1-128")
    assert isinstance(err, ValueError) and err.task_id == bad_id  # type: ignore[attr-defined]
    assert ledger.task_ids() == []


def test_the_longest_task_id_is_accepted(ledger: intentlog.Ledger) -> None:
    """A 128-character id is valid; 129 is not (boundary of [A-Za-z0-9][A-Za-z0-9._-]{0,127})."""
    ledger.task("x" * 128).append("note", {})
    assert ledger.task_ids() == ["x" * 128]
    assert check_chain(ledger.stream_path("x" * 128))[0]["data"]["task"] == "x" * 128


@pytest.mark.parametrize(
    ("bad", "words"), BAD_VALUES, ids=[f"{type(b).__name__}-{i}" for i, (b, _) in enumerate(BAD_VALUES)]
)
def test_bad_data_is_refused_naming_the_path(
    ledger: intentlog.Ledger, task: intentlog.Task, bad: Any, words: str
) -> None:
    """Task.append with a non-JSON value nested in data raises NotSerializable naming its path; nothing is written."""
    data = {"ok": 1, "deep": [{"x": bad}]}
    err = _unchanged(ledger.root, lambda: task.append("note", data), NotSerializable, "$.deep[0].x", words)
    assert err.path == "$.deep[0].x"  # type: ignore[attr-defined]


def test_non_string_keys_are_refused(ledger: intentlog.Ledger, task: intentlog.Task) -> None:
    """Task.append refuses a dict with a non-string key instead of letting it be written as a string."""
    _unchanged(ledger.root, lambda: task.append("note", {"a": {1: "one"}}), NotSerializable, "$.a", "key 1")


@pytest.mark.parametrize("bad", [[1, 2], "text", 42, [("a", 1)], [], "", 0], ids=repr)
def test_non_dict_data_is_refused(ledger: intentlog.Ledger, task: intentlog.Task, bad: Any) -> None:
    """Task.append refuses data that is not a mapping with NotSerializable — never coerced to {}; nothing is written."""
    _unchanged(ledger.root, lambda: task.append("note", bad), NotSerializable, "dict")


def test_no_data_records_an_empty_object(ledger: intentlog.Ledger, task: intentlog.Task) -> None:
    """Task.append(kind) without data records {} (None means no data)."""
    ev = task.append("note")
    assert ev.data == {}
    assert check_chain(task.path)[-1]["data"] == {}


@pytest.mark.parametrize("kind", ["call.manifest", "task.created", "stream.repaired", "attempt.started"])
def test_reserved_kinds_are_refused(ledger: intentlog.Ledger, task: intentlog.Task, kind: str) -> None:
    """Task.append of a kind in intentlog's namespaces raises ReservedKind (a ValueError) naming it; nothing written."""
    err = _unchanged(ledger.root, lambda: task.append(kind, {}), ReservedKind, repr(kind), "reserved")
    assert isinstance(err, ValueError)


@pytest.mark.parametrize("kind", ["Bad Kind", "", "note.", ".note", "Note", "a..b", "x-y", 5])
def test_malformed_kinds_are_refused(ledger: intentlog.Ledger, task: intentlog.Task, kind: Any) -> None:
    """Task.append with a kind that is not dotted lowercase words raises an error quoting it; nothing written."""
    err = _unchanged(ledger.root, lambda: task.append(kind, {}), intentlog.IntentlogError, repr(kind), "lowercase")
    assert isinstance(err, NotSerializable)


def test_a_root_that_is_a_file_is_not_a_ledger(tmp_path: Path) -> None:
    """intentlog.open on a regular file raises NotALedger naming the path; the file is untouched."""
    f = tmp_path / "file"
    f.write_bytes(b"not a folder")
    err = _unchanged(tmp_path, lambda: intentlog.open(f), NotALedger, str(f), "not a folder")
    assert isinstance(err, ValueError)
    assert f.read_bytes() == b"not a folder"


def test_a_non_empty_folder_without_marker_is_not_a_ledger(tmp_path: Path) -> None:
    """intentlog.open on a folder holding other files raises NotALedger naming it and intentlog.json; adds nothing."""
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / "tasks").mkdir()
    _unchanged(tmp_path, lambda: intentlog.open(root), NotALedger, str(root), "intentlog.json", "non-empty")
    assert sorted(p.name for p in root.iterdir()) == ["src", "tasks"]


def test_a_marker_of_another_format_is_not_a_ledger(tmp_path: Path) -> None:
    """intentlog.open on a folder whose intentlog.json declares another format refuses it and writes nothing."""
    root = tmp_path / "old"
    root.mkdir()
    (root / "intentlog.json").write_text('{"format": "intentlog/0"}\n')
    for sub in ("tasks", "objects", "tmp", "quarantine"):
        (root / sub).mkdir()
    _unchanged(tmp_path, lambda: intentlog.open(root), NotALedger, str(root), "intentlog/1")
