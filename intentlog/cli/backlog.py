"""Backlogs: ``backlog`` (the operator view), ``run`` (the supervisor) and ``unblock``."""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import sys
from typing import Any

import click
import orjson

from .._internal.text import printable as p
from ..backlog import BacklogView, StillBlocked
from ..backlog.model import ItemView, backlog_stream_id
from ..errors import UsageError
from ..eventlog.format import TASK_ID_RE, Event
from ..ledger import open_ledger
from .app import (
    EXIT_PROBLEMS,
    Ctx,
    NotFound,
    dry_run_option,
    echo,
    emit_json,
    handle_errors,
    json_option,
    main,
    pass_ctx,
    print_table,
)
from .progress import EXIT_NEEDS_PERSON, RunProgress, needing_a_person, summary
from .writing import writable


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _exists(c: Ctx, name: str) -> None:
    ledger = c.ledger()
    if not ledger.backlog(name).task.exists():
        raise NotFound(f"no backlog {name!r} in {ledger.root} (no stream {name}.backlog); add items first")


@main.command("backlog")
@click.argument("name")
@json_option
@pass_ctx
@handle_errors
def backlog_cmd(c: Ctx, name: str, as_json: bool) -> None:
    """Counts per state and one row per item: state, why, and the safe next step.

    States: queued, scheduled (not before ..., or waiting for an event or for its child
    items), running (holder, since, last progress), awaiting approval, blocked (why, and the
    command), paused for review, done, failed. A child item a step spawned is listed under
    its parent item, and the parent's row counts its children per state.

    \b
    Example:
      intentlog backlog nightly --json
    """
    _exists(c, name)
    view = c.ledger().backlog(name).view()
    if as_json:
        emit_json(_hinted(c, view))
        return
    echo(" ".join(f"{p(k)}: {v}" for k, v in view.counts.items() if v) or "no items")
    for line in view.pace.lines() if view.pace is not None else ():
        echo(p(line))
    if view.quota_waiting is not None:
        q = view.quota_waiting
        echo(f"quota {p(str(q.get('quota')))}: {p(str(q.get('reason')))}; reopens {_when(q.get('until'))}")
    rows = []
    for r, depth in _tree(view.items):
        detail = r.reason or ""
        if r.state == "scheduled" and r.not_before is not None and "child task(s)" not in detail:
            detail = f"not before {_when(r.not_before)}" + (f" ({r.reason})" if r.reason else "")
        if r.state == "running" and r.holder is not None:
            detail = _holder_detail(r.holder, r.last_progress)
        if r.children and "(children:" not in detail:
            told = ", ".join(f"{n} {s}" for s, n in r.children.items())
            detail = f"{detail}; children: {told}" if detail else f"children: {told}"
        item = "  " * depth + ("+- " if depth else "") + r.item + (f" (in backlog {r.backlog})" if r.backlog else "")
        rows.append([p(item), p(r.task), p(r.state), p(detail or "-"), p(c.hint(r.next_step))])
    if rows:
        print_table(["item", "task", "state", "why", "next step"], rows)


def _tree(items: list[ItemView]) -> list[tuple[ItemView, int]]:
    """The rows in run order, each child item right under its parent item (depth-first), with its depth."""
    by_task = {r.task for r in items}
    kids: dict[str, list[ItemView]] = {}
    for r in items:
        if r.parent is not None and r.parent in by_task:
            kids.setdefault(r.parent, []).append(r)
    out: list[tuple[ItemView, int]] = []
    seen: set[str] = set()

    def visit(r: ItemView, depth: int) -> None:
        if r.task in seen:
            return
        seen.add(r.task)
        out.append((r, depth))
        for k in kids.get(r.task, ()):
            visit(k, depth + 1)

    for r in items:
        if r.parent is None or r.parent not in by_task:
            visit(r, 0)
    for r in items:  # a cycle of parents cannot be, but no row is ever left out
        visit(r, 0)
    return out


