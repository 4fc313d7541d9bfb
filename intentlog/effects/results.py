"""Interpretations and results: recording an interpretation, what a completed call returns, reinterpret."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._internal.types import Interpret
from ..errors import (
    CorruptStream,
    IntentlogError,
    NotSerializable,
    ReinterpretFailed,
    UnknownCall,
    UsageError,
)
from ..projections.workstate import (
    CallState,
)
from .intent import refuse, scrub
from .records import cap_text, error_text, interpreter_id, load_ref, loads_json, value_record
from .steps import Interpreting, Outcome, interpret_now

if TYPE_CHECKING:
    from ..eventlog import Event
    from ..stream import TaskStream


def record_interpretation(
    task: TaskStream,
    st: CallState,
    interpret: Interpret,
    raw: bytes,
    *,
    secrets: Iterable[str],
    reinterpretation: int | None = None,
    outcome: Outcome | None = None,
) -> str | None:
    """Run ``interpret`` over ``raw``; append ``attempt.interpreted`` and, when it succeeded, ``call.completed``.

    Returns the recorded error text, or None on success. A value that is not exact JSON
    (or nests too deep to walk) is a recorded interpretation error; a large value goes to
    objects/ as canonical JSON and both events carry its ref (``result_ref`` /
    ``{"value_ref": ref}``), so no line grows past the inline threshold.
    The interpretation names the response it read (``response: {digest, size}``, the ref
    this attempt's ``attempt.observed`` stored), so a checker can tell it was not moved to
    another call's bytes. ``reinterpretation`` (1, 2, ...) marks both events of a later interpretation of the
    same stored bytes. ``outcome``: what ``interpret`` already did over ``raw`` (a driver ran
    it, awaiting an async interpreter); None runs it here.
    """
    head: dict[str, Any] = {"call": st.call_id, "attempt": st.attempts, "interpreter": interpreter_id(interpret)}
    if isinstance(st.response, Mapping):  # the bytes read: the ref this attempt's observation stored
        head["response"] = {"digest": st.response["digest"], "size": st.response["size"]}
    tail: dict[str, Any] = {} if reinterpretation is None else {"reinterpretation": reinterpretation}
    error: str | None = None
    if outcome is None:
        outcome = interpret_now(Interpreting(interpret, raw))
    value = outcome.value
    if outcome.error is not None:  # the interpreter is user code: its failure is recorded
        error = cap_text(scrub(error_text(outcome.error), secrets))
    else:
        try:  # a value that is not exact JSON is refused before anything is written
            result = value_record(task, value)
        except (NotSerializable, RecursionError) as exc:
            why = "nests too deep to record" if isinstance(exc, RecursionError) else f"is not JSON: {exc}"
            error = cap_text(f"the interpreter returned a value that {why}")
    if error is not None:
        task.append("attempt.interpreted", {**head, "error": error, **tail})
        return error
    if "value_ref" in result:
        task.append("attempt.interpreted", {**head, "result_ref": result["value_ref"], **tail})
    else:
        task.append("attempt.interpreted", {**head, "result": value, **tail})
    task.append("call.completed", {"call": st.call_id, "attempt": st.attempts, "result": result, **tail})
    return None


def _check_derived(task: TaskStream, st: CallState) -> None:
    """Refuse a completion the record does not derive (the fold saw it contradict its interpretation)."""
    if st.forged is not None:
        seq, why = st.forged
        raise CorruptStream(
            str(task.path),
            seq + 1,
            f"{st.call_id} (key {st.key!r}): {why}",
            hint="the record contradicts itself, so its value is not returned; nothing was appended or sent. "
            "Run 'intentlog verify' and restore the stream from a copy or git",
        )


def result_of(task: TaskStream, st: CallState) -> Any:
    """What a completed call returns: the raw response bytes, or the (latest) interpreted value.

    Never a value the record does not derive: a completion that contradicts the
    interpretation (or observation) it completes raises :class:`CorruptStream` naming its line.
    """
    _check_derived(task, st)
    result = st.result
    if isinstance(result, dict) and result.get("raw") is True:
        # the observation's ref carries small bytes inline; the completion's names them
        ref = st.response if st.response is not None else result.get("response")
        if not isinstance(ref, Mapping):  # pragma: no cover - a completed raw call always observed
            raise IntentlogError(f"{st.call_id}: completed raw but no response is recorded")
        return load_ref(task, ref)
    if isinstance(result, dict) and "value_ref" in result:  # a large value, stored as canonical JSON
        return loads_json(load_ref(task, result["value_ref"], f"the result of {st.call_id}"))
    return result.get("value") if isinstance(result, dict) else result


def reinterpret_hint(st: CallState) -> str:
    """For a call failed by its interpretation: how to read its stored bytes again without a send."""
    if st.interpret_error is None or st.response is None:
        return ""
    return (
        "; its response is stored, so a fixed interpreter reads it without a send: give it another identity "
        f"(a new 'version' attribute) and run again, or call task.reinterpret({st.call_id!r}, interpret)"
    )


def _reinterpretable(st: CallState) -> bool:
    """Stored bytes a new interpreter may read: a completion, or an interpretation that failed."""
    if st.response is None:
        return False
    return st.stage == "completed" or (st.interpret_error is not None and st.stage in ("interpreted", "failed"))


def reinterpret(task: TaskStream, call_or_key: str, interpret: Interpret) -> Any:
    """Run ``interpret`` over a call's stored response bytes and record the new interpretation beside the old.

    ``call_or_key`` is a call id or a key (its latest call). The call must be completed, or
    have an interpretation that failed. Appends ``attempt.interpreted`` and, when it
    succeeds, ``call.completed``, both with ``reinterpretation: n`` (1, 2, ...), durable
    on return; earlier events are never replaced, and the work state (and a re-run) then
    return the latest completion's value, which this returns too. Never sends. Raises
    :class:`UnknownCall` for a call or key the task does not have, :class:`ResumeRefused`
    for a call with nothing to reinterpret (appending nothing), and
    :class:`ReinterpretFailed` when the interpreter fails (its failure is recorded; the
    earlier result stands). Error texts are scrubbed of nothing the request marked secret
    (the request is not rebuilt here): interpreters should not quote credentials.
    """
    if not callable(interpret):
        raise UsageError(f"interpret must be a callable taking the response bytes, not {interpret!r}")
    if not isinstance(call_or_key, str) or not task.exists():
        raise UnknownCall(task.id, str(call_or_key))
    with task.mutex:
        fold = task.live()
        cid = call_or_key if call_or_key in fold.result().calls else fold.latest_call(call_or_key)
        if cid is None:
            raise UnknownCall(task.id, call_or_key)
        st = fold.call_state(cid)
        _check_derived(task, st)
        if not _reinterpretable(st):
            raise refuse(
                task,
                st,
                f"nothing to reinterpret: the call is {st.stage}",
                "only a completed call, or one whose interpretation failed, has stored bytes to interpret again",
            )
        raw = load_ref(task, st.response, f"the response of {st.call_id}")
        n = st.reinterpretations + 1
        with task.batch():
            error = record_interpretation(task, st, interpret, raw, secrets=(), reinterpretation=n)
        if error is not None:
            raise ReinterpretFailed(st.call_id, st.key, n, error)
        done = fold.call_state(cid)
        return result_of(task, done)


def reversed_call_events(task: TaskStream, st: CallState) -> list[Event]:
    out = [ev for ev in task.events(since=st.first_seq) if ev.data.get("call") == st.call_id]
    out.reverse()
    return out
