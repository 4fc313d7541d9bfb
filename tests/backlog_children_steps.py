"""Steps for the backlog children tests: a fan-out parent, its children, and a rendezvous between children.

The parent (a payload with ``docs``) spawns one child per doc, joins them and merges their
summaries; a child (a payload with ``doc``) makes one effect through the receipt-logging
provider of :mod:`backlog_steps` (the ground truth) and returns its summary. With
``$CHILDREN_MEET`` (a folder) each child writes ``MEET/<doc>`` and waits for every sibling's
file: they can only all get past it if they run at once. ``$CHILDREN_FAIL`` names a doc
whose child raises. ``$CHILDREN_HOLD`` (a folder): the parent, once it has spawned every
child, writes ``HOLD/spawned`` (its worker's pid) and waits for ``HOLD/go`` before it joins.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from backlog_steps import serve

import intentlog

WAIT = 120.0


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + WAIT
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} never appeared")
        time.sleep(0.01)


def _touch(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.fsync(fd)
    os.close(fd)


def _mark(path: str) -> None:
    """Write this process's pid to ``path`` at once whole (a temp file renamed): a reader sees all of it or none."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(str(os.getpid()))
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def fanout(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    if "docs" in payload:
        for doc in payload["docs"]:
            task.spawn(f"{payload['name']}-{doc}", {"doc": doc, "siblings": payload["docs"]})
        hold = os.environ.get("CHILDREN_HOLD")
        if hold:
            _mark(os.path.join(hold, "spawned"))
            _wait_for(os.path.join(hold, "go"))
        results = task.join()
        return {"merged": [results[k]["summary"] for k in sorted(results)]}
    doc = payload["doc"]
    if os.environ.get("CHILDREN_FAIL") == doc:
        raise RuntimeError(f"no summary for {doc}")
    meet = os.environ.get("CHILDREN_MEET")
    if meet:
        _touch(os.path.join(meet, doc))
        for other in payload["siblings"]:
            _wait_for(os.path.join(meet, other))
    raw = task.effect("summarise", {"pkey": f"sum:{doc}"}, serve)
    return {"summary": json.loads(raw)["served"]}


def waiter(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """Waits for the event ``go`` (suspending in a backlog), then makes one effect with its payload."""
    got = task.wait_for_event("go")
    raw = task.effect("after", {"pkey": f"after:{got['n']}"}, serve)
    return {"served": json.loads(raw)["served"]}


async def afanout(task: intentlog.Task, payload: dict[str, Any]) -> dict[str, Any]:
    """:func:`fanout` as an ``async def`` step (lanes of one worker process), its children making no effect."""
    if "docs" in payload:
        for doc in payload["docs"]:
            task.spawn(f"{payload['name']}-{doc}", {"doc": doc})
        results = task.join()
        return {"merged": [results[k]["summary"] for k in sorted(results)]}
    return {"summary": f"of {payload['doc']}"}
