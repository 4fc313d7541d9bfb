"""The protocol's entry points: :func:`prepare` records the intent, :func:`effect` prepares and runs."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from .._internal.types import EffectKwargs, PrepareKwargs, Send, spelled
from ..errors import (
    PreparationFailed,
    UsageError,
)
from ..projections.workstate import (
    NONE,
    START_CALL,
)
from .adrive import drive_async
from .call import Call
from .intent import (
    BuildFailed,
    Intent,
    append_intent,
    build_intent,
    check_key,
    check_not_async,
    check_send,
    drift_of,
    refuse,
    scrub,
)
from .options import EffectOptions
from .policy import DRIFT
from .records import error_text
from .steps import Steps, drive

if TYPE_CHECKING:
    from .._internal.types import Unpack
    from ..stream import TaskStream


@spelled(PrepareKwargs)
def prepare(task: TaskStream, key: str, request: Any, **options: Unpack[PrepareKwargs]) -> Call:
    """Record the intent of a call, or bind to the key's existing call after a drift check.

    For a new key: ``call.requested`` then ``call.manifest``, durable on return (inside
    :func:`effect` they share the sync of ``attempt.started``). ``request`` is the
    request value or a callable building it. For a key already recorded, the rebuilt
    request's hash and input digests must equal the manifest's, else
    :class:`ResumeRefused` with reason ``DRIFT`` and nothing is appended. A request that
    cannot be built or serialized, or a malformed input digest, appends
    ``call.requested`` and ``call.preparation_failed`` (the error message, never the
    value) and raises :class:`PreparationFailed`. ``dedup`` (a :class:`ProviderDedup`)
    is recorded in the manifest and lets :meth:`Call.run` resolve an unknown effect inside
    the provider's window. The options (:class:`~intentlog._internal.types.PrepareKwargs`) are
    checked once, here, before anything is written.
    """
    opts = EffectOptions.of(options, PrepareKwargs, "prepare")
    return prepare_call(task, check_key(key), request, opts)


_EXTRA_FIELDS: Final = frozenset({"messages", "dedup"})


def prepare_call(
    task: TaskStream,
    key: str,
    request: Any,
    options: EffectOptions,
    *,
    extra: Mapping[str, Any] | None = None,
    secrets: frozenset[str] = frozenset(),
    held: ExitStack | None = None,
) -> Call:
    """:func:`prepare`, with ``extra`` manifest fields (a session turn's ``messages``: refs, not part of the hash).

    ``extra`` goes into this call's manifest and into the manifest of any call that resumes
    it; the drift check compares the request hash and inputs only. ``key`` and ``options``
    are checked by the caller (:meth:`EffectOptions.of`).
    """
    name, dedup = options.name, options.dedup
    if extra and not set(extra) <= _EXTRA_FIELDS:  # pragma: no cover - internal callers only
        raise UsageError(f"extra manifest fields must be among {sorted(_EXTRA_FIELDS)}, not {sorted(extra)}")
    try:
        intent: Intent | None = build_intent(request, options.inputs, options.drop, options.redact)
        error = None
    except BuildFailed as exc:
        intent, error = None, exc.text
    except Exception as exc:  # building the request is user code: any failure is recorded, scrubbed
        intent, error = None, scrub(error_text(exc), ())
    if dedup is not None:
        extra = {**(extra or {}), "dedup": dedup.to_json()}
    if intent is not None and (extra or secrets):
        intent = replace(intent, secrets=intent.secrets | secrets, extra=dict(extra or {}))
    with task.mutex:  # threads sharing the handle must not take the same call id
        fold = task.live()
        existing = fold.latest_call(key)
        st = fold.call_state(existing) if existing is not None else None
        if st is not None and st.stage != "preparation_failed":
            if intent is None:
                raise refuse(task, st, DRIFT, f"the request cannot be rebuilt ({error}), so it cannot be checked")
            drift = drift_of(task, st, intent)
            if drift is not None:
                nxt = "use a new key" if st.next_operation in (START_CALL, NONE) else st.next_operation
                raise refuse(task, st, DRIFT, f"{drift}; a changed request needs a new key", next_operation=nxt)
            return Call(task, key, st.call_id, intent, fresh=False, dedup=dedup, held=held)
        call_id = fold.next_call_id()
        if intent is None:
            with task.batch():
                task.append("call.requested", {"call": call_id, "key": key, "name": name})
                task.append("call.preparation_failed", {"call": call_id, "key": key, "error": error})
            raise PreparationFailed(call_id, key, error or "unknown error")
        with task.batch():
            append_intent(task, call_id, key, intent, name=name, resumes=None)
        return Call(task, key, call_id, intent, fresh=True, dedup=dedup, held=held)


@spelled(EffectKwargs)
def effect(task: TaskStream, key: str, request: Any, send: Send, **options: Unpack[EffectKwargs]) -> Any:
    """:func:`prepare` then :meth:`Call.run`; the intent and ``attempt.started`` share one sync.

    The batch that defers the intent's sync ends as soon as ``attempt.started`` is synced
    (or the run takes any other path), so it is never held across ``send``. ``progress``,
    ``inactivity_timeout``, ``max_duration`` and ``progress_interval``: see :meth:`Call.run`.
    The options (:class:`~intentlog._internal.types.EffectKwargs`) are checked once, here, before
    anything is written.
    """
    opts = EffectOptions.of(options, EffectKwargs, "effect")
    check_not_async(send, opts.interpret, "task.effect", "task.aeffect")
    return run_effect(task, key, request, send, opts)


def run_effect(
    task: TaskStream,
    key: str,
    request: Any,
    send: Send,
    options: EffectOptions,
    *,
    extra: Mapping[str, Any] | None = None,
    secrets: frozenset[str] = frozenset(),
) -> Any:
    """:func:`effect` for the package's own callers (sessions), with ``extra`` manifest fields.

    ``secrets`` are further strings to scrub from recorded error texts (a session's
    messages are hashed apart from the envelope, so their credentials are found there).
    ``options`` are checked already (:meth:`EffectOptions.of`), and a coroutine ``send``
    or ``interpret`` refused by the caller (:func:`check_not_async`, naming its own
    awaitable form); ``key`` and ``send`` are checked here, before anything is written.
    """
    check_key(key)
    check_send(send)
    held = ExitStack()
    held.enter_context(task.batch())
    try:
        call = prepare_call(task, key, request, options, extra=extra, secrets=secrets, held=held)
    except BaseException:
        held.close()
        raise
    return drive(task, call.steps(send, options))


@spelled(EffectKwargs)
async def aeffect(task: TaskStream, key: str, request: Any, send: Send, **options: Unpack[EffectKwargs]) -> Any:
    """:func:`effect`, awaited: the same options, events and guarantees, one implementation of the decisions.

    ``send`` is awaited when it is a coroutine function (a plain one runs in a worker
    thread); ``interpret`` and ``lookup`` may be either. Everything the record needs runs
    in the task's disk thread, never on the event loop; calls gathered in one task share
    their syncs (the intents and ``attempt.started`` lines of calls started together are
    made durable by one sync, before any of their sends). One key in flight twice at once
    is refused (:class:`~intentlog.errors.UsageError`), as with threads. A cancelled
    ``aeffect`` leaves the record as far as it got: the intent only when it was cancelled
    before ``attempt.started`` was written, else an unknown effect (never "not sent").
    """
    return await arun_effect(task, key, request, send, EffectOptions.of(options, EffectKwargs, "aeffect"))


async def arun_effect(
    task: TaskStream,
    key: str,
    request: Any,
    send: Send,
    options: EffectOptions,
    *,
    extra: Mapping[str, Any] | None = None,
    secrets: frozenset[str] = frozenset(),
) -> Any:
    """:func:`aeffect` for the package's own callers (sessions), as :func:`run_effect` is :func:`effect`'s."""
    check_key(key)
    check_send(send)

    def steps() -> Steps[Any]:  # preparing is record work too: it runs in the disk thread, with the rest
        call = prepare_call(task, key, request, options, extra=extra, secrets=secrets)
        return (yield from call.steps(send, options))

    return await drive_async(task, steps())
