"""What the checker found: :class:`Problem` and :class:`VerifyReport`, and how they render.

Pure values: nothing here reads the disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, final

from .._internal.digest import DIGEST_PREFIX, is_digest

__all__ = ["CHANGED", "ERROR", "INFO", "SEVERITIES", "VERIFY_VERSION", "Problem", "VerifyReport", "abbr"]

VERIFY_VERSION: Final = "intentlog-verify/1"
ERROR: Final = "error"
CHANGED: Final = "changed"
INFO: Final = "info"
SEVERITIES: Final = (ERROR, CHANGED, INFO)


# -- the report -------------------------------------------------------------------------


def abbr(digest: object) -> str:
    """``blake3:ab12cd34ef56…`` for messages; full digests go in the ``digest`` field."""
    return f"{digest[:19]}…" if isinstance(digest, str) and is_digest(digest) else repr(digest)


@final
@dataclass(frozen=True, slots=True)
class Problem:
    """One thing found wrong (or worth knowing), and where.

    ``severity`` is ``error`` (evidence is damaged or inconsistent), ``changed`` (a
    recorded workspace file no longer matches its capture) or ``info`` (never a failure).
    ``code`` is a short stable slug (see docs/verify.md).
    """

    severity: str
    code: str
    message: str
    task: str | None = None
    seq: int | None = None
    line: int | None = None
    digest: str | None = None
    locator: str | None = None

    def where(self) -> str:
        if self.severity == CHANGED and self.locator is not None:
            return f"workspace file {self.locator}"
        if self.task is not None:
            out = f"tasks/{self.task}.jsonl"
            if self.line is not None:
                out += f" line {self.line}"
            if self.seq is not None:
                out += f" (seq {self.seq})" if self.line is not None else f" seq {self.seq}"
            return out
        if self.locator is not None:
            return self.locator
        if self.digest is not None:
            hexd = self.digest[len(DIGEST_PREFIX) :]
            return f"objects/{hexd[:2]}/{hexd[2:14]}…"
        return "ledger"

    def render(self) -> str:
        return f"{self.severity}: {self.where()}: {self.message} [{self.code}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "code": self.code,
            "task": self.task,
            "seq": self.seq,
            "line": self.line,
            "digest": self.digest,
            "locator": self.locator,
            "message": self.message,
        }


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


@final
@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What :func:`verify_path` found. ``ok``: no ``error`` and no ``changed`` problem.

    ``problems`` lists errors first, then ``changed``, then ``info``; within each, in the
    order found (stream by stream, line by line, then artifacts, workspace files, orphans).
    """

    root: str
    problems: tuple[Problem, ...]
    tasks: int
    events: int
    artifacts: int  # distinct artifacts whose bytes were checked (objects and inline)
    bytes_hashed: int  # bytes of artifacts, quarantined and workspace files hashed

    @property
    def ok(self) -> bool:
        return not any(p.severity in (ERROR, CHANGED) for p in self.problems)

    @property
    def exit_code(self) -> int:
        """0 when nothing is wrong, 1 when something is (``info`` never fails)."""
        return 0 if self.ok else 1

    def count(self, severity: str) -> int:
        return sum(1 for p in self.problems if p.severity == severity)

    def by_code(self, code: str) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.code == code)

    def summary(self) -> str:
        counts = ", ".join(f"{self.count(s)} {s}" for s in SEVERITIES)
        verdict = "OK" if self.ok else "PROBLEMS"
        return (
            f"{verdict}: {self.tasks} task(s), {self.events} event(s), {self.artifacts} artifact(s) checked, "
            f"{_size(self.bytes_hashed)} hashed; {counts}"
        )

    def render(self) -> str:
        """Human-readable: one line per problem, then a summary line."""
        return "\n".join([*(p.render() for p in self.problems), self.summary()]) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERIFY_VERSION,
            "root": self.root,
            "ok": self.ok,
            "counts": {
                "tasks": self.tasks,
                "events": self.events,
                "artifacts": self.artifacts,
                "bytes_hashed": self.bytes_hashed,
                **{s: self.count(s) for s in SEVERITIES},
            },
            "problems": [p.to_json() for p in self.problems],
        }
