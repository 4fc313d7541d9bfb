"""intentlog.pydantic_ai in one process: real pydantic-ai agents (FunctionModel, TestModel), each unit an effect.

A "re-run" here is a new agent with a new capability over the same ledger, as a new process
would build them; the kill tests (test_pydantic_ai_kill.py) do it with real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import pydantic_ai  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip(
        "pydantic_ai.durable_exec",
        reason="SKIPPED LOUDLY: the pydantic-ai tests need pip install 'intentlog[pydantic-ai]'",
    )

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.capabilities import AbstractCapability, durable_operation
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel

import intentlog
from intentlog.pydantic_ai import IntentlogDurability, current_unit_key

Model = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


def _has_tool_return(messages: list[ModelMessage]) -> bool:
    return any(isinstance(p, ToolReturnPart) for m in messages for p in getattr(m, "parts", []))


class Mailer:
    """An agent with one tool that "sends an email", counting model calls and emails from outside the ledger."""

    def __init__(self, root: Path, *, task: str = "mail", model: Model | None = None, **options: Any) -> None:
        self.model_calls = 0
        self.emails: list[dict[str, Any]] = []
        self.durability: IntentlogDurability[None] = IntentlogDurability(root, task=task, **options)
        self.agent: Agent[None, str] = Agent(
            FunctionModel(self._count(model or self.default_model)), name="mailer", capabilities=[self.durability]
        )

        @self.agent.tool_plain
        def send_email(to: str, subject: str) -> str:
            self.emails.append({"to": to, "subject": subject})
            return f"sent to {to}"

    def _count(self, model: Model) -> Model:
        def counted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.model_calls += 1
            return model(messages, info)

        return counted

    @staticmethod
    def default_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not _has_tool_return(messages):
            return ModelResponse(
                parts=[ToolCallPart("send_email", {"to": "ana@example.com", "subject": "minutes"}, tool_call_id="c1")]
            )
        return ModelResponse(parts=[TextPart("mailed ana")])


def _keys(root: Path, task: str = "mail") -> list[str]:
    events = intentlog.open(root, create=False).task(task).events()
    return [e.data["key"] for e in events if e.kind == "call.requested"]


def _bytes_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- the record and the replay ------------------------------------------------------


def test_every_unit_is_an_effect_and_a_rerun_replays_without_model_or_tool(tmp_path: Path) -> None:
    """A completed run, run again by a new agent over the same ledger, returns the same output and calls
    neither the model nor the tool: every unit came from the record."""
    first = Mailer(tmp_path)
    assert first.agent.run_sync("mail ana the minutes").output == "mailed ana"
    assert (first.model_calls, len(first.emails)) == (2, 1)
    again = Mailer(tmp_path)
    assert again.agent.run_sync("mail ana the minutes").output == "mailed ana"
    assert (again.model_calls, again.emails) == (0, [])
    state = intentlog.open(tmp_path, create=False).task("mail").work_state()
    assert [c.stage for c in state.calls.values()] == ["completed"] * 3


def test_persisted_unit_names_are_pinned(tmp_path: Path) -> None:
    """The keys a run records (run id, persisted unit name, tool call id, occurrence) never change: a record
    written today must map to the same units after an upgrade, or every in-flight run would be stranded."""
    Mailer(tmp_path).agent.run_sync("mail ana the minutes")
    assert _keys(tmp_path) == [
        "mail.1/mailer__model.request#0",
        "mail.1/mailer__function_toolset__<agent>.call_tool:send_email/c1#0",
        "mail.1/mailer__model.request#1",
    ]


def test_streamed_structured_and_capability_unit_names_are_pinned(tmp_path: Path) -> None:
    """Streamed model requests, a structured output's tool and a capability's durable operation: pinned too."""

    class Audit(AbstractCapability[Any]):
        id = "audit"

        @durable_operation(name="record")
        async def record(self, ctx: RunContext[Any], message: str) -> bool:
            return bool(message)

        async def after_model_request(self, ctx: RunContext[Any], *, request_context: Any, response: Any) -> Any:
            await self.record(ctx, "a model answered")
            return response

    class Verdict(BaseModel):
        answer: str

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        yield {0: DeltaToolCall(name=info.output_tools[0].name, json_args='{"answer": "yes"}', tool_call_id="o1")}

    durability: IntentlogDurability[None] = IntentlogDurability(tmp_path, task="pins")
    agent = Agent(
        FunctionModel(stream_function=stream), name="judge", output_type=Verdict, capabilities=[Audit(), durability]
    )

    async def go() -> Verdict:
        async with agent.run_stream("is it?") as result:
            return await result.get_output()

    import asyncio

    assert asyncio.run(go()) == Verdict(answer="yes")
    assert _keys(tmp_path, "pins") == [
        "pins.1/judge__model.request_stream#0",
        "pins.1/judge__capability__audit.record#0",
    ]


def test_the_nth_run_of_a_process_maps_to_the_nth_run_of_the_record(tmp_path: Path) -> None:
    """Two runs in one process are runs .1 and .2 of the task; a new process replays each from its own units."""
    first = Mailer(tmp_path)
    first.agent.run_sync("mail ana the minutes")
    first.agent.run_sync("mail ana the agenda")
    again = Mailer(tmp_path)
    again.agent.run_sync("mail ana the minutes")
    again.agent.run_sync("mail ana the agenda")
    assert again.model_calls == 0
    assert {k.split("/")[0] for k in _keys(tmp_path)} == {"mail.1", "mail.2"}


def test_a_changed_prompt_under_a_recorded_run_is_refused_as_drift(tmp_path: Path) -> None:
    """The same run asked something else: the first model unit's request differs from its record, so it is
    refused (DRIFT) and nothing is sent or appended."""
    Mailer(tmp_path).agent.run_sync("mail ana the minutes")
    before = _bytes_of(tmp_path)
    again = Mailer(tmp_path)
    with pytest.raises(intentlog.ResumeRefused, match="DRIFT"):
        again.agent.run_sync("mail bo the minutes")
    assert again.model_calls == 0
    assert _bytes_of(tmp_path) == before


def test_an_explicit_run_id_names_the_run(tmp_path: Path) -> None:
    """run_id= given by the caller is the run's name in the keys: a re-run with it replays, whatever the order."""
    Mailer(tmp_path).agent.run_sync("mail ana the minutes", run_id="weekly-7")
    again = Mailer(tmp_path)
    again.agent.run_sync("mail ana the minutes", run_id="weekly-7")
    assert again.model_calls == 0
    assert all(k.startswith("weekly-7/") for k in _keys(tmp_path))


