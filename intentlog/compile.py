"""Context compilation: an inventory of offered items and the package selected from it (no external effect)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

from .effects.intent import check_key
from .effects.records import error_text, store_bytes
from .errors import (
    IntentlogError,
    PreparationFailed,
    RequiredContextMissing,
    UsageError,
)
from .eventlog.canonical import dumps

if TYPE_CHECKING:
    from .stream import TaskStream

@final
@dataclass(frozen=True, slots=True)
class Package:
    """A compiled context package: its digest is what a call's ``inputs`` bind to."""

    compilation_id: str
    digest: str
    size: int
    selected: tuple[str, ...]






def _compilation_failed(task: TaskStream, compilation_id: str, error: str, missing: list[str]) -> None:
    task.append("context.compilation_failed", {"compilation": compilation_id, "error": error, "missing": missing})


def compile_context(
    task: TaskStream,
    compilation_id: str,
    offered: Sequence[Mapping[str, Any]],
    *,
    required: Iterable[str] = (),
    select: Callable[[list[dict[str, Any]]], Iterable[str]] | None = None,
) -> Package:
    """Compile a context package, recording the offered inventory and the outcome.

    Each offered item is a mapping with ``id`` and optionally ``required`` (bool),
    ``size`` (else estimated from its serialized ``content``, and marked so), ``lineage``
    and ``content``. Appends ``context.compilation_requested`` (the inventory, without
    content, and the required ids), then either ``context.compiled`` (package ref and
    selected ids; the package bytes are durable first) or ``context.compilation_failed``:
    with the missing required ids (required - offered) and
    :class:`RequiredContextMissing` raised, or with the error message of a ``select``
    that raised or chose ids never offered, or of content that is not JSON, and
    :class:`PreparationFailed` raised. Malformed arguments (an item without a string id,
    a duplicate id, a bad size) raise :class:`UsageError` and write nothing.
    Compiling has no external effect: recompiling under the same id is always safe.
    """
    check_key(compilation_id)
    if isinstance(required, str):
        raise UsageError(f"required must be a collection of ids, not the string {required!r}")
    items: list[dict[str, Any]] = []
    inventory: list[dict[str, Any]] = []
    problems: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(offered):
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            raise UsageError(f"offered item {i} must be a mapping with a string 'id'")
        item_id = item["id"]
        if item_id in seen:
            raise UsageError(f"offered item {i}: id {item_id!r} is offered twice")
        seen.add(item_id)
        size = item.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise UsageError(f"offered item {item_id!r}: size must be a non-negative integer, not {size!r}")
        estimated = size is None
        try:  # checked whether or not a size was given: the package holds the content
            content_size = len(dumps(item.get("content")))
        except IntentlogError as exc:
            problems.append(f"item {item_id!r}: {exc}")
            content_size = None
        if size is None:
            size = content_size
        inventory.append(
            {
                "id": item_id,
                "required": bool(item.get("required", False)),
                "size": size,
                "estimated": estimated,
                "lineage": item.get("lineage"),
            }
        )
        items.append(dict(item))
    need = sorted({*required, *(i["id"] for i in inventory if i["required"])})
    missing = [r for r in need if r not in seen]
    with task.batch():
        task.append(
            "context.compilation_requested",
            {"compilation": compilation_id, "offered": inventory, "required": need},
        )
        if missing:
            _compilation_failed(task, compilation_id, "RequiredContextMissing", missing)
        elif problems:
            _compilation_failed(task, compilation_id, "; ".join(problems), [])
    if missing:
        raise RequiredContextMissing(compilation_id, missing)
    if problems:
        raise PreparationFailed(compilation_id, compilation_id, "; ".join(problems))
    try:
        chosen = list(select(items)) if select is not None else [i["id"] for i in items]
    except Exception as exc:  # user code: the failure is recorded, then raised
        error = f"select raised {error_text(exc)}"
        _compilation_failed(task, compilation_id, error, [])
        raise PreparationFailed(compilation_id, compilation_id, error) from exc
    unknown = [c for c in chosen if not isinstance(c, str) or c not in seen]
    if unknown:
        error = f"selected ids not offered: {', '.join(map(repr, unknown))}"
        _compilation_failed(task, compilation_id, error, [])
        raise PreparationFailed(compilation_id, compilation_id, error)
    chosen = list(dict.fromkeys(chosen))  # once each, in the order chosen; required ones always
    chosen += [r for r in need if r not in chosen]
    by_id = {i["id"]: i for i in items}
    package = dumps(
        {"compilation": compilation_id, "items": [{"id": c, "content": by_id[c].get("content")} for c in chosen]}
    )
    ref = store_bytes(task, package, "application/json")
    task.append("context.compiled", {"compilation": compilation_id, "package": ref, "selected": chosen})
    return Package(compilation_id, str(ref["digest"]), len(package), tuple(chosen))
