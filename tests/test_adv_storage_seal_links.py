"""``seal`` never anchors streams read through a link: a linked ``tasks/`` is refused.

Before the fix ``intentlog seal`` listed and hashed the streams of the folder a linked
``tasks/`` pointed at and wrote their heads into ``heads.json``, anchoring evidence that
is not the ledger's.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import intentlog
from intentlog.heads import seal


def test_seal_refuses_a_linked_tasks_folder_and_writes_nothing(tmp_path: Path) -> None:
    led = intentlog.open(tmp_path / "l")
    led.task("t").append("note", {})
    led.task("t").close()
    outside = tmp_path / "outside"
    shutil.move(str(tmp_path / "l" / "tasks"), str(outside))
    os.symlink(outside, tmp_path / "l" / "tasks")
    with pytest.raises(intentlog.LinkRefused) as err:
        seal(led)
    assert str(tmp_path / "l" / "tasks") in str(err.value)
    assert not (tmp_path / "l" / "heads.json").exists()
    led.close()
