"""An at-most-once durability engine for pydantic-ai agents: every durable unit is an intentlog effect.

::

    from pydantic_ai import Agent
    from intentlog.pydantic_ai import IntentlogDurability

    agent = Agent(model, name="mailer", capabilities=[IntentlogDurability("evidence", task="mail-run")])

Built on pydantic-ai's public durable-execution builder (``pydantic_ai.durable_exec``:
:class:`BaseDurabilityCapability` and a :class:`CallableOperationBackend`). Every durable
unit the builder routes -- a model request (streamed or not), a tool call (function,
dynamic and MCP toolsets), MCP discovery, an event-stream handler call, a capability's
``@durable_operation`` -- runs as one effect of one intentlog task
(:meth:`intentlog.Task.aeffect`), keyed ``<run id>/<persisted unit name>[/<tool call id>]#<n>``:

- its name and parameters (messages, model settings and request parameters; a tool's
  name, arguments and call id) are the call's recorded intent, redacted and hashed like any
  request, durable with ``attempt.started`` **before** the unit runs;
- its result, encoded by the builder's JSON codec, is the stored response, durable before
  the agent sees it.

**The guarantee.** Running the same agent run again after a crash replays every unit the
record completed without calling the model or the tool, runs the units the record proves
never started, and raises :class:`~intentlog.EffectUnknown` (its ``commands`` the
runnable ``intentlog reconcile`` lines) for a unit that started and left nothing after it:
no unit is run a second time on a guess. A tool declared idempotent (``idempotent_tools=``
or ``metadata={"intentlog": {"idempotent": True}}``) is the exception it asks to be: its
unknown effect is reconciled ``resend`` (recorded, ``by`` this module) and run again.

What a re-run needs to map units to the record: the same runs in the same order in the
process (the n-th ``agent.run`` of a process is run ``<task>.<n>``; pass ``run_id=`` to
name a run yourself) with the same prompts -- a changed request under a recorded key is
refused as ``DRIFT`` (nothing sent), as everywhere in intentlog.

Failures keep pydantic-ai's behaviour: a model request the provider refused
(``ModelHTTPError``) is recorded as a provider failure and the same exception is raised; a
later run starts that unit again under a fresh key, since the record proves nothing was
served. Any other exception a unit raises is raised as it was, with a note naming the
reconcile command: the unit may have acted, so its effect is recorded unknown.
``ModelRetry``, deferred and approval-required tool outcomes are values of the unit
(pydantic-ai wraps them), replayed like any result.

The core of intentlog never imports this module; without pydantic-ai installed, importing
it raises :class:`ImportError` naming the extra (``pip install 'intentlog[pydantic-ai]'``).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import itertools
import json
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar

try:
    from pydantic_ai.durable_exec import (
        JSON_CODEC,
        BaseDurabilityCapability,
        BoundDurableOperation,
        CallableOperationBackend,
        DurabilityEngineSpec,
        DurableOperation,
        DurableOperationId,
        JournalOperationNamer,
        ModelRequestId,
        ToolsetCallToolId,
        conversation_id_from_run_id,
    )
    from pydantic_ai.exceptions import ModelHTTPError
    from pydantic_ai.tools import AgentDepsT, RunContext
    from pydantic_ai.toolsets import ToolsetTool
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test in a clean interpreter
    raise ImportError(f"intentlog.pydantic_ai needs pydantic-ai ({exc}): pip install 'intentlog[pydantic-ai]'") from exc

from .errors import CallFailed, EffectUnknown, UsageError
from .ledger import Ledger, open_ledger

__all__ = [
    "ENGINE_NAME",
    "METADATA_KEY",
    "IntentlogDurability",
    "UnitConfig",
    "current_unit_key",
    "idempotency_key_hook",
    "tool_return_evidence",
]

#: The engine's name in pydantic-ai's messages and the ``by`` of what this module records.
ENGINE_NAME: Final = "intentlog"
#: The tool metadata key read for per-tool configuration: ``{"intentlog": {"idempotent": True}}`` or ``False``.
METADATA_KEY: Final = "intentlog"

_P = TypeVar("_P")
_W = TypeVar("_W")
_R = TypeVar("_R")

UnitConfig = dict[str, Any]
"""A unit's configuration: ``{"idempotent": bool}`` (tools only); merged from the defaults and the tool's metadata."""

_UNIT_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("intentlog_pydantic_ai_unit", default=None)


def current_unit_key() -> str | None:
    """The intentlog key of the durable unit running in this context (None outside a unit)."""
    return _UNIT_KEY.get()


def idempotency_key_hook(header: str = "Idempotency-Key") -> Callable[[Any], Awaitable[None]]:
    """An ``httpx`` request hook that sends the running unit's key in ``header``, the same on every attempt.

    For a provider that deduplicates on an idempotency key: build the model's client with
    ``httpx.AsyncClient(event_hooks={"request": [idempotency_key_hook()]})`` and declare the
    provider's window with ``IntentlogDurability(..., dedup=intentlog.ProviderDedup(...))``.
    A request outside a unit is sent unchanged.
    """

    async def hook(request: Any) -> None:
        key = _UNIT_KEY.get()
        if key is not None:
            request.headers[header] = key

    return hook


# -- what a unit's intent records -------------------------------------------------------


def _opaque(value: Any) -> Any:
    """The recorded stand-in of a value with no JSON form: its type's name, never its repr (addresses differ)."""
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _context(ctx: RunContext[Any]) -> dict[str, Any]:
    """What a unit's intent keeps of its run context: the run and step, and the tool call it serves."""
    return {
        "run_id": ctx.run_id,
        "run_step": ctx.run_step,
        "tool_call_id": ctx.tool_call_id,
        "tool_name": ctx.tool_name,
        "retry": ctx.retry,
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, RunContext):
        return _context(value)
    if isinstance(value, ToolsetTool):
        return {"tool": value.tool_def.name}
    return to_jsonable_python(value, fallback=_opaque, bytes_mode="base64", serialize_unknown=False)


