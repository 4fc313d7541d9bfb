"""The record's bytes: storing and loading refs, recorded values, capped error texts, interpreter ids."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from .._internal.digest import digest_bytes, is_digest
from .._internal.fsutil import makedirs_durable, publish_bytes
from ..artifacts.inline import INLINE_MAX, inline_ref, ref_bytes
from ..errors import (
    IntentlogError,
)
from ..eventlog.canonical import dumps

if TYPE_CHECKING:
    from ..stream import TaskStream




def store_bytes(task: TaskStream, data: bytes, media_type: str | None = None) -> dict[str, Any]:
    """A ref for ``data``: inline in the event when small (DESIGN §3), else a durable blob."""
    if len(data) <= INLINE_MAX:
        return inline_ref(data, media_type=media_type)
    return task.store.put(data, media_type=media_type).to_json()


def keep_aside(task: TaskStream, call_id: str, n: int, data: bytes) -> str | None:
    """Write response bytes the store refused to ``quarantine/`` or, failing that, the system's temp folder.

    Returns the path of a durable copy (fsynced, its folder too), or None when no place took
    them. The file is named ``unstored.<task>.<call>.<attempt>.<digest prefix>``; it is
    evidence for a reconciliation, not part of the record. ``quarantine/`` is never swept
    (``tmp/`` may be) and travels with the ledger.
    """
    import tempfile


    name = f"unstored.{task.id}.{call_id}.{n}.{digest_bytes(data)[7:23]}"
    for folder in (Path(task.layout.quarantine_dir), Path(tempfile.gettempdir()) / "intentlog-unstored"):
        try:
            makedirs_durable(folder)
            publish_bytes(data, folder / name, tmp_dir=folder)
        except OSError:
            continue
        return str(folder / name)
    return None


def bare_ref(ref: Mapping[str, Any]) -> dict[str, Any]:
    return {k: ref[k] for k in ("digest", "size", "media_type") if k in ref}


def check_ref(task: TaskStream, ref: Any, what: str) -> Mapping[str, Any]:
    """``ref`` if it is an artifact ref; a damaged one is an :class:`IntentlogError` naming it, never a KeyError."""
    if not isinstance(ref, Mapping) or not is_digest(ref.get("digest")):
        raise IntentlogError(
            f"{task.path}: {what} is not an artifact ref ({{'digest': 'blake3:...', 'size': N}}) but "
            f"{str(ref)[:80]}: the record was damaged or edited; run 'intentlog verify' and restore the "
            "stream from a copy"
        )
    return ref


def load_ref(task: TaskStream, ref: Any, what: str = "a recorded ref") -> bytes:
    """The bytes of a recorded ref (inline, or from objects/); a damaged ref is an :class:`IntentlogError`."""
    return ref_bytes(check_ref(task, ref, what), task.store)


#: The longest error text recorded (characters); the rest is cut, with a note, so lines stay small.
ERROR_TEXT_MAX: Final = 2000


def cap_text(text: str) -> str:
    """``text`` cut to :data:`ERROR_TEXT_MAX` characters (after scrubbing, so no secret is cut in half)."""
    if len(text) <= ERROR_TEXT_MAX:
        return text
    return f"{text[:ERROR_TEXT_MAX]}... ({len(text) - ERROR_TEXT_MAX} more characters not recorded)"


def value_record(task: TaskStream, value: Any) -> dict[str, Any]:
    """How a completion records an interpreted value: ``{"value": v}``, or ``{"value_ref": ref}`` when large.

    Raises :class:`NotSerializable` (or RecursionError) for a value that is not exact JSON.
    """
    data = dumps(value)
    if len(data) <= INLINE_MAX:
        return {"value": value}
    return {"value_ref": bare_ref(task.store.put(data, media_type="application/json").to_json())}


def loads_json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise IntentlogError(f"a stored result is not JSON ({exc}); run 'intentlog verify'") from exc


def error_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def interpreter_id(fn: Callable[..., Any]) -> dict[str, Any]:
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    version = getattr(fn, "version", None) or getattr(fn, "__version__", None)
    return {"name": name, "version": None if version is None else str(version)}
