"""Where two JSON values first differ: one path-naming comparison for every "the request changed" message."""

from __future__ import annotations

from typing import Any

import orjson

from ..eventlog.redaction import REDACTED, apply_spans, find_spans, is_credential_name

__all__ = ["first_difference"]


def _short(value: Any, key: object = None) -> str:
    """A value as a message shows it: never a credential (a value under a credential name, or what
    looks like one inside), then cut to 80 characters -- messages are printed and logged."""
    if isinstance(key, str) and is_credential_name(key):
        return REDACTED
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    spans = find_spans(text)
    if spans:
        text = apply_spans(text, spans)
    return text if len(text) <= 80 else text[:77] + "..."


def first_difference(recorded: Any, now: Any, path: str = "$") -> str | None:
    """Where two request envelopes first differ, as ``path: recorded X, now Y``; None when equal.

    Object keys are visited in sorted order, list items by index; values are shown shortened
    to 80 characters, and never a credential: a value under a credential name is shown as
    ``[REDACTED]``, and what looks like one inside a value is redacted.
    Iterative, so data nested deeper than the recursion limit is compared too.
    """
    # entries: ("pair", recorded, now, path, key), or ("len", n_recorded, n_now, path, None) checked after a
    # list's items; ``key`` is the object key the pair sits under (a credential name hides both values)
    stack: list[tuple[str, Any, Any, str, object]] = [("pair", recorded, now, path, None)]
    while stack:
        tag, a, b, where, key = stack.pop()
        if tag == "len":
            if a != b:
                return f"{where}: recorded {a} items, now {b}"
        elif isinstance(a, dict) and isinstance(b, dict):
            todo: list[tuple[str, Any, Any, str, object]] = []
            for k in sorted({*a, *b}, key=str):
                if k not in b:
                    return f"{where}.{k}: recorded {_short(a[k], k)}, now absent"
                if k not in a:
                    return f"{where}.{k}: not recorded, now {_short(b[k], k)}"
                todo.append(("pair", a[k], b[k], f"{where}.{k}", k))
            stack.extend(reversed(todo))
        elif isinstance(a, list) and isinstance(b, list):
            stack.append(("len", len(a), len(b), where, None))
            items = [("pair", x, y, f"{where}[{i}]", key) for i, (x, y) in enumerate(zip(a, b, strict=False))]
            stack.extend(reversed(items))
        elif type(a) is not type(b) or isinstance(a, (dict, list)) or a != b:
            return f"{where}: recorded {_short(a, key)}, now {_short(b, key)}"
    return None
