"""A producer process for the seed experiment, and small on-disk helpers for the effect tests.

Run as a script (``python tests/effect_child.py LEDGER RECEIPTS [options]``) it opens the
ledger, runs one step of the review task with the synthetic provider and prints one JSON
line saying how it ended. It can stop itself with ``SIGKILL`` -- no cleanup, no
``finally``, no flush -- right after a named event is durable:

``--kill-after call.manifest``
    ``task.prepare(...)`` returns once the intent is synced; the process dies before any
    attempt.
``--kill-after attempt.observed``
    the interpreter kills its own process, so the raw response is durable and nothing
    interpreted it.
``--kill-after context.compilation_requested`` (with ``--mode compile``)
    the ``select`` function kills its own process, after the offered inventory is durable.

"While the provider holds the request" is done by the parent: ``--hold 30`` makes the
provider sleep after writing its receipt, and the parent kills the child once the
receipt log has a line.

Imported by the tests, it offers the helpers below (it is not a test module).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import orjson

SECRET = "sk-seed-secret-0123456789"
TASK = "review-ch16"
KEY = "key-16"
PARAGRAPH = "The step that didn't finish: a process was reviewing a paragraph when it died."

# the offered inventory of the seed's compilations: A (required, size estimated from its
# payload), B (required, an artifact: size 0) and D (optional, size 0)
OFFERED: list[dict[str, Any]] = [
    {"id": "A", "required": True, "content": "paragraph7", "lineage": {"from": "chapter-16.md#p7"}},
    {"id": "B", "required": True, "size": 0, "lineage": {"artifact": "style-guide"}},
    {"id": "D", "required": False, "size": 0, "lineage": None},
]


def request(model: str, key: str = KEY) -> dict[str, Any]:
    """The review request; its ``api_key`` must never reach the record."""
    return {
        "model": model,
        "idempotency_key": key,
        "api_key": SECRET,
        "messages": [{"role": "user", "content": f"Review this paragraph: {PARAGRAPH}"}],
        "temperature": 0,
    }


def review(raw: bytes) -> dict[str, Any]:
    """The interpreter: parse the provider's JSON answer."""
    value = orjson.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("the review is not a JSON object")
    return {"verdict": value["verdict"], "review": value["review"]}


review.version = "1"  # type: ignore[attr-defined]


def die() -> None:
    """SIGKILL this process: nothing after this line runs, nothing is flushed."""
    os.kill(os.getpid(), signal.SIGKILL)


def _killing_review(raw: bytes) -> Any:
    die()
    return review(raw)  # pragma: no cover - never reached


_killing_review.version = "1"  # type: ignore[attr-defined]


# -- helpers for the tests -----------------------------------------------------------