# -- pydantic-ai's behaviour is kept -------------------------------------------------


def test_model_retry_from_a_tool_behaves_as_without_the_capability(tmp_path: Path) -> None:
    """A tool that raises ModelRetry once: the model is asked again and the run ends as without durability; the
    retry is a recorded value of the tool's unit, so a re-run replays it without calling the tool."""
    tries: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answered = any(isinstance(p, ToolReturnPart) and p.content == "x=1" for m in messages for p in m.parts)
        if not answered:
            n = len(messages)
            return ModelResponse(parts=[ToolCallPart("lookup", {"q": "x"}, tool_call_id=f"c{n}")])
        return ModelResponse(parts=[TextPart("found")])

    def build() -> Agent[None, str]:
        agent = Agent(FunctionModel(model), name="finder", capabilities=[IntentlogDurability(tmp_path, task="retry")])

        @agent.tool_plain
        def lookup(q: str) -> str:
            tries.append(1)
            if len(tries) == 1:
                raise ModelRetry("try again")
            return "x=1"

        return agent

    plain = Agent(FunctionModel(model), name="finder")
    plain_tries: list[int] = []

    @plain.tool_plain
    def lookup(q: str) -> str:
        plain_tries.append(1)
        if len(plain_tries) == 1:
            raise ModelRetry("try again")
        return "x=1"

    expected = plain.run_sync("find x")
    got = build().run_sync("find x")
    assert got.output == expected.output == "found"
    assert len(tries) == len(plain_tries) == 2
    assert [type(m).__name__ for m in got.all_messages()] == [type(m).__name__ for m in expected.all_messages()]
    assert build().run_sync("find x").output == "found"
    assert len(tries) == 2  # replayed: the tool was not called again


