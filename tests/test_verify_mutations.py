"""Mutated sealed streams (issue 12, tests that must exist): only library errors, and never a clean verdict.

A sealed record (heads.json written) is mutated the ways damage and forgers mutate it:
bytes flipped, lines deleted, duplicated or swapped, the file cut, and single values
edited with the chain re-computed and heads.json re-sealed. For every mutation

* ``verify``, ``Task.events``, ``Task.work_state`` and opening the task for writing raise
  nothing but :class:`intentlog.IntentlogError` subclasses (never a raw exception);
* ``verify`` reports a problem unless the mutated bytes are identical to the original.

Re-sealed value edits are drawn from edits the record can contradict (a re-sealed edit of
a free text field is undetectable by construction): ids, attempt numbers, results, refs,
request hashes, deleted protocol events.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.eventlog.canonical import dumps
from intentlog.eventlog.format import encode_line
from intentlog.heads import stream_head
from intentlog.projections.verify import HEADS_FILE, encode_heads, verify_path

FAKE = "blake3:" + "cd" * 32
BIG = b"B" * 5000


def _send(request: Any) -> bytes:
    return b'{"n": 1}' if request.get("q") != "big" else BIG


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("mut") / "ev"
    with intentlog.open(root) as led:
        t = led.task("t")
        t.effect("a", {"q": 1}, _send, interpret=orjson.loads)
        t.effect("b", {"q": "big"}, _send)
        t.append("note", {"text": "hello"})
    _reseal(root)
    assert verify_path(root).ok
    yield root


def _reseal(root: Path) -> None:
    (root / HEADS_FILE).write_bytes(encode_heads({"t": stream_head(root / "tasks" / "t.jsonl", "t")}))


def _rechain(events: list[dict[str, Any]]) -> bytes:
    out, prev = [], None
    for i, ev in enumerate(events):
        line = encode_line(ev["kind"], dumps(ev["data"]), prev, i, ev["ts"])
        out.append(line)
        prev = digest_bytes(line)
    return b"".join(out)


# -- raw mutations: the chain and the seal are not recomputed -------------------------------------

raw_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10**3)),
    st.tuples(st.just("duplicate"), st.integers(0, 10**3)),
    st.tuples(st.just("swap"), st.integers(0, 10**3)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
)


def _apply_raw(data: bytes, m: tuple[Any, ...]) -> bytes:
    lines = data.splitlines(keepends=True)
    op = m[0]
    if op == "flip":
        i = m[1] % len(data)
        return data[:i] + bytes([data[i] ^ m[2]]) + data[i + 1 :]
    if op == "truncate":
        return data[: m[1] % len(data)]
    i = m[1] % len(lines)
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "swap":
        j = (i + 1) % len(lines)
        lines[i], lines[j] = lines[j], lines[i]
    return b"".join(lines)


# -- value edits: re-chained and re-sealed, as a forger does -------------------------------------


def _edits(events: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Every edit of one event (or deletion) that the record contradicts, with a name."""
    out: list[tuple[str, list[dict[str, Any]]]] = []

    def edited(i: int, field: str, value: Any) -> list[dict[str, Any]]:
        copy = orjson.loads(orjson.dumps(events))
        copy[i]["data"][field] = value
        return copy

    for i, ev in enumerate(events):
        kind, d = ev["kind"], ev["data"]
        if "call" in d:
            out.append((f"{i} {kind} call", edited(i, "call", "call-99")))
        if "attempt" in d:
            out.append((f"{i} {kind} attempt", edited(i, "attempt", d["attempt"] + 3)))
        for name, value in d.items():
            if isinstance(value, dict) and "digest" in value and "size" in value:
                out.append((f"{i} {kind} {name} digest", edited(i, name, {"digest": FAKE, "size": value["size"]})))
        if kind == "call.completed":
            out.append((f"{i} result", edited(i, "result", {"value": {"n": 2}})))
            out.append((f"{i} result raw, no digest", edited(i, "result", {"raw": True, "response": {"size": 3}})))
            out.append((f"{i} result bare", edited(i, "result", 5)))
        if kind == "attempt.observed":
            out.append((f"{i} response, no digest", edited(i, "response", {"size": d["response"]["size"]})))
        if kind == "call.manifest":
            out.append((f"{i} request_hash", edited(i, "request_hash", FAKE)))
        if kind == "task.created":
            out.append((f"{i} task", edited(i, "task", "other")))
        if kind in ("attempt.interpreted", "attempt.observed", "attempt.started", "call.manifest", "call.requested"):
            out.append((f"{i} delete {kind}", events[:i] + events[i + 1 :]))
    return out


