"""The one walker for artifact references in event data (DESIGN §3, §4 rule 8).

"Which artifacts does this event data name" is asked by retention (what gc must keep),
by verify (which bytes must exist and hash right), by export (which blobs a bundle must
carry), by checkpoints and by the ledger (where inline bytes ride). Each asks with its own
filter -- which objects count as a ref, whether to look inside a ref's other keys, whether
a bare ``blake3:`` string counts -- and :func:`walk` answers them all with one traversal.

Guarantee that gc's safety rests on (pinned by a property test): for any event data,
``walk(data, KEEP)`` names every digest that ``walk(data, CHECK)`` or
``walk(data, EXPORT)`` names, so retention never keeps fewer blobs than verify checks or
export copies. Walks are iterative: data nested as deep as JSON allows cannot overflow.

Pure: imports nothing above :mod:`intentlog._internal.digest`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

from ._internal.digest import DIGEST_PREFIX, is_digest, is_ref

__all__ = [
    "CHECK",
    "CHECK_REFS",
    "DIGEST_BYTES_RE",
    "EXPORT",
    "EXPORT_INLINE",
    "INLINE",
    "KEEP",
    "Found",
    "RefFilter",
    "carries_inline",
    "is_ref",
    "walk",
]

#: ``blake3:<64 hex>`` anywhere inside a string (group 1: the hex).
_DIGEST_TEXT: Final = re.compile(r"blake3:([0-9a-f]{64})")
#: The same, over raw bytes (a torn last line that never parsed).
DIGEST_BYTES_RE: Final = re.compile(rb"blake3:([0-9a-f]{64})")

Strings = Literal["none", "exact", "embedded"]


def carries_inline(v: dict[str, Any]) -> bool:
    """True for an object with a well-formed digest and an ``inline``/``inline_b64`` payload (unchecked)."""
    return ("inline" in v or "inline_b64" in v) and is_digest(v.get("digest"))


def _is_inline_ref(v: dict[str, Any]) -> bool:
    return carries_inline(v) and is_ref(v)


@dataclass(frozen=True)
class RefFilter:
    """Which references a :func:`walk` reports.

    ``ref`` says which objects are references (reported with the object); ``past_refs``
    whether to look inside such an object's values for more; ``strings`` whether a string
    counts as a bare reference: ``"none"``, ``"exact"`` (the whole string is a digest) or
    ``"embedded"`` (every ``blake3:<64 hex>`` inside it); ``keys`` whether object keys are
    searched like strings too.
    """

    ref: Callable[[dict[str, Any]], bool]
    past_refs: bool
    strings: Strings
    keys: bool = False


#: One reference: its digest, and the ref object (None for a digest named by a bare string).
#: A plain tuple, unpacked as ``for digest, ref in walk(...)``: walks are hot in gc's scan.
Found = tuple[str, "dict[str, Any] | None"]


#: Retention: every digest named anywhere (refs, bare strings, inside strings, keys), and
#: with its object each payload riding inline -- the widest filter, to be safe (§4 rule 8).
KEEP: Final = RefFilter(carries_inline, past_refs=True, strings="embedded", keys=True)
#: Verify: well-formed refs, looking inside them too (as export does), and bare digest strings (informational).
CHECK: Final = RefFilter(is_ref, past_refs=True, strings="exact")
#: Verify, in fields no rule names: refs only.
CHECK_REFS: Final = RefFilter(is_ref, past_refs=True, strings="none")
#: Export: well-formed refs, looking inside them too, and bare digest strings.
EXPORT: Final = RefFilter(is_ref, past_refs=True, strings="exact")
#: Where payloads ride inline: objects with a digest and inline bytes, anywhere.
INLINE: Final = RefFilter(carries_inline, past_refs=True, strings="none")
#: Export's search for inline copies: well-formed refs carrying inline bytes, anywhere.
EXPORT_INLINE: Final = RefFilter(_is_inline_ref, past_refs=True, strings="none")


def walk(data: Any, filt: RefFilter = EXPORT) -> Iterator[Found]:
    """Every reference in ``data`` that ``filt`` counts, depth first, last container first.

    A ref object is reported before anything inside it; a digest may be reported more
    than once (callers keep sets). Only plain ``dict``/``list``/``str`` are walked, as
    parsed JSON holds.
    """
    ref, past, keys = filt.ref, filt.past_refs, filt.keys
    exact, embedded = filt.strings == "exact", filt.strings == "embedded"
    stack: list[Any] = [data]
    while stack:
        v = stack.pop()
        if type(v) is dict:
            if ref(v):
                yield v["digest"], v
                if not past:
                    continue
            if keys:
                for k in v:
                    if DIGEST_PREFIX in k:
                        for m in _DIGEST_TEXT.finditer(k):
                            yield DIGEST_PREFIX + m.group(1), None
            items: Any = v.values()
        elif type(v) is list:
            items = v
        else:  # a bare top-level value
            items = (v,)
        for x in items:
            t = type(x)
            if t is dict or t is list:
                stack.append(x)
            elif t is str:
                if exact:
                    if is_digest(x):
                        yield x, None
                elif embedded and DIGEST_PREFIX in x:
                    for m in _DIGEST_TEXT.finditer(x):
                        yield DIGEST_PREFIX + m.group(1), None
