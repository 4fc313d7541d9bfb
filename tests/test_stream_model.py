"""A stateful model of one stream (STYLE 17): the stream against a plain list.

Rules append, batch, reopen (through a second Ledger object, which must hand back the
same handle), leave a crash tail behind a closed writer, send a stale ``expected_seq``,
send bad data, and make one write or sync fail. The model is a list of ``(kind, data)``
plus the bytes of a torn tail not yet repaired.

Invariant, checked after every step: *the stream read back equals the model and its
chain verifies* — both by an independent reading of the raw bytes and through
``events()``; a torn tail is exactly the injected bytes and ignored by readers (a crash
never leaves a whole event line; that damage is refused, see test_storage_repair.py).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from strategies import BAD_VALUES, TS_RE, b3, crash_tails, event_data, raw_lines, user_kinds

import intentlog
import intentlog.eventlog.writer as writer_mod
from intentlog import Conflict, NotSerializable, ReservedKind, StreamPoisoned

Model = list[tuple[str, Any]]  # (kind, data); data None for a task.created whose stream id is random

appends = st.tuples(user_kinds, event_data)


@contextmanager
def failing(name: str, at_call: int, how: str) -> Iterator[None]:
    """Make the writer's ``name`` (``write_all`` or ``_fdatasync``) fail once, on its ``at_call``-th call (1-based).

    ``how`` is "nothing" (fail before writing) or "half" (write half the bytes, then fail:
    a short write followed by ENOSPC).
    """
    real: Callable[..., Any] = getattr(writer_mod, name)
    calls = 0

    def fake(fd: int, *args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls != at_call:
            return real(fd, *args)  # type: ignore[no-any-return]
        if how == "half":
            data = bytes(args[0])
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        raise OSError(errno.EIO, "Input/output error (injected)")

    setattr(writer_mod, name, fake)
    try:
        yield
    finally:
        setattr(writer_mod, name, real)


def _suspect(tail: bytes) -> bool:
    """A whole first line that parses as an event object but does not chain (DESIGN §4 rule 4: suspect)."""
    first, nl, _ = tail.partition(b"\n")
    if not nl:
        return False
    try:
        obj = orjson.loads(first)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and set(obj) == {"data", "kind", "prev", "seq", "ts"}


class StreamMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="intentlog-model-"))
        self.root = self.dir / "ledger"
        self.ledger = intentlog.open(self.root)
        self.task = self.ledger.task("t")
        self.path = self.ledger.stream_path("t")
        self.model: Model = []
        self.tail: bytes | None = None  # injected bytes after the last good line, not yet repaired
        self.tail_at = (0, 0)  # (1-based line, byte offset) where the tail starts
        self.writer_open = False
        self.poisoned = False
        self.quarantined: dict[str, bytes] = {}  # quarantine file -> the tail it must hold

    # -- the model's view of opening a writer ----------------------------------------

    def _opening(self) -> None:
        """The next write opens the writer: it creates the stream or repairs its tail first."""
        if self.writer_open:
            return
        self.writer_open = True
        if self.tail is not None:
            line, offset = self.tail_at
            if offset == 0:  # nothing trustworthy was left: the stream starts again
                self.model = [("task.created", None)]
            digest = b3(self.tail)
            qfile = f"quarantine/t.{digest.split(':')[1][:32]}.bin"
            self.quarantined[qfile] = self.tail
            self.model.append(
                (
                    "stream.repaired",
                    {
                        "line": line,
                        "offset": offset,
                        "suspect": _suspect(self.tail),
                        "quarantined": {
                            "file": qfile,
                            "digest": digest,
                            "size": len(self.tail),
                        },
                    },
                )
            )
            self.tail = None
        elif not self.model:
            self.model.append(("task.created", None))

    def _size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def _leave_tail(self, tail: bytes, offset: int) -> None:
        self.tail = tail
        self.tail_at = (len(self.model) + 1, offset)

    # -- rules ------------------------------------------------------------------------

    @rule(ev=appends, with_expected=st.booleans())
    def append(self, ev: tuple[str, dict[str, Any]], with_expected: bool) -> None:
        kind, data = ev
        if self.poisoned:
            with pytest.raises(StreamPoisoned, match="open it again"):
                self.task.append(kind, data)
            return
        self._opening()
        expected = len(self.model) if with_expected else None
        got = self.task.append(kind, data, expected_seq=expected)
        self.model.append((kind, data))
        assert (got.seq, got.kind, got.data) == (len(self.model) - 1, kind, data)

    @rule(evs=st.lists(appends, min_size=0, max_size=6))
    def batch(self, evs: list[tuple[str, dict[str, Any]]]) -> None:
        if self.poisoned:
            with pytest.raises(StreamPoisoned), self.task.batch():
                for kind, data in evs:
                    self.task.append(kind, data)
            return
        self._opening()
        with self.task.batch():
            for kind, data in evs:
                self.task.append(kind, data)
                self.model.append((kind, data))

    @rule(new_ledger=st.booleans())
    def reopen(self, new_ledger: bool) -> None:
        """Close the handle (as a new process would start); a second Ledger object must give back the same handle."""
        self.task.close()
        if new_ledger:
            self.ledger = intentlog.open(self.root)
        again = self.ledger.task("t")
        assert again is self.task
        self.writer_open = False
        self.poisoned = False

    @precondition(lambda self: self.tail is None)
    @rule(data=st.data())
    def crash_tail(self, data: st.DataObject) -> None:
        """The writer dies and leaves a torn or garbage tail: the next writer must quarantine it."""
        self.task.close()
        self.writer_open = self.poisoned = False
        lines = raw_lines(self.path) if self.path.exists() else []
        tail = data.draw(crash_tails(lines[-1] if lines else b"\x01\x02"), label="tail")
        offset = self._size()
        with open(self.path, "ab") as f:
            f.write(tail)
        self._leave_tail(tail, offset)

    @rule(delta=st.sampled_from([-3, -2, -1, 1, 2, 3]))
    def stale_expected_seq(self, delta: int) -> None:
        """An append whose expected_seq is not the next seq raises Conflict and writes nothing."""
        if self.poisoned:
            with pytest.raises(StreamPoisoned):
                self.task.append("note", {"stale": True}, expected_seq=delta)
            return
        self._opening()
        actual = len(self.model)
        with pytest.raises(Conflict) as info:
            self.task.append("note", {"stale": True}, expected_seq=actual + delta)
        assert (info.value.expected_seq, info.value.actual_seq) == (actual + delta, actual)
        assert f"expected the next seq to be {actual + delta} but it is {actual}" in str(info.value)

    @rule(bad=st.sampled_from(BAD_VALUES), kind=st.sampled_from(["note", "call.manifest", "Bad Kind"]))
    def bad_data(self, bad: tuple[Any, str], kind: str) -> None:
        """Bad data or a bad kind is refused before the writer opens: nothing is written, the handle is unharmed."""
        if kind == "note":
            with pytest.raises(NotSerializable, match=r"\$\.x\[0\]"):
                self.task.append(kind, {"x": [bad[0]]})
        elif kind == "call.manifest":
            with pytest.raises(ReservedKind):
                self.task.append(kind, {})
        else:
            with pytest.raises(NotSerializable, match="Bad Kind"):
                self.task.append(kind, {})

    @precondition(lambda self: not self.poisoned)
    @rule(
        failure=st.sampled_from([("_fdatasync", "nothing"), ("write_all", "nothing"), ("write_all", "half")]),
        evs=st.lists(appends, min_size=1, max_size=4),
        in_batch=st.booleans(),
        data=st.data(),
    )
    def write_failure(
        self,
        failure: tuple[str, str],
        evs: list[tuple[str, dict[str, Any]]],
        in_batch: bool,
        data: st.DataObject,
    ) -> None:
        """A failed write or sync raises StreamPoisoned; the handle then refuses every append until reopened."""
        name, how = failure
        _ = self.task.next_seq  # open the writer (and repair) before the fault is armed
        self._opening()
        if not in_batch:
            evs = evs[:1]
        at = 1 if name == "_fdatasync" else data.draw(st.integers(1, len(evs)), label="failing append")
        with failing(name, at, how), pytest.raises(StreamPoisoned) as info:
            if in_batch:
                with self.task.batch():
                    for kind, d in evs:
                        self.task.append(kind, d)
            else:
                self.task.append(*evs[0])
        assert "injected" in str(info.value) and str(self.path) in str(info.value)
        if name == "_fdatasync":
            # every line was written; only their durability is unknown
            self.model.extend(evs)
        else:
            before = evs[: at - 1]
            self.model.extend(before)
            if how == "half":
                lines = raw_lines(self.path)
                self._leave_tail(lines[-1], self._size() - len(lines[-1]))
        self.poisoned = True
        with pytest.raises(StreamPoisoned):
            self.task.append("note", {"after": "poison"})
        with pytest.raises(StreamPoisoned):
            self.task.sync()

    # -- the invariant ------------------------------------------------------------------

    @invariant()
    def stream_read_back_equals_model_and_its_chain_verifies(self) -> None:
        """At every step the stream read back equals the model and its chain verifies."""
        if not self.path.exists():
            assert self.model == [] and self.tail is None
            return
        lines = raw_lines(self.path)
        n = len(self.model)
        good, tail = lines[:n], b"".join(lines[n:])
        assert tail == (self.tail or b""), f"unexpected bytes after the model's {n} lines: {tail[:80]!r}"

        # 1. independently of intentlog: parse, canonical form, seq and chain
        prev = None
        for i, (line, (kind, data)) in enumerate(zip(good, self.model, strict=True)):
            assert line.endswith(b"\n")
            obj = orjson.loads(line)
            assert orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n" == line
            assert (obj["seq"], obj["kind"], obj["prev"]) == (i, kind, prev)
            assert TS_RE.match(obj["ts"])
            if kind == "task.created":
                assert i == 0 and obj["data"]["task"] == "t" and obj["data"]["format"] == "intentlog/1"
            elif kind == "stream.repaired":
                reason = obj["data"].pop("reason")
                assert isinstance(reason, str) and reason
                assert obj["data"] == data
            else:
                assert obj["data"] == data
            prev = b3(line)

        for qfile, qbytes in self.quarantined.items():
            assert (self.root / qfile).read_bytes() == qbytes, "quarantine keeps the tail byte for byte"

        # 2. through intentlog's reader, which must agree and handle the tail as documented
        seen = list(self.task.events())  # a crash tail (never a whole event) ends reading quietly
        assert [ev.digest for ev in seen] == [b3(line) for line in good]
        assert [(ev.kind, ev.data) for ev in seen if ev.kind not in ("task.created", "stream.repaired")] == [
            (k, d) for k, d in self.model if k not in ("task.created", "stream.repaired")
        ]

    def teardown(self) -> None:
        try:
            self.task.close()
            # quarantine holds exactly the repaired tails, nothing else
            assert sorted(os.listdir(self.ledger.quarantine_dir)) == sorted(q.split("/")[1] for q in self.quarantined)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


StreamMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=25, deadline=None)
TestStreamModel = StreamMachine.TestCase
