"""render(): one self-contained HTML page from a ledger folder (or an exported bundle).

Guarantees:

* **Self-contained.** One file: inline style, one optional inline script (filters for
  the index), no request of any kind -- no external script, style, font or image, and a
  Content-Security-Policy of ``default-src 'none'`` that forbids them. It opens from a
  ``file://`` URL with the network off, and reads the same without JavaScript.
* **Escaped.** A payload, a note, a key, an id is data: every value from the record is
  HTML-escaped, in text and attributes; no record data is placed inside the script.
* **Deterministic.** No clock is read and nothing about the run (time, host, user, the
  folder's path) is written; tasks are in id order, events in seq order. The same folder
  (and the same arguments) gives the same bytes, so reports diff in git.
* **Bounded.** The index holds one row per task; detail (timeline, approvals,
  checkpoints, conversation, artifacts, events) is drawn for the tasks named, else for
  every task that is not settled (not *complete* and not *awaiting acceptance*) or has a
  verify problem, then the others, up to ``detail`` tasks in all (``detail=None``: every
  task). Each detail shows at most :data:`~intentlog.report.model.MAX_EVENTS` events and
  payloads of at most :data:`~intentlog.report.model.PAYLOAD_MAX` bytes.
* **Read-only.** It reads streams and objects without a lock and without probing writer
  locks (the report is of the record), through the ledger's
  :class:`~intentlog.checker.seams.LedgerReads` only, and runs :func:`~intentlog.checker.verify`
  over the same reads, which changes nothing. On an object-store ledger (a
  :class:`~intentlog.Ledger` opened on ``s3://``, or the URL itself) those are its two seams,
  checked against every seal: nothing is written to the store and no probe runs. The same
  streams and objects give the same bytes as a folder's page, except that a store has no
  torn tail (:mod:`intentlog.report.source`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, final

from .._internal.args import check_names
from .._internal.regular import NotRegular
from ..checker.report import VerifyReport
from ..checker.seams import LedgerReads
from ..errors import NotALedger, UsageError
from ..eventlog.format import check_task_id
from ..ledgerreads import open_reads
from .backlog import backlog_section, check_backlog
from .html import CSP, SCRIPT, STYLE, commands, esc, human_duration, table
from .model import TaskData, attach_verify, collect_artifacts, read_task
from .sections import state_badge, task_detail, verify_block
from .source import ReportSource

__all__ = ["DEFAULT_DETAIL", "EARLIER_REPORT_FORMATS", "REPORT_FORMAT", "ReportResult", "render", "render_report"]

REPORT_FORMAT: Final = "intentlog-report/2"
#: formats this library rendered before: a bundle's page in one of them is not compared (its markup differs)
EARLIER_REPORT_FORMATS: Final = frozenset({"intentlog-report/1"})
#: How many tasks get a detail section by default (the rest are rows of the index).
DEFAULT_DETAIL: Final = 100
_SETTLED: Final = frozenset({"complete", "awaiting acceptance"})
#: Where a task comes in the index: what needs a person first, then work that goes on, then what is settled.
_RANK: Final = {
    "paused for review": 0, "awaiting approval": 0, "unreadable": 0,
    "running": 1, "interrupted": 1, "queued": 1,
    "awaiting acceptance": 2, "failed": 3, "complete": 3,
}  # fmt: skip


def _triage(rows: Mapping[str, TaskData]) -> dict[str, TaskData]:
    """The rows in triage order: a person needed (or a verify error, or an unknown effect) first, then by id."""

    def rank(item: tuple[str, TaskData]) -> tuple[int, str]:
        t, r = item
        urgent = r.verify_errors or r.unknown
        return (0 if urgent else _RANK.get(r.state, 1), t)

    return dict(sorted(rows.items(), key=rank))


class _HasReads(Protocol):
    def reads(self) -> LedgerReads: ...


Source = str | os.PathLike[str] | _HasReads
Hint = Callable[[str], str]


@final
@dataclass(frozen=True, slots=True)
class ReportResult:
    """A rendered report: its bytes and what it holds."""

    html: bytes
    tasks: tuple[str, ...]
    detailed: tuple[str, ...]
    counts: Mapping[str, int]
    verify_ok: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "bytes": len(self.html),
            "tasks": len(self.tasks),
            "detailed": list(self.detailed),
            "counts": dict(self.counts),
            "verify_ok": self.verify_ok,
        }


def _source_of(source: Source) -> ReportSource:
    """The reads behind ``source``: a location (a folder or ``s3://B/P``), or an open ledger's own."""
    if isinstance(source, (str, os.PathLike)):
        return ReportSource(open_reads(source))  # a store only read: no probe
    reads = getattr(source, "reads", None)
    if not callable(reads):
        raise TypeError(f"render() takes a ledger or a folder path, not {type(source).__name__}")
    return ReportSource(reads())


def render(
    source: Source,
    tasks: Sequence[str] | None = None,
    *,
    backlog: Mapping[str, Any] | None = None,
    detail: int | None = DEFAULT_DETAIL,
    hint: Hint | None = None,
    verify: VerifyReport | None = None,
    title: str | None = None,
    note: str | None = None,
) -> bytes:
    """The report's HTML bytes; see :func:`render_report` (this returns only the bytes)."""
    return render_report(
        source, tasks, backlog=backlog, detail=detail, hint=hint, verify=verify, title=title, note=note
    ).html


def render_report(
    source: Source,
    tasks: Sequence[str] | None = None,
    *,
    backlog: Mapping[str, Any] | None = None,
    detail: int | None = DEFAULT_DETAIL,
    hint: Hint | None = None,
    verify: VerifyReport | None = None,
    title: str | None = None,
    note: str | None = None,
) -> ReportResult:
    """Render the report of ``source`` (a :class:`~intentlog.Ledger`, a ledger / bundle folder, or ``s3://B/P``).

    ``tasks`` limits it to those tasks (each shown in detail); default every task.
    ``backlog`` is a backlog's operator view as ``intentlog backlog --json`` prints it
    (``counts`` per state, ``items`` with ``item``, ``task``, ``state``, ``reason``,
    ``next_step``). ``detail`` bounds the detail sections (None: every task). ``hint``
    rewrites each command shown (the CLI adds ``--root PATH``). ``verify`` is a check
    already run (an export passes its check of the bundle); else the source's check runs.
    ``title`` and ``note`` head the page.

    Raises :class:`NotALedger` when the folder is not a ledger, :class:`UsageError` for a
    named task with no stream or a malformed backlog view, ``InvalidTaskId``; writes nothing.
    """
    src = _source_of(source)
    names = check_names(tasks, "tasks")
    if detail is not None and (type(detail) is not int or detail < 0):
        raise ValueError(f"detail must be a count of tasks (0 or more) or None, not {detail!r}")
    if backlog is not None:
        check_backlog(backlog)
    try:
        src.reads.marker()  # a folder holds one; a storage that keeps none is a ledger by construction
    except NotRegular:
        pass  # a link (or not a file): the check reports it, and nothing is read through it
    except OSError as exc:
        raise NotALedger(src.reads.where, "holds no intentlog.json; pass the ledger root (or a bundle folder)") from exc
    present = src.names()
    if names:
        present_set = set(present)
        for t in names:
            check_task_id(t)
            if t not in present_set:
                raise UsageError(f"no task {t!r} in {src.where()}; 'intentlog tasks' lists the tasks there")
        selected = sorted(set(names))
    else:
        selected = present
    report = verify if verify is not None else src.verify(selected if names else None)
    rows = {t: read_task(src, t, keep_events=False) for t in selected}
    folder = attach_verify(rows, report)
    rows = _triage(rows)
    detailed = _pick(rows, detail, named=bool(names))
    for t in detailed:
        full = read_task(src, t, keep_events=True)
        full.verify = rows[t].verify
        full.artifacts = collect_artifacts(src, full.detail or [])
        full.child_states = {c: rows[c].state if c in rows else "not in this report" for c in full.children}
        rows[t] = full
    counts: dict[str, int] = {}
    for r in rows.values():
        counts[r.state] = counts.get(r.state, 0) + 1
    ordered = dict(sorted(counts.items()))
    page = _page(rows, detailed, folder, report, backlog, hint or (lambda s: s), (title, note), ordered)
    return ReportResult(page.encode("utf-8"), tuple(selected), tuple(detailed), ordered, report.ok)


def _pick(rows: Mapping[str, TaskData], detail: int | None, *, named: bool) -> list[str]:
    """Which tasks get detail: all named ones; else the unsettled or failing first, then the rest, up to ``detail``."""
    if named or detail is None:
        return list(rows)
    first = [t for t, r in rows.items() if r.state not in _SETTLED or r.verify_errors]
    firsts = set(first)
    rest = [t for t in rows if t not in firsts]
    chosen = set((first + rest)[:detail])
    return [t for t in rows if t in chosen]


def _page(
    rows: Mapping[str, TaskData],
    detailed: Sequence[str],
    folder: Sequence[Any],
    report: VerifyReport,
    backlog: Mapping[str, Any] | None,
    hint: Hint,
    titles: tuple[str | None, str | None],
    counts: Mapping[str, int],
) -> str:
    heading = titles[0] or "intentlog report"
    shown = set(detailed)
    summary = " ".join(
        f'<a href="#index" data-state="{esc(s)}">{state_badge(s)} {esc(n)}</a>' for s, n in counts.items()
    )
    problems = [p for p in report.problems if p.task is None or p.task not in rows]
    head = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="{REPORT_FORMAT}">'
        f"<title>{esc(heading)}</title><style>{STYLE}</style></head><body><main>"
    )
    parts = [
        head,
        f"<h1>{esc(heading)}</h1>",
        f"<p>{esc(titles[1])}</p>" if titles[1] else "",
        f'<p class="mut">{esc(len(rows))} task(s); {esc(len(detailed))} shown in detail below the index. '
        "Generated from the record alone (no clock, no lock probe): the same folder gives the same page.</p>",
        "<h2 id=\"folder\">The folder</h2>",
        f'<div class="counts">{summary}</div>',
        f"<p>{esc(report.summary().split(':', 1)[0])}: {esc(report.tasks)} task(s), {esc(report.events)} event(s), "
        f"{esc(report.artifacts)} artifact(s) checked; {esc(report.count('error'))} error, "
        f"{esc(report.count('changed'))} changed, {esc(report.count('info'))} info</p>",
        verify_block(list(folder) if folder else problems, what="the folder"),
    ]
    if backlog is not None:
        parts.append(backlog_section(backlog, hint, shown))
    parts.append(_index(rows, shown, hint, counts))
    omitted = len(rows) - len(detailed)
    if omitted:
        parts.append(
            f'<p class="mut">{esc(omitted)} settled task(s) are summarised in the index only; '
            f"{commands(hint('intentlog report TASK --out FILE'))} draws one in detail, "
            f"{commands(hint('intentlog report --all --out FILE'))} every one.</p>"
        )
    parts.extend(task_detail(rows[t], hint) for t in detailed)
    parts.append(f"</main><script>{SCRIPT}</script></body></html>\n")
    return "\n".join(parts)


