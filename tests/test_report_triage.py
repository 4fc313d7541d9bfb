"""The report for triage: what needs a person first, whole words, how long each task ran, a text search.

The browser part runs in the real headless chromium the report's browser test uses
(skipped, loudly, where it is missing; never under CI).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from report_ledger import build
from test_report_browser import _open, browser  # noqa: F401  (the module's chromium, reused)

import intentlog
from intentlog.report import render
from intentlog.report.html import STYLE


@pytest.fixture(scope="module")
def triage_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build(tmp_path_factory.mktemp("report-triage") / "ledger")
    with intentlog.open(root) as led:
        # ids before and after "unknown" in id order, both settled
        led.task("aaa-done").effect("k", {"q": "the needle-in-payload"}, lambda r: b"fine")
        led.task("aaa-done").accept()
        led.task("zzz-done").effect("k", {"q": 2}, lambda r: b"fine")
        led.task("zzz-done").accept()
    out = root.parent / "report.html"
    out.write_bytes(render(root))
    return out


def _index_order(html: str) -> list[str]:
    table = html.split('id="index-table"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr data-task="([^"]+)"', table)


def test_the_index_puts_what_needs_a_person_first_then_unsettled_then_settled(triage_page: Path) -> None:
    html = triage_page.read_text()
    order = _index_order(html)
    assert order[0] == "unknown", order  # paused for review: an unknown effect
    assert order.index("aaa-done") > order.index("unknown")
    assert order[-2:] == ["aaa-done", "zzz-done"] or set(order[-3:]) >= {"aaa-done", "zzz-done"}, order
    assert render(triage_page.parent / "ledger") == triage_page.read_bytes()  # still the same bytes


def test_the_index_shows_how_long_each_task_ran_from_its_own_record(triage_page: Path) -> None:
    html = triage_page.read_text()
    head = html.split('id="index-table"', 1)[1].split("</thead>", 1)[0]
    assert "<th>active</th>" in head
    row = html.split('<tr data-task="aaa-done"', 1)[1].split("</tr>", 1)[0]
    assert re.search(r"<td>\d+(\.\d+)? (ms|s|min|h)</td>", row), row


def test_no_cell_breaks_a_word_in_two() -> None:
    """The stylesheet never breaks inside words (a word too long for the page wraps only where it must)."""
    assert "break-all" not in STYLE and "word-break:break-word" not in STYLE


def test_in_a_browser_the_text_search_finds_payloads_and_no_word_is_split(
    browser: Any,  # noqa: F811
    triage_page: Path,
) -> None:
    page, requested, dialogs = _open(browser, triage_page)
    page.set_viewport_size({"width": 560, "height": 900})
    split = page.evaluate(
        """() => {
          const out = [];
          for (const td of document.querySelectorAll('#index-table td')) {
            const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
            for (let n = walker.nextNode(); n; n = walker.nextNode()) {
              const re = /[^\\s\\-\\/]+/g; let m;  // a line may end after a hyphen or slash, never inside a part
              while ((m = re.exec(n.data))) {
                const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
                const lines = new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top)));
                if (lines.size > 1 && m[0].length <= 30) out.push(m[0]);  // a token longer than any column wraps
              }
            }
          }
          return out;
        }"""
    )
    assert split == [], f"words broken across lines: {split}"
    page.fill("#text", "needle-in")
    shown = page.eval_on_selector_all(
        "#index-table tbody tr", "rs => rs.filter(r => !r.hidden).map(r => r.dataset.task)"
    )
    assert shown == ["aaa-done"]
    page.fill("#text", "")
    assert page.eval_on_selector_all("#index-table tbody tr", "rs => rs.filter(r => !r.hidden).length") == 6
    assert dialogs == [] and set(requested) == {triage_page.resolve().as_uri()}
    page.close()


def test_a_task_shows_the_token_totals_its_responses_carry(tmp_path: Path) -> None:
    """The usage of every response read (each attempt served was billed), summed per field; none: no row."""
    import json

    root = tmp_path / "l"
    answers = iter([
        {"usage": {"input_tokens": 100, "output_tokens": 7}, "text": "a"},
        {"usage": {"input_tokens": 20, "output_tokens": 3, "cost": 0.25}, "text": "b"},
    ])  # fmt: skip
    with intentlog.open(root) as led:
        t = led.task("tok")
        t.effect("one", {"q": 1}, lambda r: json.dumps(next(answers)).encode())
        t.effect("two", {"q": 2}, lambda r: json.dumps(next(answers)).encode())
        led.task("plain").effect("k", {"q": 1}, lambda r: b"not json")
    html = render(root).decode()
    tok = html.split('id="task-tok"', 1)[1].split("</table>", 1)[0]
    assert "<th>usage</th><td>cost 0.25, input_tokens 120, output_tokens 10 (2 responses)</td>" in tok, tok
    plain = html.split('id="task-plain"', 1)[1].split("</table>", 1)[0]
    assert "<th>usage</th>" not in plain
