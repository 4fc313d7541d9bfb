"""The listings' index is not fooled by a stream edited in place with its mtime put back (``os.utime``, ``cp -p``)."""

from __future__ import annotations

import os
from pathlib import Path

import intentlog
from intentlog.views import task_rows


def test_an_edit_with_the_mtime_restored_is_read_again(tmp_path: Path) -> None:
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        for i in range(70):  # enough tasks for the listing to keep its index
            led.task(f"t{i:02d}").effect("k", {"i": i}, lambda r: b"ok")
    with intentlog.open(root) as led:
        first = {r.task: r.state for r in task_rows(led)}
    assert (root / "cache" / "index-rows.json").exists()
    path = root / "tasks" / "t05.jsonl"
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    at = data.rfind(b"call.completed")
    data[at + 13] = ord("X")  # the same size: 'call.completeX'
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_size == st.st_size
    with intentlog.open(root) as led:
        rows = {r.task: r for r in task_rows(led)}
    assert rows["t05"].state != first["t05"], "the listing kept the row of the stream before the edit"
    assert all(rows[t].state == first[t] for t in first if t != "t05")
