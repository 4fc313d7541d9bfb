"""A writer's resumed open trusts the bytes this process checked only while they hash to what it checked.

When another writer grew the stream between two opens, the file's times moved with the
append, so they no longer tell an edit of the bytes checked before: the resumed open reads
those bytes again and compares their BLAKE3 with the hash the closing writer kept (the
running hash of every byte it checked or appended). Any edit of them -- one byte, the same
length, anywhere -- sends the open to the full check, which judges the stream exactly as
an open that never saw it judges it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import intentlog
from intentlog.errors import CorruptStream, IntentlogError
from intentlog.stream import RESUME_FROM

N = RESUME_FROM + 20


def _make(root: Path) -> intentlog.Ledger:
    led = intentlog.open(root, create=True)
    t = led.task("t")
    with t.batch():
        for i in range(N):
            t.append("note", {"i": i, "v": "aaaa"})
    t.close()
    assert t.stream._checked is not None  # this process keeps what it checked
    return led


_GROW = (
    "import sys, intentlog\nwith intentlog.open(sys.argv[1]) as o:\n    o.task('t').append('note', {'by': 'other'})\n"
)


def _grow_elsewhere(root: Path) -> None:
    """Another process's writer appends one event (this process's handles never saw it)."""
    env = {**os.environ, "PYTHONPATH": str(Path(intentlog.__file__).parent.parent)}
    subprocess.run([sys.executable, "-c", _GROW, str(root)], env=env, check=True, timeout=120)


def _outcome(led: intentlog.Ledger, root: Path) -> tuple[Any, ...]:
    t = led.task("t")
    try:
        t.append("note", {"after": True})
    except IntentlogError as exc:
        return ("refused", type(exc).__name__, str(exc).replace(str(root), "ROOT"))
    resumed = t.stream.open_writer().resumed
    t.close()
    return ("open", resumed, [(e.seq, e.kind, e.data) for e in led.task("t").events()])


def test_a_grown_stream_whose_checked_bytes_are_untouched_is_still_resumed(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led = _make(root)
    _grow_elsewhere(root)
    got = _outcome(led, root)
    assert got[0] == "open" and got[1] is True  # only the added bytes were checked
    assert [d.get("by") for _, k, d in got[2][-2:]] == ["other", None]


@settings(max_examples=15)
@given(where=st.floats(min_value=0.0, max_value=0.999), flip=st.integers(min_value=1, max_value=255))
def test_any_byte_of_the_checked_prefix_changed_while_the_stream_grew_is_judged_as_a_fresh_open(
    tmp_path_factory: pytest.TempPathFactory, where: float, flip: int
) -> None:
    base = tmp_path_factory.mktemp("p")
    root = base / "l"
    led = _make(root)
    path = root / "tasks" / "t.jsonl"
    checked = path.stat().st_size
    _grow_elsewhere(root)
    data = bytearray(path.read_bytes())
    i = int(where * checked)
    data[i] ^= flip  # one byte of what this process checked, the size kept
    with open(path, "r+b") as fh:
        fh.write(bytes(data))
    fresh = base / "fresh"
    shutil.copytree(root, fresh)
    here = _outcome(led, root)
    there = _outcome(intentlog.open(fresh), fresh)
    assert here[0] == "refused"  # a changed byte of a checked line breaks its hash or its chain
    assert here == there
    assert path.read_bytes() == bytes(data)  # the refusal wrote nothing


def test_a_repaired_torn_tail_then_growth_then_an_edit_is_caught(tmp_path: Path) -> None:
    """The prefix kept after an open that cut a torn tail is the hash of the bytes left, not of those read."""
    root = tmp_path / "l"
    led = _make(root)
    path = root / "tasks" / "t.jsonl"
    with open(path, "ab") as fh:
        fh.write(b'{"data":{"half')
    _grow_elsewhere(root)  # another process: no checkpoint, its full check cuts the torn tail
    t = led.task("t")
    t.append("note", {"y": 1})  # checks what was added (the repair included) and keeps the new prefix
    t.close()
    assert t.stream._checked is not None
    _grow_elsewhere(root)
    data = path.read_bytes()
    edited = data.replace(b'"v":"aaaa"', b'"v":"zzzz"', 1)
    path.write_bytes(edited)
    with pytest.raises(CorruptStream):
        t.append("note", {"z": 1})
    assert path.read_bytes() == edited
