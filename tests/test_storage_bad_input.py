"""Only the library's own errors escape the stream and store layers, and nothing is written.

One table: each bad input or hostile condition, the IntentlogError subclass it must
raise (misuse is also a TypeError/ValueError), words its message must hold (what, where,
what next), and -- for every row -- the ledger folder's bytes unchanged (lock files, which
are not evidence, aside). Before the fix each row let a raw OSError, PermissionError,
RecursionError, TypeError or ValueError escape.

Disk-full rows use a real 64 KiB tmpfs and the read-only row a read-only bind mount (the
tests run as root); where ``mount`` is not allowed they are skipped, saying so.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import intentlog
from intentlog import IntentlogError, LedgerError, LinkRefused, NotSerializable, UsageError, WrongType


def snapshot(root: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath, name)
            if name.endswith(".lock"):
                continue
            out[str(p.relative_to(root))] = b"->" + os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
    return out


def _mount(args: list[str]) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"SKIPPED LOUDLY: cannot mount ({' '.join(args)}): {proc.stderr.strip()}")


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a real full disk."""
    d = tmp_path / "tiny"
    d.mkdir()
    _mount(["-t", "tmpfs", "-o", "size=64k", "tmpfs", str(d)])
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _fill(d: Path) -> None:
    """Fill the filesystem until ENOSPC."""
    fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass
class Row:
    name: str
    run: Callable[[intentlog.Ledger], object]
    error: type[BaseException]
    words: tuple[str, ...] = ()
    also: type[BaseException] | None = None  # the builtin a misuse error also is


def _nested(depth: int) -> dict[str, object]:
    d: dict[str, object] = {}
    x = d
    for _ in range(depth):
        y: dict[str, object] = {}
        x["a"] = y
        x = y
    return d


ROWS = [
    Row("open(None)", lambda led: intentlog.open(None), WrongType, ("folder path", "NoneType"), TypeError),  # type: ignore[arg-type]
    Row("open(5)", lambda led: intentlog.open(5), WrongType, ("folder path", "int"), TypeError),  # type: ignore[arg-type]
    Row("open('a\\0b')", lambda led: intentlog.open("a\0b"), UsageError, ("NUL",), ValueError),
    Row("put('s')", lambda led: led.artifacts.put("s"), WrongType, ("bytes", "encode text first"), TypeError),  # type: ignore[arg-type]
    Row("task(wait=nan)", lambda led: led.task("t", wait=math.nan), UsageError, ("wait", "finite"), ValueError),
    Row("task(wait=-1)", lambda led: led.task("t", wait=-1), UsageError, ("wait",), ValueError),
    Row("task(wait='x')", lambda led: led.task("t", wait="x"), WrongType, ("wait", "str"), TypeError),  # type: ignore[arg-type]
    Row("events(since='x')", lambda led: led.task("t").events(since="x"), WrongType, ("since", "str"), TypeError),  # type: ignore[arg-type]
    Row(
        "append 10,000 deep",
        lambda led: led.task("t").append("note", _nested(10_000)),
        NotSerializable,
        ("levels deep", "flatten it"),
        TypeError,
    ),
    Row(
        "linked lock file",
        lambda led: (_link_lock(led), led.task("t").append("note", {})),
        LinkRefused,
        ("t.jsonl.lock", "symbolic link", "move the link aside"),
    ),
]


def _link_lock(led: intentlog.Ledger) -> None:
    lock = led.root / "tasks" / "t.jsonl.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(led.root.parent / "elsewhere")


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_a_bad_input_raises_a_library_error_and_writes_nothing(tmp_path: Path, row: Row) -> None:
    led = intentlog.open(tmp_path / "l")
    led.task("t").append("note", {"i": 0})
    led.close()
    before = snapshot(tmp_path / "l")
    with pytest.raises(row.error) as info:
        r = row.run(led)
        if isinstance(r, Iterator):
            list(r)
    assert isinstance(info.value, IntentlogError)
    if row.also is not None:
        assert isinstance(info.value, row.also)
    for w in row.words:
        assert w in str(info.value), f"{row.name}: {w!r} not in {info.value}"
    led.close()
    assert snapshot(tmp_path / "l") == before
    assert not (tmp_path / "elsewhere").exists()


def test_a_stream_removed_between_listing_and_reading_reads_as_empty(tmp_path: Path) -> None:
    """gc deleting a stream while a reader starts: no FileNotFoundError, no events."""
    led = intentlog.open(tmp_path / "l")
    t = led.task("g")
    t.append("note", {})
    t.close()
    events = t.events()  # checked and created, not yet opened
    t.path.unlink()
    assert list(events) == []
    assert led.repair("g").action == "none"


def test_disk_full_while_creating_a_stream(tiny_fs: Path) -> None:
    led = intentlog.open(tiny_fs / "l")
    led.task("a").append("note", {})
    led.close()
    (tiny_fs / "l" / "tasks" / "new.jsonl.lock").write_bytes(
        b"0" * 32
    )  # so the stream, not the lock, meets the full disk
    _fill(tiny_fs)
    before = snapshot(tiny_fs / "l")
    with pytest.raises(LedgerError, match=r"lock .*other\.jsonl\.lock: No space left on device; nothing was written"):
        led.task("other").append("note", {"x": 1})
    with pytest.raises(LedgerError, match=r"new\.jsonl: creating the stream failed: No space left.*free some space"):
        led.task("new").append("note", {"x": 1})
    led.close()
    assert snapshot(tiny_fs / "l") == before


def test_disk_full_while_repairing_a_stream(tiny_fs: Path) -> None:
    """The quarantine copy does not fit: the stream is left as it was (truncation comes after the copy)."""
    led = intentlog.open(tiny_fs / "l")
    t = led.task("a")
    t.append("note", {})
    t.close()
    with t.path.open("ab") as f:
        f.write(b"\x07" * 20_000)  # a garbage tail that must be copied to quarantine/
    _fill(tiny_fs)
    before = snapshot(tiny_fs / "l")
    with pytest.raises(LedgerError, match=r"a\.jsonl: repairing the stream's tail failed: No space left"):
        t.append("note", {"x": 1})
    led.close()
    assert snapshot(tiny_fs / "l") == before


def test_a_read_only_ledger_refuses_the_lock_with_a_library_error(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led = intentlog.open(root)
    led.task("t").append("note", {})
    led.close()
    before = snapshot(root)
    _mount(["--bind", str(root), str(root)])
    try:
        _mount(["-o", "remount,ro,bind", str(root)])
        with pytest.raises(LedgerError, match=r"cannot take the writer lock .*t\.jsonl\.lock: Read-only.*read-only"):
            intentlog.open(root).task("t").append("note", {"x": 1})
        assert [e.kind for e in intentlog.open(root, create=False).task("t").events()] == ["task.created", "note"]
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)
    assert snapshot(root) == before
