"""Accepting damage never silently moves aside the record that an effect was started.

Before the fix: a run killed after ``attempt.started`` (mid-send), then a bit flip in the
line before it. The writer refused the task (good); ``intentlog repair --accept-damage``
moved the whole ``attempt.started`` line to ``quarantine/`` and the next run sent again,
though the moved bytes said plainly that the send had begun. The operator was never told.

Now a repair whose bytes to move aside hold an ``attempt.started`` is refused, naming the
call and attempt, unless the operator also accepts that risk (``accept_resend=True``,
recorded as ``"accepted": "damage+resend"``); the dry run says the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from test_storage_repair import _flip_ts

import intentlog


class Killed(BaseException):
    pass


def _killed_mid_send(root: Path) -> tuple[intentlog.Ledger, Path]:
    led = intentlog.open(root)
    t = led.task("t")

    def provider(request: Any) -> bytes:
        raise Killed  # the send began: the provider may have acted

    with pytest.raises(Killed):
        t.effect("k", {"q": 1}, provider)
    t.close()
    lines = t.path.read_bytes().splitlines(keepends=True)
    assert orjson.loads(lines[-1])["kind"] == "attempt.started"
    t.path.write_bytes(b"".join(lines[:-2]) + _flip_ts(lines[-2]) + lines[-1])
    return led, t.path


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def test_accepting_damage_that_holds_an_attempt_started_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led, _ = _killed_mid_send(root)
    before = _tree(root)
    for dry in (True, False):
        with pytest.raises(intentlog.CorruptStream) as err:
            led.repair("t", accept_damage=True, dry_run=dry)
        assert "attempt.started" in str(err.value) and "call-1" in str(err.value)
        assert "accept_resend" in str(err.value)
    assert _tree(root) == before, "nothing written"

    sent: list[Any] = []
    with pytest.raises(intentlog.CorruptStream):
        led.task("t").effect("k", {"q": 1}, lambda r: sent.append(r) or b"{}")
    led.task("t").close()
    assert sent == []
    led.close()


def test_the_operator_may_accept_the_resend_risk_explicitly(tmp_path: Path) -> None:
    root = tmp_path / "l"
    led, _ = _killed_mid_send(root)
    report = led.repair("t", accept_damage=True, accept_resend=True)
    assert report.action == "damage" and report.event is not None
    assert report.event.data["accepted"] == "damage+resend"
    assert report.event.data["started"] == [{"call": "call-1", "attempt": 1, "line": 4}]
    sent: list[Any] = []
    led.task("t").effect("k", {"q": 1}, lambda r: sent.append(r) or b"{}")
    assert len(sent) == 1, "the accepted risk: the effect is sent again"
    led.close()
    from intentlog.projections.verify import verify_path

    assert not [p for p in verify_path(root).problems if p.severity == "error" and p.code == "shape"]