def snapshot(root: str | os.PathLike[str]) -> dict[str, str]:
    """Every evidence file under a ledger with the sha256 of its bytes (lock files and tmp/ excluded)."""
    out: dict[str, str] = {}
    base = Path(root)
    for p in sorted(base.rglob("*")):
        rel = p.relative_to(base).as_posix()
        if p.is_file() and not rel.endswith(".lock") and not rel.startswith("tmp/"):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def disk_events(stream: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The events of a stream file parsed straight from its lines (no intentlog code)."""
    return [orjson.loads(line) for line in Path(stream).read_bytes().splitlines() if line.strip()]


def files_containing(root: str | os.PathLike[str], needle: bytes) -> list[str]:
    """Every file under ``root`` whose bytes contain ``needle``."""
    return [str(p) for p in Path(root).rglob("*") if p.is_file() and needle in p.read_bytes()]


class Killed(BaseException):
    """An in-process stand-in for SIGKILL at an event boundary (not an Exception: nothing catches it)."""


def kill_before(monkeypatch: Any, kind: str, *, attempt: int | None = None, nth: int = 1) -> None:
    """Make the ``nth`` append of ``kind`` (of attempt ``attempt``) die before it is written.

    Everything appended before it stays in the stream, exactly as a ``SIGKILL`` at that
    boundary leaves it (written bytes survive a process's death).
    """
    from intentlog.stream import TaskStream

    real = TaskStream.append
    seen = [0]

    def append(self: TaskStream, k: str, data: dict[str, Any], **kw: Any) -> Any:
        if k == kind and (attempt is None or data.get("attempt") == attempt):
            seen[0] += 1
            if seen[0] == nth:
                raise Killed(f"killed before {kind}")
        return real(self, k, data, **kw)

    monkeypatch.setattr(TaskStream, "append", append)


class SyncCounter:
    """Counts stream fdatasyncs and records the file size each one made durable."""

    def __init__(self, monkeypatch: Any) -> None:
        import intentlog.eventlog.writer as writer

        self._real = writer._fdatasync
        self.sizes: list[int] = []
        monkeypatch.setattr(writer, "_fdatasync", self)

    def __call__(self, fd: int) -> None:
        self._real(fd)
        self.sizes.append(os.fstat(fd).st_size)

    @property
    def count(self) -> int:
        return len(self.sizes)

    def durable(self, stream: str | os.PathLike[str]) -> bool:
        """True when every byte of ``stream`` was covered by the last sync."""
        return bool(self.sizes) and self.sizes[-1] == os.stat(stream).st_size


# -- the producer ------------------------------------------------------------------


def _outcome(**fields: Any) -> None:
    sys.stdout.write(orjson.dumps(fields).decode() + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ledger")
    ap.add_argument("receipts")
    ap.add_argument("--mode", default="effect", choices=["effect", "compile", "inspect", "naive"])
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--key", default=KEY)
    ap.add_argument("--model", default="model-a")
    ap.add_argument("--kill-after", default=None)
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--wait", type=float, default=0.0)
    ap.add_argument("--required", default="")
    ap.add_argument("--offer-extra", default="")
    ap.add_argument("--label", default="")
    args = ap.parse_args(argv)

    import intentlog
    from intentlog.demo.provider import SyntheticProvider

    provider = SyntheticProvider(args.receipts, hold=args.hold, label=args.label)

    if args.mode == "inspect":  # a reader: takes no lock, appends nothing
        ledger = intentlog.open(args.ledger, create=False)
        _outcome(work_state=ledger.task(args.task).work_state().to_json())
        return 0

    if args.mode == "naive":
        # what restart loops do: take the recorded request and send it again, without
        # consulting the work state
        ledger = intentlog.open(args.ledger, create=False)
        ws = ledger.task(args.task).work_state()
        call = ws.call_for_key(args.key)
        if call is None or call.request is None:
            _outcome(error="NoManifest")
            return 1
        recorded = orjson.loads(ledger.artifacts.get(str(call.request["digest"])))
        raw = provider.send(recorded)
        _outcome(result=orjson.loads(raw), resent=call.call_id)
        return 0

    ledger = intentlog.open(args.ledger)
    task = ledger.task(args.task, wait=args.wait)
    try:
        if args.mode == "compile":
            offered = list(OFFERED)
            for extra in filter(None, args.offer_extra.split(",")):
                offered.append({"id": extra, "required": False, "size": 0, "lineage": None})
            required = [r for r in args.required.split(",") if r]

            def select(items: list[dict[str, Any]]) -> list[str]:
                if args.kill_after == "context.compilation_requested":
                    die()
                return [i["id"] for i in items]

            package = task.compile("ctx-16", offered, required=required, select=select)
            _outcome(package=package.digest, selected=list(package.selected))
            return 0

        req = request(args.model, args.key)
        if args.kill_after == "call.manifest":
            task.prepare(args.key, req, name="review paragraph 7")
            die()
        interpret = _killing_review if args.kill_after == "attempt.observed" else review
        result = task.effect(args.key, req, provider.send, interpret=interpret, name="review paragraph 7")
        _outcome(result=result)
        return 0
    except intentlog.IntentlogError as exc:
        _outcome(
            error=type(exc).__name__,
            message=str(exc),
            reason=getattr(exc, "reason", None),
            next_operation=getattr(exc, "next_operation", None),
            call_id=getattr(exc, "call_id", None),
            key=getattr(exc, "key", None),
            missing=getattr(exc, "missing", None),
        )
        return 3
    finally:
        ledger.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
