"""The work-state projection (DESIGN §6): what was done, what is unknown, what is safe next.

A pure fold over events: one small handler per event kind, a frozen result, no clock, no
I/O, no provider query. Each call is classified by the last evidence recorded for it;
the dangerous rung is an attempt that started and left nothing after it — the effect is
*unknown* and only reconciliation may move it on. Memory grows with the number of calls
and compilations, not with the number of events.

The ladder, first rung that matches (stage -> next operation, provider effect):

- ``call.completed`` -> completed: none, happened
- ``call.preparation_failed`` -> preparation_failed: fix inputs, none
- ``call.resumed`` to a new call recorded with ``resumes`` -> superseded: none
- ``call.failed`` -> failed: operator decides, per its attempts
- no ``call.manifest`` -> requested: start call, none
- manifest, no attempt -> manifest_recorded: start call, none
- last attempt: retry decided -> retry_decided: start next attempt; decided ``fail`` ->
  failed; interpreted -> interpreted: finalize (redecide after an interpretation error);
  observed -> observed: reinterpret (redecide when the provider answered with a failure);
  reconciled ``not_served`` -> reconciled_not_served: start next attempt, none;
  ``resend`` -> risk_accepted: start next attempt, duplicate risk; ``provider_dedup`` ->
  provider_dedup: start next attempt (same key, inside the provider's window); ``served`` with
  evidence whose observation is not recorded yet (a kill between the two) -> observed:
  reinterpret (``observation_pending``; the bytes are in objects/); ``served`` without
  bytes -> reconciled_served: operator decides; ``attempt.not_sent`` -> not_sent: start
  next attempt; nothing after ``attempt.started`` (or only ``attempt.errored``,
  ``attempt.progress`` heartbeats, or ``attempt.timed_out``) -> effect_unknown: reconcile
  effect, **unknown**, duplicate risk (a timed-out attempt says so in its reason).

A later interpretation of the same stored bytes (``reinterpretation: n``) completes again
beside the first: the latest completion's result counts. ``call.requested`` carries the
request hash (and input digests), so ``request_hash`` is known from the first event.
Approvals are folded by the operator projection; here only which keys they ever bound
(:meth:`WorkStateFold.approvals_of`), so the protocol reads them only for those keys.

Compilations: requested -> recompile; failed -> fix inputs; compiled -> none. The task's
next operation is the first unresolved (latest-per-key) call's or compilation's, else
``check and accept`` once a call completed after the last ``task.accepted``, else none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from .._types import CompilationStage, NextOperation, ProviderEffect, Stage
from ..eventlog.format import Event
from .derive import completion_token, interpretation_token

__all__ = [
    "CHECK_AND_ACCEPT",
    "FINALIZE",
    "FIX_INPUTS",
    "NONE",
    "OPERATOR_DECIDES",
    "RECOMPILE",
    "RECONCILE_EFFECT",
    "REDECIDE",
    "REINTERPRET",
    "START_CALL",
    "START_NEXT_ATTEMPT",
    "CallState",
    "CompilationState",
    "WorkState",
    "WorkStateFold",
    "work_state",
]

# next operations (DESIGN §2); their type, :data:`~intentlog._types.NextOperation`, lists exactly these words
START_CALL: Final[NextOperation] = "start call"
RECONCILE_EFFECT: Final[NextOperation] = "reconcile effect"
REINTERPRET: Final[NextOperation] = "reinterpret"
REDECIDE: Final[NextOperation] = "redecide"
FINALIZE: Final[NextOperation] = "finalize"
START_NEXT_ATTEMPT: Final[NextOperation] = "start next attempt"
FIX_INPUTS: Final[NextOperation] = "fix inputs"
RECOMPILE: Final[NextOperation] = "recompile"
CHECK_AND_ACCEPT: Final[NextOperation] = "check and accept"
OPERATOR_DECIDES: Final[NextOperation] = "operator decides"
NONE: Final[NextOperation] = "none"

WORK_STATE_VERSION: Final = "intentlog-workstate/1"


@dataclass(frozen=True, slots=True)
class CallState:
    """One call as the record proves it."""

    call_id: str
    key: str
    name: str | None
    stage: Stage
    next_operation: NextOperation
    provider_effect: ProviderEffect
    duplicate_effect_risk: bool
    attempts: int
    request_hash: str | None
    request: Mapping[str, Any] | None
    inputs: Mapping[str, str]
    resumes: str | None
    superseded_by: str | None
    result: Any
    response: Mapping[str, Any] | None
    reason: str | None
    first_seq: int
    last_seq: int
    since: str  # ts of the event that put the call in its stage
    interpreter: Mapping[str, Any] | None
    encoding: str | None = None  # how the observed response decodes back to the text send returned (if not UTF-8)
    interpret_error: str | None = None  # the latest attempt's latest interpretation failed with this
    reinterpretations: int = 0  # how many interpretations of stored bytes followed the first one
    observation_pending: bool = False  # served evidence is recorded in effect.reconciled, its observation not yet
    provider_dedup: bool = False  # an attempt's unknown effect was resolved by the provider's idempotency window
    # (seq, why) of the latest completion when it carries what its interpretation or observation does not:
    # the record contradicts itself there, and the protocol refuses to return its value
    forged: tuple[int, str] | None = None


@dataclass(frozen=True, slots=True)
class CompilationState:
    compilation_id: str
    stage: CompilationStage
    next_operation: NextOperation
    offered: tuple[Mapping[str, Any], ...]
    required: tuple[str, ...]
    missing: tuple[str, ...]
    package: Mapping[str, Any] | None
    selected: tuple[str, ...]
    error: str | None
    first_seq: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class WorkState:
    """The projection of one task. ``calls`` and ``compilations`` keep recording order."""

    task_id: str | None
    calls: Mapping[str, CallState]
    compilations: Mapping[str, CompilationState]
    keys: Mapping[str, str]  # key -> its latest call
    next_operation: NextOperation
    unresolved: tuple[str, ...]  # call and compilation ids needing action, in order
    accepted: bool
    events: int
    last_seq: int
    last_ts: str | None
    other_kinds: Mapping[str, int]  # kinds this projection does not interpret, counted
    anomalies: tuple[str, ...]  # protocol events it could not place (see 'intentlog verify')
    version: str = WORK_STATE_VERSION

    def call_for_key(self, key: str) -> CallState | None:
        cid = self.keys.get(key)
        return self.calls[cid] if cid is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "task": self.task_id,
            "next_operation": self.next_operation,
            "unresolved": list(self.unresolved),
            "accepted": self.accepted,
            "events": self.events,
            "last_seq": self.last_seq,
            "last_ts": self.last_ts,
            "calls": {cid: _call_json(c) for cid, c in self.calls.items()},
            "compilations": {k: _comp_json(c) for k, c in self.compilations.items()},
            "other_kinds": dict(self.other_kinds),
            "anomalies": list(self.anomalies),
        }


def _call_json(c: CallState) -> dict[str, Any]:
    return {
        "call": c.call_id,
        "key": c.key,
        "name": c.name,
        "stage": c.stage,
        "next_operation": c.next_operation,
        "provider_effect": c.provider_effect,
        "duplicate_effect_risk": c.duplicate_effect_risk,
        "attempts": c.attempts,
        "request_hash": c.request_hash,
        "inputs": dict(c.inputs),
        "resumes": c.resumes,
        "superseded_by": c.superseded_by,
        "reason": c.reason,
        "first_seq": c.first_seq,
        "last_seq": c.last_seq,
        "since": c.since,
    }


def _comp_json(c: CompilationState) -> dict[str, Any]:
    return {
        "compilation": c.compilation_id,
        "stage": c.stage,
        "next_operation": c.next_operation,
        "required": list(c.required),
        "missing": list(c.missing),
        "offered": [dict(o) for o in c.offered],
        "selected": list(c.selected),
        "package": dict(c.package) if c.package else None,
        "error": c.error,
    }


# what an attempt's record holds, as bit flags (a set per attempt costs a container per attempt)
_STARTED: Final = 1
_NOT_SENT: Final = 2
_ERRORED: Final = 4
_OBSERVED: Final = 8
_INTERPRETED: Final = 16
_DECIDED: Final = 32
_RECONCILED: Final = 64
_TIMED_OUT: Final = 128


class _Call:
    """What the record says about one call (mutable while folding; never handed out)."""

    __slots__ = (
        "call_id",
        "completed",
        "dedup",
        "encoding",
        "error",
        "evidence",
        "failed",
        "first_seq",
        "flags",
        "forged",
        "inputs",
        "interpret_error",
        "interpretation",
        "interpreter",
        "key",
        "last_seq",
        "manifest",
        "n",
        "name",
        "outcome",
        "preparation_failed",
        "prior_effect",
        "reinterpretations",
        "request",
        "request_hash",
        "response",
        "result",
        "resumes",
        "retry",
        "since",
        "superseded_by",
        "timeout",
    )

    def __init__(self, call_id: str, key: str, name: str | None, ev: Event, resumes: str | None) -> None:
        self.call_id = call_id
        self.key = key
        self.name = name
        self.first_seq = self.last_seq = ev.seq  # the first and the latest event naming this call
        self.since = ev.ts
        self.resumes = resumes
        # only the fields the states need are kept, never whole event data: a long fold
        # then holds few containers, and the garbage collector has little to walk
        self.manifest = False
        self.request_hash: str | None = None
        self.request: dict[str, Any] | None = None
        self.inputs: dict[str, Any] | None = None
        # the latest attempt (earlier ones only count for what the provider may have done)
        self.n = 0  # attempts started
        self.flags = 0
        self.outcome: str | None = None  # reconciliation outcome
        self.retry: str | None = None  # "retry" | "fail"
        self.error: str | None = None  # the provider answered with this failure
        self.interpret_error: str | None = None
        self.prior_effect: ProviderEffect = "none"  # across the attempts before the latest
        self.completed = False
        self.result: Any = None
        self.failed: str | None = None
        self.preparation_failed: str | None = None
        self.superseded_by: str | None = None
        self.response: dict[str, Any] | None = None
        self.interpreter: dict[str, Any] | None = None
        self.timeout: str | None = None  # why the latest attempt timed out
        self.encoding: str | None = None  # the latest observation's text encoding, when not plain
        self.evidence: dict[str, Any] | None = None  # served evidence of the latest attempt's reconciliation
        self.reinterpretations = 0
        self.dedup = False  # some attempt was reconciled 'provider_dedup': later sends rely on the window
        # the data of the latest attempt's latest attempt.interpreted no completion consumed yet (its
        # token, projections/derive.py, is computed only when a completion needs it)
        self.interpretation: Mapping[str, Any] | None = None
        self.forged: tuple[int, str] | None = None


@dataclass(slots=True)
class _Comp:
    cid: str
    first_seq: int
    last_seq: int
    offered: list[dict[str, Any]]
    required: list[str]
    stage: CompilationStage = "requested"
    missing: list[str] = field(default_factory=list)
    package: dict[str, Any] | None = None
    selected: list[str] = field(default_factory=list)
    error: str | None = None


class WorkStateFold:
    """The projection as a fold: feed events to :meth:`apply`, read :meth:`result` any time.

    Each event costs one dictionary lookup for its kind and one small handler; the fold
    keeps one record per call and compilation, never the events themselves.
    """

    def __init__(self, task_id: str | None = None) -> None:
        self.task_id = task_id
        self._calls: dict[str, _Call] = {}
        self._comps: dict[str, _Comp] = {}
        self._keys: dict[str, str] = {}
        self._reserved: set[str] = set()  # new call ids named by call.resumed, not yet requested
        self._approval_keys: dict[str, list[str]] = {}  # key -> approvals that ever bound one of its calls
        self._approval_digests: dict[str, list[str]] = {}  # digest -> approvals that ever bound it
        self._events = 0
        self._last: Event | None = None
        self._last_completed = -1
        self._last_accepted = -1
        self._other: dict[str, int] = {}
        self._anomalies: list[str] = []
        self._handlers: dict[str, Callable[[Event, dict[str, Any]], None]] = {
            "task.created": self._on_created,
            "task.accepted": self._on_accepted,
            "stream.repaired": _ignore,
            "artifact.recorded": _ignore,
            "call.requested": self._on_requested,
            "call.manifest": self._on_manifest,
            "call.preparation_failed": self._on_preparation_failed,
            "call.resumed": self._on_resumed,
            "call.completed": self._on_completed,
            "call.failed": self._on_failed,
            "attempt.started": self._on_attempt_started,
            "attempt.not_sent": self._on_not_sent,
            "attempt.errored": self._on_errored,
            "attempt.observed": self._on_observed,
            "attempt.interpreted": self._on_interpreted,
            "attempt.retry_decided": self._on_retry_decided,
            "attempt.progress": self._on_progress,
            "attempt.timed_out": self._on_timed_out,
            "effect.reconciled": self._on_reconciled,
            # the operator's records: folded by projections.operator, not here
            "task.checkpoint": _ignore,
            "task.failed": _ignore,
            "task.forked": _ignore,
            "approval.requested": self._on_approval_requested,
            "approval.decided": _ignore,
            "context.compilation_requested": self._on_comp_requested,
            "context.compiled": self._on_compiled,
            "context.compilation_failed": self._on_comp_failed,
        }

    # -- feeding -------------------------------------------------------------------

    def apply(self, ev: Event) -> None:
        """Fold one event in. Never raises for an event's content: what cannot be placed is an anomaly."""
        self._events += 1
        self._last = ev
        handler = self._handlers.get(ev.kind)
        if handler is None:
            other = self._other
            other[ev.kind] = other.get(ev.kind, 0) + 1
        else:
            handler(ev, ev.data)

    def _anomaly(self, ev: Event, what: str) -> None:
        if len(self._anomalies) < 100:
            self._anomalies.append(f"seq {ev.seq} ({ev.kind}): {what}")

    def _call(self, ev: Event, d: dict[str, Any]) -> _Call | None:
        cid = d.get("call")
        c = self._calls.get(cid) if type(cid) is str else None
        if c is None:
            self._anomaly(ev, f"names call {cid!r}, which was never requested")
            return None
        c.last_seq = ev.seq
        c.since = ev.ts
        return c

    def _attempt(self, ev: Event, d: dict[str, Any]) -> _Call | None:
        """The call, when the event names its latest started attempt (else an anomaly)."""
        c = self._call(ev, d)
        if c is None:
            return None
        n = d.get("attempt")
        if c.n == 0 or n != c.n:
            self._anomaly(ev, f"names attempt {n!r} of {c.call_id}, which is not its latest started attempt")
            return None
        return c

    # -- handlers ------------------------------------------------------------------

    def _on_created(self, ev: Event, d: dict[str, Any]) -> None:
        if self.task_id is None and isinstance(d.get("task"), str):
            self.task_id = d["task"]

    def _on_accepted(self, ev: Event, d: dict[str, Any]) -> None:
        self._last_accepted = ev.seq

    def _on_requested(self, ev: Event, d: dict[str, Any]) -> None:
        cid, key = d.get("call"), d.get("key")
        if type(cid) is not str or type(key) is not str or cid in self._calls:
            self._anomaly(ev, "call.requested without a new call id and a key")
            return
        name, resumes = d.get("name"), d.get("resumes")
        self._reserved.discard(cid)
        c = _Call(
            cid,
            key,
            name if type(name) is str else None,
            ev,
            resumes if type(resumes) is str else None,
        )
        # the intent's hash rides in the first event, so drift is refused before any manifest exists
        request_hash, inputs = d.get("request_hash"), d.get("inputs")
        c.request_hash = request_hash if type(request_hash) is str else None
        c.inputs = inputs if type(inputs) is dict and inputs else None
        self._calls[cid] = c
        self._keys[key] = cid

    def _on_approval_requested(self, ev: Event, d: dict[str, Any]) -> None:
        binds, aid = d.get("binds"), d.get("approval")
        key = binds.get("key") if type(binds) is dict and "call" in binds else None
        if type(key) is str and type(aid) is str:
            bound = self._approval_keys.setdefault(key, [])
            if aid not in bound:
                bound.append(aid)
        digest = binds.get("digest") if type(binds) is dict and "call" not in binds else None
        if type(digest) is str and type(aid) is str:
            about = self._approval_digests.setdefault(digest, [])
            if aid not in about:
                about.append(aid)

    def _on_manifest(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        if c is not None:
            request_hash, request, inputs = d.get("request_hash"), d.get("request"), d.get("inputs")
            c.manifest = True
            c.request_hash = request_hash if type(request_hash) is str else None
            c.request = request if type(request) is dict else None
            c.inputs = inputs if type(inputs) is dict and inputs else None

    def _on_preparation_failed(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        if c is not None:
            c.preparation_failed = str(d.get("error"))

    def _on_resumed(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        if c is None:
            return
        new = d.get("new_call")
        if type(new) is not str:
            self._anomaly(ev, "call.resumed without a new call id")
            return
        c.superseded_by = new
        if new not in self._calls:
            self._reserved.add(new)

    def _on_completed(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        if c is not None:
            c.completed = True
            c.result = result = d.get("result")  # a reinterpretation's completion follows the first: the latest counts
            why = _underived(c, d.get("attempt"), result)
            c.forged = None if why is None else (ev.seq, why)
            self._last_completed = ev.seq

    def _on_failed(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        if c is not None:
            c.failed = str(d.get("reason"))

    def _on_attempt_started(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        if c is None:
            return
        n = d.get("attempt")
        if n != c.n + 1 or type(n) is not int:
            self._anomaly(ev, f"attempt {n!r} of {c.call_id} does not follow attempt {c.n}")
        if c.n:
            c.prior_effect = _worse(c.prior_effect, _attempt_effect(c))
        c.n += 1
        c.flags = _STARTED
        c.outcome = c.retry = c.error = c.interpret_error = c.timeout = c.evidence = c.interpretation = None
        c.reinterpretations = 0

    def _on_not_sent(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is not None:
            a.flags |= _NOT_SENT

    def _on_errored(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is not None:
            a.flags |= _ERRORED

    def _on_observed(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is None:
            return
        a.flags |= _OBSERVED
        error = d.get("error")
        a.error = None if error is None else str(error)
        resp = d.get("response")
        a.response = resp if type(resp) is dict else None
        enc = d.get("encoding")
        a.encoding = enc if type(enc) is str else None

    def _on_interpreted(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is None:
            return
        if a.flags & _INTERPRETED:
            a.reinterpretations += 1
        a.flags |= _INTERPRETED
        error = d.get("error")
        a.interpret_error = None if error is None else str(error)
        a.interpretation = d
        interp = d.get("interpreter")
        a.interpreter = interp if type(interp) is dict else None

    def _on_retry_decided(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is not None:
            a.flags |= _DECIDED
            a.retry = str(d.get("decision"))

    def _on_progress(self, ev: Event, d: dict[str, Any]) -> None:
        self._attempt(ev, d)  # a heartbeat: the attempt is still out, its effect still unknown

    def _on_timed_out(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is not None:
            a.flags |= _TIMED_OUT
            limit, after, timeout = d.get("limit"), d.get("after"), d.get("timeout")
            a.timeout = f"attempt {a.n} timed out after {after} s (limit {limit} {timeout} s)"

    def _on_reconciled(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is not None:
            a.flags |= _RECONCILED
            a.outcome = str(d.get("outcome"))
            if a.outcome == "provider_dedup":
                a.dedup = True
            evidence = d.get("evidence")
            a.evidence = evidence if a.outcome == "served" and type(evidence) is dict else None

    def _on_comp_requested(self, ev: Event, d: dict[str, Any]) -> None:
        cid = d.get("compilation")
        if not isinstance(cid, str):
            self._anomaly(ev, "compilation request without an id")
            return
        offered = [o for o in _list(d.get("offered")) if isinstance(o, dict)]
        required = [r for r in _list(d.get("required")) if isinstance(r, str)]
        self._comps[cid] = _Comp(cid, ev.seq, ev.seq, offered, required)

    def _comp(self, ev: Event, d: dict[str, Any]) -> _Comp | None:
        cid = d.get("compilation")
        c = self._comps.get(cid) if isinstance(cid, str) else None
        if c is None:
            self._anomaly(ev, f"names compilation {d.get('compilation')!r}, which was never requested")
            return None
        c.last_seq = ev.seq
        return c

    def _on_compiled(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._comp(ev, d)
        if c is not None:
            package = d.get("package")
            c.stage = "compiled"
            c.package = package if isinstance(package, dict) else None
            c.selected = [s for s in _list(d.get("selected")) if isinstance(s, str)]

    def _on_comp_failed(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._comp(ev, d)
        if c is not None:
            c.stage = "failed"
            c.error = str(d.get("error"))
            offered_ids = {o.get("id") for o in c.offered}
            derived = [r for r in c.required if r not in offered_ids]
            recorded = [m for m in _list(d.get("missing")) if isinstance(m, str)]
            c.missing = sorted(set(derived) | set(recorded))

    # -- the result ----------------------------------------------------------------

    def call_state(self, cid: str) -> CallState:
        """The state of one call (raises KeyError for a call never requested)."""
        return _classify(self._calls[cid], self._calls)

    def latest_call(self, key: str) -> str | None:
        return self._keys.get(key)

    def approvals_of(self, key: str) -> tuple[str, ...]:
        """The approvals that ever bound a call of ``key``, in the order first requested."""
        return tuple(self._approval_keys.get(key, ()))

    def approvals_about(self, digest: str) -> tuple[str, ...]:
        """The approvals that ever bound ``digest`` itself (``binds={digest}``), in the order first requested.

        A call whose request hashes to ``digest`` is gated by them as by approvals of its key:
        a digest is how a script names a request before it prepares the call (a session turn).
        """
        return tuple(self._approval_digests.get(digest, ()))

    def pending_resume(self, cid: str) -> str | None:
        """The new call a ``call.resumed`` of ``cid`` named, if that call was never requested."""
        new = self._calls[cid].superseded_by
        return new if new is not None and new not in self._calls else None

    def next_call_id(self) -> str:
        """The id the next new call takes: ``call-<n>``, never one already used or promised."""
        n = len(self._calls) + 1
        while f"call-{n}" in self._calls or f"call-{n}" in self._reserved:
            n += 1
        return f"call-{n}"

    def result(self) -> WorkState:
        """The projection so far: a frozen :class:`WorkState` that later events do not change."""
        known = self._calls
        return self._result(MappingProxyType({cid: _classify(c, known) for cid, c in known.items()}))

    def _result(self, calls: Mapping[str, CallState]) -> WorkState:
        known = self._calls
        comps = {cid: _classify_comp(c) for cid, c in self._comps.items()}
        pending: list[tuple[int, str, NextOperation]] = []
        for cid in self._keys.values():  # only the latest call of each key can be unresolved
            c = known[cid]
            nxt = _ladder(c, known)[1]
            if nxt != NONE:
                pending.append((c.first_seq, cid, nxt))
        for cid, comp in comps.items():
            if comp.next_operation != NONE:
                pending.append((comp.first_seq, cid, comp.next_operation))
        pending.sort()
        accepted = self._last_completed >= 0 and self._last_accepted > self._last_completed
        if pending:
            nxt = pending[0][2]
        elif self._last_completed >= 0 and not accepted:
            nxt = CHECK_AND_ACCEPT
        else:
            nxt = NONE
        last = self._last
        return WorkState(
            task_id=self.task_id,
            calls=calls,
            compilations=MappingProxyType(comps),
            keys=MappingProxyType(dict(self._keys)),
            next_operation=nxt,
            unresolved=tuple(p[1] for p in pending),
            accepted=accepted,
            events=self._events,
            last_seq=last.seq if last is not None else -1,
            last_ts=last.ts if last is not None else None,
            other_kinds=MappingProxyType(dict(self._other)),
            anomalies=tuple(self._anomalies),
        )


def _ignore(ev: Event, d: dict[str, Any]) -> None:
    return None




def _underived(c: _Call, attempt: Any, result: Any) -> str | None:
    """Why a completion's ``result`` is not what the events before it hold, or None when it is.

    ``{"value": V}`` must be, as canonical JSON bytes, the result of the latest
    ``attempt.interpreted`` of that attempt no completion consumed yet; ``{"value_ref":
    ref}`` must name the digest of its ``result_ref``; ``{"raw": true, "response": ref}``
    the digest of the response that attempt's ``attempt.observed`` stored. (The rule of
    verify's graph check, applied where the protocol reads the value back.)
    """
    if attempt != c.n or c.n == 0:
        return f"the completion names attempt {attempt!r}, but the latest started attempt is {c.n}"
    if type(result) is not dict:
        return "the completion carries no result object"
    if result.keys() == {"raw", "response"} and result["raw"] is True:
        ref, seen = result["response"], c.response
        digest = ref.get("digest") if type(ref) is dict else None
        if seen is None or digest != seen.get("digest"):
            return "the raw completion names another response than the one its attempt.observed stored"
        return None
    claimed = completion_token(result)
    if claimed is None:
        return f"the completion's result has the keys {sorted(result)}, not a value, a value_ref or a raw response"
    interpreted, c.interpretation = c.interpretation, None
    if interpreted is None:
        return "the completion carries a value no attempt.interpreted of its attempt recorded"
    interp = interpretation_token(interpreted)
    if interp is None:
        return "the completion carries a value, but its interpretation recorded an error"
    if interp.split(b" ", 1)[0] != claimed.split(b" ", 1)[0]:
        return "the completion carries its value inline where the interpretation stored it by ref, or the reverse"
    if interp != claimed:
        return "the completion's value differs from the result its attempt.interpreted recorded"
    return None


def _list(value: Any) -> list[Any]:
    """A recorded list, or nothing: a projection never trusts a field's shape."""
    return value if isinstance(value, list) else []


_RANK: Final[dict[ProviderEffect, int]] = {"none": 0, "unknown": 1, "happened": 2}


def _worse(a: ProviderEffect, b: ProviderEffect) -> ProviderEffect:
    """Across attempts, what the provider may have done: happened > unknown > none."""
    return a if _RANK[a] >= _RANK[b] else b


def _attempt_effect(c: _Call) -> ProviderEffect:
    """What the provider may have done for the call's latest attempt."""
    if c.flags & _OBSERVED or c.outcome == "served":
        return "happened"
    if c.flags & _NOT_SENT or c.outcome == "not_served":
        return "none"
    return "unknown"


_NO_INPUTS: Final[Mapping[str, str]] = MappingProxyType({})


_Rung = tuple[Stage, NextOperation, ProviderEffect, bool, "str | None"]  # stage, next op, effect, risk, reason


def _ladder(c: _Call, known: Mapping[str, _Call]) -> _Rung:
    """The ladder of DESIGN §6: each rung asks whether a particular event exists.

    A ``call.resumed`` whose new call was never requested with ``resumes`` naming it (the
    process died between the appends) does not supersede: the old call keeps its stage,
    and running again records the promised new call.
    """
    effect = _worse(c.prior_effect, _attempt_effect(c)) if c.n else "none"
    if c.completed:
        return "completed", NONE, "happened", False, None
    if c.preparation_failed is not None:
        return "preparation_failed", FIX_INPUTS, effect, False, c.preparation_failed
    new = known.get(c.superseded_by) if c.superseded_by is not None else None
    if new is not None and new.resumes == c.call_id:
        return "superseded", NONE, effect, False, None
    if c.failed is not None:
        return "failed", OPERATOR_DECIDES, effect, False, c.failed
    if not c.manifest:
        return "requested", START_CALL, effect, False, None
    if not c.n:
        return "manifest_recorded", START_CALL, effect, False, None
    a = c
    k = a.flags
    if a.retry == "retry":
        return "retry_decided", START_NEXT_ATTEMPT, effect, False, None
    if a.retry is not None:
        return "failed", OPERATOR_DECIDES, effect, False, None
    if k & _INTERPRETED:
        return "interpreted", FINALIZE if a.interpret_error is None else REDECIDE, effect, False, a.interpret_error
    if k & _OBSERVED:
        if a.error is not None:  # a failure answer: nothing to interpret, decide on it
            return "observed", REDECIDE, effect, False, a.error
        return "observed", REINTERPRET, effect, False, None
    if a.outcome == "not_served":
        return "reconciled_not_served", START_NEXT_ATTEMPT, effect, False, None
    if a.outcome == "resend":
        return "risk_accepted", START_NEXT_ATTEMPT, effect, True, None
    if a.outcome == "provider_dedup":  # the provider replays the first answer for the key within its window
        why = "the provider deduplicates the key within its window: the next attempt resends under the same key"
        return "provider_dedup", START_NEXT_ATTEMPT, effect, False, why
    if a.outcome == "served" and a.evidence is not None:  # the observation naming the evidence is still to come
        return "observed", REINTERPRET, effect, False, None
    if a.outcome == "served":
        lost = "served, but the response is lost: fail the call or resend accepting the duplicate risk"
        return "reconciled_served", OPERATOR_DECIDES, effect, False, lost
    if k & _NOT_SENT:
        return "not_sent", START_NEXT_ATTEMPT, effect, False, None
    return "effect_unknown", RECONCILE_EFFECT, "unknown", True, a.timeout


def _classify(c: _Call, known: Mapping[str, _Call]) -> CallState:
    """The :class:`CallState` of one call record."""
    stage, nxt, effect, risk, reason = _ladder(c, known)
    inputs = c.inputs
    pending = c.evidence is not None and not c.flags & _OBSERVED
    return CallState(
        call_id=c.call_id,
        key=c.key,
        name=c.name,
        stage=stage,
        next_operation=nxt,
        provider_effect=effect,
        duplicate_effect_risk=risk,
        attempts=c.n,
        request_hash=c.request_hash,
        request=c.request,
        inputs=MappingProxyType(dict(inputs)) if inputs else _NO_INPUTS,
        resumes=c.resumes,
        superseded_by=c.superseded_by if stage == "superseded" else None,
        result=c.result,
        response=c.evidence if pending else c.response,
        reason=reason,
        first_seq=c.first_seq,
        last_seq=c.last_seq,
        since=c.since,
        interpreter=c.interpreter,
        encoding=c.encoding,
        interpret_error=c.interpret_error if c.flags & _INTERPRETED else None,
        reinterpretations=c.reinterpretations,
        observation_pending=pending,
        provider_dedup=c.dedup,
        forged=c.forged if c.completed else None,
    )


class _FinishedCalls(Mapping[str, CallState]):
    """The calls of a finished fold, each classified on first access.

    Only :func:`work_state` makes one: its fold is private and done, so the records behind
    this mapping never change again and classifying late gives what classifying early
    would. A 100k-event task then pays for the states a caller reads, not for all of them.
    """

    __slots__ = ("_done", "_records")

    def __init__(self, records: dict[str, _Call]) -> None:
        self._records = records
        self._done: dict[str, CallState] = {}

    def __getitem__(self, cid: str) -> CallState:
        state = self._done.get(cid)
        if state is None:
            state = _classify(self._records[cid], self._records)
            self._done[cid] = state
        return state

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, cid: object) -> bool:
        return cid in self._records

    def __repr__(self) -> str:
        return f"<calls {list(self._records)}>"


def _classify_comp(c: _Comp) -> CompilationState:
    nxt: NextOperation = RECOMPILE if c.stage == "requested" else FIX_INPUTS if c.stage == "failed" else NONE
    return CompilationState(
        compilation_id=c.cid,
        stage=c.stage,
        next_operation=nxt,
        offered=tuple(MappingProxyType(o) for o in c.offered),
        required=tuple(c.required),
        missing=tuple(c.missing),
        package=c.package,
        selected=tuple(c.selected),
        error=c.error,
        first_seq=c.first_seq,
        last_seq=c.last_seq,
    )


def work_state(events: Iterable[Event], *, task_id: str | None = None) -> WorkState:
    """Fold ``events`` into a :class:`WorkState`. Pure: no clock, no I/O, appends nothing."""
    fold = WorkStateFold(task_id)
    apply = fold.apply
    for ev in events:
        apply(ev)
    return fold._result(_FinishedCalls(fold._calls))
