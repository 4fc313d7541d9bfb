"""Approvals: the human decision step, bound to the exact request it approves.

``task.request_approval(id, question, binds=call)`` appends ``approval.requested
{approval, question, binds}``: ``binds`` names the call (its id, key and manifest request
hash) or a digest (a plan, a diff, any stored bytes) the decision is about. A person
decides with ``task.decide(id, "approve" | "reject", by=..., note=...)`` -- or ``intentlog
approve`` / ``intentlog reject`` from another process -- which appends
``approval.decided {approval, decision, by, note, request_hash}`` naming the hash it
decided on. The decision counts only for that hash: when the script asks again with a
changed request, the approval is requested again and the earlier decision is void; when
the bound key's call now records another request, the approval is void until requested
again.

Requesting is idempotent: the same id with the same binding returns the recorded state
(with its decision, if one was made), so a process killed while waiting resumes from the
record. :func:`wait_for_approval` releases the task's writer lock while it waits --
another process must be able to record the decision -- and polls the stream (reads take
no lock); the next write takes the lock again and re-checks the tail.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any, Final

from ._internal.commands import approval_commands, hint_root
from ._internal.digest import is_digest
from .errors import ApprovalConflict, ApprovalPending, UnknownApproval, UnknownCall, UsageError
from .eventlog.redaction import scrub_note
from .projections.operator import APPROVED, REJECTED, VOID, ApprovalState, OperatorFold, approval_states
from .projections.workstate import WorkStateFold

if TYPE_CHECKING:
    from .eventlog import Event
    from .stream import StreamSource, TaskStream

__all__ = [
    "DECISIONS",
    "approval",
    "approvals",
    "await_for_approval",
    "decide",
    "request_approval",
    "wait_for_approval",
]

DECISIONS: Final = ("approve", "reject")
_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")


def _check_id(approval_id: object) -> str:
    if not isinstance(approval_id, str) or _ID_RE.match(approval_id) is None:
        raise UsageError(
            f"invalid approval id {approval_id!r}: use 1-128 characters from A-Z a-z 0-9 . _ : -, "
            "starting with a letter or digit (it is typed on the command line)"
        )
    return approval_id


def _binds(task: TaskStream, binds: object) -> dict[str, Any]:
    """What the approval is about, resolved to ``{call, key, request_hash}`` or ``{digest}``."""
    if binds is None:
        return {}
    call_id = getattr(binds, "call_id", None)  # a Call, or a session Turn
    if isinstance(call_id, str):
        _check_owner(task, binds)
        binds = call_id
    if isinstance(binds, str) and not is_digest(binds):
        fold = task.live()
        try:
            st = fold.call_state(binds)
        except KeyError:
            raise UnknownCall(task.id, binds) from None
        latest = fold.latest_call(st.key)  # a resumed call is bound through its key's latest call
        if latest is not None and latest != st.call_id:
            st = fold.call_state(latest)
        if st.request is None or st.request_hash is None:
            raise UsageError(
                f"{st.call_id} (key {st.key!r}) has no manifest yet, so there is no request to approve; "
                "prepare the call first (task.prepare) and bind the Call it returns"
            )
        return {"call": st.call_id, "key": st.key, "request_hash": st.request_hash}
    if isinstance(binds, str):
        return {"digest": binds}
    if isinstance(binds, Mapping) and is_digest(binds.get("digest")):
        return {"digest": binds["digest"]}
    raise UsageError(
        "binds must be a Call, a session Turn, a call id, a digest or an artifact ref, "
        f"not {type(binds).__name__}"
    )


def _same_folder(a: object, b: object) -> bool:
    """Whether two paths name one folder (a relative and an absolute spelling, a link): never raises."""
    try:
        return os.path.samefile(a, b)  # type: ignore[arg-type]
    except (OSError, TypeError, ValueError):
        return a == b


def _check_owner(task: TaskStream, bound: object) -> None:
    """A Call or Turn binds only in its own task: its call id means another call anywhere else."""
    owner = getattr(bound, "task", None)  # a Call's task
    owner_id = getattr(owner, "id", None) if owner is not None else getattr(bound, "session", None)  # a Turn's
    root = getattr(owner, "root", None)  # a Call's stream knows its ledger folder
    same_ledger = owner is None or root is None or _same_folder(root, task.root)
    if isinstance(owner_id, str) and (owner_id != task.id or not same_ledger):
        raise UsageError(
            f"{type(bound).__name__} {getattr(bound, 'call_id', '?')} belongs to task {owner_id!r}, not {task.id!r}: "
            f"request the approval in that task (ledger.task({owner_id!r}).request_approval(...)); here the same "
            "call id names another call"
        )


def _states(task: TaskStream) -> Mapping[str, ApprovalState]:
    """Every approval, from one pass over the stream (the work state decides which are void)."""
    ws = WorkStateFold(task.id)
    ops = OperatorFold()
    for ev in task.events():
        ws.apply(ev)
        ops.apply(ev)
    return ops.result(ws.result()).approvals


def approvals(task: TaskStream) -> Mapping[str, ApprovalState]:
    """Every approval of the task, by id, read fresh from disk (takes no lock)."""
    return _states(task)


def approval(task: TaskStream, approval_id: str) -> ApprovalState:
    """One approval's state, read fresh from disk; :class:`UnknownApproval` if it was never requested."""
    st = _states(task).get(_check_id(approval_id))
    if st is None:
        raise UnknownApproval(task.id, approval_id)
    return st


