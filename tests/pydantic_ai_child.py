"""Child process for the pydantic-ai kill tests: one agent run with one tool that "sends an email".

``python pydantic_ai_child.py LEDGER BASE_URL SIDE_EFFECTS MARKER STOP_AT [--stream] [--idempotent]``

The agent (real pydantic-ai, its OpenAI provider pointed at ``BASE_URL``, the SDK's own
retries off) is made durable with ``IntentlogDurability(LEDGER, task="mail")``. Its tool
appends ``{"to", "subject"}`` to ``SIDE_EFFECTS`` (fsynced): the side effect counted from
outside the ledger.

``--dedup`` sends each model unit's key as ``Idempotency-Key`` and declares a one-hour
provider window. ``STOP_AT`` chooses where the child stops on its own, so the parent can SIGKILL it there;
it first writes ``MARKER`` (the parent waits for that file, never for a time):

- ``model-send-<n>``: the n-th model HTTP request of this process, before it leaves (the
  unit's ``attempt.started`` is durable, the provider has seen nothing);
- ``tool-entered``: inside the tool, before its side effect;
- ``tool-acted``: inside the tool, after its side effect is durable, before it returns;
- ``none``: runs to the end.

Prints one JSON line: ``{"outcome": "done", "output": ...}``, ``{"outcome": "unknown",
"call", "key", "commands"}`` for :class:`intentlog.EffectUnknown`, or ``{"outcome": "error",
"type", "message"}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import httpx
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai_provider import append_line

import intentlog
from intentlog.pydantic_ai import IntentlogDurability, idempotency_key_hook

API_KEY = "sk-test-0123456789abcdef"


async def _stop_here(marker: str) -> None:
    Path(marker).write_text("here")
    await asyncio.Event().wait()  # until the parent's SIGKILL


def build(
    ledger: str, base_url: str, side_effects: str, marker: str, stop_at: str, idempotent: bool, dedup: bool
) -> Agent[Any, str]:
    sends = 0

    async def on_request(request: httpx.Request) -> None:
        nonlocal sends
        sends += 1
        if stop_at == f"model-send-{sends}":
            await _stop_here(marker)

    hooks: list[Any] = [on_request]
    if dedup:
        hooks.insert(0, idempotency_key_hook("Idempotency-Key"))
    http = httpx.AsyncClient(event_hooks={"request": hooks})
    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY, http_client=http, max_retries=0)
    model = OpenAIChatModel("gpt-fake", provider=OpenAIProvider(openai_client=client))
    # on an object store the killed run's lease is taken over at once (one machine, the holder is dead)
    root: Any = intentlog.open(ledger, take_over_after=0) if ledger.startswith("s3://") else ledger
    durability = IntentlogDurability(
        root,
        task="mail",
        idempotent_tools=["send_email"] if idempotent else (),
        dedup=intentlog.ProviderDedup(window=3600, header="Idempotency-Key") if dedup else None,
    )
    agent: Agent[Any, str] = Agent(model, name="mailer", capabilities=[durability])

    @agent.tool_plain
    async def send_email(to: str, subject: str) -> str:
        """Send an email."""
        if stop_at == "tool-entered":
            await _stop_here(marker)
        append_line(side_effects, {"to": to, "subject": subject})
        if stop_at == "tool-acted":
            await _stop_here(marker)
        return f"sent to {to}"

    return agent


async def main(argv: list[str]) -> None:
    ledger, base_url, side_effects, marker, stop_at = argv[:5]
    agent = build(ledger, base_url, side_effects, marker, stop_at, "--idempotent" in argv, "--dedup" in argv)
    try:
        if "--stream" in argv:
            async with agent.run_stream("mail ana the minutes") as result:
                output = await result.get_output()
        else:
            output = (await agent.run("mail ana the minutes")).output
    except intentlog.EffectUnknown as exc:
        print(json.dumps({"outcome": "unknown", "call": exc.call_id, "key": exc.key, "commands": list(exc.commands)}))
        return
    except Exception as exc:
        print(json.dumps({"outcome": "error", "type": type(exc).__name__, "message": str(exc)}))
        return
    print(json.dumps({"outcome": "done", "output": output}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
