"""Recorded values: run a function once, record its JSON result, return the record on every later run.

``task.value(name, fn)`` looks ``name`` up in the task's record. Recorded: the recorded
value is returned and ``fn`` is not called. Not recorded: ``fn()`` runs, its result is
checked to be exact JSON, ``task.value_recorded {name, value}`` is appended and synced
(inside a batch too), and the value *as recorded* (read back from its JSON) is returned --
so the first run and every re-run see the same value (a tuple comes back as a list on
both), and a value that feeds the next effect's request hashes the same on the re-run: no
``ResumeRefused (DRIFT)``.

There is no unknown state: a value has no effect outside the process, so a crash after
``fn`` ran and before the record is durable simply runs ``fn`` again on the re-run; the
first record of a name is the only one that counts. A name is one value for the task's
life: asking again (in the same run or a later one) returns the recorded value, whatever
``fn`` is then. A result that is not exact JSON raises :class:`~intentlog.errors.NotSerializable`
and records nothing.

``@task.step`` records a function's result under ``step:<qualified name>:<hash of its
JSON arguments>``: a stable name, the same in every run. A step is one value per
arguments: called again with the same arguments (in this run or a later one) it returns
the recorded result without running. A step meant to run afresh each time takes a
distinguishing argument (an index, a date).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import orjson

from .._internal.digest import digest_bytes
from ..errors import NotSerializable, UsageError
from ..eventlog.canonical import dumps
from ..projections.idioms import VALUE_RECORDED
from ..stream import as_recorded
from . import state
from .names import check_name

if TYPE_CHECKING:
    from ..stream import TaskStream

__all__ = ["arecorded_value", "recorded_value", "step"]

P = ParamSpec("P")
R = TypeVar("R")
_MISSING: Any = object()
#: the longest step name: ``step:<name>:<32 hex>`` stays within an idiom name's 200 characters
_LONGEST_STEP = 200 - len("step:") - 1 - 32


def _recorded(task: TaskStream, name: str) -> Any:
    return state.current(task).values.get(name, _MISSING)


def _inner(exc: NotSerializable) -> str:
    """The reason a value is not JSON, without the error's own prefix."""
    return str(exc).split(": ", 1)[-1]


def _as_json(task: TaskStream, name: str, value: Any) -> tuple[bytes, Any]:
    """The value's canonical JSON and the value read back from it, or NotSerializable naming where."""
    try:
        raw = dumps(value)
    except NotSerializable as exc:
        raise NotSerializable(
            f"task {task.id!r}, value {name!r}: the function's result is not exact JSON ({_inner(exc)}); nothing was "
            "recorded: return a dict, list, str, int, float, bool or None (store bytes with task.record_artifact "
            "and return the ref)",
            path=exc.path,
        ) from exc
    return raw, as_recorded(orjson.loads(raw))


def _store(task: TaskStream, name: str, value: Any, extra: dict[str, Any]) -> Any:
    _, back = _as_json(task, name, value)
    with task.mutex:
        again = _recorded(task, name)
        if again is not _MISSING:  # another thread of this process recorded it first: the first record counts
            return again
        state.record(task, VALUE_RECORDED, {"name": name, "value": back, **extra})
    return back


def _check_fn(fn: object, what: str) -> None:
    if not callable(fn):
        raise UsageError(f"{what} takes a function to call (with no arguments), not {type(fn).__name__}")


def recorded_value(task: TaskStream, name: str, fn: Callable[[], Any], *, extra: dict[str, Any] | None = None) -> Any:
    """The value recorded under ``name``, running ``fn`` and recording its result first if there is none."""
    check_name(name, "value")
    _check_fn(fn, "task.value")
    if inspect.iscoroutinefunction(fn):
        raise UsageError(f"task.value({name!r}, ...) got an async function: await task.avalue(name, fn) instead")
    got = _recorded(task, name)
    if got is not _MISSING:
        return got
    return _store(task, name, fn(), extra or {})


async def arecorded_value(
    task: TaskStream, name: str, fn: Callable[[], Awaitable[Any]], *, extra: dict[str, Any] | None = None
) -> Any:
    """:func:`recorded_value`, awaited: ``fn`` is awaited; reading and recording run off the event loop."""
    check_name(name, "value")
    _check_fn(fn, "task.avalue")
    got = await asyncio.to_thread(_recorded, task, name)
    if got is not _MISSING:
        return got
    value = await fn()
    return await asyncio.to_thread(_store, task, name, value, extra or {})


def _step_name(task: TaskStream, label: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str]:
    try:
        digest = digest_bytes(dumps({"args": list(args), "kwargs": kwargs}))
    except NotSerializable as exc:
        raise NotSerializable(
            f"task {task.id!r}, step {label!r}: its arguments are not exact JSON ({_inner(exc)}), so the step has no "
            "stable name; nothing was run or recorded: pass JSON arguments (or use task.value with a name)",
            path=exc.path,
        ) from exc
    return f"step:{label}:{digest.removeprefix('blake3:')[:32]}", digest


def _label(fn: Callable[..., Any]) -> str:
    """A function's qualified name as a record name (``<locals>`` and the like spelled with ``_``), at most 120."""
    raw = f"{getattr(fn, '__module__', None) or '_'}.{getattr(fn, '__qualname__', None) or repr(fn)}"
    return re.sub(r"[^A-Za-z0-9._:/@#+=-]", "_", raw)[-120:].lstrip("._:/@#+=-") or "step"


def step(task: TaskStream, fn: Callable[P, R] | None = None, *, name: str | None = None) -> Any:
    """Decorate ``fn`` so that each call's result is recorded (see the module docstring); sync or async."""
    if fn is None:
        return lambda f: step(task, f, name=name)
    _check_fn(fn, "task.step")
    label = check_name(name, "step") if name is not None else _label(fn)
    if len(label) > _LONGEST_STEP:  # its record's name adds "step:" and ":<32 hex>", within a name's 200
        raise UsageError(
            f"step name {label[:40]!r}... is {len(label)} characters: a step's name is at most {_LONGEST_STEP}, "
            "so that its record's name fits; nothing was written"
        )

    if inspect.iscoroutinefunction(fn):
        afn: Callable[..., Awaitable[Any]] = fn

        @functools.wraps(fn)
        async def arun(*args: Any, **kwargs: Any) -> Any:
            key, digest = _step_name(task, label, args, kwargs)
            return await arecorded_value(task, key, lambda: afn(*args, **kwargs), extra={"step": label, "args": digest})

        return arun

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        key, digest = _step_name(task, label, args, kwargs)
        return recorded_value(task, key, lambda: fn(*args, **kwargs), extra={"step": label, "args": digest})

    return run
