"""Fork: a new task that reuses another's record up to a call, so the script can run again from there.

``fork_task(ledger, "review", "call-3", "review.v2")`` writes a new stream (``ledger``: a
:class:`ForkLedger`, such as a :class:`~intentlog.Ledger` on either storage; :meth:`intentlog.Ledger.fork`
opens the new task):

* line 0: its own ``task.created``;
* lines 1..N: byte-for-byte copies of the original's events 1..N -- the events before
  the first event of the call's key (every call of that key goes, so a resumed call's
  chain is dropped whole) -- with the same ``seq``, ``kind``, ``ts`` and ``data`` bytes;
  only ``prev`` differs, re-chained from the new line 0;
* line N+1: ``task.forked {from_task, from_call, key, upto_seq: N, from_head, from_stream,
  note}`` (with ``accept_risk: true, unknown: [calls]`` when the operator forked past an
  unknown effect), where ``from_head`` is the digest of the original's line N -- so an auditor can
  check the copied prefix against the original (:func:`check_fork`).

The new stream is created through the stream seam (:class:`~intentlog.eventlog.storage.StreamStorage`)
in one atomic create: it exists whole or not at all, and an existing task (or, on a store,
an id once used) is never overwritten. The original is read through the seam too, and only
read (no lock), so it stays byte-identical; its trusted events are the task's own reading
of its stream (a folder's torn tail is not part of the record; on a store, where a segment
is whole or absent, any bad line is damage), and damage is :class:`CorruptStream` with
nothing written. Artifact refs stay valid: the objects are shared by the ledger and inline
payloads are copied with their events. Running the script against the new task then
replays the copied calls from the record and runs the forked call -- with changed input,
if the script changed it -- as a new call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol

from ._internal.commands import hint_root, reconcile_commands
from ._internal.digest import digest_bytes
from .errors import CorruptStream, EffectUnknown, IntentlogError, LedgerError, UnknownCall, UsageError
from .eventlog.canonical import dumps
from .eventlog.format import FORMAT, TASK_CREATED, Event, check_task_id, encode_line, new_stream_id, utc_now
from .projections.workstate import RECONCILE_EFFECT, CallState, WorkStateFold

if TYPE_CHECKING:
    from .eventlog.storage import StreamStorage

__all__ = ["ForkLedger", "check_fork", "default_fork_id", "fork_task"]

_DATA_START: Final = b'{"data":'
_KIND_MARK: Final = b',"kind":'


class _Events(Protocol):
    def events(self) -> Iterator[Event]: ...


class ForkLedger(Protocol):
    """What fork needs of a ledger (a :class:`~intentlog.Ledger` is one): its streams, and a task's reading."""

    @property
    def location(self) -> str: ...

    @property
    def streams(self) -> StreamStorage: ...

    def task(self, task_id: str) -> _Events: ...


def _data_bytes(line: bytes) -> bytes:
    """The exact ``data`` JSON of a canonical line (keys are sorted: data first, kind right after it)."""
    end = line.rindex(_KIND_MARK)  # kind, prev, seq and ts after it never contain the mark
    return line[len(_DATA_START) : end]


def _where(ledger: ForkLedger, task_id: str) -> str:
    return f"{ledger.location}: task {task_id!r}"


def _exists(ledger: ForkLedger, task_id: str) -> bool:
    return task_id in ledger.streams.names()


def _source(ledger: ForkLedger, task_id: str) -> Iterator[tuple[bytes, Event]]:
    """The trusted lines of ``task_id``'s stream with their events, read through the stream seam.

    Which lines are trusted is the task's own reading (:meth:`~intentlog.Task.events`); each
    one's bytes are then taken from :meth:`StreamStorage.read` and checked against the
    event's digest, so the bytes copied are exactly the ones the events were read from.
    """
    events = list(ledger.task(task_id).events())
    if not events:
        return
    try:
        data = ledger.streams.read(task_id)
    except FileNotFoundError:
        raise CorruptStream(_where(ledger, task_id), 1, "the stream was removed while being read") from None
    start = 0
    for ev in events:
        end = data.find(b"\n", start)
        line = data[start : end + 1] if end >= 0 else b""
        if digest_bytes(line) != ev.digest:
            raise CorruptStream(_where(ledger, task_id), ev.seq + 1, "the stream changed while being read")
        yield line, ev
        start = end + 1


