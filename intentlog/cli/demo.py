"""``intentlog demo``: the crash experiment, run for real."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .app import (
    EXIT_OK,
    EXIT_PROBLEMS,
    echo,
    emit_json,
    handle_errors,
    json_option,
    main,
)

# -- demo -------------------------------------------------------------------------------


@main.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@json_option
@handle_errors
def demo(directory: Path | None, as_json: bool) -> None:
    """Reproduce the crash experiment: real processes, real kills, a provider with its own receipts.

    Leaves one folder per case under DIRECTORY (default ./intentlog-demo) to inspect
    with 'status', 'log' and 'verify'. Exit 1 if any claim fails its check.

    \b
    Example:
      intentlog demo /tmp/intentlog-demo
      intentlog --root /tmp/intentlog-demo/1-killed-after-manifest/ledger status chapter-16
    """
    from ..demo.run import render, run_demo

    result = run_demo(directory or Path("intentlog-demo"))
    if as_json:
        emit_json(result.to_json())
    else:
        echo(render(result))
    sys.exit(EXIT_OK if result.ok else EXIT_PROBLEMS)