def request_approval(task: TaskStream, approval_id: str, question: str, *, binds: object = None) -> ApprovalState:
    """Ask for a decision about ``binds``; idempotent for the same id and binding.

    Appends ``approval.requested`` (durable on return) unless the approval was already
    requested with the same binding, in which case nothing is appended and the recorded
    state is returned -- decided or not. A changed binding (the request it names changed)
    is requested again, and any earlier decision is void. ``question`` is what the person
    is asked; when only it changes, the earlier request stands.
    """
    _check_id(approval_id)
    if not isinstance(question, str) or not question:
        raise UsageError(f"an approval needs a question (a non-empty string), not {question!r}")
    with task.mutex:
        bound = _binds(task, binds)
        fold = task.live()  # holds the writer lock: the check and the append are one step
        current = approval_states(task.events(), fold.result()).get(approval_id)
        binding = bound.get("request_hash", bound.get("digest"))
        if current is not None and current.binding == binding and current.status != VOID:
            return current
        question = scrub_note(question) or question  # a question can quote a credential: never recorded
        task.append("approval.requested", {"approval": approval_id, "question": question, "binds": bound})
        return approval_states(task.events(), fold.result())[approval_id]


def decide(
    task: TaskStream,
    approval_id: str,
    decision: str,
    *,
    by: str | None = None,
    note: str | None = None,
    request_hash: str | None = None,
) -> Event:
    """Record a person's decision on the approval's current request (``approval.decided``), durable on return.

    ``request_hash``: the hash the person reviewed (``intentlog status`` shows it); when
    given and the approval now binds another, :class:`ApprovalConflict` is raised -- the
    request changed since they looked. Also refused: an approval never requested
    (:class:`UnknownApproval`), one already decided for this request, and a void one
    (the script must request it again). Refusals append nothing.
    """
    _check_id(approval_id)
    if decision not in DECISIONS:
        raise UsageError(f"decision must be 'approve' or 'reject', not {decision!r}")
    for label, text in (("by", by), ("note", note)):
        if text is not None and not isinstance(text, str):
            raise UsageError(f"{label} must be a string, not {type(text).__name__}")
    if request_hash is not None and not is_digest(request_hash):
        raise UsageError(f"request_hash must be a digest ('blake3:' and 64 hex digits), not {request_hash!r}")
    if not task.exists() or approval_id not in _states(task):
        # a refusal must not create the task, nor take (and so rewrite) its lock: checked read-only first
        raise UnknownApproval(task.id, approval_id)
    with task.mutex:
        fold = task.live()
        st = approval_states(task.events(), fold.result()).get(approval_id)
        if st is None:
            raise UnknownApproval(task.id, approval_id)
        if st.status == VOID:
            raise ApprovalConflict(
                task.id,
                approval_id,
                f"it is void: {st.void_reason}",
                next_step="re-run the script so that it requests the approval again for the current request",
            )
        if st.status in (APPROVED, REJECTED):
            raise ApprovalConflict(
                task.id,
                approval_id,
                f"it is already decided for this request: {st.decision} by {st.by or 'someone'} at seq "
                f"{st.decided_seq}",
                next_step="a different decision needs a changed request (the script requests again)",
            )
        if request_hash is not None and request_hash != st.binding:
            raise ApprovalConflict(
                task.id,
                approval_id,
                f"you decided on {request_hash} but it now binds {st.binding}: the request changed since you looked",
                next_step=f"review it again ('intentlog status {task.id}') and decide on the current request",
            )
        return task.append(
            "approval.decided",
            {
                "approval": approval_id,
                "decision": decision,
                "by": by,
                "note": scrub_note(note),  # a note can quote a credential: never recorded
                "request_hash": st.binding,
            },
        )