def _cut(ledger: ForkLedger, task_id: str, from_call: str) -> tuple[int, str, list[CallState]]:
    """The seq of the first event of ``from_call``'s key (a call id, or a key such as ``turn-3``), the key, and
    every call whose effect is unknown, whether the copy drops it (a re-run of the fork would send it
    again) or copies it (the fork and the original would each hold the same unknown attempt)."""
    fold = WorkStateFold(task_id)
    for ev in ledger.task(task_id).events():
        fold.apply(ev)
    ws = fold.result()
    if from_call in ws.calls:
        key = ws.calls[from_call].key
    elif from_call in ws.keys:
        key = from_call
    else:
        raise UnknownCall(task_id, from_call)
    cut = min(c.first_seq for c in ws.calls.values() if c.key == key)
    # a call of another key begun before the cut and continued after it would lose its
    # attempts in the copy and look never sent: a re-run would pay again
    spanning = sorted(c.call_id for c in ws.calls.values() if c.key != key and c.first_seq < cut <= c.last_seq)
    if spanning:
        raise UsageError(
            f"cannot fork {task_id!r} before {from_call!r}: {', '.join(spanning)} began before it and went on "
            "after it, so the copy would lose their attempts and a re-run would send them again; "
            "fork from an earlier call"
        )
    # dropped (a re-run of the fork sends it again) or copied (the fork then holds the same
    # unknown attempt as the original, and settling each on its own, --resend, pays twice)
    unknown = [c for c in ws.calls.values() if c.provider_effect == "unknown"]
    return cut, key, unknown


def default_fork_id(ledger: ForkLedger, task_id: str) -> str:
    """The id a fork of ``task_id`` takes when none is given: ``<task>.fork-<n>``, the first one free."""
    taken = set(ledger.streams.names())
    n = 1
    while True:
        candidate = f"{task_id}.fork-{n}"
        check_task_id(candidate)
        if candidate not in taken:
            return candidate
        n += 1


def fork_task(
    ledger: ForkLedger,
    task_id: str,
    from_call: str,
    new_id: str | None = None,
    *,
    note: str | None = None,
    accept_risk: bool = False,
) -> str:
    """Start task ``new_id`` (default ``<task>.fork-<n>``) from ``task_id``'s record before ``from_call``.

    ``from_call`` is a call id (``call-3``) or a key (``turn-3``); the copy stops before
    the first event of that key. Returns the new task's id. Raises
    :class:`UnknownCall` for a call or key the task does not have, :class:`UsageError`
    when the task does not exist or ``new_id`` does; writes nothing then.

    A fork never re-sends an unknown effect blind, nor doubles one: when a call the copy
    leaves out (the forked one, or any later one) has an attempt whose effect is unknown,
    running the script on the fork would send it again; when a call the copy keeps has
    one, the fork and the original would each hold that attempt, and settling each on its
    own (``reconcile --resend``) could pay twice. Either way :class:`EffectUnknown` is
    raised and nothing is written -- reconcile it in the original first.
    ``accept_risk=True`` forks anyway and records the risk in ``task.forked``
    (``accept_risk: true, unknown: [calls]``).
    """
    check_task_id(task_id)
    if note is not None and not isinstance(note, str):
        raise UsageError(f"note must be a string, not {type(note).__name__}")
    if not isinstance(accept_risk, bool):
        raise UsageError(f"accept_risk must be True or False, not {accept_risk!r}")
    if not _exists(ledger, task_id):
        raise UsageError(f"no task {task_id!r} in {ledger.location}; see 'intentlog tasks'")
    target = check_task_id(new_id) if new_id is not None else default_fork_id(ledger, task_id)
    if target == task_id:
        raise UsageError("a fork needs a new task id, not the original's")
    if _exists(ledger, target):
        raise UsageError(f"task {target!r} already exists in {ledger.location}; name another with --as")
    cut, key, unknown = _cut(ledger, task_id, from_call)
    if unknown and not accept_risk:
        first = unknown[0]
        dropped = [c for c in unknown if c.first_seq >= cut]
        copied = [c for c in unknown if c.first_seq < cut]
        why = []
        if dropped:
            names = ", ".join(f"{c.call_id} (key {c.key!r})" for c in dropped)
            why.append(f"drops {names}, whose effect is unknown, so running the script on the fork would send it again")
        if copied:
            names = ", ".join(f"{c.call_id} (key {c.key!r})" for c in copied)
            why.append(
                f"copies {names}, whose effect is unknown, so the fork and the original would each hold that "
                "attempt and settling each on its own could pay twice"
            )
        as_new = f" --as {new_id}" if new_id is not None else ""
        raise EffectUnknown(
            call_id=first.call_id,
            key=first.key,
            reason=f"forking {task_id!r} before {from_call!r} " + "; it ".join(why),
            next_operation=RECONCILE_EFFECT,
            detail=f"reconcile it in the original first ('intentlog reconcile {task_id} {first.call_id} --served' "
            "or '--not-served'), or fork accepting the duplicate risk, which the new task records "
            f"(accept_risk=True; 'intentlog fork {task_id} --from {from_call}{as_new} --accept-risk')",
            commands=reconcile_commands(task_id, first.call_id, hint_root(ledger.location)),
        )
    upto = cut - 1
    head: list[str] = []  # the original's line 0 stream id and the digest of line `upto`
    stream: list[str] = []

    def chunks() -> Iterator[bytes]:
        created = encode_line(
            TASK_CREATED, dumps({"format": FORMAT, "stream": new_stream_id(), "task": target}), None, 0, utc_now()
        )
        prev = digest_bytes(created)
        yield created
        for line, ev in _source(ledger, task_id):
            if ev.seq == 0:
                stream.append(str(ev.data.get("stream")))
            if ev.seq == upto:
                head.append(ev.digest)
            if ev.seq == 0:
                continue
            if ev.seq > upto:
                break
            copy = encode_line(ev.kind, _data_bytes(line), prev, ev.seq, ev.ts)
            prev = digest_bytes(copy)
            yield copy
        if not head:  # pragma: no cover - the cut lies inside the trusted record read above
            raise IntentlogError(f"{_where(ledger, task_id)}: the record ends before seq {upto}; cannot fork")
        forked = {
            "from_task": task_id,
            "from_call": from_call,
            "key": key,
            "upto_seq": upto,
            "from_head": head[0],
            "from_stream": stream[0] if stream else "",
            "note": note,
        }
        if unknown:
            forked["accept_risk"] = True
            forked["unknown"] = [c.call_id for c in unknown]
        yield encode_line("task.forked", dumps(forked), prev, upto + 1, utc_now())

    records = [line[:-1] for line in chunks()]
    try:
        ledger.streams.create(target, records)
    except LedgerError:
        # ours only if it holds our very records (a retried create whose answer was lost: line 0
        # carries a fresh random stream id, so no other writer's stream can match)
        try:
            held: bytes | None = ledger.streams.read(target)
        except (FileNotFoundError, IntentlogError):
            held = None
        if held != b"".join(r + b"\n" for r in records):
            raise UsageError(f"task {target!r} was created meanwhile in {ledger.location}; name another") from None
    return target


