"""The commands a hint offers, spelled once: complete, with ``--root`` where it is needed, quoted to run as pasted.

Every hint intentlog shows -- in an exception a script catches, in ``status`` (text and
``--json``), ``tasks``, ``backlog``, the report -- names a command through this module, so
a hint never lacks the flags that make it a decision or the ``--root`` of the ledger it is
about. A word in capitals (``RESPONSE_FILE``, ``TEXT``) is the only part left to fill in.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Final

__all__ = [
    "COMMANDS",
    "approval_commands",
    "command",
    "complete",
    "hint_root",
    "prog",
    "reconcile_commands",
    "reconcile_step",
]

#: The ledger the command line opens when neither ``--root`` nor ``$INTENTLOG_ROOT`` names one.
DEFAULT_ROOT: Final = ".intentlog"  # intentlog.ledger.DEFAULT_ROOT is this

#: Commands whose names, after "intentlog ", start a hint that is completed with ``--root``.
COMMANDS = (
    "accept", "approve", "backlog", "demo", "doctor", "export", "fail", "fork", "gc", "init", "keep", "log",
    "merge", "reconcile", "reject", "repair", "report", "revisions", "run", "seal", "show", "signal", "status", "tasks",
    "unblock", "verify",
)  # fmt: skip
_HINT_RE = re.compile(r"\bintentlog (?=(?:" + "|".join(COMMANDS) + r")\b)")


def _same_folder(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):  # pragma: no cover - a path the OS cannot resolve is not the same folder
        return False


def hint_root(location: str) -> str | None:
    """The ``--root`` a command run here needs to reach the ledger at ``location``; None: none is needed.

    None when the command line, run in this folder without ``--root``, opens that very
    ledger (``$INTENTLOG_ROOT``, else ``./.intentlog``); otherwise the location itself,
    made absolute for a folder so that the command runs from any folder.
    """
    default = os.environ.get("INTENTLOG_ROOT") or DEFAULT_ROOT
    if location.startswith("s3://"):
        return None if default.rstrip("/") == location.rstrip("/") else location
    if not default.startswith("s3://") and _same_folder(default, location):
        return None
    return os.path.abspath(location)


def prog(root: str | None) -> str:
    """How a command starts: ``intentlog``, plus ``--root ROOT`` (quoted) when ``root`` is given."""
    return f"intentlog --root {shlex.quote(root)}" if root is not None else "intentlog"


def command(root: str | None, *args: str) -> str:
    """One complete command line: ``intentlog [--root ROOT] ARGS...``, each part quoted for a POSIX shell."""
    return " ".join([prog(root), *(shlex.quote(a) for a in args)])


def complete(text: str, root: str | None) -> str:
    """``text`` with every ``intentlog COMMAND`` in it given ``--root ROOT`` (unchanged when ``root`` is None)."""
    if root is None:
        return text
    return _HINT_RE.sub(lambda _: prog(root) + " ", text)


def reconcile_commands(task_id: str, call_id: str, root: str | None = None) -> tuple[str, str]:
    """The two decisions about an unknown effect: not served (runs as pasted), served (with its evidence)."""
    return (
        command(root, "reconcile", task_id, call_id, "--not-served"),
        command(root, "reconcile", task_id, call_id, "--served") + " --evidence RESPONSE_FILE",
    )


def reconcile_step(task_id: str, call_id: str, key: str, root: str | None = None) -> str:
    """The next step for a call whose effect is unknown: what to find out, and the commands that record it."""
    not_served, served = reconcile_commands(task_id, call_id, root)
    return f"find out whether the provider served key {key!r}, then record it: {not_served}, or {served}"


def approval_commands(task_id: str, approval_id: str, root: str | None = None) -> tuple[str, str]:
    """The two decisions about a pending approval: approve, reject (who decides, and why, filled in)."""
    return (
        command(root, "approve", task_id, approval_id) + " --by NAME",
        command(root, "reject", task_id, approval_id) + " --by NAME --note WHY",
    )
