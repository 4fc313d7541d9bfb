"""A repair never truncates bytes it did not keep: a file already at the quarantine name must hold them.

Before the fix, the writer skipped the copy whenever ``quarantine/<name>`` existed (a
crashed repair's leftover, it assumed) and truncated the stream: a decoy planted at the
predictable name (or a link there) made the torn tail's bytes vanish for good, with a
``stream.repaired`` naming the decoy.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import intentlog
from intentlog.eventlog.writer import quarantine_plan
from intentlog.projections.verify import verify_path

TAIL = b'{"seq": 2, "kind": "note", "data": {"important": 1'


@pytest.mark.parametrize("planted", ["decoy", "link", "same bytes"])
def test_a_file_at_the_quarantine_name_never_replaces_the_tail(tmp_path: Path, planted: str) -> None:
    root = tmp_path / "l"
    led = intentlog.open(root)
    t = led.task("t")
    t.append("note", {})
    t.close()
    with open(t.path, "ab") as f:
        f.write(TAIL)
    name, digest, size = quarantine_plan(t.path, "t", t.path.stat().st_size - len(TAIL))
    at = root / "quarantine" / name
    if planted == "decoy":
        at.write_bytes(b"decoy")
    elif planted == "link":
        (tmp_path / "elsewhere").write_bytes(b"x")
        os.symlink(tmp_path / "elsewhere", at)
    else:
        at.write_bytes(TAIL)  # what a repair that crashed after its copy leaves

    led.task("t").append("note", {"after": True})
    led.task("t").close()
    rep = [e for e in led.task("t").events() if e.kind == "stream.repaired"][-1]
    kept = root / rep.data["quarantined"]["file"]
    assert not kept.is_symlink() and kept.read_bytes() == TAIL, "the torn tail's bytes were not kept"
    assert rep.data["quarantined"]["digest"] == digest and rep.data["quarantined"]["size"] == size
    if planted == "same bytes":
        assert kept == at  # the leftover of a crashed repair is reused
    assert not [p for p in verify_path(root).problems if p.code == "artifact_corrupt"]
    led.close()
