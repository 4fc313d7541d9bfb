"""One task's detail in the report: its state and next step, timeline, approvals, checkpoints, turns, artifacts.

Every value from the record is escaped (:func:`~intentlog.report.html.esc`); the commands
shown are the ones :mod:`intentlog.projections.status` spells for ``intentlog status``
(:func:`~intentlog.projections.status.call_next_step` for each unresolved call), passed
through the caller's ``hint`` so they run as printed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import orjson

from ..checker.report import Problem
from ..eventlog.format import Event
from ..projections.status import call_next_step
from ..projections.workstate import CallState
from .html import STAGE_OF_KIND, commands, esc, human_size, running_since, stage_class, table
from .model import MAX_EVENTS, Artifact, TaskData, event_summary

__all__ = ["task_detail", "verify_block"]

Hint = Callable[[str], str]
_TURN: Final = re.compile(r"turn-[0-9]+\Z")
_SETTLED: Final = frozenset({"complete", "awaiting acceptance"})
_UNKNOWN: Final = (
    " An attempt started and nothing after it was recorded: the provider may or may not have served it;"
    " resending blind may pay twice."
)


def badge(text: str, cls: str) -> str:
    return f'<span class="badge {esc(cls)}">{esc(text)}</span>'


def state_badge(state: str) -> str:
    return badge(state, "state-" + re.sub(r"[^a-z0-9]+", "-", state))


def short(digest: object) -> str:
    s = str(digest)
    return f'<span class="mono" title="{esc(s)}">{esc(s[:19])}…</span>' if s.startswith("blake3:") else esc(s)


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, ValueError):
        return "(not printable)"


def verify_block(problems: Sequence[Problem], *, what: str) -> str:
    errors = [p for p in problems if p.severity != "info"]
    head = badge("verify: ok", "ok") if not errors else badge(f"verify: {len(errors)} problem(s)", "bad")
    if not problems:
        return f'<p class="verify">{head} <span class="mut">nothing found wrong in {esc(what)}</span></p>'
    rows = [[esc(p.severity), esc(p.code), esc(p.where()), esc(p.message)] for p in problems]
    return f'<div class="verify">{head}{table(["severity", "code", "where", "message"], rows)}</div>'


def task_detail(t: TaskData, hint: Hint) -> str:
    """The whole detail section of one task."""
    parts = [f'<section class="task" id="task-{esc(t.task)}">']
    why = f" <span class=mut>({esc(t.status.reason)})</span>" if t.status is not None and t.status.reason else ""
    parts.append(f"<h2>{esc(t.task)} {state_badge(t.state)}{why}</h2>")
    parts.append(_overview(t, hint))
    parts.append(verify_block(t.verify, what="this task"))
    st = t.status
    if st is not None:
        calls = list(st.work.calls.values())
        if calls:
            parts.append("<h3>Calls and their attempts</h3>")
            by_call = _events_by_call(t.detail or [])
            parts.extend(_call_block(t.task, c, by_call.get(c.call_id, []), st.work.unresolved, hint) for c in calls)
        if st.work.compilations:
            rows = [
                [esc(k.compilation_id), badge(k.stage, stage_class(k.stage)), esc(k.next_operation),
                 esc(", ".join(k.required)), esc(", ".join(k.missing)), esc(k.error or "")]
                for k in st.work.compilations.values()
            ]
            parts.append("<h3>Compilations</h3>" + table(
                ["compilation", "stage", "next operation", "required", "missing", "error"], rows))
        parts.append(_approvals(t))
        parts.append(_checkpoints(t))
        parts.append(_turns(t, calls))
    parts.append(_artifacts(t.artifacts, hint))
    parts.append(_all_events(t, hint))
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def _overview(t: TaskData, hint: Hint) -> str:
    st = t.status
    stream = t.stream + (f": {t.problem}" if t.problem else "")
    rows: list[list[str]] = [["state", state_badge(t.state)], ["stream", esc(stream)], ["events", esc(t.events)]]
    if st is not None:
        cp = st.checkpoint
        rows += [
            ["phase", esc(st.phase or "-")],
            ["checkpoint", esc(f"{cp.phase} ({cp.status}) at seq {cp.seq}" if cp is not None else "-")],
            ["last outcome", esc(st.last_outcome or "-")],
            ["unresolved", esc(st.unresolved_action or "-")],
            ["next operation", esc(st.next_operation)],
        ]
        forked = st.operator.forked if st.operator is not None else None
        if forked is not None:
            rows.append(["forked from", esc(f"{forked.get('from_task')} before {forked.get('from_call')}")])
    if t.parent is not None:
        rows.append(["parent", f'<a href="#task-{esc(t.parent)}">{esc(t.parent)}</a>'])
    if t.children:
        kids = (f'<a href="#task-{esc(c)}">{esc(c)}</a> {state_badge(t.child_states.get(c, "-"))}' for c in t.children)
        rows.append(["children", "<br>".join(kids)])
    usage = usage_totals(t)
    if usage is not None:
        rows.append(["usage", esc(usage)])
    rows.append(["next step", commands(hint(t.next_step))])
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    out = f'<table class="overview">{body}</table>'
    if t.state not in _SETTLED:
        cls = "resolve" if t.state in ("paused for review", "unreadable", "failed") else "resolve pending"
        out += f'<div class="{cls}"><strong>Next step</strong>: {commands(hint(t.next_step))}</div>'
    return out


def usage_totals(t: TaskData) -> str | None:
    """The ``usage`` numbers of every response this task observed, summed per field (tokens, cost).

    Each observed response counts (every attempt the provider served was billed); only the
    responses whose bytes the report read are counted (a larger one is named as not read).
    None when no response carries a ``usage`` object of numbers.
    """
    payloads = _payloads(t.artifacts)
    sums: dict[str, float] = {}
    counted = unread = 0
    for ev in t.detail or ():
        ref = ev.data.get("response") if ev.kind == "attempt.observed" else None
        digest = ref.get("digest") if isinstance(ref, dict) else None
        if not isinstance(digest, str):
            continue
        data = payloads.get(digest)
        if data is None:
            unread += 1
            continue
        try:
            usage = orjson.loads(data).get("usage")
        except (ValueError, AttributeError):
            continue
        if not isinstance(usage, dict):
            continue
        numbers = {k: v for k, v in usage.items() if type(v) in (int, float)}
        if not numbers:
            continue
        counted += 1
        for k, v in numbers.items():
            sums[k] = sums.get(k, 0) + v
    if not counted:
        return None
    fields = ", ".join(f"{k} {v:g}" for k, v in sorted(sums.items()))
    more = f"; {unread} response(s) too large to read here" if unread else ""
    return f"{fields} ({counted} response{'s' if counted != 1 else ''}{more})"


def _events_by_call(events: Sequence[Event]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for ev in events:
        cid = ev.data.get("call")
        if type(cid) is str and (ev.kind in STAGE_OF_KIND):
            out.setdefault(cid, []).append(ev)
    return out


def _call_block(task: str, c: CallState, events: Sequence[Event], unresolved: Sequence[str], hint: Hint) -> str:
    unknown = c.stage == "effect_unknown"
    cls = "call unknown" if unknown else "call unresolved" if c.call_id in unresolved else "call"
    head = (
        f'<h4>{esc(c.call_id)} <span class="mut">key</span> <span class="mono">{esc(c.key)}</span>'
        f"{f' <span class=mut>({esc(c.name)})</span>' if c.name else ''} "
        f'<span class="badge call-stage {stage_class(c.stage)}" data-stage="{esc(c.stage)}">'
        f'{esc(c.stage.replace("_", " "))}</span></h4>'
        f'<p class="mut">provider effect {esc(c.provider_effect)}; attempts {esc(c.attempts)}; next operation '
        f"{esc(c.next_operation)}; request {short(c.request_hash)}"
        f"{f'; resumes {esc(c.resumes)}' if c.resumes else ''}"
        f"{f'; superseded by {esc(c.superseded_by)}' if c.superseded_by else ''}</p>"
    )
    alert = ""
    if unknown or c.call_id in unresolved:
        step = commands(hint(call_next_step(task, c)))
        what = "Unknown effect" if unknown else f"Unresolved: {esc(c.next_operation)}"
        risk = _UNKNOWN if unknown else ""
        reason = f" ({esc(c.reason)})" if c.reason else ""
        pending = "" if unknown else " pending"
        started = _pending_attempt(c, events) if unknown else None
        since = f"<br>{running_since(started[1], f'attempt {started[0]} started')}" if started else ""
        alert = (f'<div class="resolve{pending}" data-call="{esc(c.call_id)}"><strong>{what}</strong>'
                 f"{reason}.{esc(risk)}{since}<br>Resolve: {step}</div>")
    groups: list[tuple[str, list[Event]]] = []
    index: dict[str, list[Event]] = {}
    for ev in events:
        n = ev.data.get("attempt")
        label = f"attempt {n}" if type(n) is int else "call"
        if label not in index:
            index[label] = []
            groups.append((label, index[label]))
        index[label].append(ev)
    tl = []
    for label, evs in groups:
        items = "".join(_event_item(ev) for ev in evs)
        tl.append(f'<div class="group"><div class="mut">{esc(label)}</div><ol class="tl">{items}</ol></div>')
    return f'<div class="{cls}" id="{esc(task)}-{esc(c.call_id)}">{head}{alert}{"".join(tl)}</div>'


def _pending_attempt(c: CallState, events: Sequence[Event]) -> tuple[int, str] | None:
    """The call's last attempt, when it started and nothing settled it since: ``(attempt, its recorded ts)``."""
    last = None
    for ev in events:
        if ev.kind == "attempt.started" and type(ev.data.get("attempt")) is int:
            last = ev
    if last is None or last.data["attempt"] != c.attempts:
        return None
    return int(last.data["attempt"]), last.ts


