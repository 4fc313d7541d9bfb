"""Value checks for event fields: the named predicates a kind's shape is written in, and findings.

A :class:`FieldType` is a predicate with a name the shape message quotes. Everything
here is pure and never raises for bad data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, final

from .._internal.digest import is_digest, is_ref

__all__ = [
    "ANY",
    "BOOL",
    "DICT",
    "DIGEST",
    "FILE",
    "INT",
    "NAT",
    "NUMBER",
    "POS",
    "REF",
    "STR",
    "FieldType",
    "Finding",
    "dict_of",
    "is_ref",
    "list_of",
    "nullable",
    "one_of",
    "show",
]


# -- field types ---------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class FieldType:
    """A named predicate on a JSON value; ``name`` is what a shape message says was expected.

    ``spec`` describes the predicate as data -- ``("str",)``, ``("maybe", inner)``,
    ``("list", inner)``, ``("values", inner)``, ``("one_of", "a", "b")`` -- so that the
    standalone verifier's kinds table can be generated from this registry; None for a type
    defined outside intentlog.
    """

    name: str
    check: Callable[[Any], bool]
    spec: tuple[Any, ...] | None = None


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_file(v: Any) -> bool:
    if type(v) is not dict or type(v.get("file")) is not str or not is_digest(v.get("digest")):
        return False
    size = v.get("size")
    return type(size) is int and size >= 0


ANY: Final = FieldType("any value", lambda v: True, ("any",))
STR: Final = FieldType("a string", lambda v: type(v) is str, ("str",))
INT: Final = FieldType("an integer", _is_int, ("int",))
NAT: Final = FieldType("an integer >= 0", lambda v: type(v) is int and v >= 0, ("nat",))
POS: Final = FieldType("an integer >= 1", lambda v: type(v) is int and v >= 1, ("pos",))
NUMBER: Final = FieldType("a number", lambda v: type(v) in (int, float), ("number",))
BOOL: Final = FieldType("true or false", lambda v: type(v) is bool, ("bool",))
DICT: Final = FieldType("an object", lambda v: type(v) is dict, ("object",))
DIGEST: Final = FieldType("a digest 'blake3:<64 hex>'", is_digest, ("digest",))
REF: Final = FieldType("an artifact ref {digest, size}", is_ref, ("ref",))
FILE: Final = FieldType("a file record {file, digest, size}", _is_file, ("file",))


def nullable(t: FieldType) -> FieldType:
    """``t`` or ``null``."""
    return FieldType(f"{t.name} or null", lambda v: v is None or t.check(v), _wrap("maybe", t))


def list_of(t: FieldType) -> FieldType:
    return FieldType(
        f"a list of {t.name}", lambda v: type(v) is list and all(t.check(x) for x in v), _wrap("list", t)
    )


def dict_of(t: FieldType) -> FieldType:
    """An object whose values are all ``t`` (keys are strings in JSON anyway)."""
    return FieldType(
        f"an object of {t.name}",
        lambda v: type(v) is dict and all(t.check(x) for x in v.values()),
        _wrap("values", t),
    )


def one_of(*values: str) -> FieldType:
    allowed = frozenset(values)
    return FieldType(
        "one of " + ", ".join(repr(x) for x in values),
        lambda v: type(v) is str and v in allowed,
        ("one_of", *values),
    )


def _wrap(how: str, t: FieldType) -> tuple[Any, ...] | None:
    return None if t.spec is None else (how, t.spec)


# -- findings ------------------------------------------------------------------------


class Finding(NamedTuple):
    """One thing a rule found wrong with an event; the checker adds where it is."""

    code: str
    message: str
    severity: str = "error"


def show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
