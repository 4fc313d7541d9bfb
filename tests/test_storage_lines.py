"""Reading is linear in line length, and stream lines stay under MAX_LINE.

Before the fix ``iter_lines`` rebuilt ``rest + chunk`` and rescanned it for every 1 MiB
chunk: a 100 MB line took 14-17 s. Now pending pieces are joined once and only each new
chunk is searched; a line longer than :data:`MAX_LINE` is skipped without buffering and
reported as CorruptStream, and the writer never appends one.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from strategies import check_chain

import intentlog
from intentlog.eventlog.reader import MAX_LINE, iter_lines, scan


def test_max_line_is_the_documented_16_mib() -> None:
    assert MAX_LINE == 16 << 20
    assert "16 MiB" in (Path(__file__).parents[1] / "docs" / "streams.md").read_text()


def _read_time(path: Path, size: int) -> float:
    path.write_bytes(b"first\n" + b"a" * size + b"\nlast\n")
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()  # this process's CPU time: other work on the machine does not count
        lines = list(iter_lines(path, max_line=1 << 30))
        best = min(best, time.process_time() - t0)
    assert [len(line) for _, line in lines] == [6, size + 1, 5]
    assert [off for off, _ in lines] == [0, 6, 6 + size + 1]
    assert lines[1][1] == b"a" * size + b"\n"
    return best


def test_a_128_mib_line_is_read_in_linear_time(tmp_path: Path) -> None:
    """8x the line, about 8x the time (the old quadratic loop: ~60x; 1 s for 64 MiB, now ~0.1 s).

    Best of three runs each, in CPU time, and a ratio rather than a wall-clock bound, so a
    busy machine does not fail it; the absolute bound is only a backstop.
    """
    small = _read_time(tmp_path / "small.jsonl", 16 << 20)
    big = _read_time(tmp_path / "big.jsonl", 128 << 20)
    assert big < 10.0, f"reading a 128 MiB line took {big:.2f} s"
    # the floor: a 16 MiB read can take 2 ms while 128 MiB pays first-touch page faults for its
    # buffers (up to ~0.8 s seen with other processes pressing on memory); the quadratic loop
    # took 14-17 s for 100 MB, far above 30 x the floor
    assert big / max(small, 0.1) < 30, f"16 MiB took {small:.3f} s but 128 MiB {big:.3f} s: not linear"


def test_lines_split_across_chunks_keep_their_bytes_and_offsets(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    parts = [b"x" * n + b"\n" for n in (0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 << 20, 5)] + [b"tail"]
    path.write_bytes(b"".join(parts))
    got = list(iter_lines(path))
    assert [line for _, line in got] == parts
    offsets = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
    assert [off for off, _ in got] == offsets


def test_a_line_longer_than_max_line_is_corrupt_for_readers_and_writers(tmp_path: Path) -> None:
    led = intentlog.open(tmp_path / "l")
    t = led.task("t")
    t.append("note", {"i": 1})
    t.close()
    good = t.path.read_bytes()
    with t.path.open("ab") as f:
        f.write(b'{"data":{"s":"' + b"y" * (MAX_LINE + 10) + b'"}}\n')
        f.write(good.splitlines(keepends=True)[-1])
    before = t.path.read_bytes()
    with pytest.raises(intentlog.CorruptStream, match=r"line 3: the line is longer than 16777216 bytes"):
        list(t.events())
    with pytest.raises(intentlog.CorruptStream, match="line 3"):
        list(iter_lines(t.path))
    s = scan(t.path)
    assert s.count == 2 and s.problem is not None and (s.problem.line, s.problem.torn) == (3, False)
    with pytest.raises(intentlog.CorruptStream, match="longer than"):
        t.append("note", {"i": 2})
    assert t.path.read_bytes() == before, "refused for writing: nothing written"
    report = led.repair("t", accept_damage=True)
    assert report.action == "damage" and report.line == 3 and report.size == len(before) - len(good)
    led.close()


def test_the_writer_refuses_an_event_longer_than_max_line(tmp_path: Path) -> None:
    led = intentlog.open(tmp_path / "l")
    t = led.task("t")
    t.append("note", {"i": 1})
    before = t.path.read_bytes()
    with pytest.raises(intentlog.NotSerializable, match=r"more than a stream line may hold.*artifacts"):
        t.append("note", {"s": "z" * MAX_LINE})
    assert t.path.read_bytes() == before
    t.append("note", {"s": "z" * (MAX_LINE - 8192)})  # just under the limit is fine
    led.close()
    assert len(check_chain(t.path)) == 3