def check_fork(ledger: ForkLedger, task_id: str) -> list[str]:
    """What differs between a fork's copied prefix and its original; empty when they match.

    Compares each copied event's ``seq``, ``kind``, ``ts`` and exact data bytes with the
    original's, and ``from_head`` with the digest of the original's line ``upto_seq``.
    Takes no lock and writes nothing.
    """
    check_task_id(task_id)
    copied: list[tuple[bytes, Any]] = []
    forked: dict[str, Any] | None = None
    for line, ev in _source(ledger, task_id):
        if ev.kind == "task.forked":
            forked = ev.data
            break
        if ev.seq > 0:
            copied.append((line, ev))
    if forked is None:
        return [f"task {task_id!r} is not a fork (no task.forked)"]
    problems: list[str] = []
    origin = str(forked.get("from_task"))
    upto = forked.get("upto_seq")
    if len(copied) != upto:
        problems.append(f"the fork copies {len(copied)} events but says upto_seq {upto}")
    try:
        check_task_id(origin)
    except IntentlogError as exc:
        return [*problems, f"the original {origin!r} cannot be named: {exc}"]
    if not _exists(ledger, origin):
        return [*problems, f"the original {origin!r} is not in this ledger"]
    mine = iter(copied)
    for line, ev in _source(ledger, origin):
        if ev.seq == upto and ev.digest != forked.get("from_head"):
            recorded = forked.get("from_head")
            problems.append(f"the original's seq {upto} hashes to {ev.digest}, the fork recorded {recorded}")
        if ev.seq == 0:
            if ev.data.get("stream") != forked.get("from_stream"):
                problems.append(f"the original's stream id is {ev.data.get('stream')!r}, not the one forked")
            continue
        if not isinstance(upto, int) or ev.seq > upto:
            break
        got = next(mine, None)
        if got is None:
            problems.append(f"the fork lacks the original's seq {ev.seq}")
            break
        cline, cev = got
        if (cev.seq, cev.kind, cev.ts, _data_bytes(cline)) != (ev.seq, ev.kind, ev.ts, _data_bytes(line)):
            problems.append(f"seq {ev.seq} differs from the original's ({ev.kind} vs the fork's {cev.kind})")
    return problems
