"""One demo process: produce (and die at a chosen boundary), resume, restart naively, inspect.

Run as ``python -m intentlog.demo.producer MODE CASE_DIR [options]``. Every mode is its
own OS process and refuses outbound network first thing in ``main`` (:mod:`intentlog.demo.netguard`):
only the provider on 127.0.0.1 is reachable. Kills are real ``SIGKILL``s that run no
cleanup. The ledger is ``CASE_DIR/ledger``; the provider is reached over HTTP at
``--url``; each inspection is written to ``CASE_DIR/inspections/``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

import orjson

import intentlog
from intentlog.demo.netguard import install
from intentlog.demo.records import stream_digest, write_json

TASK = "chapter-16"
KEY = "review-p7"
COMPILATION = "context-16"
PATIENT = intentlog.RetryPolicy(max_attempts=3, backoff=600.0, max_backoff=600.0)  # killed during its backoff

#: The inventory the compilation is offered: A (required, size estimated from its payload), B (required), D.
OFFERED = [
    {"id": "A", "content": {"text": "chapter 15 summary"}, "required": True, "lineage": "ch15"},
    {"id": "B", "content": {"text": ""}, "required": True, "size": 0, "lineage": "ch16"},
    {"id": "D", "content": {"text": ""}, "size": 0, "lineage": "notes"},
]


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


def http_sender(url: str, mode: str) -> Any:
    """``send(request) -> bytes`` over HTTP to the provider: the canonical request bytes, its key as a header.

    An error status is the provider's refusal (nothing served): ``ProviderFailure.from_status``.
    """
    import http.client  # only the sending modes pay for it
    from urllib.parse import urlsplit

    parts = urlsplit(url)

    def send(request: dict[str, Any]) -> bytes:
        body = intentlog.canonicalize(request).data
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=300)
        try:
            conn.request(
                "POST",
                parts.path,
                body,
                headers={
                    "Content-Type": "application/json",
                    "Idempotency-Key": str(request["idempotency_key"]),
                    "User-Agent": f"intentlog-demo {mode} pid={os.getpid()}",
                },
            )
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if resp.status >= 400:
            raise intentlog.ProviderFailure.from_status(resp.status, resp.reason, body=data, headers=resp.getheaders())
        return data

    return send


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _print(obj: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode() + "\n")
    sys.stdout.flush()


def _stream(case: Path) -> Path:
    return case / "ledger" / "tasks" / f"{TASK}.jsonl"


def inspect(case: Path, label: str) -> dict[str, Any]:
    """Project the work state (reads only) and record what was projected, with the stream as seen before and after."""
    before = stream_digest(_stream(case))
    ledger = intentlog.open(case / "ledger", create=False)
    state = ledger.task(TASK).work_state().to_json()
    ledger.close()
    after = stream_digest(_stream(case))
    folder = case / "inspections"
    n = len(list(folder.glob("*.json"))) + 1 if folder.exists() else 1
    record = {"label": label, "n": n, "pid": os.getpid(), "before": before, "after": after, "state": state}
    write_json(folder / f"{n:02d}-{label}.json", record)
    return record


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


def refused(exc: intentlog.ResumeRefused) -> dict[str, Any]:
    return {
        "outcome": "refused",
        "error": type(exc).__name__,
        "reason": exc.reason,
        "call": exc.call_id,
        "next_operation": exc.next_operation,
    }


def reproject(root: Path, cases: list[str]) -> dict[str, Any]:
    """A fresh process reopens each case's ledger and projects it again, appending nothing."""
    out: dict[str, Any] = {"pid": os.getpid(), "ledgers": {}}
    for name in cases:
        case = root / name
        before = stream_digest(_stream(case))
        ledger = intentlog.open(case / "ledger", create=False)
        state = ledger.task(TASK).work_state().to_json()
        ledger.close()
        out["ledgers"][name] = {"before": before, "after": stream_digest(_stream(case)), "state": state}
    write_json(root / "reprojection.json", out)
    return {"outcome": "reprojected", "ledgers": len(cases)}


def netcheck() -> dict[str, Any]:
    """Try what the guard must refuse: a connect to a non-loopback address and a name lookup."""
    import socket

    results: dict[str, str] = {}
    for what, attempt in (
        ("connect 192.0.2.1:9", lambda: socket.create_connection(("192.0.2.1", 9), timeout=2).close()),
        ("lookup example.com", lambda: socket.getaddrinfo("example.com", 443)),
    ):
        try:
            attempt()
            results[what] = "allowed"
        except PermissionError as exc:
            results[what] = f"refused: {exc}"
        except OSError as exc:
            results[what] = f"failed outside the guard: {exc}"
    return {"outcome": "netcheck", "results": results}


def run(a: argparse.Namespace) -> int:
    case = Path(a.case)
    if a.mode == "netcheck":
        _print(netcheck())
        return 0
    if a.mode == "inspect":
        rec = inspect(case, a.label)
        _print({"outcome": "inspected", "n": rec["n"], "events": rec["after"]["events"]})
        return 0
    if a.mode == "reproject":
        _print(reproject(case, a.cases))
        return 0
    ledger = intentlog.open(case / "ledger")
    task = ledger.task(TASK)
    if a.mode == "compile":
        _print(compile_step(task, kill=a.kill == "mid-compilation", missing=a.kill == "missing-input"))
        return 0
    request = build_request(a.model)
    send = http_sender(a.url, a.mode)
    if a.kill == "after-manifest":
        task.prepare(KEY, request)
        _die()

    def interpret(raw: bytes) -> dict[str, Any]:
        if a.kill == "after-observation":
            _die()
        return parse_review(raw)

    interpret.version = "1"  # type: ignore[attr-defined]
    retry = PATIENT if a.kill == "in-backoff" else None
    try:
        result = task.effect(KEY, request, send=send, interpret=interpret, retry=retry)
    except intentlog.EffectUnknown as exc:
        if a.mode != "naive":
            _print(refused(exc))
            return 3
        # what restart loops do with every error: run the step that did not finish again
        task.reconcile(exc.call_id, "resend", note="restart loop: re-run the step that did not finish", by="restart")
        result = task.effect(KEY, request, send=send, interpret=interpret)
        _print({"outcome": "resent", "refused_first": refused(exc), "result": result})
        return 0
    except intentlog.ResumeRefused as exc:
        _print(refused(exc))
        return 3
    _print({"outcome": "completed", "result": result})
    return 0


def main(argv: list[str] | None = None) -> int:
    install()  # first: nothing in this process has opened a socket yet (importing intentlog opens none)
    p = argparse.ArgumentParser(prog="python -m intentlog.demo.producer")
    p.add_argument("mode", choices=["produce", "resume", "naive", "inspect", "compile", "reproject", "netcheck"])
    p.add_argument("case", help="the case folder (for reproject: the experiment folder)")
    p.add_argument("--url", default="", help="the provider's review URL for this case")
    p.add_argument(
        "--kill",
        default="none",
        choices=["none", "after-manifest", "after-observation", "in-backoff", "mid-compilation", "missing-input"],
    )
    p.add_argument("--model", default="reviewer-1")
    p.add_argument("--label", default="inspection")
    p.add_argument("--cases", nargs="*", default=[])
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
