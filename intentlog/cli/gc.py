"""Retention: the ``gc`` plan and apply, and ``keep`` marks."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import BinaryIO

import click

from ..errors import UsageError
from .app import (
    EXIT_OK,
    EXIT_PROBLEMS,
    Ctx,
    echo,
    emit_json,
    handle_errors,
    json_option,
    main,
    pass_ctx,
    print_table,
    progress_for,
    require_task,
    task_arg,
)

# -- retention ------------------------------------------------------------------------


def _check_duration(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Validate --max-age / --grace at parse time, so a bad value is a usage error (exit 2)."""
    from ..retention import parse_duration

    if value is not None:
        name = param.name or ""
        try:
            parse_duration(value, what=f"--{name.replace('_', '-')}", allow_none=name == "max_age")
        except UsageError as exc:
            raise click.BadParameter(str(exc)) from exc
    return value


def _check_size(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Validate --max-size at parse time (exit 2 on a bad value)."""
    from ..retention import parse_size

    if value is not None:
        try:
            parse_size(value, what="--max-size", allow_none=True)
        except UsageError as exc:
            raise click.BadParameter(str(exc)) from exc
    return value


@main.command()
@click.option(
    "--max-age",
    callback=_check_duration,
    help="Expire tasks idle longer than this, by the timestamps inside their streams (30d, 12h, 90m; "
    "'none': no age limit). Default: intentlog.json 'retention', else 30d.",
)
@click.option(
    "--max-size",
    callback=_check_size,
    help="Keep streams and objects together under this, evicting the oldest eligible tasks first "
    "(500MiB, 2GiB, 10MB; 'none'). Default: intentlog.json 'retention', else 500MiB.",
)
@click.option(
    "--grace",
    callback=_check_duration,
    help="Spare unreferenced blobs, and tasks, touched more recently than this. Default: intentlog.json "
    "'retention', else 1h.",
)
@click.option(
    "--apply",
    "do_apply",
    is_flag=True,
    help="Delete: re-plan under the ledger's gc lock and carry out exactly that plan (recorded in gc.jsonl).",
)
@click.option(
    "--take-over-after",
    callback=_check_duration,
    help="On an object store: take the gc lock from a gc whose log stood still this long (30s, 5m): "
    "a killed gc leaves it held. A folder's lock dies with its holder.",
)
@json_option
@pass_ctx
@handle_errors
def gc(
    c: Ctx,
    max_age: str | None,
    max_size: str | None,
    grace: str | None,
    do_apply: bool,
    take_over_after: str | None,
    as_json: bool,
) -> None:
    """Delete old task streams and unreferenced artifacts; without --apply, only print the plan.

    Never deleted: a task with an unknown effect or paused for review, a task marked with
    'intentlog keep', a task open for writing, and any artifact a kept task refers to.
    Exit 1 when the plan is refused. See docs/retention.md.

    \b
    Example:
      intentlog gc                          # the plan: what would go, why, the bytes freed
      intentlog gc --max-age 14d --apply    # carry it out
    """
    from ..retention import apply_gc, parse_duration, plan_gc

    ledger = c.ledger()
    if take_over_after is not None and not do_apply:
        raise click.UsageError("--take-over-after goes with --apply")
    if do_apply:
        taker = None if take_over_after is None else parse_duration(take_over_after, what="--take-over-after")
        result = apply_gc(ledger, max_age=max_age, max_size=max_size, grace=grace, take_over_after=taker)
        _write(result.iter_json() if as_json else None, result.iter_render())
        return
    progress = progress_for("gc: scanned") if not as_json else None
    plan = plan_gc(ledger, max_age=max_age, max_size=max_size, grace=grace, progress=progress)
    if progress is not None:
        echo("", err=True)
    _write(plan.iter_json() if as_json else None, plan.iter_render())
    sys.exit(EXIT_PROBLEMS if plan.refused else EXIT_OK)


def _write(json_chunks: Iterator[bytes] | None, lines: Iterator[str]) -> None:
    """Print a plan or result as it is read (a kept task at a time): its JSON, else its lines.

    The bytes are those of ``emit_json(x.to_json())`` / ``echo(x.render())``.
    """
    if json_chunks is None:
        for line in lines:
            echo(line)
        return
    out: BinaryIO | None = getattr(sys.stdout, "buffer", None)
    if out is None:  # a text-only stdout (an embedding harness)
        for chunk in json_chunks:
            click.echo(chunk.decode(), nl=False)
        click.echo()
        return
    sys.stdout.flush()
    for chunk in json_chunks:
        out.write(chunk)
    out.write(b"\n")
    out.flush()


@main.command()
@task_arg(required=False)
@click.option("--note", help="Why it is kept (stored in keep.json).")
@click.option("--remove", is_flag=True, help="Release the task: gc may collect it again.")
@json_option
@pass_ctx
@handle_errors
def keep(c: Ctx, task: str | None, note: str | None, remove: bool, as_json: bool) -> None:
    """Mark a task so that gc never deletes it; without TASK, list the kept tasks.

    The mark lives in keep.json at the ledger root, outside the task's stream.

    \b
    Example:
      intentlog keep chapter-16 --note "evidence for the 2026 audit"
      intentlog keep chapter-16 --remove
      intentlog keep --json
    """
    from ..retention import keep as keep_task
    from ..retention import kept_tasks, unkeep

    ledger = c.ledger()
    if task is None:
        if note is not None or remove:
            raise click.UsageError("--note and --remove need a TASK")
        marks = kept_tasks(ledger)
        if as_json:
            emit_json([m.to_json() for m in marks.values()])
        elif not marks:
            echo("no kept tasks")
        else:
            print_table(["task", "since", "note"], [[m.task, m.since, m.note or ""] for m in marks.values()])
        return
    if remove:
        if note is not None:
            raise click.UsageError("--note goes with keeping a task, not with --remove")
        removed = unkeep(ledger, task)
        if as_json:
            emit_json({"task": task, "kept": False, "changed": removed})
        else:
            echo(f"released {task}: gc may collect it again" if removed else f"{task} was not kept")
        return
    require_task(c, ledger, task)
    mark = keep_task(ledger, task, note=note)
    if as_json:
        emit_json(mark.to_json() | {"kept": True})
    else:
        echo(f"kept {task}: gc will never delete it (keep.json); 'intentlog keep {task} --remove' releases it")