def wait_for_approval(
    task: TaskStream, approval_id: str, *, timeout: float | None = None, poll: float = 1.0
) -> ApprovalState:
    """Wait until the approval's current request is decided; return its state (approved or rejected).

    Releases the task's writer lock first (``task.close()``), so that ``intentlog
    approve`` in another process can record the decision; polls the stream every
    ``poll`` seconds. A decision already recorded returns at once -- which is how a
    re-run after a kill resumes. Raises :class:`ApprovalPending` after ``timeout``
    seconds (None: wait for ever), :class:`ApprovalConflict` when the approval is void,
    :class:`UnknownApproval` when it was never requested.
    """
    waiting = _waiting(task, approval_id, timeout, poll)
    try:
        pause = next(waiting)
        while True:
            time.sleep(pause)
            pause = waiting.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def await_for_approval(
    task: StreamSource, approval_id: str, *, timeout: float | None = None, poll: float = 1.0
) -> ApprovalState:
    """:func:`wait_for_approval`, awaited: the same decisions, the stream read and the lock released off the loop.

    ``task`` is a :class:`~intentlog.Task` or its stream. Each poll reads the stream in a
    worker thread and the pauses are :func:`asyncio.sleep`, so the event loop runs other
    coroutines (other calls of the task included) while the decision is awaited.
    """
    import asyncio

    waiting = _waiting(task.stream, approval_id, timeout, poll)
    while True:
        done, value = await asyncio.to_thread(_step, waiting)  # reads the stream: off the loop
        if done:
            return value  # type: ignore[no-any-return]
        await asyncio.sleep(value)


def _step(waiting: Generator[float, None, ApprovalState]) -> tuple[bool, Any]:
    """One step of the wait, as a value (a StopIteration cannot cross into a future)."""
    try:
        return False, next(waiting)
    except StopIteration as stop:
        return True, stop.value


def _waiting(
    task: TaskStream, approval_id: str, timeout: float | None, poll: float
) -> Generator[float, None, ApprovalState]:
    """The wait's decisions, once for both forms: reads the record, yields each pause, returns the decided state."""
    _check_id(approval_id)
    for label, value in (("timeout", timeout), ("poll", poll)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf")
        ):
            raise UsageError(f"{label} must be a finite, non-negative number of seconds, not {value!r}")
    start = time.monotonic()
    st = approval(task, approval_id)
    if not st.decided:
        task.close()  # the decision comes from another process: let it take the lock
    while True:
        if st.decided:
            return st
        if st.status == VOID:
            raise ApprovalConflict(
                task.id,
                approval_id,
                f"it is void: {st.void_reason}",
                next_step="request it again for the current request (task.request_approval)",
            )
        waited = time.monotonic() - start
        if timeout is not None and waited >= timeout:
            decisions = approval_commands(task.id, approval_id, hint_root(task.layout.location))
            raise ApprovalPending(task.id, approval_id, waited, commands=decisions)
        pause = poll if timeout is None else min(poll, max(0.0, timeout - waited))
        yield max(pause, 0.01)
        st = approval(task, approval_id)
