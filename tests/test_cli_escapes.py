"""No field a caller or a person wrote reaches the terminal as a control sequence, in any command.

A call key that erases the screen, an approval note that sets the window title, a question
with a bidirectional override: each is shown as its escape (``\\x1b``, ``\\u202e``), so the
output holds no ESC, BEL or override character but the renderer's own colours.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import intentlog
from intentlog.cli import main

ERASE = "\x1b[2J\x1b[H"  # clear the screen, cursor home
TITLE = "\x1b]0;pwned\x07"  # set the window title
RLO = "\u202e"  # right-to-left override
SGR = re.compile(r"\x1b\[[0-9;]*m")


def _run(root: Path, *args: str) -> str:
    r = CliRunner().invoke(main, ["--root", str(root), *args], color=True)  # colours kept: only ours may be there
    return r.output


def _assert_inert(out: str) -> None:
    plain = SGR.sub("", out)
    for ch in ("\x1b", "\x07", RLO, "\r", "\x08", "\x9b"):
        assert ch not in plain, (ch, out)


@pytest.fixture
def hostile(ledger: intentlog.Ledger) -> Path:
    t = ledger.task("t")
    t.effect(f"pay{ERASE}{RLO}", {"a": 1}, lambda r: b"{}")
    t.request_approval("ok", f"Send {RLO}it?{TITLE}", binds=intentlog.request_hash({"b": 1}))
    t.decide("ok", "reject", by=f"al{TITLE}ice", note=f"no{ERASE} way\r\nfake row")
    with pytest.raises(intentlog.ApprovalRejected):
        t.effect("k2", {"b": 1}, lambda r: b"{}")
    p = ledger.task("p")
    p.request_approval("wait", f"Wire {RLO}021 EUR{TITLE}?", binds=intentlog.request_hash({"c": 1}))
    ledger.close()
    return ledger.root


def test_status_escapes_keys_and_an_approvals_by_and_note(hostile: Path) -> None:
    out = _run(hostile, "status", "t")
    _assert_inert(out)
    assert "pay\\x1b[2J\\x1b[H\\u202e" in out  # the key, shown as its escapes
    assert "al\\x1b]0;pwned\\x07ice" in out and "no\\x1b[2J\\x1b[H way\\x0d\\x0afake row" in out
    pending = _run(hostile, "status", "p")
    _assert_inert(pending)
    assert "Wire \\u202e021 EUR\\x1b]0;pwned\\x07?" in pending


def test_log_and_tasks_escape_every_field(hostile: Path) -> None:
    for args in (("log", "t"), ("log", "p"), ("tasks",)):
        _assert_inert(_run(hostile, *args))
    assert '"key":"pay\\u001b[2J\\u001b[H\\u202e"' in _run(hostile, "log", "t")


def _failing_step(task: intentlog.Task, payload: Any) -> Any:
    def send(request: Any) -> bytes:
        raise intentlog.ProviderFailure(f"400 refused{ERASE}{TITLE}{RLO}", body=b"{}", retryable=False)

    return task.effect("charge", payload, send)


def test_backlog_escapes_a_step_failure(ledger: intentlog.Ledger) -> None:
    b = ledger.backlog("nightly")
    b.add("x", {"item": "x"})
    b.run(_failing_step, until_idle=True)
    root = ledger.root
    ledger.close()
    out = _run(root, "backlog", "nightly")
    _assert_inert(out)
    assert "refused\\x1b[2J" in out


def test_the_escaping_rule() -> None:
    from intentlog._internal.text import printable, terminal_text

    assert printable("plain text, ünïcödé, 日本語\u3000ok") == "plain text, ünïcödé, 日本語\u3000ok"
    assert printable(f"a{ERASE}b\tc\nd{RLO}\U000e0001") == "a\\x1b[2J\\x1b[Hb\\x09c\\x0ad\\u202e\\U000e0001"
    ours = "\x1b[1mhead\x1b[0m\nrow\tcell"
    assert terminal_text(ours) == ours  # the renderer's own bold, line breaks and tabs are kept
    assert terminal_text(f"\x1b[31mx\x1b[0m{TITLE}") == "\x1b[31mx\x1b[0m\\x1b]0;pwned\\x07"
