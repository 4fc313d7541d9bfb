"""The HTML report: escaped, deterministic, bounded at scale, and in every bundle (checked like every file).

The page itself is checked in a real browser by tests/test_report_browser.py.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from report_ledger import HOSTILE, build

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.bundle import check_bundle, export_bundle
from intentlog.cli import main
from intentlog.eventlog.canonical import dumps
from intentlog.eventlog.format import encode_line
from intentlog.report import DEFAULT_DETAIL, REPORT_FILE, render, render_report


@pytest.fixture(scope="module")
def every_stage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("report") / "ledger")


def _text_of(page: str) -> str:
    """The page's text as a reader sees it (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_a_payload_is_text_never_markup(every_stage: Path) -> None:
    """Every place the hostile payload lands (request, response, note, phase) holds it escaped, never as a tag."""
    page = render(every_stage).decode()
    assert page.count("<script") == 1, "the page's own script is its only script element"
    assert "<img" not in page and "<b onmouseover" not in page and "</script><script>" not in page
    assert "&lt;script&gt;window.__pwned = 1;" in page
    assert HOSTILE in _text_of(page), "the payload is shown, as text"
    assert "Content-Security-Policy" in page and "default-src 'none'" in html.unescape(page)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.style = ""
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False


def test_no_external_reference(every_stage: Path) -> None:
    """No element loads anything: no src, no link, no href but an in-page anchor, no url() in the style."""
    parser = _Tags()
    parser.feed(render(every_stage, detail=None).decode())
    tags = parser.tags
    assert len(tags) > 500
    assert not [t for t, a in tags if "src" in a or t in ("img", "link", "iframe", "object", "embed", "base")]
    assert {a["href"] for _, a in tags if a.get("href") and not str(a["href"]).startswith("#")} == set()
    assert [t for t, a in tags if t == "script"] == ["script"]
    assert [k for _, a in tags for k in a if k.startswith("on")] == [], "no inline event handler"
    assert "url(" not in parser.style and "@import" not in parser.style


