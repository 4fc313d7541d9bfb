"""A writer's open resumes its check where this process last checked the stream, and nowhere it may not.

A process that closes a stream's writer keeps what it checked (offset, count, head, the
file's identity and times); its next open checks only the bytes added since. Any stream
edited, truncated or replaced in between must be judged exactly as an open that never
saw it before judges it: each case opens the mutated stream in this process (which holds
a checkpoint) and a copy of it in a fresh ledger (which holds none), and the two outcomes
-- the error, or the events and the live work state -- must be the same.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog.errors import IntentlogError
from intentlog.stream import RESUME_FROM

N = RESUME_FROM + 44


def _make(root: Path, task: str = "t") -> intentlog.Ledger:
    led = intentlog.open(root, create=True)
    t = led.task(task)
    with t.batch():
        for i in range(N):
            t.append("note", {"i": i, "pad": "x" * (i % 7)})
    t.effect("k", {"q": 1}, lambda req: b"served")
    t.close()
    return led


def _stream(root: Path, task: str = "t") -> Path:
    return root / "tasks" / f"{task}.jsonl"


def _outcome(led: intentlog.Ledger, root: Path, task: str = "t") -> tuple[Any, ...]:
    """What opening the writer gives: the error (type and text, the root named ROOT), or the record and live state."""
    t = led.task(task)
    try:
        t.append("note", {"after": True})
    except IntentlogError as exc:
        return ("refused", type(exc).__name__, str(exc).replace(str(root), "ROOT"))
    live = t.stream.live()
    calls = {cid: (c.stage, c.key) for cid, c in live.result().calls.items()}
    t.close()
    events = [(e.seq, e.kind, e.data) for e in led.task(task).events()]
    return ("open", events, calls)


def _both(tmp_path: Path, mutate: Callable[[Path], None]) -> tuple[tuple[Any, ...], tuple[Any, ...], bytes]:
    """The outcome in this process (checkpoint held) and in a fresh ledger (none); the mutated bytes, untouched."""
    root = tmp_path / "l"
    led = _make(root)
    assert led.task("t").stream._checked is not None  # this process holds a checkpoint of the stream
    mutate(_stream(root))
    fresh = tmp_path / "fresh"
    shutil.copytree(root, fresh)
    mutated = _stream(root).read_bytes()
    here = _outcome(led, root)
    there = _outcome(intentlog.open(fresh), fresh)
    return here, there, mutated


def _edit_last_line(p: Path) -> None:
    data = p.read_bytes()
    i = data.rindex(b'"served"') if b'"served"' in data else len(data) - 20
    p.write_bytes(data[:i] + data[i:].replace(b"e", b"E", 1))


def _truncate_to_a_line(p: Path) -> None:
    lines = p.read_bytes().splitlines(keepends=True)
    p.write_bytes(b"".join(lines[: len(lines) - 3]))


def _truncate_mid_line(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 9])


def _replace_with_another_stream(p: Path) -> None:
    other = p.parent.parent.parent / "other"
    led = _make(other, "t")
    led.close()
    src = _stream(other)
    tmp = p.with_suffix(".new")
    shutil.copyfile(src, tmp)
    os.replace(tmp, p)  # a new inode at the path


def _replace_same_inode(p: Path) -> None:
    other = p.parent.parent.parent / "other2"
    _make(other, "t").close()
    p.write_bytes(_stream(other).read_bytes())  # rewritten in place: the same file, other bytes


def _append_garbage(p: Path) -> None:
    with open(p, "ab") as f:
        f.write(b'{"data":{},"kind":"note","prev":"blake3:00","seq":999}\n')


def _append_torn(p: Path) -> None:
    with open(p, "ab") as f:
        f.write(b'{"data":{"half')


def _edit_middle_same_size(p: Path) -> None:
    """Flip one byte of an early line, the size kept; once the file system's clock has moved past the last write.

    The file's times are what tell an edit in place that adds no byte: waited for, as an event
    (a probe file's modification time passing the stream's), never slept for.
    """
    before = os.stat(p).st_mtime_ns
    probe = p.with_name("probe")
    while True:
        probe.write_bytes(b"x")
        if os.stat(probe).st_mtime_ns > before:
            break
    probe.unlink()
    data = bytearray(p.read_bytes())
    i = data.index(b'"i":5,')
    data[i + 4] = ord("6")
    p.write_bytes(bytes(data))


MUTATIONS = {
    "last line edited": _edit_last_line,
    "truncated to a line": _truncate_to_a_line,
    "truncated mid-line": _truncate_mid_line,
    "replaced by another stream": _replace_with_another_stream,
    "rewritten in place": _replace_same_inode,
    "a line that does not chain appended": _append_garbage,
    "a torn line appended": _append_torn,
    "an early line edited, size kept": _edit_middle_same_size,
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_a_stream_changed_between_two_opens_is_judged_exactly_as_a_fresh_open_judges_it(
    tmp_path: Path, name: str
) -> None:
    here, there, mutated = _both(tmp_path, MUTATIONS[name])
    assert here == there
    if here[0] == "refused":
        assert _stream(tmp_path / "l").read_bytes() == mutated  # a refusal writes nothing


def test_an_unchanged_stream_is_checked_only_past_the_checkpoint_and_its_live_state_is_the_full_one(
    tmp_path: Path,
) -> None:
    root = tmp_path / "l"
    led = _make(root)
    t = led.task("t")
    t.append("note", {"again": True})
    assert t.stream.open_writer().resumed
    before = {cid: (c.stage, c.key) for cid, c in t.stream.live().result().calls.items()}
    assert before == {"call-1": ("completed", "k")}
    assert t.effect("k", {"q": 1}, lambda req: b"never sent") == b"served"  # resumed state: nothing resent
    t.close()


GROW = """
import sys, intentlog
with intentlog.open(sys.argv[1]) as led:
    t = led.task("t")
    t.append("note", {"by": "another process"})
    t.effect("k2", {"q": 2}, lambda req: b"other")