def _holder_detail(h: Any, last: str | None) -> str:
    """A running item's holder: its process, since when, its last record and (on a store) its last heartbeat."""
    who = f"pid {h.get('pid')} on {h.get('host')}" if h.get("pid") is not None else "a holder recording no process"
    if h.get("since"):
        who += f" since {h['since']}"
    who += f", last {last or '-'}"
    if h.get("beat") is not None:
        who += f", heartbeat {_when(h['beat'])} (the store's clock)"
    if h.get("alive") is None:
        who += "; alive or not cannot be told from this machine"
    return who


@main.command("run")
@click.argument("name")
@click.option("--step", "step", required=True, help="The step function, as package.module:function.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Items run at once.")
@click.option(
    "--in-flight", "in_flight", type=click.IntRange(min=1), default=1, show_default=True,
    help="Items each worker process holds at once (an async def step).",
)  # fmt: skip
@click.option(
    "--engine", type=click.Choice(["local", "dask"]), default="local", show_default=True,
    help="local: forked processes; dask: one Dask task per item (the intentlog[dask] extra).",
)  # fmt: skip
@click.option("--scheduler", default=None, help="With --engine dask: a running scheduler (tcp://HOST:8786).")
@click.option(
    "--quota", "quotas", multiple=True,
    help="NAME=LIMIT/WINDOW (calls=60/60s), a budget NAME=LIMIT, or in_flight=N (items running at once).",
)  # fmt: skip
@click.option("--until-idle", is_flag=True, help="Return once no item can progress without a person.")
@click.option("--inactivity", type=float, default=300.0, show_default=True, help="Seconds without progress: stalled.")
@click.option("--max-duration", type=float, default=None, help="Seconds an item may run before it is timed out.")
@click.option("--grace", type=float, default=10.0, show_default=True, help="Seconds running effects get on shutdown.")
@json_option
@pass_ctx
@handle_errors
def run_cmd(
    c: Ctx,
    name: str,
    step: str,
    workers: int,
    in_flight: int,
    engine: str,
    scheduler: str | None,
    quotas: tuple[str, ...],
    until_idle: bool,
    inactivity: float,
    max_duration: float | None,
    grace: float,
    as_json: bool,
) -> None:
    """Run a backlog's items with worker processes; SIGTERM or Ctrl-C stops it cleanly.

    An item taken over after a crash or a stall resumes from its task's record; an unknown
    effect, a pending approval or a call paused for review blocks it for a person.

    On a terminal a live line shows the counts, the rate, the quota's state and what is in
    flight. The summary names each item that needs a person and its command. Exit 0 when
    no item waits for a person, 3 when some do, 1 for a spent budget with items queued.

    \b
    Example:
      intentlog run nightly --step mypkg.jobs:step --workers 2 --quota calls=60/60s --until-idle
      intentlog run nightly --step mypkg.jobs:step --engine dask --workers 4 --until-idle
      intentlog run nightly --step mypkg.jobs:astep --workers 2 --in-flight 100 --quota in_flight=200
    """
    from ..backlog.worker import resolve_step

    _exists(c, name)
    if "" not in sys.path:
        sys.path.insert(0, "")  # a step in the current folder, as python -m finds it
    resolve_step(step)
    if scheduler is not None and engine != "dask":
        raise UsageError("--scheduler is for --engine dask")
    chosen: object = engine
    if engine == "dask":
        from ..backlog.dask_engine import DaskEngine

        # each Dask task opens the ledger the way the command line does (a path or, later, a URL)
        opener = functools.partial(open_ledger, create=False, write=True)  # a store: the fencing probe first
        chosen = DaskEngine(scheduler=scheduler, workers=workers, open_ledger=opener)
    backlog = c.ledger(write=True).backlog(name)
    with _progress(c, name, quotas, as_json):
        view = backlog.run(
            step, workers=workers, quota=list(quotas), until_idle=until_idle, inactivity=inactivity,
            max_duration=max_duration, grace=grace, engine=chosen, in_flight=in_flight,
        )  # fmt: skip
    if as_json:
        emit_json(_hinted(c, view))
    else:
        for line in summary(view, c.hint):
            echo(line)
    spent = (view.stopped or {}).get("quota")
    if spent and view.counts["queued"]:
        echo(
            f"intentlog run: {p(str(spent))}: {view.counts['queued']} item(s) still queued; "
            + c.hint(f"raise the budget and run again: intentlog run {name} --step {step} --quota ..."),
            err=True,
        )
        sys.exit(EXIT_PROBLEMS)
    if needing_a_person(view):
        sys.exit(EXIT_NEEDS_PERSON)


