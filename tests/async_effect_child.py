"""Child process for the awaitable protocol's crash test: records 50 intents, then runs them ten at a time.

``python async_effect_child.py LEDGER RECEIPTS``: prepares ``k0`` .. ``k49`` (intents
only, synced), then gathers ``call.arun`` over all of them, at most ten in flight, against
the receipt-logging provider (20 ms latency). Prints ``ready`` once the intents are
durable. The parent SIGKILLs it in the middle.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from async_provider import AsyncProvider

import intentlog

N = 50


async def run(ledger: str, receipts: str) -> None:
    task = intentlog.open(ledger).task("fanout")
    provider = AsyncProvider(Path(receipts), latency=0.02)
    with task.batch():
        calls = [task.prepare(f"k{i}", {"key": f"k{i}"}) for i in range(N)]
    print("ready", flush=True)
    gate = asyncio.Semaphore(10)

    async def one(call: intentlog.Call) -> object:
        async with gate:
            return await call.arun(provider.send, interpret=json.loads)

    await asyncio.gather(*(one(c) for c in calls))
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], sys.argv[2]))
