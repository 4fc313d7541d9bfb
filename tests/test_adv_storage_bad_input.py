"""Careless arguments to the storage, gc, verify and export entries: library errors, nothing written.

Before the fix: ``apply_gc(plan="x")`` raised ``AttributeError``; ``apply_gc(wait="x")``
and ``plan_gc(max_tracked="x")`` raw ``TypeError`` s from inside; ``wait=nan`` / ``-1``
were taken as they came; ``repair(accept_damage="no")`` *accepted damage* (any truthy
value did); ``verify_path(None)``, ``export_bundle(None)``, ``out=5``, ``out="a\\0b"``,
``receipts=[5]``, ``check_bundle(5)`` and ``record_artifact(None)`` raised Python's own
``TypeError``/``ValueError`` naming no argument; a task list given as one string
(``verify_path(root, "tu")``) was read as the tasks ``t`` and ``u``;
``append(expected_seq="1")`` was reported as a seq conflict; ``events(since=-1)`` was taken.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog import retention
from intentlog.bundle import check_bundle, export_bundle
from intentlog.projections.verify import verify_path


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


@pytest.fixture
def led(tmp_path: Path) -> intentlog.Ledger:
    led = intentlog.open(tmp_path / "l")
    led.task("t").effect("k", {"q": 1}, lambda r: b"{}")
    led.task("t").append("note", {})
    led.task("t").close()
    return led


CASES: dict[str, tuple[type[BaseException], str, Callable[[intentlog.Ledger, Path], Any]]] = {
    "apply_gc(plan='x')": (intentlog.WrongType, "plan", lambda L, o: retention.apply_gc(L, "x")),  # type: ignore[arg-type]
    "apply_gc(wait='x')": (intentlog.WrongType, "wait", lambda L, o: retention.apply_gc(L, wait="x")),  # type: ignore[arg-type]
    "apply_gc(wait=nan)": (intentlog.UsageError, "wait", lambda L, o: retention.apply_gc(L, wait=math.nan)),
    "apply_gc(wait=-1)": (intentlog.UsageError, "wait", lambda L, o: retention.apply_gc(L, wait=-1)),
    "keep(wait=nan)": (intentlog.UsageError, "wait", lambda L, o: retention.keep(L, "t", wait=math.nan)),
    "unkeep(wait='x')": (intentlog.WrongType, "wait", lambda L, o: retention.unkeep(L, "t", wait="x")),  # type: ignore[arg-type]
    "plan_gc(max_tracked='x')": (
        intentlog.WrongType, "max_tracked", lambda L, o: retention.plan_gc(L, max_tracked="x")  # type: ignore[arg-type]
    ),
    "plan_gc(max_tracked=-1)": (intentlog.UsageError, "max_tracked", lambda L, o: retention.plan_gc(L, max_tracked=-1)),
    "repair(accept_damage='no')": (
        intentlog.WrongType, "accept_damage", lambda L, o: L.repair("t", accept_damage="no")  # type: ignore[arg-type]
    ),
    "repair(dry_run=1)": (intentlog.WrongType, "dry_run", lambda L, o: L.repair("t", dry_run=1)),  # type: ignore[arg-type]
    "repair(accept_resend=None)": (
        intentlog.WrongType, "accept_resend", lambda L, o: L.repair("t", accept_resend=None)  # type: ignore[arg-type]
    ),
    "verify_path(None)": (intentlog.WrongType, "root", lambda L, o: verify_path(None)),  # type: ignore[arg-type]
    "verify_path(5)": (intentlog.WrongType, "root", lambda L, o: verify_path(5)),  # type: ignore[arg-type]
    "verify_path(tasks='tu')": (intentlog.WrongType, "tasks", lambda L, o: verify_path(L.root, "tu")),
    "verify_path(tasks=5)": (intentlog.WrongType, "tasks", lambda L, o: verify_path(L.root, 5)),  # type: ignore[arg-type]
    "export_bundle(None)": (intentlog.WrongType, "root", lambda L, o: export_bundle(None, out=o)),  # type: ignore[arg-type]
    "export_bundle(out=5)": (intentlog.WrongType, "out", lambda L, o: export_bundle(L.root, out=5)),  # type: ignore[arg-type]
    "export_bundle(out=NUL)": (intentlog.UsageError, "out", lambda L, o: export_bundle(L.root, out="a\0b")),
    "export_bundle(tar=NUL)": (intentlog.UsageError, "tar", lambda L, o: export_bundle(L.root, tar="a\0b")),
    "export_bundle(tasks='t')": (intentlog.WrongType, "tasks", lambda L, o: export_bundle(L.root, "t", out=o)),
    "export_bundle(receipts=[5])": (
        intentlog.WrongType, "receipts", lambda L, o: export_bundle(L.root, out=o, receipts=[5])  # type: ignore[list-item]
    ),
    "export_bundle(receipts='r')": (
        intentlog.WrongType, "receipts", lambda L, o: export_bundle(L.root, out=o, receipts="r")
    ),
    "check_bundle(None)": (intentlog.WrongType, "bundle", lambda L, o: check_bundle(None)),  # type: ignore[arg-type]
    "check_bundle(5)": (intentlog.WrongType, "bundle", lambda L, o: check_bundle(5)),  # type: ignore[arg-type]
    "record_artifact(None)": (
        intentlog.WrongType, "locator", lambda L, o: L.task("t").record_artifact(None)  # type: ignore[arg-type]
    ),
    "append(expected_seq='1')": (
        intentlog.WrongType, "expected_seq", lambda L, o: L.task("t").append("note", {}, expected_seq="1")  # type: ignore[arg-type]
    ),
    "append(expected_seq=True)": (
        intentlog.WrongType, "expected_seq", lambda L, o: L.task("t").append("note", {}, expected_seq=True)
    ),
    "events(since=-1)": (intentlog.UsageError, "since", lambda L, o: list(L.task("t").events(since=-1))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_careless_argument_is_a_library_error_and_nothing_is_written(
    name: str, led: intentlog.Ledger, tmp_path: Path
) -> None:
    error, argument, call = CASES[name]
    before = _tree(led.root)
    out = tmp_path / "bundle"
    with pytest.raises(error) as err:
        call(led, out)
    assert argument in str(err.value), f"{name}: the message should name {argument!r}: {err.value}"
    led.task("t").close()
    assert _tree(led.root) == before, "nothing written"
    assert not out.exists()
    led.close()
