"""Child tasks: a parent spawns children by id, and joins their results once each has returned one.

``task.spawn(child_id, payload)`` appends ``task.child_spawned {child, payload}`` to the
parent (synced) **before** the child exists, then creates the child's stream with
``task.spawned {parent, payload}``: a crash in between leaves the link recorded and the
re-run creates the child; it is never lost. The child id is the idempotency key: a re-run
spawning the same id records nothing more and reuses the child (the same payload is
required: another payload under a spawned id is refused -- a changed child needs a new
id), and a task that exists under that id but was not spawned by this parent is refused.
An id of the form of a backlog's own streams (``NAME.backlog``, ``NAME.item.ITEM``) or an
inbox (``ID.inbox``) is refused before anything is written: a backlog would take that
stream as its own.

A child returns its result with ``child.finish(result)`` (``task.returned {result}``,
JSON, once: a second finish returns the first result). ``task.join(children)`` reads each
child's stream (no lock): when all returned, it appends ``task.joined {children}`` and
returns their results by id; otherwise it raises
:class:`~intentlog.idioms.errors.ChildrenPending` naming each blocked child with its
state and safe next step (from its own status), and records nothing.

``task.spawn(child_id, payload, backlog=NAME)`` sends the child to the backlog ``NAME``:
the name is recorded in the link (``task.child_spawned {child, payload, backlog}``) and the
child is added as an item of that backlog (by the child id, once), run there by that
backlog's own step and workers. A re-run naming another backlog for a spawned child is
refused (nothing written); ``run=`` (the child run here) and ``backlog=`` exclude each
other. Outside a runner the child is added to that backlog at once.

Inside a runner's suspending context (:mod:`intentlog.idioms.suspend`; a backlog worker),
each child is handed to the runner once its link is recorded (a backlog adds it as an
item, by the child id, of its own backlog or of the one the link names, so a re-run adds
nothing twice), and a join whose children have
not all returned raises :class:`~intentlog.idioms.errors.Suspended` naming them instead
of waiting -- or, once every child not returned is settled without a result (a failed
item), ``ChildrenPending`` naming those.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import orjson

from .._internal.commands import complete, hint_root
from ..errors import IntentlogError, NotSerializable, UsageError
from ..eventlog.canonical import dumps
from ..eventlog.format import check_task_id
from ..projections.backlogs import BACKLOG_NAME_RE, BACKLOG_SUFFIX, children_there
from ..projections.idioms import CHILD_SPAWNED, INBOX_SUFFIX, JOINED, RETURNED, SPAWNED, IdiomState, idiom_state
from ..stream import as_recorded
from . import state
from .errors import ChildrenPending, Suspended
from .suspend import runner

if TYPE_CHECKING:
    from ..stream import TaskStream
    from .events import TaskHandles

__all__ = ["finish", "hand_over", "join", "settled_child", "spawn"]

_pause = time.sleep
_T = TypeVar("_T")
_ITEM_INFIX = ".item."  # a backlog's item task is NAME.item.ITEM (intentlog.backlog.model.item_task_id)


def _json(what: str, value: Any) -> Any:
    """``value`` as the record holds it (credentials replaced): the re-run compares the same."""
    return as_recorded(_plain_json(what, value))


def _plain_json(what: str, value: Any) -> Any:
    """``value`` as JSON gives it back, credentials still in it (for a check that refuses them)."""
    try:
        raw = dumps(value)
    except NotSerializable as exc:
        why = str(exc).split(": ", 1)[-1]
        raise NotSerializable(f"{what} is not exact JSON ({why}); nothing was written", path=exc.path) from exc
    return orjson.loads(raw)


def spawn(
    ledger: TaskHandles, parent: TaskStream, child_id: str, payload: Any = None, *, hand: bool = True,
    backlog: str | None = None,
) -> TaskStream:  # fmt: skip
    """Record the link, then create the child (see the module docstring); the child's stream.

    ``hand``: give the child to the runner now (False: the caller does, with :func:`hand_over`).
    ``backlog``: the backlog the child is an item of (None: the runner's own, if any).
    """
    check_task_id(child_id)
    if backlog is not None and (not isinstance(backlog, str) or BACKLOG_NAME_RE.match(backlog) is None):
        raise UsageError(
            f"child {child_id!r} of task {parent.id!r}: backlog name {backlog!r} must be letters, digits, '_' or "
            "'-' (no dot), starting with a letter or digit, at most 64 characters; nothing was written"
        )
    if child_id.endswith(INBOX_SUFFIX):
        raise UsageError(
            f"child id {child_id!r} names an inbox (the stream {child_id[: -len(INBOX_SUFFIX)]!r}'s signals go to); "
            "pick a child id that does not end in '.inbox'; nothing was written"
        )
    if child_id.endswith(BACKLOG_SUFFIX) or _ITEM_INFIX in child_id:
        raise UsageError(
            f"child id {child_id!r} has the form of a backlog's own stream ('NAME{BACKLOG_SUFFIX}') or item task "
            f"('NAME{_ITEM_INFIX}ITEM'): a backlog would take it as its own; pick a child id without "
            f"{_ITEM_INFIX!r} that does not end in {BACKLOG_SUFFIX!r}; nothing was written"
        )
    if child_id == parent.id:
        raise UsageError(f"task {parent.id!r} cannot spawn itself; nothing was written")
    for what, tid in (("child id", child_id), ("parent id", parent.id)):
        if as_recorded(tid) != tid:  # the links would record it redacted: a link to no task
            raise UsageError(
                f"a child of task {parent.id!r}: the {what} has the shape of a credential, which every record "
                "replaces with '[REDACTED]'; pick an id that names the work, not a key; nothing was written"
            )
    if backlog is not None and hand is False:
        raise UsageError(
            f"child {child_id!r} of task {parent.id!r}: run= runs the child here and backlog= sends it to that "
            "backlog's workers; give one of them; nothing was written"
        )
    given = _plain_json(f"the payload of child {child_id!r} of task {parent.id!r}", payload)
    value = as_recorded(given)
    child = ledger.task(child_id).stream
    target: _Adds | None = None  # the backlog handle a new link was checked against (no runner)
    with parent.mutex:
        spawned = state.current(parent).children
        if child_id in spawned:
            if spawned[child_id] != value:
                raise UsageError(
                    f"task {parent.id!r} spawned child {child_id!r} with another payload; a changed child needs a "
                    "new id; nothing was written"
                )
            was = state.current(parent).child_backlogs.get(child_id)
            if was != backlog:
                raise UsageError(
                    f"task {parent.id!r} spawned child {child_id!r} "
                    f"{'in backlog ' + repr(was) if was else 'with no backlog named'}, not "
                    f"{'in backlog ' + repr(backlog) if backlog else 'with none'}; a child runs where it was "
                    "first sent: spawn it as before, or the new work under a new id; nothing was written"
                )
        else:
            theirs = idiom_state(child.events()).parent if child.exists() else None
            if child.exists() and theirs != parent.id:
                raise UsageError(
                    f"task {child_id!r} already exists and was not spawned by {parent.id!r} (its parent: {theirs!r}); "
                    "pick another child id; nothing was written"
                )
            target = _refusals(ledger, parent, child_id, given, backlog)  # a credential in it is refused there
            link = {"child": child_id, "payload": value}
            if backlog is not None:
                link["backlog"] = backlog
            state.record(parent, CHILD_SPAWNED, link)
    _create(child, parent.id, value)
    if hand or backlog is not None:
        hand_over(parent, child_id, ledger, target)
    return child


def _refusals(ledger: TaskHandles, parent: TaskStream, child_id: str, value: Any, backlog: str | None) -> _Adds | None:
    """Raise, before the link is recorded, what the child's runner or backlog would refuse when handed it.

    A link once recorded names its child forever: one its backlog refuses (the id another
    task's item, a credential in the payload...) would wait in every join for a child
    that is never added. Returns the backlog handle asked (no runner): the add reuses its read.
    """
    r = runner()
    if r is not None:  # a run= child too: it is handed to the runner once it returned
        r.check(parent, child_id, value, backlog)
    elif backlog is not None:
        target = cast("_Backlogs", ledger).backlog(backlog)
        target.check_child(child_id, value, parent=parent.id)
        return target
    return None


def hand_over(
    parent: TaskStream, child_id: str, ledger: TaskHandles | None = None, target: _Adds | None = None
) -> None:
    """Give a spawned child to the suspending runner, if any (a backlog adds it as an item); idempotent.

    With no runner, a child the link sends to a backlog is added to it here (``ledger``'s,
    or ``target``: that backlog's handle, already read).
    """
    r = runner()
    with parent.mutex:
        st = state.current(parent)
        payload, where = st.children[child_id], st.child_backlogs.get(child_id)  # as recorded: the same on re-runs
    if r is not None:
        r.spawned(parent, child_id, payload)
    elif where is not None and ledger is not None:
        (target or cast("_Backlogs", ledger).backlog(where)).add_child(child_id, payload, parent=parent.id)


class _Adds(Protocol):
    def add_child(self, child_id: str, payload: Any, *, parent: str) -> object: ...

    def check_child(self, child_id: str, payload: Any, *, parent: str) -> None: ...


class _Backlogs(Protocol):
    def backlog(self, name: str) -> _Adds: ...


def _create(child: TaskStream, parent_id: str, payload: Any) -> None:
    """The child's own link to its parent, once (the re-run after a crash here writes it).

    The child's writer is released afterwards unless this process already held it: the
    child may run in another process.
    """
    with child.mutex:
        held = child.writing
        try:
            if state.current(child).parent is None:
                state.record(child, SPAWNED, {"parent": parent_id, "payload": payload})
        finally:
            if not held:
                child.close()


def finish(task: TaskStream, result: Any) -> Any:
    """Record the task's result (``task.returned``) once; return the recorded result (the first)."""
    value = _json(f"the result of task {task.id!r}", result)
    with task.mutex:
        st = state.current(task)
        if st.returned:
            return st.result
        state.record(task, RETURNED, {"result": value})
        return value


def _blocked(
    ledger: TaskHandles, child_id: str, backlog: str | None = None, there: Mapping[str, _There | None] | None = None
) -> tuple[str, str]:
    """A child's state and safe next step, from its own status (and, sent to ``backlog``, from what that backlog's
    record says of it: ``there``, by backlog, as :func:`_backlogs_there` read it)."""
    from ..projections.status import task_status

    child = ledger.task(child_id).stream
    if not child.exists():
        return "not created", "re-run the parent script: it creates the child"
    st = task_status(child.events(), task_id=child_id, running=child.writer_pid() is not None)
    said = st.state + (f" ({st.reason})" if st.reason else "")
    if st.state in ("running", "failed", "awaiting approval", "paused for review"):
        return said, st.next_step
    if backlog is not None:
        return _waiting_in(child_id, backlog, said, (there or {}).get(backlog))
    return said, "run the child's script to its end: it returns its result with task.finish(result)"


def _waiting_in(child_id: str, backlog: str, said: str, there: _There | None) -> tuple[str, str]:
    """A child sent to ``backlog`` that has not returned: an item there (its step runs it), or not added yet."""
    if there is None:
        return said, f"intentlog verify: the stream of backlog {backlog!r} cannot be read"
    added, _, taken = there
    if child_id in added:
        return (
            f"{said} in backlog {backlog!r}",
            f"run that backlog: intentlog run {backlog} --step MODULE:FUNCTION (its step runs the child)",
        )
    if child_id in taken:
        return (
            f"never added to backlog {backlog!r}: its item {child_id!r} is task {taken[child_id]!r}'s",
            "the child can never run there: spawn the work under another child id, and join the others by id",
        )
    return (
        f"not an item of backlog {backlog!r} yet",
        "re-run the parent's script: its spawn adds the child to that backlog, once",
    )


def settled_child(child_id: str, backlog: str, failed: str | None) -> tuple[str, str, str]:
    """A child its backlog settled with no result in its task -- ``failed`` (the reason), or else done -- as
    ``(id, state, next step)`` for :class:`ChildrenPending`: it never returns one."""
    if failed is not None:
        return (
            child_id, f"failed in backlog {backlog!r}: {failed}",
            f"nothing runs it again: spawn the work under a new child id (intentlog log {child_id} shows it)",
        )  # fmt: skip
    return child_id, f"done in backlog {backlog!r} with no result in its task", f"intentlog log {child_id}"


class _Reads:
    """One join's reads of the streams it polls: each read again only once its stamp changed.

    A poll takes the stamps of the streams it may read (one ``stat`` each on a folder, one
    LIST each on a store; :meth:`~intentlog.eventlog.storage.StreamStorage.stamps`) before
    reading any of them: an append racing a read changes the stamp again, so the next poll
    reads it. A stream whose stamp is unchanged answers what was projected from it last; one
    with no stamp (a link, a storage that cannot tell) is read every time. A join waiting
    for a backlog of 50,000 items reads it once, not once per poll.
    """

    def __init__(self, ledger: TaskHandles) -> None:
        streams = getattr(getattr(ledger, "backend", None), "streams", None)
        self._stamps: Callable[[Sequence[str]], dict[str, str | None]] | None = getattr(streams, "stamps", None)
        self._now: dict[str, str | None] = {}
        self._kept: dict[str, tuple[str, Any]] = {}

    def look(self, names: Iterable[str]) -> None:
        """Take the stamps of ``names`` now, before any of them is read."""
        wanted = list(dict.fromkeys(names))
        self._now = self._stamps(wanted) if self._stamps is not None and wanted else {}

    def project(self, stream: TaskStream, fn: Callable[[TaskStream], _T]) -> _T:
        """``fn(stream)``, or what it answered at this stream's stamp before."""
        stamp = self._now.get(stream.id)
        kept = self._kept.get(stream.id)
        if stamp is not None and kept is not None and kept[0] == stamp:
            return cast("_T", kept[1])
        value = fn(stream)
        if stamp is not None:
            self._kept[stream.id] = (stamp, value)
        return value


def _child_backlogs(parent: TaskStream) -> dict[str, str]:
    with parent.mutex:
        return dict(state.current(parent).child_backlogs)


#: what a backlog's record says of the children sent to it (:func:`~intentlog.projections.backlogs.children_there`)
_There = tuple[set[str], dict[str, str | None], dict[str, str]]


def _backlogs_there(
    ledger: TaskHandles, where: dict[str, str], pending: list[str], reads: _Reads
) -> dict[str, _There | None]:
    """Per backlog the pending children were sent to (``where``: child -> backlog), what its record says of them,
    read once (again once it changed); None for a backlog whose stream cannot be read (verify names it)."""
    by_backlog: dict[str, list[str]] = {}
    for cid in pending:
        if cid in where:
            by_backlog.setdefault(where[cid], []).append(cid)
    out: dict[str, _There | None] = {}
    for name, cids in by_backlog.items():
        # pending only shrinks in one join: what was read of the ids first asked holds for fewer
        try:
            out[name] = reads.project(ledger.task(f"{name}{BACKLOG_SUFFIX}").stream, functools.partial(_there, cids))
        except IntentlogError:
            out[name] = None
    return out


def _settled_in(where: dict[str, str], pending: list[str], there: dict[str, _There | None]) -> dict[str, Any]:
    """The pending children their backlog settled with no result, as :func:`settled_child` gives each."""
    out: dict[str, tuple[str, str, str]] = {}
    for cid in pending:
        got = there.get(where.get(cid, ""))
        if got is not None and cid in got[1]:
            out[cid] = settled_child(cid, where[cid], got[1][cid])
    return out


def _there(items: list[str], stream: TaskStream) -> _There:
    return children_there(stream.events() if stream.exists() else (), items)


def _pending(parent: TaskStream, blocked: Sequence[tuple[str, str, str]]) -> ChildrenPending:
    """:class:`ChildrenPending` with each next step's ``intentlog`` command given this ledger's ``--root``."""
    root = hint_root(parent.layout.location)
    return ChildrenPending(parent.id, [(c, state, complete(step, root)) for c, state, step in blocked])


def _idiom_state(stream: TaskStream) -> IdiomState:
    return idiom_state(stream.events())


def _returned_since(ledger: TaskHandles, children: list[str]) -> bool:
    """Whether one of ``children``, read as not returned, has returned since (a child records its result in its
    own task before its backlog records it done, so a read of the backlog can be newer than the child's)."""
    return any(idiom_state(ledger.task(c).stream.events()).returned for c in children)


def join(
    ledger: TaskHandles, parent: TaskStream, children: Iterable[str] | None = None, *, wait: float = 0.0,
    poll: float = 1.0,
) -> dict[str, Any]:  # fmt: skip
    """The children's results by id once every one returned (see the module docstring); ``wait``: seconds to poll."""
    spawned = state.current(parent).children
    ids = list(spawned) if children is None else [c if isinstance(c, str) else getattr(c, "id", c) for c in children]
    stray = [c for c in ids if c not in spawned]
    if stray:
        raise UsageError(f"task {parent.id!r} never spawned {stray}; join only its children; nothing was written")
    deadline = time.monotonic() + wait
    where = _child_backlogs(parent)
    reads = _Reads(ledger)
    polls = wait > 0 and runner() is None  # stamps pay only for a second look
    results: dict[str, Any] = {}  # a child's first task.returned is its result for good
    while True:
        waiting = [c for c in ids if c not in results]
        if polls:
            reads.look([*waiting, *{f"{where[c]}{BACKLOG_SUFFIX}" for c in waiting if c in where}])
        pending: list[str] = []
        for cid in waiting:
            st = reads.project(ledger.task(cid).stream, _idiom_state)
            if st.returned:
                results[cid] = st.result
            else:
                pending.append(cid)
        if not pending:
            with parent.mutex:
                if tuple(ids) not in state.current(parent).joined:  # a re-run's join records nothing more
                    state.record(parent, JOINED, {"children": ids})
            return {c: results[c] for c in ids}
        r = runner()
        if r is not None:  # a runner's children: suspend while any may return, never poll for them here
            failed = r.failed(parent, pending)
            if failed is None:
                raise Suspended(parent.id, children=pending)
            if _returned_since(ledger, [c for c, _, _ in failed]):
                continue  # one returned between the two reads (its backlog then recorded it done): read again
            raise _pending(parent, failed)
        there = _backlogs_there(ledger, where, pending, reads)
        settled = _settled_in(where, pending, there)
        if settled and _returned_since(ledger, list(settled)):
            continue
        if len(settled) == len(pending):  # none of them can return any more: no use waiting
            raise _pending(parent, [settled[c] for c in pending])
        if time.monotonic() >= deadline:
            blocked = [settled.get(c) or (c, *_blocked(ledger, c, where.get(c), there)) for c in pending]
            raise _pending(parent, blocked)
        _pause(min(poll, max(0.01, deadline - time.monotonic())))
