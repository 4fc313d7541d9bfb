"""Where two JSON values first differ: one path-naming comparison for every "the request changed" message."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["first_difference"]


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def first_difference(recorded: Any, now: Any, path: str = "$") -> str | None:
    """Where two request envelopes first differ, as ``path: recorded X, now Y``; None when equal.

    Object keys are visited in sorted order, list items by index; values are shown shortened
    to 80 characters. Iterative, so data nested deeper than the recursion limit is compared too.
    """
    # entries: ("pair", recorded, now, path), or ("len", n_recorded, n_now, path) checked after a list's items
    stack: list[tuple[str, Any, Any, str]] = [("pair", recorded, now, path)]
    while stack:
        tag, a, b, where = stack.pop()
        if tag == "len":
            if a != b:
                return f"{where}: recorded {a} items, now {b}"
        elif isinstance(a, dict) and isinstance(b, dict):
            todo: list[tuple[str, Any, Any, str]] = []
            for k in sorted({*a, *b}, key=str):
                if k not in b:
                    return f"{where}.{k}: recorded {_short(a[k])}, now absent"
                if k not in a:
                    return f"{where}.{k}: not recorded, now {_short(b[k])}"
                todo.append(("pair", a[k], b[k], f"{where}.{k}"))
            stack.extend(reversed(todo))
        elif isinstance(a, list) and isinstance(b, list):
            stack.append(("len", len(a), len(b), where))
            items = [("pair", x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=False))]
            stack.extend(reversed(items))
        elif type(a) is not type(b) or isinstance(a, (dict, list)) or a != b:
            return f"{where}: recorded {_short(a)}, now {_short(b)}"
    return None