def _unit_intent(name: str, params: Any) -> dict[str, Any]:
    """The request an effect records for a unit: its persisted name and every parameter field, as JSON.

    A run context becomes its run id, step, tool call id, tool name and retry count (deps and
    the live model are not parameters of the unit); a value with no JSON form becomes its type's
    name. Timestamps, credentials and redaction are the effect protocol's (``task.effect``).
    """
    intent: dict[str, Any] = {"format": "intentlog-pydantic-ai-unit/1", "unit": name}
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        for f in dataclasses.fields(params):
            intent[f.name] = _jsonable(getattr(params, f.name))
    else:
        intent["params"] = _jsonable(params)
    return intent


def _tool_call_id(params: Any) -> str | None:
    for attr in ("ctx", "run_context"):
        ctx = getattr(params, attr, None)
        if isinstance(ctx, RunContext) and ctx.tool_call_id:
            return str(ctx.tool_call_id)
    return None


def _run_id(params: Any) -> str | None:
    for attr in ("ctx", "run_context"):
        ctx = getattr(params, attr, None)
        if isinstance(ctx, RunContext) and ctx.run_id:
            return str(ctx.run_id)
    return None


# -- keys: a unit's place in the run ---------------------------------------------------


@dataclass
class _Occurrences:
    """How many units of each base key a run has dispatched in this process (the ``#n`` of its key)."""

    counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, base: str) -> int:
        with self.lock:
            n = self.counts.get(base, 0)
            self.counts[base] = n + 1
            return n


@dataclass
class _Shared:
    """State every bound copy of one capability shares: the ledger, the task, the run counter."""

    root: Ledger | str | os.PathLike[str]
    task_id: str
    ledger: Ledger | None = None
    handle: Any = None  # the task, once opened
    runs: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    occurrences: dict[str, _Occurrences] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def task(self) -> Any:
        with self.lock:
            if self.ledger is None:
                self.ledger = self.root if isinstance(self.root, Ledger) else open_ledger(self.root)
            if self.handle is None:
                self.handle = self.ledger.task(self.task_id)
            return self.handle

    def close(self) -> None:
        with self.lock:
            handle, self.handle = self.handle, None
            ledger = self.ledger
            if handle is not None:
                handle.close()
            if ledger is not None and ledger is not self.root:
                ledger.close()
                self.ledger = None

    def of_run(self, run_id: str) -> _Occurrences:
        with self.lock:
            occ = self.occurrences.get(run_id)
            if occ is None:
                occ = self.occurrences[run_id] = _Occurrences()
            return occ