def _index(rows: Mapping[str, TaskData], shown: set[str], hint: Hint, counts: Mapping[str, int]) -> str:
    options = "".join(f'<option value="{esc(s)}">{esc(s)} ({esc(n)})</option>' for s, n in counts.items())
    filters = (
        '<div id="filters" hidden><label>task <input id="q" type="search" placeholder="filter by id"></label>'
        '<label>text <input id="text" type="search" placeholder="ids, keys, payloads"></label>'
        f'<label>state <select id="state"><option value="">every state</option>{options}</select></label>'
        '<span id="shown" class="mut"></span></div>'
    )
    body = []
    keys = list(rows)
    for t in keys:
        r = rows[t]
        link = f'<a href="#task-{esc(t)}">{esc(t)}</a>' if t in shown else esc(t)
        v = "ok" if not r.verify_errors else f"{r.verify_errors} error(s)"
        calls = len(r.status.work.calls) if r.status is not None else 0
        phase = r.status.phase if r.status is not None else None
        body.append([
            link, state_badge(r.state), esc(r.events), esc(human_duration(r.first_ts, r.last_ts)), esc(calls),
            f'<b class="bad badge">{esc(r.unknown)}</b>' if r.unknown else "0",
            esc(v), f'<span class="long">{esc(phase or "-")}</span>', esc(r.next_operation),
            commands(hint(r.next_step)) if r.state not in _SETTLED else esc(r.next_step),
        ])

    def attrs(i: int) -> str:
        r = rows[keys[i]]
        found = " ".join(_keys(r))
        extra = f' data-keys="{esc(found)}"' if found else ""
        return f' data-task="{esc(keys[i])}" data-state="{esc(r.state)}"{extra}'

    header = [
        "task", "state", "events", "active", "calls", "unknown", "verify", "phase", "next operation", "next step",
    ]  # fmt: skip
    index = table(header, body, cls="index", attrs=attrs, ident="index-table")
    return f'<h2 id="index">Tasks</h2>{filters}<div class="scroll">{index}</div>'


def _keys(r: TaskData) -> list[str]:
    """What the text search finds a task by beyond its row: its call keys and approval ids."""
    if r.status is None:
        return []
    ops = r.status.operator
    return [c.key for c in r.status.work.calls.values()] + (list(ops.approvals) if ops is not None else [])
