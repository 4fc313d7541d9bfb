"""The work-state projection (DESIGN §6): what was done, what is unknown, what is safe next.

A pure fold over events: one small handler per event kind, a frozen result, no clock, no
I/O, no provider query. Each call is classified by the last evidence recorded for it;
the dangerous rung is an attempt that started and left nothing after it — the effect is
*unknown* and only reconciliation may move it on. Memory grows with the number of calls
and compilations, not with the number of events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from ..eventlog.format import Event

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

# next operations (DESIGN §2)
START_CALL: Final = "start call"
RECONCILE_EFFECT: Final = "reconcile effect"
REINTERPRET: Final = "reinterpret"
REDECIDE: Final = "redecide"
FINALIZE: Final = "finalize"
START_NEXT_ATTEMPT: Final = "start next attempt"
FIX_INPUTS: Final = "fix inputs"
RECOMPILE: Final = "recompile"
CHECK_AND_ACCEPT: Final = "check and accept"
OPERATOR_DECIDES: Final = "operator decides"
NONE: Final = "none"

WORK_STATE_VERSION: Final = "intentlog-workstate/1"


@dataclass(frozen=True, slots=True)
class CallState:
    """One call as the record proves it."""

    call_id: str
    key: str
    name: str | None
    stage: str
    next_operation: str
    provider_effect: str  # "none" | "unknown" | "happened"
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


@dataclass(frozen=True, slots=True)
class CompilationState:
    compilation_id: str
    stage: str  # "requested" | "compiled" | "failed"
    next_operation: str
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
    next_operation: str
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


@dataclass(slots=True)
class _Attempt:
    n: int
    kinds: set[str] = field(default_factory=set)
    outcome: str | None = None  # reconciliation outcome
    evidence: bool = False
    interpreted_ok: bool | None = None
    retry: str | None = None  # "retry" | "fail"
    observed_error: bool = False


@dataclass(slots=True)
class _Call:
    call_id: str
    key: str
    name: str | None
    first_seq: int
    last_seq: int
    since: str
    resumes: str | None = None
    manifest: dict[str, Any] | None = None
    attempts: list[_Attempt] = field(default_factory=list)
    completed: dict[str, Any] | None = None
    failed: str | None = None
    preparation_failed: str | None = None
    superseded_by: str | None = None
    response: dict[str, Any] | None = None
    interpreter: dict[str, Any] | None = None


@dataclass(slots=True)
class _Comp:
    cid: str
    first_seq: int
    last_seq: int
    offered: list[dict[str, Any]]
    required: list[str]
    stage: str = "requested"
    missing: list[str] = field(default_factory=list)
    package: dict[str, Any] | None = None
    selected: list[str] = field(default_factory=list)
    error: str | None = None


class WorkStateFold:
    """The projection as a fold: feed events to :meth:`apply`, read :meth:`result` any time."""

    def __init__(self, task_id: str | None = None) -> None:
        self.task_id = task_id
        self._calls: dict[str, _Call] = {}
        self._comps: dict[str, _Comp] = {}
        self._keys: dict[str, str] = {}
        self._events = 0
        self._last_seq = -1
        self._last_ts: str | None = None
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
            "attempt.not_sent": self._on_attempt_event,
            "attempt.errored": self._on_attempt_event,
            "attempt.observed": self._on_observed,
            "attempt.interpreted": self._on_interpreted,
            "attempt.retry_decided": self._on_retry_decided,
            "effect.reconciled": self._on_reconciled,
            "context.compilation_requested": self._on_comp_requested,
            "context.compiled": self._on_compiled,
            "context.compilation_failed": self._on_comp_failed,
        }

    # -- feeding -------------------------------------------------------------------

    def apply(self, ev: Event) -> None:
        self._events += 1
        self._last_seq = ev.seq
        self._last_ts = ev.ts
        handler = self._handlers.get(ev.kind)
        if handler is None:
            self._other[ev.kind] = self._other.get(ev.kind, 0) + 1
            return
        handler(ev, ev.data)

    def _anomaly(self, ev: Event, what: str) -> None:
        if len(self._anomalies) < 100:
            self._anomalies.append(f"seq {ev.seq} ({ev.kind}): {what}")

    def _call(self, ev: Event, d: dict[str, Any]) -> _Call | None:
        c = self._calls.get(d.get("call"))  # type: ignore[arg-type]
        if c is None:
            self._anomaly(ev, f"names call {d.get('call')!r}, which was never requested")
            return None
        c.last_seq = ev.seq
        c.since = ev.ts
        return c

    def _attempt(self, ev: Event, c: _Call, d: dict[str, Any]) -> _Attempt | None:
        n = d.get("attempt")
        if not c.attempts or c.attempts[-1].n != n:
            self._anomaly(ev, f"names attempt {n!r} of {c.call_id}, which is not its latest started attempt")
            return None
        return c.attempts[-1]

    # -- handlers ------------------------------------------------------------------

    def _on_created(self, ev: Event, d: dict[str, Any]) -> None:
        if self.task_id is None and isinstance(d.get("task"), str):
            self.task_id = d["task"]

    def _on_accepted(self, ev: Event, d: dict[str, Any]) -> None:
        self._last_accepted = ev.seq

    def _on_requested(self, ev: Event, d: dict[str, Any]) -> None:
        cid, key = d.get("call"), d.get("key")
        if not isinstance(cid, str) or not isinstance(key, str) or cid in self._calls:
            self._anomaly(ev, "call.requested without a new call id and a key")
            return
        resumes = d.get("resumes")
        self._calls[cid] = _Call(cid, key, d.get("name"), ev.seq, ev.seq, ev.ts, resumes=resumes)
        self._keys[key] = cid

    def _on_manifest(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        if c is not None:
            c.manifest = d

    def _on_preparation_failed(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        if c is not None:
            c.preparation_failed = str(d.get("error"))

    def _on_resumed(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        if c is not None:
            c.superseded_by = d.get("new_call")

    def _on_completed(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        if c is not None:
            c.completed = d
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
        if not isinstance(n, int) or n != len(c.attempts) + 1:
            self._anomaly(ev, f"attempt {n!r} of {c.call_id} does not follow attempt {len(c.attempts)}")
        c.attempts.append(_Attempt(n if isinstance(n, int) else len(c.attempts) + 1, {ev.kind}))

    def _on_attempt_event(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        a = self._attempt(ev, c, d) if c is not None else None
        if a is not None:
            a.kinds.add(ev.kind)

    def _on_observed(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        a = self._attempt(ev, c, d) if c is not None else None
        if c is None or a is None:
            return
        a.kinds.add(ev.kind)
        a.observed_error = d.get("error") is not None
        resp = d.get("response")
        c.response = resp if isinstance(resp, dict) else None

    def _on_interpreted(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        a = self._attempt(ev, c, d) if c is not None else None
        if c is None or a is None:
            return
        a.kinds.add(ev.kind)
        a.interpreted_ok = d.get("error") is None
        interp = d.get("interpreter")
        c.interpreter = interp if isinstance(interp, dict) else None

    def _on_retry_decided(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        a = self._attempt(ev, c, d) if c is not None else None
        if a is not None:
            a.kinds.add(ev.kind)
            a.retry = str(d.get("decision"))

    def _on_reconciled(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._call(ev, d)
        a = self._attempt(ev, c, d) if c is not None else None
        if a is not None:
            a.kinds.add(ev.kind)
            a.outcome = str(d.get("outcome"))
            a.evidence = d.get("evidence") is not None

    def _on_comp_requested(self, ev: Event, d: dict[str, Any]) -> None:
        cid = d.get("compilation")
        if not isinstance(cid, str):
            self._anomaly(ev, "compilation request without an id")
            return
        offered = [o for o in d.get("offered") or [] if isinstance(o, dict)]
        required = [r for r in d.get("required") or [] if isinstance(r, str)]
        self._comps[cid] = _Comp(cid, ev.seq, ev.seq, offered, required)

    def _comp(self, ev: Event, d: dict[str, Any]) -> _Comp | None:
        c = self._comps.get(d.get("compilation"))  # type: ignore[arg-type]
        if c is None:
            self._anomaly(ev, f"names compilation {d.get('compilation')!r}, which was never requested")
            return None
        c.last_seq = ev.seq
        return c

    def _on_compiled(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._comp(ev, d)
        if c is not None:
            c.stage = "compiled"
            c.package = d.get("package")
            c.selected = [s for s in d.get("selected") or [] if isinstance(s, str)]

    def _on_comp_failed(self, ev: Event, d: dict[str, Any]) -> None:
        c = self._comp(ev, d)
        if c is not None:
            c.stage = "failed"
            c.error = str(d.get("error"))
            offered_ids = {o.get("id") for o in c.offered}
            derived = [r for r in c.required if r not in offered_ids]
            recorded = [m for m in d.get("missing") or [] if isinstance(m, str)]
            c.missing = sorted(set(derived) | set(recorded))

    # -- the result ----------------------------------------------------------------

    def call_state(self, cid: str) -> CallState:
        return _classify(self._calls[cid])

    def latest_call(self, key: str) -> str | None:
        return self._keys.get(key)

    @property
    def call_count(self) -> int:
        return len(self._calls)

    def result(self) -> WorkState:
        calls = {cid: _classify(c) for cid, c in self._calls.items()}
        comps = {cid: _classify_comp(c) for cid, c in self._comps.items()}
        latest = set(self._keys.values())
        pending: list[tuple[int, str, str]] = []
        for cid, cs in calls.items():
            if cid in latest and cs.next_operation != NONE:
                pending.append((cs.first_seq, cid, cs.next_operation))
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
        return WorkState(
            task_id=self.task_id,
            calls=MappingProxyType(calls),
            compilations=MappingProxyType(comps),
            keys=MappingProxyType(dict(self._keys)),
            next_operation=nxt,
            unresolved=tuple(p[1] for p in pending),
            accepted=accepted,
            events=self._events,
            last_seq=self._last_seq,
            last_ts=self._last_ts,
            other_kinds=MappingProxyType(dict(self._other)),
            anomalies=tuple(self._anomalies),
        )


def _ignore(ev: Event, d: dict[str, Any]) -> None:
    return None


def _effect_of(attempts: list[_Attempt]) -> str:
    """What the provider may have done across all attempts: happened > unknown > none."""
    effect = "none"
    for a in attempts:
        if "attempt.observed" in a.kinds or a.outcome == "served":
            return "happened"
        if "attempt.not_sent" in a.kinds or a.outcome == "not_served":
            continue
        effect = "unknown"
    return effect


def _classify(c: _Call) -> CallState:
    """The ladder of DESIGN §6: each rung asks whether a particular event exists."""
    effect = _effect_of(c.attempts)
    risk = False
    reason: str | None = None
    if c.completed is not None:
        stage, nxt, effect = "completed", NONE, "happened"
    elif c.preparation_failed is not None:
        stage, nxt, reason = "preparation_failed", FIX_INPUTS, c.preparation_failed
    elif c.superseded_by is not None:
        stage, nxt = "superseded", NONE
    elif c.failed is not None:
        stage, nxt, reason = "failed", OPERATOR_DECIDES, c.failed
    elif c.manifest is None:
        stage, nxt = "requested", START_CALL
    elif not c.attempts:
        stage, nxt = "manifest_recorded", START_CALL
    else:
        a = c.attempts[-1]
        k = a.kinds
        if a.retry == "retry":
            stage, nxt = "retry_decided", START_NEXT_ATTEMPT
        elif a.retry is not None:
            stage, nxt = "failed", OPERATOR_DECIDES
        elif "attempt.interpreted" in k:
            stage, nxt = "interpreted", FINALIZE if a.interpreted_ok else REDECIDE
        elif "attempt.observed" in k:
            stage, nxt = "observed", REINTERPRET
        elif a.outcome == "not_served":
            stage, nxt = "reconciled_not_served", START_NEXT_ATTEMPT
        elif a.outcome == "resend":
            stage, nxt, risk = "risk_accepted", START_NEXT_ATTEMPT, True
        elif a.outcome == "served":
            stage, nxt = "reconciled_served", OPERATOR_DECIDES
            reason = "served, but the response is lost: fail the call or resend accepting the duplicate risk"
        elif "attempt.not_sent" in k:
            stage, nxt = "not_sent", START_NEXT_ATTEMPT
        else:
            stage, nxt, effect, risk = "effect_unknown", RECONCILE_EFFECT, "unknown", True
    m = c.manifest or {}
    inputs = m.get("inputs")
    return CallState(
        call_id=c.call_id,
        key=c.key,
        name=c.name,
        stage=stage,
        next_operation=nxt,
        provider_effect=effect,
        duplicate_effect_risk=risk,
        attempts=len(c.attempts),
        request_hash=m.get("request_hash"),
        request=m.get("request"),
        inputs=MappingProxyType(dict(inputs) if isinstance(inputs, dict) else {}),
        resumes=c.resumes,
        superseded_by=c.superseded_by,
        result=(c.completed or {}).get("result"),
        response=c.response,
        reason=reason,
        first_seq=c.first_seq,
        last_seq=c.last_seq,
        since=c.since,
        interpreter=c.interpreter,
    )


def _classify_comp(c: _Comp) -> CompilationState:
    nxt = {"requested": RECOMPILE, "failed": FIX_INPUTS}.get(c.stage, NONE)
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
    for ev in events:
        fold.apply(ev)
    return fold.result()
