"""``intentlog show`` streams an artifact: a chunk at a time, checked before the first byte is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import intentlog
from intentlog.artifacts import ArtifactStore
from intentlog.cli import main
from intentlog.cli.reading import SHOW_CHUNK


def _show(root: Path, digest: str) -> Any:
    return CliRunner().invoke(main, ["--root", str(root), "show", digest], catch_exceptions=False)


def test_show_never_holds_the_whole_artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "l"
    data = os.urandom(SHOW_CHUNK // 3) * 10 + b"end"  # over three chunks
    with intentlog.open(root) as led:
        digest = led.artifacts.put(data).digest
    reads: list[int] = []
    real_open = ArtifactStore.open

    def counted_open(self: ArtifactStore, d: str) -> Any:
        f = real_open(self, d)
        real_read = f.read

        def read(n: int = -1) -> bytes:
            reads.append(n)
            return real_read(n)

        f.read = read  # type: ignore[method-assign]
        return f

    def no_get(self: ArtifactStore, d: str) -> bytes:
        raise AssertionError("show read the whole artifact into memory")

    monkeypatch.setattr(ArtifactStore, "open", counted_open)
    monkeypatch.setattr(ArtifactStore, "get", no_get)
    r = _show(root, digest)
    assert r.exit_code == 0, r.output
    assert r.stdout_bytes == data
    assert reads and all(0 < n <= SHOW_CHUNK for n in reads), reads
    assert len(reads) >= 2 * (len(data) // SHOW_CHUNK + 1), "one pass to check, one to write"


def test_show_of_a_corrupt_artifact_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "l"
    data = b"x" * (3 * SHOW_CHUNK)
    with intentlog.open(root) as led:
        digest = led.artifacts.put(data).digest
        path = led.artifacts.path_for(digest)
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(len(data) - 1)
        f.write(b"y")  # the last byte: a single checked pass would have written all the rest
    r = _show(root, digest)
    assert r.exit_code != 0
    assert r.stdout_bytes == b""


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"plain text",
        'naïve — ünïcödé 🙂 spanning chunks " \\ \n\t\x01'.encode() * 7,
        bytes(range(256)) * 3,
        b"abc" * 50 + b"\xff",  # text until its last byte
        b"\xe2\x82",  # a character cut short at the end
    ],
)
def test_show_json_streams_the_same_bytes_emit_json_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes
) -> None:
    import base64

    import orjson

    import intentlog.cli.reading as reading

    root = tmp_path / "l"
    with intentlog.open(root) as led:
        digest = led.artifacts.put(data).digest
    monkeypatch.setattr(reading, "SHOW_CHUNK", 7)  # chunks that cut characters and base64 groups
    monkeypatch.setattr(ArtifactStore, "get", lambda self, d: pytest.fail("read whole"))
    r = CliRunner().invoke(main, ["--root", str(root), "show", digest, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    want: dict[str, Any] = {"digest": digest, "size": len(data), "text": text}
    if text is None:
        want["base64"] = base64.b64encode(data).decode()
    assert r.stdout_bytes == orjson.dumps(want, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