# -- the checks ------------------------------------------------------------------------------------


def _only_library_errors(root: Path) -> bool:
    """Run every reader and the writer over ``root``; a raw exception fails the test. Returns verify's ok."""
    report = verify_path(root)  # verify raises for nothing it finds: everything is in the report
    with intentlog.open(root, create=False) as led:
        t = led.task("t")
        try:
            list(t.events())
        except intentlog.IntentlogError:
            pass
        try:
            t.work_state()
        except intentlog.IntentlogError:
            pass
        try:
            t.append("note", {"after": "mutation"})  # opening for writing: repair or refusal, nothing raw
        except intentlog.IntentlogError:
            pass
    return report.ok


def _case(base: Path, stream: bytes, *, reseal: bool) -> tuple[bool, bool]:
    """(verify ok, bytes unchanged) for ``stream`` in place of the base's stream."""
    original = (base / "tasks" / "t.jsonl").read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ev"
        shutil.copytree(base, root)
        (root / "tasks" / "t.jsonl").write_bytes(stream)
        if reseal:
            _reseal(root)
        return _only_library_errors(root), stream == original


@given(raw_mutation)
def test_a_damaged_sealed_stream_never_verifies_clean(base: Path, mutation: tuple[Any, ...]) -> None:
    """Byte flips, line deletions, duplications, swaps and cuts of a sealed stream: verify reports each."""
    data = (base / "tasks" / "t.jsonl").read_bytes()
    ok, unchanged = _case(base, _apply_raw(data, mutation), reseal=False)
    assert ok == unchanged, mutation


@given(st.data())
def test_a_resealed_forgery_never_verifies_clean(base: Path, data: st.DataObject) -> None:
    """A value edit or deleted protocol event, re-chained and re-sealed: verify still reports it."""
    events = [orjson.loads(line) for line in (base / "tasks" / "t.jsonl").read_bytes().splitlines()]
    name, forged = data.draw(st.sampled_from(_edits(events)))
    ok, unchanged = _case(base, _rechain(forged), reseal=True)
    assert not unchanged and not ok, name


def test_every_listed_edit_is_caught(base: Path) -> None:
    """The whole edit list, not a sample: each re-sealed edit is reported (and nothing raw escapes)."""
    events = [orjson.loads(line) for line in (base / "tasks" / "t.jsonl").read_bytes().splitlines()]
    edits = _edits(events)
    assert len(edits) > 25
    missed = [name for name, forged in edits if _case(base, _rechain(forged), reseal=True)[0]]
    assert missed == []


def test_re_running_the_calls_after_each_edit_raises_only_library_errors(base: Path) -> None:
    """After every re-sealed edit, running the task's calls again raises only IntentlogError subclasses."""
    events = [orjson.loads(line) for line in (base / "tasks" / "t.jsonl").read_bytes().splitlines()]
    raw: list[str] = []
    for name, forged in _edits(events):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "ev"
            shutil.copytree(base, root)
            (root / "tasks" / "t.jsonl").write_bytes(_rechain(forged))
            _reseal(root)
            with intentlog.open(root, create=False) as led:
                t = led.task("t")
                for key, request in (("a", {"q": 1}), ("b", {"q": "big"})):
                    try:
                        t.effect(key, request, _send, interpret=orjson.loads if key == "a" else None)
                    except intentlog.IntentlogError:
                        pass
                    except Exception as exc:  # the defect this test pins: any raw exception is listed
                        raw.append(f"{name}: key {key}: {type(exc).__name__}: {exc}")
    assert raw == []
