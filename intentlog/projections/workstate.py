"""The work-state projection (DESIGN §6): what was done, what is unknown, what is safe next.

A pure fold over events: one small handler per event kind, a frozen result, no clock, no
I/O, no provider query. Memory grows with the number of calls and compilations, not with
the number of events. The ladder that classifies each call is :mod:`.ladder`; the
records the fold keeps, :mod:`.records`; the result types, :mod:`.states` (re-exported
here); a fold's state as JSON, to resume it later, :mod:`.snapshot`.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

from .._internal.types import NextOperation
from ..eventlog.format import Event
from .ladder import FinishedCalls, classify, classify_comp, task_summary, underived
from .records import (
    DECIDED,
    ERRORED,
    INTERPRETED,
    NOT_SENT,
    OBSERVED,
    RECONCILED,
    STARTED,
    TIMED_OUT,
    CallRecord,
    CompRecord,
    attempt_effect,
    worse,
)
from .snapshot import SNAPSHOT_VERSION, decode_snapshot, encode_snapshot
from .states import (
    CHECK_AND_ACCEPT,
    FINALIZE,
    FIX_INPUTS,
    NONE,
    OPERATOR_DECIDES,
    RECOMPILE,
    RECONCILE_EFFECT,
    REDECIDE,
    REINTERPRET,
    START_CALL,
    START_NEXT_ATTEMPT,
    WORK_STATE_VERSION,
    CallState,
    CompilationState,
    WorkState,
)

__all__ = [
    "SNAPSHOT_VERSION",
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
    "WORK_STATE_VERSION",
    "CallState",
    "CompilationState",
    "WorkState",
    "WorkStateFold",
    "work_state",
]


class WorkStateFold:
    """The projection as a fold: feed events to :meth:`apply`, read :meth:`result` any time.

    Each event costs one dictionary lookup for its kind and one small handler; the fold
    keeps one record per call and compilation, never the events themselves.
    """

    def __init__(self, task_id: str | None = None) -> None:
        self.task_id = task_id
        self._calls: dict[str, CallRecord] = {}
        self._comps: dict[str, CompRecord] = {}
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

    # -- feeding -------------------------------------------------------------------

    def apply(self, ev: Event) -> None:
        """Fold one event in. Never raises for an event's content: what cannot be placed is an anomaly."""
        self._events += 1
        self._last = ev
        handler = _HANDLERS.get(ev.kind)
        if handler is None:
            other = self._other
            other[ev.kind] = other.get(ev.kind, 0) + 1
        else:
            handler(self, ev, ev.data)

    def _anomaly(self, ev: Event, what: str) -> None:
        if len(self._anomalies) < 100:
            self._anomalies.append(f"seq {ev.seq} ({ev.kind}): {what}")

    def _call(self, ev: Event, d: dict[str, Any]) -> CallRecord | None:
        cid = d.get("call")
        c = self._calls.get(cid) if type(cid) is str else None
        if c is None:
            self._anomaly(ev, f"names call {cid!r}, which was never requested")
            return None
        c.last_seq = ev.seq
        c.since = ev.ts
        return c

    def _attempt(self, ev: Event, d: dict[str, Any]) -> CallRecord | None:
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
        c = CallRecord(
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
            why = underived(c, d.get("attempt"), result)
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
            c.prior_effect = worse(c.prior_effect, attempt_effect(c))
        c.n += 1
        c.flags = STARTED
        c.outcome = c.retry = c.error = c.interpret_error = c.timeout = c.evidence = c.interpretation = None
        c.reinterpretations = 0

    def _on_not_sent(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is not None:
            a.flags |= NOT_SENT

    def _on_errored(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is not None:
            a.flags |= ERRORED

    def _on_observed(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is None:
            return
        a.flags |= OBSERVED
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
        if a.flags & INTERPRETED:
            a.reinterpretations += 1
        a.flags |= INTERPRETED
        error = d.get("error")
        a.interpret_error = None if error is None else str(error)
        a.interpretation = d
        interp = d.get("interpreter")
        a.interpreter = interp if type(interp) is dict else None

    def _on_retry_decided(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is not None:
            a.flags |= DECIDED
            a.retry = str(d.get("decision"))

    def _on_progress(self, ev: Event, d: dict[str, Any]) -> None:
        self._attempt(ev, d)  # a heartbeat: the attempt is still out, its effect still unknown

    def _on_timed_out(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is not None:
            a.flags |= TIMED_OUT
            limit, after, timeout = d.get("limit"), d.get("after"), d.get("timeout")
            a.timeout = f"attempt {a.n} timed out after {after} s (limit {limit} {timeout} s)"

    def _on_reconciled(self, ev: Event, d: dict[str, Any]) -> None:
        a = self._attempt(ev, d)
        if a is not None:
            a.flags |= RECONCILED
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
        self._comps[cid] = CompRecord(cid, ev.seq, ev.seq, offered, required)

    def _comp(self, ev: Event, d: dict[str, Any]) -> CompRecord | None:
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

    # -- snapshots -----------------------------------------------------------------

    def snapshot(self, *, calls: bool = True) -> dict[str, Any]:
        """The fold's whole state as JSON values: :meth:`from_snapshot` resumes it exactly.

        Folding the events after it into the resumed fold gives what folding every event
        gives (a property test holds it). Holds no event, only the records; with
        ``calls=False`` not the call records either (:meth:`records` gives them, for a
        store that keeps each apart).
        """
        return encode_snapshot(
            self.task_id, self._calls if calls else {}, self._comps, self._keys, self._reserved,
            self._approval_keys, self._approval_digests, self._events, self._last,
            self._last_completed, self._last_accepted, self._other, self._anomalies,
        )

    def records(self) -> Mapping[str, CallRecord]:
        """The call records, by id in recording order (read-only: the fold owns them)."""
        return MappingProxyType(self._calls)

    @classmethod
    def from_snapshot(
        cls,
        snap: Mapping[str, Any],
        records: Iterable[CallRecord] | None = None,
        *,
        known: Container[str] | None = None,
    ) -> WorkStateFold:
        """The fold :meth:`snapshot` described (with ``records``, those call records instead of its own).

        ``known``: the ids of records kept elsewhere (for :meth:`finished_from`; the fold
        holds none and must not be fed). ``ValueError`` (or ``KeyError``/``TypeError``) for anything else.
        """
        p = decode_snapshot(snap, records)
        fold = cls(p.task)
        fold._calls, fold._comps, fold._keys, fold._reserved = p.calls, p.comps, p.keys, p.reserved
        fold._approval_keys, fold._approval_digests = p.approval_keys, p.approval_digests
        fold._events, fold._last, fold._other, fold._anomalies = p.events, p.last, p.other, p.anomalies
        fold._last_completed, fold._last_accepted = p.last_completed, p.last_accepted
        if any(cid not in (fold._calls if known is None else known) for cid in fold._keys.values()):
            raise ValueError("a snapshot whose keys name calls it does not hold")
        return fold

    # -- the result ----------------------------------------------------------------

    def call_state(self, cid: str) -> CallState:
        """The state of one call (raises KeyError for a call never requested)."""
        return classify(self._calls[cid], self._calls)

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
        return self._result(MappingProxyType({cid: classify(c, known) for cid, c in known.items()}))

    def finished(self) -> WorkState:
        """The projection, each call classified when first read: feed nothing to this fold afterwards.

        What :func:`work_state` returns; for a fold resumed from a snapshot and read once.
        """
        return self._assemble(FinishedCalls(self._calls), *self._summary())

    def summary(self) -> dict[str, Any]:
        """What the result says of the task as a whole (next operation, unresolved, accepted), as JSON."""
        nxt, unresolved, accepted = self._summary()
        return {"next_operation": nxt, "unresolved": list(unresolved), "accepted": accepted}

    def finished_from(self, records: Mapping[str, CallRecord], summary: Mapping[str, Any]) -> WorkState:
        """The projection of a fold restored without its call records, from ``records`` and its :meth:`summary`.

        ``records`` is read only for the calls a caller looks at (a store decoding each on
        first access). ``ValueError`` for a summary of the wrong shape.
        """
        nxt, unresolved, accepted = summary["next_operation"], summary["unresolved"], summary["accepted"]
        if type(nxt) is not str or type(unresolved) is not list or type(accepted) is not bool:
            raise ValueError("a summary of the wrong shape")
        return self._assemble(FinishedCalls(records), nxt, tuple(unresolved), accepted)  # type: ignore[arg-type]

    def _result(self, calls: Mapping[str, CallState]) -> WorkState:
        return self._assemble(calls, *self._summary())

    def _summary(self) -> tuple[NextOperation, tuple[str, ...], bool]:
        return task_summary(self._calls, self._keys, self._comps, self._last_completed, self._last_accepted)

    def _assemble(
        self, calls: Mapping[str, CallState], nxt: NextOperation, unresolved: tuple[str, ...], accepted: bool
    ) -> WorkState:
        last = self._last
        return WorkState(
            task_id=self.task_id,
            calls=calls,
            compilations=MappingProxyType({cid: classify_comp(c) for cid, c in self._comps.items()}),
            keys=MappingProxyType(dict(self._keys)),
            next_operation=nxt,
            unresolved=unresolved,
            accepted=accepted,
            events=self._events,
            last_seq=last.seq if last is not None else -1,
            last_ts=last.ts if last is not None else None,
            other_kinds=MappingProxyType(dict(self._other)),
            anomalies=tuple(self._anomalies),
        )


def _ignore(fold: WorkStateFold, ev: Event, d: dict[str, Any]) -> None:
    return None


#: kind -> handler, called as ``handler(fold, event, data)``: held by the class, not by each fold, so a
#: fold holds no reference to itself (no cycle: it is freed as soon as it is dropped, collector or not)
_HANDLERS: Final[dict[str, Callable[[WorkStateFold, Event, dict[str, Any]], None]]] = {
    "task.created": WorkStateFold._on_created,
    "task.accepted": WorkStateFold._on_accepted,
    "stream.repaired": _ignore,
    "artifact.recorded": _ignore,
    "call.requested": WorkStateFold._on_requested,
    "call.manifest": WorkStateFold._on_manifest,
    "call.preparation_failed": WorkStateFold._on_preparation_failed,
    "call.resumed": WorkStateFold._on_resumed,
    "call.completed": WorkStateFold._on_completed,
    "call.failed": WorkStateFold._on_failed,
    "attempt.started": WorkStateFold._on_attempt_started,
    "attempt.not_sent": WorkStateFold._on_not_sent,
    "attempt.errored": WorkStateFold._on_errored,
    "attempt.observed": WorkStateFold._on_observed,
    "attempt.interpreted": WorkStateFold._on_interpreted,
    "attempt.retry_decided": WorkStateFold._on_retry_decided,
    "attempt.progress": WorkStateFold._on_progress,
    "attempt.timed_out": WorkStateFold._on_timed_out,
    "effect.reconciled": WorkStateFold._on_reconciled,
    # the operator's records: folded by projections.operator, not here
    "task.checkpoint": _ignore,
    "task.failed": _ignore,
    "task.forked": _ignore,
    "approval.requested": WorkStateFold._on_approval_requested,
    "approval.decided": _ignore,
    "context.compilation_requested": WorkStateFold._on_comp_requested,
    "context.compiled": WorkStateFold._on_compiled,
    "context.compilation_failed": WorkStateFold._on_comp_failed,
}





def _list(value: Any) -> list[Any]:
    """A recorded list, or nothing: a projection never trusts a field's shape."""
    return value if isinstance(value, list) else []


def work_state(events: Iterable[Event], *, task_id: str | None = None) -> WorkState:
    """Fold ``events`` into a :class:`WorkState`. Pure: no clock, no I/O, appends nothing."""
    fold = WorkStateFold(task_id)
    apply = fold.apply
    for ev in events:
        apply(ev)
    return fold._result(FinishedCalls(fold._calls))

