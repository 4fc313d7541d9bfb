"""The names an idiom is recorded under: checked once, before anything is written."""

from __future__ import annotations

import re
from typing import Final

from ..errors import UsageError

__all__ = ["check_name"]

#: what a value, sleep or event name may be (it is typed on the command line: ``intentlog signal TASK NAME``)
NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@#+=-]{0,199}\Z")


def check_name(name: object, what: str) -> str:
    """``name`` when it is a valid idiom name, else :class:`UsageError` naming ``what`` it was for."""
    if not isinstance(name, str) or NAME_RE.match(name) is None:
        raise UsageError(
            f"invalid {what} name {name!r}: use 1-200 characters from A-Z a-z 0-9 . _ : / @ # + = -, starting with a "
            "letter or digit; nothing was written"
        )
    return name
