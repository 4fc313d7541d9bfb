"""The batched line splitter the cold read uses gives exactly the lines and offsets of ``line_spans``.

``line_spans`` (one newline at a time) is what the damage assessment reads with; the scan
reads a chunk's lines at once. Generated files mix short and long lines, ``\\r`` and
over-long lines, with chunks and limits small enough that every boundary is crossed.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intentlog.eventlog import reader

PIECES = st.lists(
    st.sampled_from([b"\n", b"\r", b"\r\n", b"a", b"bb", b"{}", b"x" * 7, b"\xff", b"y" * 30, b"\x0b", b"\x85"]),
    max_size=60,
)


def flat(batches: Iterator[tuple[int, list[bytes | None]]]) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    for first, lines in batches:
        at = first
        for line in lines:
            out.append((at, line))
            if line is not None:
                at += len(line)
    return out


@settings(max_examples=400, deadline=None)
@given(pieces=PIECES, chunk=st.integers(1, 40), max_line=st.integers(1, 50))
def test_batches_are_the_lines_of_line_spans(pieces: list[bytes], chunk: int, max_line: int) -> None:
    data = b"".join(pieces)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reader, "_CHUNK", chunk)
        want = list(reader.line_spans(io.BytesIO(data), max_line))
        got = flat(reader.line_batches(io.BytesIO(data), max_line))
    # an over-long line's offset is given by the batch; the next line's offset follows from line_spans
    assert got == want
