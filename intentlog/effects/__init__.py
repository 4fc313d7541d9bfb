"""The effect protocol (DESIGN §5): record intent before every effect, resume only what is provably safe.

For a new key, :func:`effect` appends, in order and each durable before what it guards:

1. ``call.requested`` and 2. ``call.manifest`` (canonical, redacted request stored as an
   artifact; its hash and the named input digests) — before any attempt;
3. ``attempt.started`` — fdatasynced **before** ``send`` is called;
4. the raw response bytes (inline when small, else a blob in ``objects/``) and
   ``attempt.observed`` — synced before anything interprets them;
5. ``attempt.interpreted`` (interpreter name and version, result), 6.
   ``attempt.retry_decided`` when not accepted at once, 7. ``call.completed``.

Running the same code again *is* resume: for a key already in the record, the stage the
work-state projection gives decides what happens (see :meth:`Call.run`). Syncs are shared
where the order allows: intent and ``attempt.started`` share one, the observation has its
own, interpretation and completion share the last — three syncs for a small effect (two
without an interpreter: nothing reads the bytes, so observation and completion share one).
``effect`` never holds a group commit open across ``send``.

Long effects: inside ``send``, :func:`heartbeat` records ``attempt.progress`` (rate
limited) and resets the inactivity timer; with ``inactivity_timeout`` or ``max_duration``
the send runs in a daemon worker thread and a passed limit records ``attempt.timed_out``
(synced) and raises :class:`EffectUnknown` -- the effect is unknown, reconciled, never
resent blind, and the abandoned worker's late answer is never recorded.

Gates before every attempt: the rebuilt request's hash and inputs equal the recorded
ones (from ``call.requested`` on), and every approval that bound the key is approved for
that hash. Stored bytes are reinterpreted by a newer interpreter, beside the old record.

Provider deduplication (:class:`~intentlog.ProviderDedup`, recorded in the manifest): an
unknown effect whose first attempt started less than ``window - margin`` ago is resent
under the same key after a synced ``effect.reconciled {outcome: "provider_dedup"}``;
every later send of that call checks the window again. A ``send`` raising
:class:`~intentlog.errors.KeyReused` fails the call as drift.

Guarantees: no ``send`` without a durable ``attempt.started`` before it; no interpretation
of bytes that are not durable; no resend of an attempt whose effect is unknown unless a
reconciliation is recorded (``provider_dedup`` included, only inside the declared window);
no resumed call whose rebuilt request differs from the manifest. Credentials named by the
redaction rule never reach the record (error texts are scrubbed of their values too). Not
exactly-once, unless the provider deduplicates within a declared window: an unknown
effect is refused or reconciled, never guessed. No line grows past the inline threshold
with recorded payloads: large requests, responses, evidence and interpreted values are refs into ``objects/``.

Awaitable forms (:func:`aeffect`, :meth:`Call.arun`): the same decisions, events and
guarantees. :mod:`.call` writes the decisions once, as generators yielding instructions
(:mod:`.steps`: sync now, the point of no return, send, interpret, pause, ask);
:func:`.steps.drive` carries them out in the calling thread, :func:`.adrive.drive_async`
with an event loop, the record's work in the task's disk thread (:mod:`.disk`), where
concurrent calls share their syncs. A cancelled ``aeffect`` leaves the intent only before
``attempt.started`` is written, an unknown effect after.

The package, one concept a file: :mod:`.policy` (retry policy, a lookup's answer),
:mod:`.records` (the record's bytes and refs), :mod:`.intent` (argument checks, the
canonical request, drift, the intent events), :mod:`.long` (heartbeats and time limits),
:mod:`.call` (the :class:`Call` state machine), :mod:`.gate` (the approval gate),
:mod:`.window` (provider deduplication windows), :mod:`.results` (interpretations and
what a completed call returns), :mod:`.options` (the effect options, checked once into
one :class:`~.options.EffectOptions`; the signatures take them typed as
``**options: Unpack[EffectKwargs]``),
:mod:`.prepare` (the entry points), :mod:`.reconcile` (the operator's decisions), :mod:`.steps`
(the instructions and the synchronous driver), :mod:`.adrive` (the awaitable driver) and
:mod:`.disk` (the disk thread and its group commit).
Context compilation, which has no external effect, is :mod:`intentlog.compile`. Every
module takes the stream core (:class:`~intentlog.stream.TaskStream`), never the ``Task``
facade.
"""

from __future__ import annotations

from .._internal.types import DEFAULT_PROGRESS_INTERVAL, EffectKwargs, PrepareKwargs, RunKwargs, TurnKwargs
from .call import Call
from .intent import decode_text, secrets_of
from .long import current_heartbeat, heartbeat
from .policy import DRIFT, NO_RETRY, RetryPolicy, Served
from .prepare import aeffect, effect, prepare
from .reconcile import fail_call, reconcile
from .results import reinterpret

__all__ = [
    "DEFAULT_PROGRESS_INTERVAL",
    "DRIFT",
    "NO_RETRY",
    "Call",
    "EffectKwargs",
    "PrepareKwargs",
    "RetryPolicy",
    "RunKwargs",
    "Served",
    "TurnKwargs",
    "aeffect",
    "current_heartbeat",
    "decode_text",
    "effect",
    "fail_call",
    "heartbeat",
    "prepare",
    "reconcile",
    "reinterpret",
    "secrets_of",
]