# -- the backend: one effect per unit --------------------------------------------------

_PARAMS: contextvars.ContextVar[Any] = contextvars.ContextVar("intentlog_pydantic_ai_params", default=None)


class _Bound(BoundDurableOperation[_P, _W, _R], Generic[_P, _W, _R]):
    """The builder's bound operation, with the unit's parameters made visible to :meth:`_Backend.execute`."""

    def __init__(self, inner: BoundDurableOperation[_P, _W, _R]) -> None:
        self._inner = inner

    @property
    def operation(self) -> DurableOperation[_P, _W, _R]:
        return self._inner.operation

    async def __call__(self, params: _P, *, config: object | None = None) -> _R:
        token = _PARAMS.set(params)
        try:
            return await self._inner(params, config=config)
        finally:
            _PARAMS.reset(token)


def _encode(payload: object) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _provider_failure(exc: ModelHTTPError) -> Exception:
    from .errors import ProviderFailure

    body = exc.body
    raw = body if isinstance(body, bytes) else _encode(to_jsonable_python(body, fallback=_opaque))
    return ProviderFailure.from_status(exc.status_code, exc.model_name or "", body=raw)


class _Backend(CallableOperationBackend[UnitConfig]):
    """Runs each unit's body as the ``send`` of one effect of the task (:meth:`intentlog.Task.aeffect`)."""

    def __init__(self, capability: IntentlogDurability[Any], namer: JournalOperationNamer) -> None:
        from pydantic_ai.durable_exec import RoleBasedOperationConfig

        self._capability = capability
        super().__init__(
            namer=namer,
            config=RoleBasedOperationConfig(
                model={},
                event={},
                capability={},
                tool={},
                resolve_tool=capability._resolve_tool_config,
            ),
        )

    def bind(self, operation: DurableOperation[_P, _W, _R]) -> BoundDurableOperation[_P, _W, _R]:
        return _Bound(super().bind(operation))

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: UnitConfig,
    ) -> object:
        params = _PARAMS.get()
        shared = self._capability._shared
        run_id = _run_id(params) or _RUN.get() or f"{shared.task_id}.0"
        base = f"{run_id}/{name}"
        call_id = _tool_call_id(params) if isinstance(operation_id, ToolsetCallToolId) else None
        if call_id is not None:
            base = f"{base}/{call_id}"
        occurrence = shared.of_run(run_id).next(base)
        return await self._run_unit(
            base,
            occurrence,
            _unit_intent(name, params),
            body,
            idempotent=bool(config.get("idempotent")) if isinstance(config, dict) else False,
            model=isinstance(operation_id, ModelRequestId),
        )

    async def _run_unit(
        self,
        base: str,
        occurrence: int,
        intent: dict[str, Any],
        body: Callable[[], Awaitable[object]],
        *,
        idempotent: bool,
        model: bool,
    ) -> object:
        from .effects import NO_RETRY

        shared = self._capability._shared
        task = shared.handle if shared.handle is not None else await asyncio.to_thread(shared.task)
        # the call's name (not hashed: a changed declaration never blocks the replay of a recorded unit)
        name = str(intent["unit"]) + (" (idempotent)" if idempotent else "")
        fresh = 0  # a unit the provider refused (nothing served) starts again under key base~<fresh>
        resent = False
        while True:
            key = f"{base}#{occurrence}" + (f"~{fresh}" if fresh else "")
            raised: list[BaseException] = []

            async def send(_request: Any, key: str = key, raised: list[BaseException] = raised) -> bytes:
                token = _UNIT_KEY.set(key)
                try:
                    payload = await body()
                except ModelHTTPError as exc:
                    raised.append(exc)
                    raise _provider_failure(exc) from exc
                except Exception as exc:
                    raised.append(exc)
                    raise
                finally:
                    _UNIT_KEY.reset(token)
                return _encode(payload)

            options: dict[str, Any] = {"retry": NO_RETRY, "name": name}
            if model and self._capability._dedup is not None:
                options["dedup"] = self._capability._dedup
            try:
                raw = await task.aeffect(key, intent, send, **options)
            except EffectUnknown as exc:
                if raised:  # this run's unit raised: pydantic-ai sees its own exception, the record says unknown
                    _note(raised[0], exc)
                    raise raised[0] from None
                if idempotent and not resent:
                    resent = True
                    await asyncio.to_thread(
                        task.reconcile,
                        exc.call_id,
                        "resend",
                        note=f"declared idempotent: {intent['unit']} is run again",
                        by=f"{ENGINE_NAME}.pydantic_ai",
                    )
                    continue
                raise
            except CallFailed as exc:
                if raised:
                    raise raised[0] from None
                if await asyncio.to_thread(_nothing_served, task, exc.call_id):
                    fresh += 1
                    continue
                raise
            return json.loads(raw)


