"""One demo process: produce (and die at a chosen boundary), resume, restart naively, inspect.

Run as ``python -m intentlog.demo.producer MODE LEDGER RECEIPTS [options]``. Every mode
is its own OS process; kills are real ``SIGKILL``s that run no cleanup.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

import orjson

import intentlog
from intentlog.artifacts.inline import ref_bytes
from intentlog.demo.provider import SyntheticProvider

TASK = "chapter-16"
KEY = "review-p7"


def build_request(model: str) -> dict[str, Any]:
    return {
        "idempotency_key": KEY,
        "messages": [
            {"role": "system", "content": "You review one paragraph of chapter 16."},
            {"role": "user", "content": "Paragraph 7: restart is not resume."},
        ],
        "model": model,
        "temperature": 0,
    }


def parse_review(raw: bytes) -> dict[str, Any]:
    review = orjson.loads(raw)
    return {"verdict": review["verdict"], "model": review["model"]}


parse_review.version = "1"  # type: ignore[attr-defined]


#: The inventory the compilation is offered: A (required, size estimated from its payload), B (required), D.
OFFERED = [
    {"id": "A", "content": {"text": "chapter 15 summary"}, "required": True, "lineage": "ch15"},
    {"id": "B", "content": {"text": ""}, "required": True, "size": 0, "lineage": "ch16"},
    {"id": "D", "content": {"text": ""}, "size": 0, "lineage": "notes"},
]
COMPILATION = "context-16"


def compile_step(task: Any, *, kill: bool, missing: bool) -> dict[str, Any]:
    """Compile the paragraph's context; die inside the selection, or require an id never offered."""
    offered = [dict(o) for o in OFFERED]
    required = ["A", "B", "C"] if missing else ["A", "B"]

    def select(items: list[dict[str, Any]]) -> list[str]:
        if kill:
            _die()
        return [str(i["id"]) for i in items]

    try:
        package = task.compile(COMPILATION, offered, required=required, select=select)
    except intentlog.PreparationFailed as exc:
        return {"outcome": "failed", "error": type(exc).__name__}
    return {"outcome": "compiled", "package": getattr(package, "digest", None)}


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _print(obj: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode() + "\n")
    sys.stdout.flush()


def run(mode: str, ledger_path: str, receipts: str, *, kill: str, model: str, hold: float) -> int:
    ledger = intentlog.open(ledger_path)
    task = ledger.task(TASK)
    provider = SyntheticProvider(receipts, hold=hold, label=mode)
    request = build_request(model)
    if mode == "inspect":
        ws = task.work_state()
        c = ws.call_for_key(KEY)
        comp = ws.compilations.get(COMPILATION)
        _print(
            {
                "events": ws.events,
                "stage": c.stage if c else None,
                "next_operation": c.next_operation if c else ws.next_operation,
                "provider_effect": c.provider_effect if c else None,
                "superseded_by": c.superseded_by if c else None,
                "calls": {cid: x.stage for cid, x in ws.calls.items()},
                "task_next_operation": ws.next_operation,
                "compilation": None
                if comp is None
                else {
                    "stage": comp.stage,
                    "next_operation": comp.next_operation,
                    "offered": [
                        {k: o.get(k) for k in ("id", "required", "size", "estimated", "lineage")} for o in comp.offered
                    ],
                    "missing": list(comp.missing),
                    "error": comp.error,
                },
            }
        )
        return 0
    if mode == "compile":
        _print(compile_step(task, kill=kill == "mid-compilation", missing=kill == "missing-input"))
        return 0
    if mode == "naive":
        # what restart loops do: take the recorded request and send it again, never asking the work state
        for ev in task.events():
            if ev.kind == "call.manifest":
                recorded = ref_bytes(ev.data["request"], ledger.artifacts)
                provider.send(orjson.loads(recorded))
                _print({"outcome": "resent"})
                return 0
        return 1
    if kill == "after-manifest":
        task.prepare(KEY, request)
        _die()

    def interpret(raw: bytes) -> dict[str, Any]:
        if kill == "after-observation":
            _die()
        return parse_review(raw)

    interpret.version = "1"  # type: ignore[attr-defined]
    try:
        result = task.effect(KEY, request, send=provider.send, interpret=interpret)
    except intentlog.ResumeRefused as exc:
        _print(
            {
                "outcome": "refused",
                "error": type(exc).__name__,
                "reason": exc.reason,
                "next_operation": exc.next_operation,
            }
        )
        return 3
    _print({"outcome": "completed", "result": result})
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m intentlog.demo.producer")
    p.add_argument("mode", choices=["produce", "resume", "naive", "inspect", "compile"])
    p.add_argument("ledger")
    p.add_argument("receipts")
    p.add_argument(
        "--kill",
        default="none",
        choices=["none", "after-manifest", "provider-holds", "after-observation", "mid-compilation", "missing-input"],
    )
    p.add_argument("--model", default="reviewer-1")
    p.add_argument("--hold", type=float, default=0.0)
    a = p.parse_args(argv)
    return run(a.mode, a.ledger, a.receipts, kill=a.kill, model=a.model, hold=a.hold)


if __name__ == "__main__":
    sys.exit(main())