def _event_item(ev: Event) -> str:
    stage = STAGE_OF_KIND.get(ev.kind, ev.kind)
    d = {k: v for k, v in event_summary(ev.data).items() if k not in ("call", "attempt", "key")}
    return (
        f'<li data-kind="{esc(ev.kind)}"><span class="seq">seq {esc(ev.seq)}</span>'
        f'<span class="badge {stage_class(stage)}">{esc(stage)}</span><span class="ts mono">{esc(ev.ts)}</span>'
        f'<span class="mono">{esc(_json(d))}</span></li>'
    )


def _approvals(t: TaskData) -> str:
    ops = t.status.operator if t.status is not None else None
    if ops is None or not ops.approvals:
        return ""
    rows = [
        [esc(a.approval_id), esc(a.question), esc(_json(dict(a.binds))), short(a.binding), state_badge(a.status),
         esc(a.decision or "-"), esc(a.by or "-"), esc(a.note or ""),
         esc(_recorded(a.requested_seq, a.decided_seq, a.decided_ts)),
         esc(a.void_reason or "")]
        for a in ops.approvals.values()
    ]
    return "<h3>Approvals</h3>" + table(
        ["approval", "question", "binds", "on hash", "status", "decision", "by", "note", "recorded", "void"], rows
    )


def _recorded(requested: int, decided: int | None, ts: str | None) -> str:
    return f"seq {requested}" + (f" → seq {decided} at {ts}" if decided is not None else "")