def test_structured_output_replays_as_the_same_object(tmp_path: Path) -> None:
    """output_type= a pydantic model (TestModel, through the output tool): the re-run returns an equal object."""

    class Invoice(BaseModel):
        total: int
        currency: str

    def build() -> Agent[None, Invoice]:
        return Agent(
            TestModel(), name="biller", output_type=Invoice, capabilities=[IntentlogDurability(tmp_path, task="bill")]
        )

    plain = Agent(TestModel(), name="biller", output_type=Invoice).run_sync("bill it").output
    first = build().run_sync("bill it").output
    assert isinstance(first, Invoice) and first == plain
    assert build().run_sync("bill it").output == first


def test_a_refused_model_request_raises_pydantic_ais_error_and_a_rerun_starts_it_afresh(tmp_path: Path) -> None:
    """The provider answered 503: ModelHTTPError reaches the caller as without the capability; the record says
    refused (nothing served), so the next run starts that unit again under a fresh key and completes."""
    answers = [503]

    def flaky(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if answers:
            raise ModelHTTPError(answers.pop(), "fake-model", body={"error": "overloaded"})
        return Mailer.default_model(messages, info)

    with pytest.raises(ModelHTTPError) as caught:
        Mailer(tmp_path, model=flaky).agent.run_sync("mail ana the minutes")
    assert caught.value.status_code == 503
    state = intentlog.open(tmp_path, create=False).task("mail").work_state()
    assert [c.stage for c in state.calls.values()] == ["failed"]
    events = list(intentlog.open(tmp_path, create=False).task("mail").events())
    assert [e.data["error"] for e in events if e.kind == "attempt.observed"] == ["HTTP 503 fake-model"]
    again = Mailer(tmp_path, model=flaky)
    assert again.agent.run_sync("mail ana the minutes").output == "mailed ana"
    assert _keys(tmp_path)[:2] == ["mail.1/mailer__model.request#0", "mail.1/mailer__model.request#0~1"]


def test_a_tool_that_raises_keeps_its_exception_and_its_effect_is_unknown(tmp_path: Path) -> None:
    """A tool raising an ordinary exception: the caller gets that exception (with a note naming the reconcile
    command), because the tool may have acted; the next run refuses the unit with EffectUnknown."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("archive", {"box": "inbox"}, tool_call_id="a1")])

    mailer = Mailer(tmp_path, model=model)

    @mailer.agent.tool_plain
    def archive(box: str) -> str:
        raise OSError("disk full after writing half the archive")

    with pytest.raises(OSError, match="disk full") as caught:
        mailer.agent.run_sync("archive the inbox")
    assert any("reconcile mail call-2" in note for note in getattr(caught.value, "__notes__", []))
    again = Mailer(tmp_path, model=model)

    @again.agent.tool_plain
    def archive(box: str) -> str:  # noqa: F811
        raise AssertionError("never run again on a guess")

    with pytest.raises(intentlog.EffectUnknown) as unknown:
        again.agent.run_sync("archive the inbox")
    assert unknown.value.call_id == "call-2"
    assert any("--not-served" in c for c in unknown.value.commands)


def test_deferred_and_approval_outcomes_are_values_of_the_unit(tmp_path: Path) -> None:
    """A tool needing approval: the run ends with DeferredToolRequests, as without durability, and a re-run
    ends the same way from the record."""
    from pydantic_ai import ApprovalRequired, DeferredToolRequests

    def build() -> tuple[Agent[None, str | DeferredToolRequests], list[str]]:
        called: list[str] = []
        agent: Agent[None, str | DeferredToolRequests] = Agent(
            FunctionModel(Mailer.default_model),
            name="mailer",
            output_type=[str, DeferredToolRequests],
            capabilities=[IntentlogDurability(tmp_path, task="approve")],
        )

        @agent.tool
        def send_email(ctx: RunContext[None], to: str, subject: str) -> str:
            called.append(to)
            if not ctx.tool_call_approved:
                raise ApprovalRequired
            return "sent"

        return agent, called

    agent, called = build()
    out = agent.run_sync("mail ana").output
    assert isinstance(out, DeferredToolRequests) and [c.tool_name for c in out.approvals] == ["send_email"]
    assert called == ["ana@example.com"]
    agent, called_again = build()
    again = agent.run_sync("mail ana").output
    assert isinstance(again, DeferredToolRequests) and called_again == []


# -- redaction, configuration, bad input ------------------------------------------------


def test_credentials_in_settings_headers_and_tool_args_never_reach_the_record(tmp_path: Path) -> None:
    """An Authorization header in model settings never reaches the record; an api_key tool argument is redacted
    from the tool unit's intent and from every later model request, and the tool still receives the real value.
    (The model's own answer that wrote the argument is stored as served, as every response is.)"""
    seen: list[str] = []
    secret_header, secret_arg = "Bearer sk-live-0123456789abcdef", "sk-tool-9876543210fedcba"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not _has_tool_return(messages):
            return ModelResponse(
                parts=[ToolCallPart("charge", {"amount": 5, "api_key": secret_arg}, tool_call_id="p1")]
            )
        return ModelResponse(parts=[TextPart("charged")])

    agent = Agent(
        FunctionModel(model),
        name="payer",
        capabilities=[IntentlogDurability(tmp_path, task="pay")],
        model_settings={"extra_headers": {"Authorization": secret_header}},
    )

    @agent.tool_plain
    def charge(amount: int, api_key: str) -> str:
        seen.append(api_key)
        return "ok"

    assert agent.run_sync("charge 5").output == "charged"
    assert seen == [secret_arg]
    everything = b"".join(_bytes_of(tmp_path).values())
    assert b"sk-live-0123456789abcdef" not in everything  # the header: in no request, hash or response
    ledger = intentlog.open(tmp_path, create=False)
    manifests = [e.data["request"]["digest"] for e in ledger.task("pay").events() if e.kind == "call.manifest"]
    requests = [json.loads(ledger.artifacts.get(digest)) for digest in manifests]
    tool_unit, second_model_unit = requests[1], requests[2]
    assert tool_unit is not None and tool_unit["tool_args"]["api_key"] == "[REDACTED]"
    assert second_model_unit is not None and secret_arg not in json.dumps(second_model_unit)


def test_unit_key_is_visible_inside_the_unit_only(tmp_path: Path) -> None:
    """current_unit_key() names the running unit (what idempotency_key_hook sends); None outside any unit."""
    keys: list[str | None] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not _has_tool_return(messages):
            return ModelResponse(parts=[ToolCallPart("peek", {}, tool_call_id="k1")])
        return ModelResponse(parts=[TextPart("done")])

    mailer = Mailer(tmp_path, model=model)

    @mailer.agent.tool_plain
    def peek() -> str:
        keys.append(current_unit_key())
        return "ok"

    mailer.agent.run_sync("peek")
    assert keys == ["mail.1/mailer__function_toolset__<agent>.call_tool:peek/k1#0"]
    assert current_unit_key() is None


def test_a_tool_marked_out_of_durability_runs_unrecorded(tmp_path: Path) -> None:
    """metadata={"intentlog": False}: the tool runs outside any unit (pydantic-ai's per-tool opt-out)."""
    agent = Agent(
        FunctionModel(Mailer.default_model), name="mailer", capabilities=[IntentlogDurability(tmp_path, task="mail")]
    )

    @agent.tool_plain(metadata={"intentlog": False})
    def send_email(to: str, subject: str) -> str:
        return "sent"

    agent.run_sync("mail ana")
    assert not any("call_tool" in k for k in _keys(tmp_path))


def test_bad_configuration_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """A bad task id, a wrong ledger, a bare string of tool names, a dedup that is not a ProviderDedup: the
    library's errors, and the folder is never created."""
    root = tmp_path / "never"
    with pytest.raises(intentlog.InvalidTaskId):
        IntentlogDurability(root, task="../escape")
    with pytest.raises(intentlog.UsageError, match="Ledger, a folder"):
        IntentlogDurability(42, task="t")  # type: ignore[arg-type]
    with pytest.raises(intentlog.UsageError, match="tool names"):
        IntentlogDurability(root, task="t", idempotent_tools="send_email")
    with pytest.raises(intentlog.UsageError, match="ProviderDedup"):
        IntentlogDurability(root, task="t", dedup=3600)
    assert not root.exists()
    agent = Agent(
        FunctionModel(Mailer.default_model), name="mailer", capabilities=[IntentlogDurability(root, task="t")]
    )
    sent: list[str] = []

    @agent.tool_plain(metadata={"intentlog": {"idempotnet": True}})
    def send_email(to: str, subject: str) -> str:
        sent.append(to)
        return "sent"

    with pytest.raises(intentlog.UsageError, match="idempotent"):
        agent.run_sync("mail ana")
    assert sent == [] and not any("call_tool" in k for k in _keys(root, "t"))


# -- the core never imports it; a missing extra says what to install ----------------------

_BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "pydantic_ai" or name.startswith("pydantic_ai."):
            raise ImportError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, Block())
try:
    import intentlog.pydantic_ai
except ImportError as exc:
    print(exc)
"""

_CORE = """
import importlib, pkgutil, sys, json
import intentlog
for m in pkgutil.walk_packages(intentlog.__path__, "intentlog."):
    if m.name != "intentlog.pydantic_ai":
        try:
            importlib.import_module(m.name)
        except ImportError:
            pass
print(json.dumps(sorted(n for n in sys.modules if n.startswith(("pydantic_ai", "intentlog.pydantic_ai")))))
"""


def test_without_the_extra_the_import_names_what_to_install() -> None:
    """With pydantic-ai absent, importing the integration raises ImportError naming the extra."""
    out = subprocess.run([sys.executable, "-c", _BLOCK], capture_output=True, text=True, check=True, timeout=120)
    assert "pip install 'intentlog[pydantic-ai]'" in out.stdout


def test_no_other_module_imports_pydantic_ai() -> None:
    """Every other module of the package imported: neither pydantic-ai nor the integration is loaded."""
    out = subprocess.run([sys.executable, "-c", _CORE], capture_output=True, text=True, check=True, timeout=300)
    assert json.loads(out.stdout) == []


def test_declaring_a_tool_idempotent_later_still_replays_the_recorded_run(tmp_path: Path) -> None:
    """The declaration is the call's recorded name, not part of its request: a re-run that now declares the tool
    idempotent replays the completed run (no DRIFT), and the record keeps what was declared when it ran."""
    Mailer(tmp_path).agent.run_sync("mail ana the minutes")
    again = Mailer(tmp_path, idempotent_tools=["send_email"])
    assert again.agent.run_sync("mail ana the minutes").output == "mailed ana"
    assert (again.model_calls, again.emails) == (0, [])
    names = [
        e.data["name"]
        for e in intentlog.open(tmp_path, create=False).task("mail").events()
        if e.kind == "call.requested"
    ]
    assert names == [
        "mailer__model.request",
        "mailer__function_toolset__<agent>.call_tool:send_email",
        "mailer__model.request",
    ]


def test_an_event_stream_handler_runs_in_units_and_is_not_called_again_on_replay(tmp_path: Path) -> None:
    """event_stream_handler=: the tool-call events reach it inside recorded units, once; a re-run replays them."""
    seen: list[str] = []

    async def handler(ctx: RunContext[Any], events: Any) -> None:
        async for event in events:
            seen.append(type(event).__name__)

    def build() -> Agent[None, str]:
        agent = Agent(
            TestModel(custom_output_text="mailed ana"),  # streams (a handler asks for streamed requests)
            name="mailer",
            capabilities=[IntentlogDurability(tmp_path, task="events", event_stream_handler=handler)],
        )

        @agent.tool_plain
        def send_email(to: str, subject: str) -> str:
            return "sent"

        return agent

    assert build().run_sync("mail ana").output == "mailed ana"
    first = list(seen)
    assert "FunctionToolCallEvent" in first and "FunctionToolResultEvent" in first
    assert "events.1/mailer__event_stream_handler#0" in _keys(tmp_path, "events")
    assert build().run_sync("mail ana").output == "mailed ana"
    assert seen == first


def test_a_streamed_run_streams_what_it_would_without_the_capability(tmp_path: Path) -> None:
    """run_stream with stream_text: the same text deltas as the plain agent, on the first run and on the replay."""
    import asyncio

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        for word in ["one ", "two ", "three"]:
            yield word

    async def deltas(agent: Agent[None, str]) -> list[str]:
        async with agent.run_stream("count") as result:
            return [chunk async for chunk in result.stream_text(delta=True)]

    def build(*capabilities: Any) -> Agent[None, str]:
        return Agent(FunctionModel(stream_function=stream), name="counter", capabilities=list(capabilities))

    plain = asyncio.run(deltas(build()))
    assert asyncio.run(deltas(build(IntentlogDurability(tmp_path, task="count")))) == plain
    assert asyncio.run(deltas(build(IntentlogDurability(tmp_path, task="count")))) == plain
    assert _keys(tmp_path, "count") == ["count.1/counter__model.request_stream#0"]


def test_status_export_bundle_and_report_show_the_units_by_name(tmp_path: Path) -> None:
    """A run whose tool unit is left unknown: status names the unit's key and offers the reconcile command; the
    exported bundle checks out with its own verifier; the report names the tool unit."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("archive", {"box": "inbox"}, tool_call_id="a1")])

    mailer = Mailer(tmp_path / "evidence", model=model)

    @mailer.agent.tool_plain
    def archive(box: str) -> str:
        raise OSError("the archive may be half written")

    with pytest.raises(OSError):
        mailer.agent.run_sync("archive the inbox")
    mailer.durability.close()  # the writer lock released, as at the end of a process

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "intentlog.cli", "--root", str(tmp_path / "evidence"), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode in (0, 1), done.stderr
        return done.stdout

    status = cli("status", "mail")
    assert "call_tool:archive/a1#0" in status and "reconcile mail call-2 --not-served" in status
    cli("export", "mail", "--out", str(tmp_path / "bundle"))
    checked = subprocess.run(
        [sys.executable, str(tmp_path / "bundle" / "verify_bundle.py"), str(tmp_path / "bundle")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    cli("report", "mail", "--out", str(tmp_path / "report.html"))
    assert "call_tool:archive" in (tmp_path / "report.html").read_text()


def test_every_persisted_unit_name_is_pinned() -> None:
    """The name of every kind of unit the builder can route, as this engine persists it (pydantic-ai's journal
    convention): a change here strands every recorded run, so it must be a reviewed migration, never a rename."""
    from pydantic_ai.durable_exec import (
        CapabilityOperationId,
        EventStreamHandlerId,
        JournalOperationNamer,
        ModelCancelSuspendedResponseId,
        ModelCompactMessagesId,
        ModelRequestId,
        ToolsetCallToolId,
        ToolsetGetInstructionsId,
        ToolsetGetToolsId,
        ToolsetValidateToolArgumentsId,
    )

    namer = JournalOperationNamer("mailer", default_model_id="default")
    ids: dict[str, Any] = {
        "model": ModelRequestId(None, model_name="m"),
        "model other": ModelRequestId("gpt-x", model_name="m"),
        "stream": ModelRequestId(None, streaming=True, model_name="m"),
        "compact": ModelCompactMessagesId(None, model_name="m"),
        "cancel": ModelCancelSuspendedResponseId(None, model_name="m"),
        "events": EventStreamHandlerId(),
        "capability": CapabilityOperationId("audit", operation="record"),
        "function": ToolsetCallToolId("function", toolset_id="<agent>"),
        "validate": ToolsetValidateToolArgumentsId("function", toolset_id="<agent>"),
        "mcp call": ToolsetCallToolId("mcp", toolset_id="files"),
        "mcp tools": ToolsetGetToolsId("mcp", toolset_id="files"),
        "mcp instructions": ToolsetGetInstructionsId("files"),
        "dynamic tools": ToolsetGetToolsId("dynamic", toolset_id="dyn"),
        "dynamic call": ToolsetCallToolId("dynamic", toolset_id="dyn"),
    }
    names = {k: namer.invocation_name(v, label="send_email").operation_name for k, v in ids.items()}
    assert names == {
        "model": "mailer__model.request",
        "model other": "mailer__model.request.gpt-x",
        "stream": "mailer__model.request_stream",
        "compact": "mailer__model.compact_messages",
        "cancel": "mailer__model.cancel_suspended_response",
        "events": "mailer__event_stream_handler",
        "capability": "mailer__capability__audit.record",
        "function": "mailer__function_toolset__<agent>.call_tool:send_email",
        "validate": "mailer__function_toolset__<agent>.validate_args",
        "mcp call": "mailer__mcp_server__files.call_tool",
        "mcp tools": "mailer__mcp_server__files.get_tools",
        "mcp instructions": "mailer__mcp_server__files.get_instructions",
        "dynamic tools": "mailer__dynamic_toolset__dyn.get_tools",
        "dynamic call": "mailer__dynamic_toolset__dyn.call_tool:send_email",
    }