def test_the_same_folder_gives_the_same_bytes_wherever_it_is(every_stage: Path, tmp_path: Path) -> None:
    """Two renders are byte-identical; so is the render of a copy elsewhere (no path, clock or host inside)."""
    first, second = render(every_stage), render(every_stage)
    assert first == second
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(every_stage, copy)
    assert render(copy) == first
    before = _snapshot(every_stage)
    r = CliRunner()
    for name in ("a.html", "b.html"):
        res = r.invoke(main, ["--root", str(every_stage), "report", "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    assert _snapshot(every_stage) == before, "reporting writes nothing into the ledger"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_new_event_changes_the_report(every_stage: Path, tmp_path: Path) -> None:
    """Determinism is not blindness: one more recorded decision gives another page."""
    copy = tmp_path / "copy"
    shutil.copytree(every_stage, copy)
    before = render(copy)
    with intentlog.open(copy) as ledger:
        ledger.task("unknown").reconcile("call-1", "not_served", by="bob")
    after = render(copy).decode()
    assert after.encode() != before
    assert "reconciled_not_served" in after or "reconciled not served" in after


def test_unknown_effects_carry_the_command_status_prints(every_stage: Path) -> None:
    """The unknown effect's block names the exact commands 'intentlog status' prints as its next step."""
    page = render(every_stage).decode()
    block = re.search(r'<div class="call unknown" id="unknown-call-1">.*?</div></div>', page, re.S)
    assert block is not None
    text = _text_of(block.group())
    assert "Unknown effect" in text
    st = intentlog.open(every_stage, create=False).task("unknown").status()
    for cmd in re.findall(r"intentlog reconcile [^,]*", st.next_step):
        assert cmd.strip() in text
    hinted = render(every_stage, ["unknown"], hint=lambda s: s.replace("intentlog ", "intentlog --root X ")).decode()
    assert "intentlog --root X reconcile unknown call-1 --not-served" in _text_of(hinted)


def test_approvals_checkpoints_and_turns_are_shown(every_stage: Path) -> None:
    """Who decided what on which hash; the checkpoint's phase; each turn with its identity and messages."""
    page = _text_of(render(every_stage).decode())
    ws = intentlog.open(every_stage, create=False).task("every-stage").work_state()
    ship = ws.call_for_key("ship")
    assert ship is not None and ship.request_hash is not None
    assert "Ship the release notes?" in page and "alice" in page and "read them" in page
    raw = render(every_stage).decode()
    assert f'title="{ship.request_hash}"' in raw, "the approved hash is on the page"
    assert "current phase: review" in page and "all claims supported" in page
    assert "turn-1" in page and "turn-2" in page
    assert "Summarise chapter 3" in page and "Chapter 3 is about fsync." in page


def test_the_named_tasks_only(every_stage: Path) -> None:
    """Naming tasks limits the page to them; an unknown name is refused with the list to look at."""
    res = render_report(every_stage, ["chat"])
    assert res.tasks == ("chat",) and res.detailed == ("chat",)
    assert 'id="task-every-stage"' not in res.html.decode()
    with pytest.raises(intentlog.IntentlogError, match="no task 'nope'"):
        render(every_stage, ["nope"])


def test_a_backlog_view_shows_counts_and_blocked_items(every_stage: Path) -> None:
    """The backlog section: counts per state, the items a person must act on with reason and command (escaped)."""
    view = {
        "backlog": "nightly",
        "counts": {"done": 3, "blocked": 1},
        "items": [
            {"item": "i1", "task": "unknown", "state": "blocked", "reason": "unknown effect <b>x</b>",
             "next_step": "intentlog reconcile unknown call-1 --not-served"},
            {"item": "i2", "task": "chat", "state": "done", "reason": None, "next_step": "nothing"},
        ],
    }
    page = render(every_stage, backlog=view).decode()
    sec = page[page.index('id="backlog"') :]
    assert "unknown effect &lt;b&gt;x&lt;/b&gt;" in sec and '<code class="cmd">intentlog reconcile unknown' in sec
    assert "i2" not in sec.split("</table>")[0]
    with pytest.raises(intentlog.IntentlogError, match="counts"):
        render(every_stage, backlog={"items": []})


def test_a_backlog_the_ledger_does_not_hold_is_a_clear_error(every_stage: Path, tmp_path: Path) -> None:
    """--backlog names a backlog: one the ledger lacks is exit 1 naming it, and nothing is written anywhere."""
    before = _snapshot(every_stage)
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["--root", str(every_stage), "report", "--backlog", "nightly", "--out", str(out)])
    assert res.exit_code == 1, res.output
    assert "no backlog 'nightly'" in res.output
    assert not out.exists()
    assert _snapshot(every_stage) == before


def test_backlog_from_the_backlog_runner(tmp_path: Path) -> None:
    """With the backlog runner installed, --backlog draws its view: a blocked item with its reason and command."""
    root = tmp_path / "l"
    with intentlog.open(root) as ledger:
        b = ledger.backlog("nightly")
        b.add("a", {"x": 1})
        b.add("b", {"x": 2})
        try:
            ledger.task(b.task_id("b")).effect("k", {"q": 1}, lambda r: (_ for _ in ()).throw(ConnectionResetError()))
        except intentlog.EffectUnknown:
            pass
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["--root", str(root), "report", "--backlog", "nightly", "--out", str(out)])
    assert res.exit_code == 0, res.output
    sec = _text_of(out.read_text()[out.read_text().index('id="backlog"') :].split("</table>")[0])
    assert "blocked 1" in sec and "queued 1" in sec
    assert "unknown effect: call-1" in sec and "unblock nightly b" in sec
    assert f"intentlog --root {root} reconcile nightly.item.b call-1 --not-served" in sec
    assert "\na\n" not in sec and "nightly.item.a" not in sec, "a queued item needs no person"


def test_bundles_carry_a_report_that_hashes_json_lists(every_stage: Path, tmp_path: Path) -> None:
    """export puts report.html beside README.md; both verifiers fail a bundle whose report was edited."""
    out = tmp_path / "bundle"
    res = export_bundle(every_stage, out=out)
    assert res.ok
    page = (out / REPORT_FILE).read_bytes()
    assert b"intentlog evidence bundle" in page and b'id="task-unknown"' in page
    hashes = orjson.loads((out / "hashes.json").read_bytes())["files"]
    assert hashes[REPORT_FILE] == {"digest": digest_bytes(page), "size": len(page)}
    again = tmp_path / "again"
    export_bundle(every_stage, out=again)
    assert (again / REPORT_FILE).read_bytes() == page, "the bundle's report is deterministic too"
    (out / REPORT_FILE).write_bytes(page.replace(b"paused for review", b"complete"))
    report = check_bundle(out)
    assert not report.ok and any(p.locator == REPORT_FILE for p in report.by_code("inventory"))
    proc = subprocess.run([sys.executable, str(out / "verify_bundle.py"), str(out)], capture_output=True, text=True)
    assert proc.returncode == 1 and REPORT_FILE in proc.stdout


# -- scale --------------------------------------------------------------------------------


