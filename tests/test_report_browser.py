"""The report in a real headless browser (Debian's chromium, driven by playwright), with the network blocked.

Skipped, loudly, only where chromium or playwright is missing -- and never under CI
(``CI`` set): there a missing browser fails the test. ``.ci/run`` installs both.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_ledger import HOSTILE, build

from intentlog.report import render

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: What the timeline must show for the every-stage task: each stage the protocol records.
STAGES = ("requested", "manifest", "started", "observed", "interpreted", "decided", "completed", "reconciled",
          "timed out")


def _missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is missing (pip install -e '.[report-test]')"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    why = _missing()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the report's browser test cannot run under CI: {why}")
        sys.stderr.write(f"\n*** SKIPPING the report's browser test: {why} ***\n")
        pytest.skip(f"*** the report's browser test did not run: {why} ***")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=ARGS, headless=True, viewport={"width": 1280, "height": 900}
        )
        try:
            yield ctx
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build(tmp_path_factory.mktemp("report-browser") / "ledger")
    out = root.parent / "report.html"
    out.write_bytes(render(root))
    return out


def _open(browser: Any, page_file: Path) -> tuple[Any, list[str], list[str]]:
    """A page on the report with every request routed: the file itself is served, anything else aborted.

    Console errors (a Content-Security-Policy violation: something tried to load or run) are
    collected with the dialogs."""
    page = browser.new_page()
    url = page_file.resolve().as_uri()
    requested: list[str] = []
    dialogs: list[str] = []

    def route(r: Any) -> None:
        requested.append(r.request.url)
        if r.request.url == url:
            r.continue_()
        else:
            r.abort()

    page.route("**/*", route)
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("console", lambda m: dialogs.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: dialogs.append(f"page error: {e}"))
    page.on("request", lambda req: requested.append(req.url) if req.url not in requested else None)
    page.goto(url)
    page.wait_for_load_state("load")
    return page, requested, dialogs


def test_the_report_in_a_browser(browser: Any, page_file: Path, tmp_path: Path) -> None:
    """Offline, the page asks for nothing but itself; the timeline shows each stage; the unknown effect stands out
    with its command; the hostile payload is text and never runs; a screenshot is kept."""
    page, requested, dialogs = _open(browser, page_file)
    url = page_file.resolve().as_uri()
    # every stage of the every-stage task, drawn in its timeline
    drawn = page.eval_on_selector_all(
        "#task-every-stage .tl li .badge", "els => els.map(e => e.textContent)"
    )
    for stage in STAGES:
        assert stage in drawn, f"the timeline does not show {stage!r}"
    call_stages = page.eval_on_selector_all("#task-every-stage .call-stage", "els => els.map(e => e.dataset.stage)")
    assert call_stages == ["completed", "completed", "completed", "completed", "superseded", "completed"]
    # the unknown effect: visible, marked, with the command that resolves it
    block = page.locator("#unknown-call-1 .resolve")
    assert block.is_visible()
    assert "Unknown effect" in block.inner_text()
    assert "intentlog reconcile unknown call-1 --not-served" in block.locator("code.cmd").all_inner_texts()
    colour = block.evaluate("e => getComputedStyle(e).borderTopColor")
    assert colour == "rgb(179, 38, 30)", "the unknown effect is framed in the alarm colour"
    # the payload with <script> is shown as text, never executed
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert dialogs == []
    assert page.evaluate("document.scripts.length") == 1
    page.locator("#task-hostile details summary").first.click()
    assert HOSTILE in page.locator("#task-hostile").inner_text()
    page.hover("#task-hostile")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    # the optional script filters the index
    page.fill("#q", "unkn")
    visible = page.eval_on_selector_all("#index-table tbody tr", "rs => rs.filter(r => !r.hidden).length")
    assert visible == 1
    page.fill("#q", "")
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=False)
    print(f"\nscreenshot of the report: {shot}")
    assert shot.stat().st_size > 10_000
    assert set(requested) == {url}, f"requests left the page: {sorted(set(requested) - {url})}"
    page.close()


def test_the_report_reads_without_javascript(browser: Any, page_file: Path) -> None:
    """With scripts off, the index and the details are all there; only the filters (which need JS) stay hidden."""
    page = browser.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
    cdp = browser.new_cdp_session(page)
    cdp.send("Emulation.setScriptExecutionDisabled", {"value": True})
    page.goto(page_file.resolve().as_uri())
    assert page.locator("#filters").is_hidden()
    rows = page.eval_on_selector_all("#index-table tbody tr", "rs => rs.filter(r => !r.hidden).length")
    assert rows == 4
    assert page.locator("#unknown-call-1 .resolve").is_visible()
    page.close()