def _checkpoints(t: TaskData) -> str:
    ops = t.status.operator if t.status is not None else None
    if ops is None or not ops.checkpoints:
        return ""
    rows = [
        [esc(c.seq), esc(c.ts), esc(c.phase), state_badge(c.status), esc(c.by or "-"), esc(c.note or ""),
         esc(c.turn or ""), " ".join(short(e.get("digest")) for e in c.evidence)]
        for c in ops.checkpoints
    ]
    phase = t.status.phase if t.status is not None else None
    return (f"<h3>Checkpoints and phases</h3><p>current phase: <b>{esc(phase or '-')}</b></p>"
            + table(["seq", "ts", "phase", "status", "by", "note", "turn", "evidence"], rows))


def _payloads(artifacts: Sequence[Artifact]) -> dict[str, bytes]:
    return {a.digest: a.payload for a in artifacts if a.payload is not None}


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _turns(t: TaskData, calls: Sequence[CallState]) -> str:
    turns = [c for c in calls if _TURN.match(c.key)]
    if not turns:
        return ""
    payloads = _payloads(t.artifacts)
    manifests = {ev.data.get("call"): ev.data for ev in (t.detail or []) if ev.kind == "call.manifest"}
    ops = t.status.operator if t.status is not None else None
    accepted = {c.turn: c.status for c in (ops.checkpoints if ops is not None else ()) if c.turn}
    out = ["<h3>Conversation</h3>"]
    for c in turns:
        msgs = []
        refs = manifests.get(c.call_id, {}).get("messages")
        for ref in refs if type(refs) is list else []:
            digest = ref.get("digest") if type(ref) is dict else ref
            msgs.append(_message(payloads.get(str(digest)), digest))
        resp = c.response.get("digest") if c.response is not None else None
        answer = _text(payloads.get(str(resp))) if resp is not None else None
        verdict = accepted.get(c.key)
        out.append(
            f'<div class="turn"><div><b>{esc(c.key)}</b> <span class="mut">{esc(c.call_id)} · request</span> '
            f"{short(c.request_hash)} {badge(c.stage.replace('_', ' '), stage_class(c.stage))}"
            f"{(' ' + state_badge(verdict)) if verdict else ''}</div>{''.join(msgs)}"
            f'<div class="msg"><span class="role">response</span>'
            f"{_answer(answer, resp)}"
            f"</div></div>"
        )
    return "".join(out)


