"""``intentlog report``: one self-contained HTML page of the ledger (see docs/report.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from .._internal.fsutil import makedirs_durable, publish_bytes
from ..errors import IntentlogError, UsageError
from ..ledger import Ledger
from .app import Ctx, echo, emit_json, handle_errors, json_option, main, pass_ctx, task_arg


def backlog_view(ledger: Ledger, name: str) -> dict[str, Any]:
    """The operator view of backlog ``name`` as ``intentlog backlog NAME --json`` prints it.

    A backlog the ledger does not hold is an error naming it, never an empty section.
    """
    backlog = ledger.backlog(name)
    if not ledger.task(backlog.stream_id).exists():
        raise IntentlogError(
            f"--backlog {name}: the ledger at {ledger.root} has no backlog {name!r} "
            f"(no stream {backlog.stream_id}); see 'intentlog tasks'"
        )
    return {"backlog": name, **backlog.view().to_json()}


def _refuse_inside(out: Path, ledger: Ledger) -> None:
    """A report never lands inside the ledger it describes: writing it there could replace the record."""
    where = Path(os.path.realpath(out.absolute().parent)) / out.name
    root = Path(os.path.realpath(ledger.root))
    if where == root or root in where.parents:
        raise UsageError(
            f"--out {out}: {where} is inside the ledger {root}; a report is written beside the ledger, "
            "never into it (it could replace a stream or the marker): choose a path outside it"
        )


@main.command()
@task_arg("tasks", nargs=-1)
@click.option("--out", "out", type=click.Path(path_type=Path), required=True, help="The HTML file to write.")
@click.option("--backlog", "backlog", default=None, help="Also show this backlog's counts and blocked items.")
@click.option(
    "--detail",
    type=click.IntRange(min=0),
    default=None,
    help="Draw at most this many tasks in detail (default 100; the unsettled first).",
)
@click.option("--all", "all_tasks", is_flag=True, help="Draw every task in detail, however many.")
@json_option
@pass_ctx
@handle_errors
def report(
    c: Ctx, tasks: tuple[str, ...], out: Path, backlog: str | None, detail: int | None, all_tasks: bool, as_json: bool
) -> None:
    """Write one self-contained HTML report: no network, no external files; the same folder gives the same bytes.

    An index of every task (counts, filters), the verify result, and for the tasks in
    detail: calls and attempts by stage, unknown effects with the command that resolves
    each, approvals, checkpoints, conversations and artifacts.

    \b
    Example:
      intentlog report --out report.html
      intentlog report chapter-16 --out chapter-16.html
    """
    from ..report import DEFAULT_DETAIL, render_report

    if all_tasks and detail is not None:
        raise UsageError("give --all or --detail N, not both")
    ledger = c.ledger()
    _refuse_inside(out, ledger)
    view = backlog_view(ledger, backlog) if backlog is not None else None
    result = render_report(
        ledger,
        list(tasks) or None,
        backlog=view,
        detail=None if all_tasks else (detail if detail is not None else DEFAULT_DETAIL),
        hint=c.hint,
    )
    makedirs_durable(out.absolute().parent)
    publish_bytes(result.html, out, tmp_dir=out.absolute().parent, replace=True, mode=0o644)
    if as_json:
        emit_json({"out": str(out)} | result.to_json())
        return
    counts = ", ".join(f"{n} {s}" for s, n in result.counts.items()) or "no tasks"
    verdict = "verify ok" if result.verify_ok else "verify found problems"
    echo(
        f"wrote {out} ({len(result.html)} bytes): {len(result.tasks)} task(s) ({counts}); "
        f"{len(result.detailed)} in detail; {verdict}"
    )
