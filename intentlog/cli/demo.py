"""``intentlog demo``: the crash experiment, run for real (see docs/demo.md)."""

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
    """Run the whole crash experiment: real processes, real kills, a provider with its own receipts.

    Preregisters the plan, runs seven cases and a naive restart (each step its own
    process, outbound network refused, the provider on 127.0.0.1), writes a termination
    record and a BLAKE3 inventory of every file, then checks the folder with its
    standalone verifier. Leaves everything under DIRECTORY (default ./intentlog-demo);
    docs/demo.md says how to read it. Exit 1 if any claim fails.

    \b
    Example:
      intentlog demo /tmp/intentlog-demo
      python /tmp/intentlog-demo/code/verify_experiment.py /tmp/intentlog-demo
      intentlog --root /tmp/intentlog-demo/3-effect-unknown/ledger status chapter-16
    """
    from ..demo.run import render, run_demo

    result = run_demo(directory or Path("intentlog-demo"))
    if as_json:
        emit_json(result.to_json())
    else:
        echo(render(result))
    sys.exit(EXIT_OK if result.ok else EXIT_PROBLEMS)
