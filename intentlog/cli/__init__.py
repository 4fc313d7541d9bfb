"""The ``intentlog`` command line: thin over the library.

Each command parses its arguments, makes one library call and renders the result.
Errors are mapped once (:func:`intentlog.cli.app.handle_errors`): an
:class:`~intentlog.errors.IntentlogError` (or an OS error) is one line on stderr and exit 1;
a usage error exits 2; a refusal or a failed check exits 1. Colour is used only on a
terminal (click strips it elsewhere). The entry point is ``intentlog.cli:main``.
"""

from __future__ import annotations

from . import backlog, demo, gc, merge, reading, report, signals, verify_export, writing  # noqa: F401  (each registers its commands on main)
from .app import EXIT_OK, EXIT_PIPE, EXIT_PROBLEMS, EXIT_USAGE, NotFound, main

__all__ = ["EXIT_OK", "EXIT_PIPE", "EXIT_PROBLEMS", "EXIT_USAGE", "NotFound", "main"]
