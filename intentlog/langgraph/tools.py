"""``intentlog_tool``: a LangGraph tool whose side effect runs at most once, whatever crashes.

Called inside a graph node, the wrapped function runs as an effect of the thread's task
(:meth:`intentlog.Task.effect`): ``call.requested`` and ``call.manifest`` (the tool's
name and arguments, credentials redacted) are durable before the function runs, then
``attempt.started`` -- synced **before** the function is called -- then its result. The key
is the LangGraph task that runs it (``checkpoint_ns``: the node and its task id, stable
across a resume, as LangGraph derives it from the checkpoint) plus the tool's name and
the hash of its arguments. So when a graph is resumed after a crash:

* a call that completed returns its recorded result and the function is not called;
* a call whose intent was recorded but that never started runs once;
* a call that started and left nothing raises :class:`~intentlog.EffectUnknown`, whose
  message names the ``intentlog reconcile`` command to run -- the function is never run
  again on a guess.

The same tool with the same arguments in the same node run is one effect (a second call
returns the first one's result). The result is recorded as the response's bytes: JSON
when it is JSON (a string, numbers, lists, dicts), else a JSON envelope of the saver's
serde bytes; it is what a resumed run gets back, and JSON is what an operator gives as
evidence to ``intentlog reconcile ... --served --evidence FILE``.

An exception from the function leaves the effect unknown (it may have acted before
raising); raise :class:`intentlog.NotSent` from it to say that nothing left.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import inspect
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import orjson
from langgraph.config import get_config

from ..errors import NotSerializable, UsageError
from ..eventlog.canonical import dumps, request_hash
from ..task import Task
from .saver import IntentlogSaver

__all__ = ["SERDE_KEY", "decode_result", "encode_result", "intentlog_tool", "node_run", "tool_key"]

F = TypeVar("F", bound=Callable[..., Any])

#: A result the serde had to encode is recorded as this JSON envelope (its type and base64 bytes).
SERDE_KEY = "$langgraph_serde"


def tool_key(checkpoint_ns: str, name: str, request: Any) -> str:
    """The effect key of one tool call: the LangGraph task's namespace, the tool, its arguments' hash."""
    digest = request_hash(request)[len("blake3:") :][:32]
    where = checkpoint_ns if len(checkpoint_ns) <= 400 else request_hash(checkpoint_ns)
    return f"tool:{where}:{name}:{digest}"


def encode_result(saver: IntentlogSaver, value: Any) -> bytes:
    """The bytes recorded as the tool's response: its result as JSON, else a JSON envelope of the serde's bytes.

    So the evidence an operator gives ``intentlog reconcile ... --served --evidence FILE``
    for a tool that returns JSON is simply that JSON (``"m-1"``, ``{"id": 7}``).
    """
    try:
        return dumps(value)
    except (NotSerializable, RecursionError):
        kind, data = saver.serde.dumps_typed(value)
        return dumps({SERDE_KEY: kind, "b64": base64.b64encode(data).decode("ascii")})


def decode_result(saver: IntentlogSaver, raw: bytes) -> Any:
    """The tool's result from its recorded response (what :func:`encode_result` wrote, or an operator's evidence)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UsageError(
            f"a tool's recorded response is not JSON ({exc}); the evidence given to 'intentlog reconcile --served' "
            "must be the tool's result as JSON"
        ) from exc
    if isinstance(value, dict) and set(value) == {SERDE_KEY, "b64"}:
        return saver.serde.loads_typed((value[SERDE_KEY], base64.b64decode(value["b64"])))
    return value


#: LangGraph's configurable keys: the checkpoint each namespace of a task runs from, and the run's durability
_CHECKPOINT_MAP: Final = "checkpoint_map"
_DURABILITY: Final = "__pregel_durability"


def _where(name: str) -> tuple[str, str, dict[str, str]]:
    try:
        config = get_config()
    except RuntimeError as exc:
        raise UsageError(
            f"{name!r} runs at most once only inside a LangGraph node (it keys the call by the node's task); "
            "call it from a node of a graph compiled with an IntentlogSaver"
        ) from exc
    conf = config.get("configurable", {})
    thread_id = conf.get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        raise UsageError(
            f"{name!r} needs a thread: invoke the graph with config={{'configurable': {{'thread_id': ...}}}}"
        )
    if conf.get(_DURABILITY) == "exit":
        raise UsageError(
            f"{name!r} runs at most once only when the checkpoint its node runs from is recorded before it: "
            "this graph was invoked with durability='exit' (checkpoints written only at the end); invoke it "
            "with durability='async' (the default) or 'sync'. Nothing was recorded or sent"
        )
    checkpoints = conf.get(_CHECKPOINT_MAP) or {}
    return thread_id, str(conf.get("checkpoint_ns", "")), {str(k): str(v) for k, v in checkpoints.items()}


def node_run(saver: IntentlogSaver, name: str = "node_run") -> tuple[Task, str]:
    """The thread's task and the running node's key (its ``checkpoint_ns``), for effects made in a node.

    Returns only once the checkpoint the node runs from is durable (see
    :meth:`IntentlogSaver.wait_recorded`): the key is derived from that checkpoint, so an
    effect keyed by it is the same effect on every resume. Use it to key a model call::

        task, where = node_run(saver)
        with task.key(f"model:{where}"):
            reply = llm.invoke(...)

    Raises ``UsageError`` outside a node, without a thread, or under ``durability="exit"``.
    """
    thread_id, ns, checkpoints = _where(name)
    saver.wait_recorded(thread_id, checkpoints)
    return saver.task(thread_id), ns


def intentlog_tool(fn: F, saver: IntentlogSaver, *, name: str | None = None) -> F:
    """``fn`` as a tool that runs at most once per node run (see the module doc); sync or async.

    The wrapper keeps ``fn``'s name, docstring and signature, so ``langchain_core.tools.tool``
    and ``ToolNode`` describe it to a model exactly as they would ``fn``.
    """
    if not callable(fn):
        raise UsageError(f"intentlog_tool() wraps a function, not {type(fn).__name__}")
    if not isinstance(saver, IntentlogSaver):
        raise UsageError(f"intentlog_tool() records into an IntentlogSaver's ledger, not {type(saver).__name__}")
    tool_name = name or getattr(fn, "__name__", None) or "tool"
    signature = inspect.signature(fn)

    def request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = signature.bind(*args, **kwargs)
        return {"tool": tool_name, "args": dict(bound.arguments)}

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def arun(*args: Any, **kwargs: Any) -> Any:
            request = request_of(args, kwargs)
            task, ns = await asyncio.to_thread(node_run, saver, f"tool {tool_name}")

            async def send(_recorded: Any) -> bytes:
                return encode_result(saver, await fn(*args, **kwargs))

            raw = await task.aeffect(tool_key(ns, tool_name, request), request, cast(Any, send), name=tool_name)
            return decode_result(saver, raw)

        return cast(F, arun)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        request = request_of(args, kwargs)
        task, ns = node_run(saver, f"tool {tool_name}")

        def send(_recorded: Any) -> bytes:
            return encode_result(saver, fn(*args, **kwargs))

        raw = task.effect(tool_key(ns, tool_name, request), request, send, name=tool_name)
        return decode_result(saver, raw)

    return cast(F, run)