def _answer(answer: str | None, resp: object) -> str:
    if answer is not None:
        return f"<pre>{esc(answer)}</pre>"
    return "(not recorded)" if resp is None else short(resp)


def _message(data: bytes | None, digest: object) -> str:
    text = _text(data)
    if text is None:
        return f'<div class="msg">{short(digest)}</div>'
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    if type(value) is dict and "role" in value:
        content = value.get("content")
        shown = content if type(content) is str else _json(content)
        return f'<div class="msg"><span class="role">{esc(value["role"])}</span><span>{esc(shown)}</span></div>'
    return f'<div class="msg"><pre>{esc(text)}</pre></div>'


def _artifacts(artifacts: Sequence[Artifact], hint: Hint) -> str:
    if not artifacts:
        return ""
    rows = []
    for a in artifacts:
        text = _text(a.payload)
        if text is not None:
            size = esc(human_size(len(a.payload or b"")))
            shown = f'<details><summary>view ({size})</summary><pre class="payload">{esc(text)}</pre></details>'
        elif a.payload is not None:
            shown = "binary: " + commands(hint(f"intentlog show {a.digest} > FILE"))
        else:
            shown = commands(hint(a.note or ""))
        rows.append([f'<span class="mono">{esc(a.digest)}</span>', esc(human_size(a.size)), esc(a.media_type or ""),
                     esc(a.where), shown])
    return "<h3>Artifacts</h3>" + table(["digest", "size", "media type", "first named", "payload"], rows)


def _all_events(t: TaskData, hint: Hint) -> str:
    """The task's own events (those of no call: creation, approvals, checkpoints, notes...); the calls' are above."""
    events = t.detail or []
    if not events:
        return ""
    own = [ev for ev in events if not (ev.kind in STAGE_OF_KIND and type(ev.data.get("call")) is str)]
    items = "".join(_event_item(ev) for ev in own)
    more = ""
    if t.events > len(events):
        more = (f'<p class="mut">{esc(t.events - len(events))} more event(s) not shown (the first {MAX_EVENTS} are): '
                f'{commands(hint(f"intentlog log {t.task} --since {len(events)}"))}</p>')
    summary = f"The task's own events ({esc(len(own))})"
    return f'<details><summary>{summary}</summary><ol class="tl">{items}</ol></details>{more}'


def stage_counts(states: Mapping[str, int]) -> str:
    return "".join(f"{state_badge(s)} {esc(n)} " for s, n in states.items())
