"""Checks for the arguments of public entries: a careless value is a library error naming it.

Each check raises :class:`~intentlog.errors.WrongType` (a ``TypeError``) for a value of
the wrong type and :class:`~intentlog.errors.UsageError` (a ``ValueError``) for a value
of the right type that the call cannot take, naming the argument; nothing has been
written when they raise (call them first). Writes nothing, imports no writer.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import UsageError, WrongType

__all__ = ["check_bool", "check_count", "check_names", "check_path", "check_paths", "check_seconds"]


def check_bool(value: object, name: str) -> bool:
    """``value`` itself, which must be True or False (a truthy string is not a yes)."""
    if not isinstance(value, bool):
        raise WrongType(f"{name} must be True or False, not {type(value).__name__} {value!r}")
    return value


def check_seconds(value: object, name: str) -> float:
    """A finite number of seconds >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WrongType(f"{name} must be a number of seconds, not {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{name} must be a finite number of seconds >= 0, not {value!r}")
    return float(value)


def check_count(value: object, name: str) -> int:
    """An int >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise WrongType(f"{name} must be an int >= 0, not {type(value).__name__} {value!r}")
    if value < 0:
        raise UsageError(f"{name} must be an int >= 0, not {value!r}")
    return value


def check_path(value: object, name: str) -> Path:
    """A filesystem path given as ``str`` or ``os.PathLike`` (not bytes, not empty, no NUL)."""
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise WrongType(f"{name} must be a path (str or os.PathLike), not {type(value).__name__} {value!r}")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise WrongType(f"{name} must be a text path, not {type(text).__name__} {text!r}")
    if not text or "\0" in text:
        raise UsageError(f"{name} {text!r} is not a usable path (empty, or with a NUL character)")
    return Path(text)


def check_names(value: object, name: str) -> list[str] | None:
    """A list (any iterable but a string) of names, or None; the names' own checks are the caller's."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise WrongType(
            f"{name} must be a list of names, not {type(value).__name__} {value!r}"
            + (f" (pass [{value!r}] for one)" if isinstance(value, str) else "")
        )
    return list(value)


def check_paths(value: object, name: str) -> list[Path]:
    """A list (any iterable but a string) of paths, each checked with :func:`check_path`."""
    items = check_names(value, name)
    return [check_path(v, f"each of {name}") for v in items or []]