"""


def test_what_another_process_appended_meanwhile_is_checked_and_folded(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led = _make(root)
    env = {**os.environ, "PYTHONPATH": str(Path(intentlog.__file__).parent.parent)}
    subprocess.run([sys.executable, "-c", GROW, str(root)], env=env, check=True, timeout=60)
    t = led.task("t")
    t.append("note", {"after": True})
    assert t.stream.open_writer().resumed
    calls = {cid: (c.stage, c.key) for cid, c in t.stream.live().result().calls.items()}
    assert calls == {"call-1": ("completed", "k"), "call-2": ("completed", "k2")}
    t.close()
    assert [e.data.get("by") for e in led.task("t").events() if e.kind == "note"][-2:] == ["another process", None]
    fresh = tmp_path / "fresh"
    shutil.copytree(root, fresh)
    assert _outcome(intentlog.open(fresh), fresh)[2] == calls


# -- on an object store (SeaweedFS) ------------------------------------------------------------

STORE_OUTCOME = """
import json, sys, intentlog
from intentlog.errors import IntentlogError
url = sys.argv[1]
led = intentlog.open(url)
t = led.task("t")
try:
    live = t.stream.live()
except IntentlogError as exc:
    print(json.dumps(["refused", type(exc).__name__, str(exc).replace(url, "ROOT")]))
else:
    calls = {cid: [c.stage, c.key] for cid, c in live.result().calls.items()}
    t.close()
    print(json.dumps(["open", [[e.seq, e.kind, e.data] for e in led.task("t").events()], calls]))