def _note(error: BaseException, unknown: EffectUnknown) -> None:
    commands = "; ".join(unknown.commands) if unknown.commands else "intentlog status"
    add_note = getattr(error, "add_note", None)  # Python 3.11+; on 3.10 the record alone says it
    if add_note is not None:
        add_note(
            f"intentlog: {unknown.call_id} (key {unknown.key!r}) may have acted; its effect is unknown: {commands}"
        )


def _nothing_served(task: Any, call_id: str) -> bool:
    """Whether the record proves the failed call had no effect: every attempt refused by the provider
    (observed with an error) or never sent, and no reconciliation. An operator's ``fail`` of an unknown
    effect proves nothing, so such a call stays failed."""
    started: set[int] = set()
    settled: set[int] = set()
    for event in task.events():
        data = event.data
        if data.get("call") != call_id:
            continue
        if event.kind == "attempt.started":
            started.add(data["attempt"])
        elif (event.kind == "attempt.observed" and "error" in data) or event.kind == "attempt.not_sent":
            settled.add(data["attempt"])
        elif event.kind == "effect.reconciled":
            return False
    return bool(started) and started <= settled


_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("intentlog_pydantic_ai_run", default=None)


@dataclass(init=False, kw_only=True)
class IntentlogDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes an agent's durable units effects of one intentlog task: at most once, resumable, verifiable.

    ``ledger_or_root``: an open :class:`intentlog.Ledger`, a folder or an ``s3://bucket/prefix``
    (opened at the first unit, created if missing). ``task``: the task every unit of every
    run of the agent is recorded in. ``idempotent_tools``: tool names safe to run again
    (their unknown effect is reconciled ``resend``, recorded); a tool's own
    ``metadata={"intentlog": {"idempotent": True}}`` says the same, ``{"intentlog": False}``
    runs it outside any unit (not recorded). ``dedup``: the model provider's idempotency
    window (:class:`intentlog.ProviderDedup`), relied on for model requests whose client sends
    the unit's key (:func:`idempotency_key_hook`). ``name``: the agent's name in persisted
    unit names (default: the agent's ``name``); ``models`` and ``event_stream_handler`` as
    for every pydantic-ai durability capability.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name=ENGINE_NAME,
        durable_unit_noun="effect",
        durable_container_noun="task",
        codec=JSON_CODEC,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-in-durable-unit", "dynamic": "enter-never"},
        tool_call_result_upgrade_lenient=False,
        journal_discovery=True,
        sequential_tools_in_durable_context=False,
        tool_config_key=METADATA_KEY,
    )

    def __init__(
        self,
        ledger_or_root: Ledger | str | os.PathLike[str],
        *,
        task: str,
        idempotent_tools: Mapping[str, bool] | frozenset[str] | set[str] | tuple[str, ...] | list[str] = (),
        dedup: Any = None,
        name: str | None = None,
        models: Mapping[str, Any] | None = None,
        event_stream_handler: Any = None,
    ) -> None:
        from .dedup import ProviderDedup
        from .eventlog.format import check_task_id

        check_task_id(task)
        if not isinstance(ledger_or_root, (Ledger, str, os.PathLike)):
            raise UsageError(
                "IntentlogDurability needs a Ledger, a folder or an s3:// location, "
                f"not {type(ledger_or_root).__name__}"
            )
        if dedup is not None and not isinstance(dedup, ProviderDedup):
            raise UsageError(f"IntentlogDurability(dedup=...) must be an intentlog.ProviderDedup, not {dedup!r}")
        if isinstance(idempotent_tools, str):
            raise UsageError("IntentlogDurability(idempotent_tools=...) takes tool names, not one string")
        tools = (
            {n for n, yes in idempotent_tools.items() if yes}
            if isinstance(idempotent_tools, Mapping)
            else set(idempotent_tools)
        )
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        self._shared = _Shared(ledger_or_root, task)
        self._idempotent_tools = frozenset(tools)
        self._dedup = dedup

    # -- the durable container: one agent run ----------------------------------------

    @property
    def in_durable_context(self) -> bool:
        return _RUN.get() is not None

    @property
    def task_id(self) -> str:
        """The intentlog task every unit is recorded in."""
        return self._shared.task_id

    def close(self) -> None:
        """Close the task (its writer lock or lease is released); a ledger this capability opened is closed too.

        A ledger passed in open stays open (its owner closes it). Every bound copy shares this
        state; a later unit opens the task again.
        """
        self._shared.close()

    def get_default_run_id(self) -> str | None:
        """``<task>.<n>`` for the n-th run this capability starts in the process: a re-run maps to its record."""
        return f"{self._shared.task_id}.{next(self._shared.runs)}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id)

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: Any) -> Any:
        token = _RUN.set(ctx.run_id or f"{self._shared.task_id}.0")
        try:
            return await super().wrap_run(ctx, handler=handler)
        finally:
            _RUN.reset(token)

    def get_durable_operation_backend(self) -> _Backend:
        agent = self.agent
        default_model = self.default_model_id
        return _Backend(
            self,
            JournalOperationNamer(
                self.name or (agent.name if agent else "") or "agent", default_model_id=default_model or "default"
            ),
        )

    def _resolve_tool_config(
        self, operation_id: DurableOperationId, tool: object | None, tool_name: str
    ) -> UnitConfig | Literal[False]:
        config: UnitConfig = {"idempotent": tool_name in self._idempotent_tools}
        if isinstance(tool, ToolsetTool) and tool.tool_def.metadata is not None:
            own = tool.tool_def.metadata.get(METADATA_KEY)
            if own is False:
                return False
            if own is not None:
                if not isinstance(own, dict) or set(own) - {"idempotent"}:
                    raise UsageError(
                        f"tool {tool_name!r}: metadata[{METADATA_KEY!r}] must be False or {{'idempotent': bool}}, "
                        f"not {own!r}"
                    )
                config.update(own)
        return config


def tool_return_evidence(value: Any) -> bytes:
    """The bytes a tool unit records for a tool that returned ``value``: reconciliation evidence for an operator.

    After a crash inside a tool that did act (the email went out), the operator who knows
    what it returned saves these bytes to a file and runs ``intentlog reconcile TASK CALL
    --served --evidence FILE``; the next run replays that return without calling the tool.
    ``value`` must be what the tool returns, as JSON; anything else raises ``UsageError``.
    """
    from pydantic_ai.durable_exec import CallToolResult

    try:
        checked = JSON_CODEC.load(CallToolResult, {"kind": "tool_return", "result": value})
        return _encode(JSON_CODEC.dump(CallToolResult, checked))
    except (ValueError, TypeError) as exc:
        raise UsageError(f"tool_return_evidence: {value!r} is not a JSON tool return: {exc}") from exc