def _progress(c: Ctx, name: str, quotas: tuple[str, ...], as_json: bool) -> contextlib.AbstractContextManager[Any]:
    """The live line while the run goes on: on a terminal (stderr), never in a pipe or with ``--json``."""
    if as_json or not sys.stderr.isatty():
        return contextlib.nullcontext()
    reader = c.ledger().backlog(name)  # a handle of its own: the drawing thread reads, the run writes
    return RunProgress(reader.view, sys.stderr, quotas=quotas)


def _hinted(c: Ctx, view: BacklogView) -> dict[str, Any]:
    """The view as JSON with every command in it complete (``--root`` when the command line gave one)."""
    out = view.to_json()
    for row in out["items"]:
        row["next_step"] = c.hint(row["next_step"])
    return out


@main.command("unblock")
@click.argument("name")
@click.argument("item")
@click.option("--by", default=None, help="Who unblocks it (recorded).")
@dry_run_option
@json_option
@pass_ctx
@handle_errors
def unblock_cmd(c: Ctx, name: str, item: str, by: str | None, dry_run: bool, as_json: bool) -> None:
    """Put a blocked item back in the queue, once its reconcile or approval is recorded.

    Refused (exit 1) while the reason still holds. --dry-run makes the same checks on a
    private copy of the backlog's and the item's streams and prints the event it would
    append; nothing is written.

    \b
    Example:
      intentlog unblock nightly item-7 --by ana --dry-run
      intentlog unblock nightly item-7 --by ana
    """
    _exists(c, name)
    try:
        ev = _unblock_on_a_copy(c, name, item, by) if dry_run else c.ledger().backlog(name).unblock(item, by=by)
    except StillBlocked as exc:
        raise StillBlocked(c.hint(str(exc))) from None
    except UsageError as exc:  # no such item, or done, or never run: a refusal (exit 1); a malformed id stays 2
        if TASK_ID_RE.match(item) is None:
            raise
        raise NotFound(c.hint(str(exc))) from None
    if as_json:
        emit_json({"backlog": name, **ev.to_json(), "digest": ev.digest, "dry_run": dry_run})
        return
    if dry_run:
        body = orjson.dumps(ev.data, option=orjson.OPT_SORT_KEYS).decode()
        echo(
            f"dry run: would append {p(ev.kind)} to {p(backlog_stream_id(name))} at seq {ev.seq}: {p(body)}; "
            "nothing was written"
        )
        return
    if ev.kind == "backlog.item_failed":  # its task was given up: failed now, never run again
        why = p(str(ev.data["reason"]))
        echo(f"item {p(repr(item))} of backlog {p(repr(name))} is failed: {why}; its step never runs again")
        return
    echo(f"item {p(repr(item))} of backlog {p(repr(name))} is queued again")


def _unblock_on_a_copy(c: Ctx, name: str, item: str, by: str | None) -> Event:
    """The very ``unblock`` on a private copy of the backlog's stream and the item's task (:func:`private_copy`)."""
    rec = c.ledger().backlog(name).fold().items.get(item)
    streams = [backlog_stream_id(name), *([rec.task] if rec is not None else [])]
    with writable(c, streams, dry_run=True) as copy:
        return copy.backlog(name).unblock(item, by=by)