"""


def _store_outcome_here(led: intentlog.Ledger, url: str) -> list[Any]:
    t = led.task("t")
    try:
        live = t.stream.live()
    except IntentlogError as exc:
        return ["refused", type(exc).__name__, str(exc).replace(url, "ROOT")]
    calls = {cid: [c.stage, c.key] for cid, c in live.result().calls.items()}
    t.close()
    return ["open", [[e.seq, e.kind, e.data] for e in led.task("t").events()], calls]


def _store_outcome_fresh(url: str) -> list[Any]:
    import json

    env = {**os.environ, "PYTHONPATH": str(Path(intentlog.__file__).parent.parent)}
    r = subprocess.run([sys.executable, "-c", STORE_OUTCOME, url], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got: list[Any] = json.loads(r.stdout)
    return got


def _segments(client: Any) -> list[str]:
    return sorted(k for k, _ in client.scan("tasks/t/s"))


def _rewrite_a_middle_segment(client: Any) -> None:
    key = next(k for k in _segments(client) if b'"pad"' in (client.get(k) or b""))
    data = client.get(key)
    i = data.index(b'"i":5,')
    client.delete(key)
    assert client.create(key, data[: i + 4] + b"6" + data[i + 5 :])


def _remove_the_last_data_segment(client: Any) -> None:
    for key in reversed(_segments(client)):
        if b'"kind":"call.completed"' in (client.get(key) or b""):
            client.delete(key)
            return
    raise AssertionError("no segment holds the call's completion")


def _replace_the_stream(client: Any) -> None:
    for key, _ in list(client.scan("tasks/t")):
        client.delete(key)


STORE_MUTATIONS = {
    "a middle segment rewritten": _rewrite_a_middle_segment,
    "the last data segment removed": _remove_the_last_data_segment,
    "the stream deleted and made again": _replace_the_stream,
}


@pytest.mark.parametrize("name", list(STORE_MUTATIONS))
def test_on_a_store_a_stream_changed_between_two_opens_is_judged_as_a_fresh_process_judges_it(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    import s3_server

    url = s3_server.ledger_url(monkeypatch)
    led = intentlog.open(url)
    t = led.task("t")
    with t.batch():
        for i in range(N):
            t.append("note", {"i": i, "pad": "x" * (i % 7)})
    t.effect("k", {"q": 1}, lambda req: b"served")
    t.close()
    assert t.stream._checked is not None
    STORE_MUTATIONS[name](s3_server.client_of(url))
    if name == "the stream deleted and made again":  # another writer makes a new stream under the id
        _store_outcome_fresh(url)
    here = _store_outcome_here(led, url)
    there = _store_outcome_fresh(url)
    assert here == there


def test_on_a_store_an_unchanged_stream_is_checked_only_past_what_was_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    import s3_server

    url = s3_server.ledger_url(monkeypatch)
    led = intentlog.open(url)
    t = led.task("t")
    with t.batch():
        for i in range(N):
            t.append("note", {"i": i})
    t.effect("k", {"q": 1}, lambda req: b"served")
    t.close()
    env = {**os.environ, "PYTHONPATH": str(Path(intentlog.__file__).parent.parent)}
    subprocess.run([sys.executable, "-c", GROW, url], env=env, check=True, timeout=120)
    t.append("note", {"after": True})
    assert t.stream.open_writer().resumed
    calls = {cid: (c.stage, c.key) for cid, c in t.stream.live().result().calls.items()}
    assert calls == {"call-1": ("completed", "k"), "call-2": ("completed", "k2")}
    t.close()


def test_an_open_accepting_damage_checks_and_folds_the_whole_stream_whatever_was_checked_before(
    tmp_path: Path,
) -> None:
    root = tmp_path / "l"
    led = _make(root)
    assert led.task("t").stream._checked is not None
    _edit_middle_same_size(_stream(root))
    fresh = tmp_path / "fresh"
    shutil.copytree(root, fresh)

    def opened(ledger: intentlog.Ledger) -> tuple[Any, ...]:
        t = ledger.task("t")
        w = t.stream.open_writer(accept_damage=True, accept_resend=True)
        assert not w.resumed
        calls = {cid: (c.stage, c.key, c.attempts) for cid, c in t.stream.live().result().calls.items()}
        t.close()
        return calls, [(e.kind, e.seq) for e in ledger.task("t").events()][-3:]

    assert opened(led) == opened(intentlog.open(fresh))