def _clone(template: Path, dest: Path, task: str) -> None:
    events = [orjson.loads(line) for line in template.read_bytes().splitlines()]
    events[0]["data"] = events[0]["data"] | {"task": task, "stream": digest_bytes(task.encode())[7:39]}
    out, prev = [], None
    for i, ev in enumerate(events):
        line = encode_line(ev["kind"], dumps(ev["data"]), prev, i, ev["ts"])
        out.append(line)
        prev = digest_bytes(line)
    dest.write_bytes(b"".join(out))


def test_a_ledger_of_thousands_of_tasks_gives_a_small_page(tmp_path: Path) -> None:
    """5,000 tasks (100 of them with an unknown effect): an index of every task, detail for the first 100
    unsettled ones, a page of a few megabytes -- and every unknown effect is still counted in the index."""
    root = tmp_path / "big"
    with intentlog.open(root) as ledger:
        ledger.task("tpl-done").effect("k", {"q": 1}, lambda r: b"answer " * 40)
        try:
            ledger.task("tpl-unk").effect("k", {"q": 2}, lambda r: (_ for _ in ()).throw(ConnectionResetError()))
        except intentlog.EffectUnknown:
            pass
    tasks = root / "tasks"
    n, unknown = 5000, 100
    for i in range(n):
        tpl = "tpl-unk" if i % (n // unknown) == 0 else "tpl-done"
        _clone(tasks / f"{tpl}.jsonl", tasks / f"t{i:05d}.jsonl", f"t{i:05d}")
    for tpl in ("tpl-done", "tpl-unk"):
        os.remove(tasks / f"{tpl}.jsonl")
    t0 = time.perf_counter()
    res = render_report(root)
    took = time.perf_counter() - t0
    size = len(res.html)
    print(f"\n{n} tasks: report {size / 1e6:.2f} MB, {len(res.detailed)} in detail, rendered in {took:.1f} s")
    assert len(res.tasks) == n and res.counts == {"awaiting acceptance": n - unknown, "paused for review": unknown}
    assert len(res.detailed) == DEFAULT_DETAIL and all(t.startswith("t") for t in res.detailed)
    assert size < 5_000_000, f"{size} bytes for {n} tasks"
    page = res.html.decode()
    assert page.count('<tr data-task="') == n
    assert page.count('class="call unknown"') == unknown, "every unsettled task is drawn before any settled one"
    full = render_report(root, detail=None)
    assert len(full.detailed) == n and len(full.html) > size


def test_cli_json_says_what_it_wrote(every_stage: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["--root", str(every_stage), "report", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = orjson.loads(res.output)
    assert doc["bytes"] == out.stat().st_size and doc["tasks"] == 4 and doc["counts"]["paused for review"] == 1
    bad = CliRunner().invoke(main, ["--root", str(every_stage), "report", "--all", "--detail", "3", "--out", str(out)])
    assert bad.exit_code == 2


def test_a_long_task_shows_its_first_events_and_the_command_for_the_rest(tmp_path: Path) -> None:
    """A task with more than MAX_EVENTS events is drawn with the first MAX_EVENTS and 'log --since' for the rest."""
    from intentlog.report import MAX_EVENTS

    with intentlog.open(tmp_path / "l") as ledger:
        t = ledger.task("long")
        with t.batch():
            for i in range(MAX_EVENTS + 50):
                t.append("note", {"i": i})
    page = render(tmp_path / "l").decode()
    assert f"{MAX_EVENTS + 51 - MAX_EVENTS} more event(s) not shown" in page
    assert f"intentlog log long --since {MAX_EVENTS}" in _text_of(page)
    assert page.count('<li data-kind="note">') == MAX_EVENTS - 1


@pytest.mark.parametrize("target", ["tasks/t.jsonl", "intentlog.json", "report.html", "link/t.jsonl"])
def test_a_report_is_never_written_into_the_ledger(tmp_path: Path, target: str) -> None:
    """--out inside the ledger (directly or through a linked folder) is refused, exit 2, every byte unchanged."""
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        led.task("t").append("note", {"n": 1})
    (tmp_path / "link").symlink_to(root / "tasks")
    out = tmp_path / target if target.startswith("link/") else root / target
    before = _snapshot(root)
    res = CliRunner().invoke(main, ["--root", str(root), "report", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "is inside the ledger" in res.output
    assert _snapshot(root) == before


def test_the_report_command_runs_in_a_fresh_process(tmp_path: Path) -> None:
    """``intentlog report`` as a user runs it: a new interpreter whose first feature import is the report's."""
    root = tmp_path / "ledger"
    with intentlog.open(root) as ledger:
        ledger.task("t").append("note", {"n": 1})
    out = tmp_path / "r.html"
    r = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(root), "report", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.read_bytes().startswith(b"<!DOCTYPE html>") and b"t" in out.read_bytes()
