"""The report says "running for ..." on pending work, and stays a deterministic rendering of the record.

Pending work is a call whose last attempt started with nothing recorded after it, and a
backlog item a worker holds. The page carries only the recorded start (``data-since``,
shown as text); its script computes the elapsed time from the reader's clock. In a real
browser (chromium, playwright) the clock is fixed at a known instant after the recorded
start, so the text is known exactly: no test here waits for time to pass.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest
from test_report_browser import _open, browser  # noqa: F401  (the module's chromium, reused)

import intentlog
from intentlog.report import render

REQ = {"model": "m", "prompt": "charge"}


def _lost(_r: Any) -> bytes:
    raise ConnectionResetError("reset after the request was written")


def _ledger(root: Path) -> str:
    """A task whose call's attempt started and nothing followed; the attempt's recorded ts."""
    with intentlog.open(root) as led:
        t = led.task("pending")
        with pytest.raises(intentlog.EffectUnknown):
            t.effect("charge-42", REQ, _lost)
        t.effect("done", {"model": "m", "prompt": "fine"}, lambda r: b"ok")
        started = [e for e in t.events() if e.kind == "attempt.started"]
    return started[0].ts


def _view(since: str) -> dict[str, Any]:
    """A backlog view in the shape ``intentlog backlog --json`` prints: one item running, one done."""
    return {
        "backlog": "nightly",
        "counts": {"running": 1, "done": 1},
        "items": [
            {"item": "a", "task": "nightly.a", "state": "running", "reason": "a worker holds the item's task",
             "next_step": "wait", "holder": {"pid": 4242, "host": "build-7", "since": since}},
            {"item": "b", "task": "nightly.b", "state": "done", "reason": None, "next_step": ""},
        ],
    }  # fmt: skip


def test_pending_work_carries_its_recorded_start_and_the_page_is_the_same_bytes_every_time(tmp_path: Path) -> None:
    """The unknown effect's block names the attempt's recorded start; the running item its lease's; nothing else."""
    ts = _ledger(tmp_path / "led")
    since = "2026-12-01T08:00:00.000000Z"
    one = render(tmp_path / "led", backlog=_view(since))
    again = render(tmp_path / "led", backlog=_view(since))
    assert one == again
    page = one.decode()
    starts = re.findall(r'data-since="([^"]+)"', page)
    assert starts == [since, ts], starts  # the backlog's running item, then the one pending call
    assert f"attempt 1 started <time>{ts}</time>" in page
    assert f"taken <time>{since}</time>" in page and "process 4242 on build-7" in page
    assert "running for" not in page.split("<script>")[0]  # no elapsed time baked into the markup


def _before(ts: str, hours: int) -> str:
    at = dt.datetime.fromisoformat(ts.replace("Z", "+00:00")) - dt.timedelta(hours=hours)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_running_for_is_computed_in_the_browser_from_the_recorded_start(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Clock fixed 50 min 20 s after the attempt started: 'running for 50 min'; the item taken 3 h earlier: 3.8 h."""
    ts = _ledger(tmp_path / "led")
    out = tmp_path / "report.html"
    out.write_bytes(render(tmp_path / "led", backlog=_view(_before(ts, 3))))
    start = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    page = browser.new_page()
    page.clock.set_fixed_time(start + dt.timedelta(minutes=50, seconds=20))
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
    page.goto(out.resolve().as_uri())
    block = page.locator("#pending-call-1 .resolve")
    assert block.locator(".elapsed").inner_text() == ", running for 50 min"
    assert f"attempt 1 started {ts}, running for 50 min" in block.inner_text()
    assert f"attempt 1 started {ts}" in block.inner_text()
    held = page.locator("#backlog ~ table .since")
    assert held.get_attribute("data-since") == _before(ts, 3)
    assert held.inner_text() == f"taken {_before(ts, 3)}, running for 3.8 h"
    page.close()


def test_without_javascript_the_recorded_start_is_shown(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """Scripts off: no elapsed time, the recorded start as text."""
    ts = _ledger(tmp_path / "led")
    out = tmp_path / "report.html"
    out.write_bytes(render(tmp_path / "led"))
    page = browser.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
    cdp = browser.new_cdp_session(page)
    cdp.send("Emulation.setScriptExecutionDisabled", {"value": True})
    page.goto(out.resolve().as_uri())
    block = page.locator("#pending-call-1 .resolve")
    assert block.locator(".elapsed").inner_text() == ""
    assert f"attempt 1 started {ts}" in block.inner_text()
    page.close()
