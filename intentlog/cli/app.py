"""The ``intentlog`` command group: its options, context, error mapping, ``--json`` and hints.

The commands live beside it, one module per family (reading, writing, verify_export, gc,
demo); :mod:`intentlog.cli` imports them all so each registers on :data:`main`.

Each command parses its arguments, makes one library call and renders the result.
Errors are mapped once: an :class:`~intentlog.errors.IntentlogError` (or an OS error) is
one line on stderr and exit 1; a usage error exits 2; a refusal or a failed check exits 1.
Colour is used only on a terminal (click strips it elsewhere).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
from click.shell_completion import CompletionItem

from .._internal.commands import command, complete, hint_root, prog
from .._internal.text import format_table, terminal_text
from ..errors import IntentlogError, InvalidDigest, InvalidTaskId, NotALedger, TaskBusy, UsageError
from ..ledger import DEFAULT_ROOT, Ledger, open_ledger

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


#: Exit status after a closed pipe, as git and a shell report a SIGPIPE death (128 + 13).
EXIT_PIPE = 141


class Ctx:
    def __init__(self, root: Path, *, explicit: bool, url: str | None = None) -> None:
        self.root = root
        self.explicit = explicit  # the ledger is not ./.intentlog: hints must name it
        #: the ``s3://bucket/prefix`` the ledger is on (``--root`` as given), or None for a folder
        self.url = url
        #: ``--take-over-after`` of a command writing a task (seconds), None: the ledger's default
        self.take_over_after: float | None = None

    def ledger(self, *, create: bool = False, write: bool = False) -> Ledger:
        """The ``--root`` ledger; ``write``: opened to write (a store's fencing probe runs first)."""
        root = self.url if self.url is not None else self.root
        return open_ledger(root, create=create, write=write, take_over_after=self.take_over_after)

    @property
    def prog(self) -> str:
        """How a hint starts: ``intentlog``, plus ``--root PATH`` when the ledger is not the default."""
        return prog(self.hint_root)

    @property
    def hint_root(self) -> str | None:
        """The ``--root`` every hint names (None: the default ledger, named by none)."""
        return (self.url if self.url is not None else str(self.root)) if self.explicit else None

    def hint(self, text: str) -> str:
        """``text`` with every ``intentlog COMMAND`` completed so that it runs as printed."""
        return complete(text, self.hint_root)


def _hint(text: str) -> str:
    ctx = click.get_current_context(silent=True)
    c = ctx.find_object(Ctx) if ctx is not None else None
    return c.hint(text) if c is not None else text


def echo(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print a renderer's human text: whatever it holds that a terminal could act on is escaped.

    Fields a caller or a person wrote are escaped where they are rendered (:func:`printable`);
    this is the last guard, keeping only the line breaks, tabs and colours of the layout.
    """
    click.echo(terminal_text(text), err=err, nl=nl)


def emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode())


def json_option(f: F) -> F:
    """The one shared ``--json`` option: machine-readable output for scripts."""
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)


def dry_run_option(f: F) -> F:
    """The one shared ``--dry-run`` option of the writing commands."""
    return click.option("--dry-run", is_flag=True, help="Print the event this would append, and write nothing.")(f)


class NotFound(IntentlogError):
    """A task, call, approval or digest named on the command line does not exist (exit 1)."""


def _fail(message: str, code: int = EXIT_PROBLEMS) -> None:
    """One error line on stderr; with ``--json``, also ``{"error", "exit_code"}`` on stdout, so a script's
    JSON parser meets JSON whether the command succeeded or not."""
    text = _hint(message)
    click.echo(f"intentlog: error: {terminal_text(text)}", err=True)
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.params.get("as_json"):
        emit_json({"error": text, "exit_code": code})
    sys.exit(code)


def _quiet_pipe() -> None:
    """The reader of stdout went away: end quietly, as git does (no message, status 141)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(EXIT_PIPE)


#: How a library error about a missing ledger ends: replaced by the complete command for that folder.
_RUN_INIT = "; run 'intentlog init'"


def _no_ledger_hint(exc: NotALedger) -> str:
    """The error, with both ways on: create the ledger it names (said once, for that folder), or point at one."""
    reason = exc.reason.removesuffix(_RUN_INIT)
    init = command(hint_root(exc.root), "init")
    return (
        f"{exc.root}: {reason}; create it with: {init} -- or point at an existing ledger with "
        "--root PATH (before the command) or INTENTLOG_ROOT=PATH"
    )


def _busy_hint(exc: TaskBusy) -> str:
    """What a refused writer prints: a lock, wait for it; a store lease, the very command that takes it over."""
    if exc.still_for is None:  # a lock: it dies with its holder
        return f"{exc}: retry with --wait SECONDS (this command takes the task's writer lock)"
    ctx = click.get_current_context(silent=True)
    again = _command_line(ctx) if ctx is not None else None
    if again is None:
        return str(exc)
    return f"{exc}. Once that process is gone, take the lease over (recorded; the old holder fenced): {again}"


def _command_line(ctx: click.Context) -> str | None:
    """The running command spelled again (``--take-over-after 0`` added), as a hint: ``intentlog NAME ARGS``."""
    from click.core import ParameterSource

    if ctx.parent is None or ctx.info_name is None:
        return None
    words = [ctx.info_name]
    for p in ctx.command.params:
        if p.name is None or p.name not in ctx.params or p.name == "wait":
            continue
        value = ctx.params[p.name]
        if ctx.get_parameter_source(p.name) in (ParameterSource.DEFAULT, None) or value is None:
            continue
        if isinstance(p, click.Argument):
            words.extend(str(v) for v in (value if isinstance(value, tuple | list) else [value]))
        elif isinstance(p, click.Option) and p.is_flag:
            if value:
                words.append(p.opts[0])
        elif isinstance(p, click.Option):
            for v in value if isinstance(value, tuple | list) else [value]:
                words.extend([p.opts[0], str(v)])
    words.extend(["--take-over-after", "0"])
    return command(None, *words)


def handle_errors(f: F) -> F:
    """Map library and OS errors to one clear line on stderr: exit 2 for usage, else 1; never a traceback."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except BrokenPipeError:
            _quiet_pipe()
        except click.UsageError:  # malformed usage met inside a command: click prints it, exit 2 (JSON: _Group)
            raise
        except (InvalidTaskId, InvalidDigest, UsageError) as exc:
            # a malformed id, digest or option value is a usage error, whichever command met it
            _fail(str(exc), EXIT_USAGE)
        except NotALedger as exc:
            _fail(_no_ledger_hint(exc))
        except TaskBusy as exc:
            _fail(_busy_hint(exc))
        except IntentlogError as exc:
            _fail(str(exc))
        except OSError as exc:
            _fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
        return None

    return wrapper  # type: ignore[return-value]


def _complete_task(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of task ids from the ledger the command line names (never creates one)."""
    root = ctx.find_root().params.get("root") or os.environ.get("INTENTLOG_ROOT") or DEFAULT_ROOT
    try:
        ids = open_ledger(Path(root), create=False).task_ids()
    except (IntentlogError, OSError):
        return []
    return [CompletionItem(i) for i in ids if i.startswith(incomplete)]


def task_arg(name: str = "task", **kw: Any) -> Callable[[F], F]:
    return click.argument(name, shell_complete=_complete_task, **kw)


_DEFAULT_ROOT_SHOWN = os.environ.get("INTENTLOG_ROOT") or str(DEFAULT_ROOT)


class _Group(click.Group):
    """The ``intentlog`` group: a malformed command line says what to do, and honours ``--json``.

    ``--root`` given after a command says that it goes before it; with ``--json`` among the
    arguments, a usage error also prints ``{"error", "exit_code": 2}`` on stdout.
    """

    def invoke(self, ctx: click.Context) -> Any:
        args = list(ctx.args)  # the tokens after the command name
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            err = exc
            if isinstance(exc, click.NoSuchOption) and exc.option_name == "--root":
                sub = exc.ctx.command_path.removeprefix(ctx.command_path).strip() if exc.ctx else "COMMAND"
                err = click.UsageError(
                    f"no such option --root for {sub!r}: --root belongs to intentlog itself and goes before the "
                    f"command: intentlog --root PATH {sub} ...",
                    ctx=exc.ctx,
                )
            if "--json" in args:
                emit_json({"error": err.format_message(), "exit_code": EXIT_USAGE})
            if err is exc:
                raise
            raise err from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--root",
    type=click.Path(),
    envvar="INTENTLOG_ROOT",
    default=None,
    show_default=_DEFAULT_ROOT_SHOWN,
    help="The ledger folder, or s3://BUCKET/PREFIX (else $INTENTLOG_ROOT, else ./.intentlog).",
)
@click.version_option(package_name="intentlog")
@click.pass_context
def main(ctx: click.Context, root: str | None) -> None:
    """Durable, resumable records of work that calls things that cannot be taken back.

    Exit status: 0 ok; 1 problems found, refused, or not found; 2 malformed usage.
    Colour only on a terminal, never with NO_COLOR set.

    \b
    Example:
      intentlog demo                 # see what it is for, in seconds
      intentlog --root evidence status chapter-16
    """
    if os.environ.get("NO_COLOR"):
        ctx.color = False
    explicit = root is not None and Path(root) != Path(DEFAULT_ROOT)
    url = root if root is not None and root.startswith("s3://") else None
    ctx.obj = Ctx(Path(root) if root is not None else Path(DEFAULT_ROOT), explicit=explicit, url=url)


pass_ctx = click.make_pass_decorator(Ctx)


def require_task(c: Ctx, ledger: Ledger, task: str) -> None:
    """Refuse (exit 1) a well-formed task id with no stream; a malformed one is exit 2 (InvalidTaskId)."""
    if not ledger.task(task).exists():
        raise NotFound(f"no task {task!r} in {ledger.location}; see 'intentlog tasks'")


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A table; cells are the renderer's, already escaped (:func:`printable`) where a caller wrote them."""
    first, *rest = format_table(header, [[click.unstyle(x) for x in row] for row in rows])
    echo(click.style(first, bold=True))
    for line, row in zip(rest, rows, strict=False):
        for cell in row:
            plain = click.unstyle(cell)
            if plain != cell:
                line = line.replace(plain, cell, 1)
        echo(line)


def progress_for(verb: str) -> Callable[[str, int, int], None] | None:
    """A progress line on stderr, only when stderr is a terminal (never in pipes or logs)."""
    if not sys.stderr.isatty():
        return None

    def progress(what: str, done: int, total: int) -> None:
        click.echo(f"\r{verb} {what}: {done}/{total}\x1b[K", nl=False, err=True)

    return progress
