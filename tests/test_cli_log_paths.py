"""``intentlog log`` names the path of an artifact a task recorded (``artifact.recorded``), not only its digest."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import intentlog
from intentlog.cli import main


def test_log_shows_the_recorded_artifacts_path_and_its_short_digest(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "out").mkdir(parents=True)
    (work / "out" / "chapter-16.md").write_text("# Tides\n")
    with intentlog.open(tmp_path / "led", workspace=work) as led:
        ref = led.task("t").record_artifact("out/chapter-16.md", producer="writer")
    r = CliRunner().invoke(main, ["--root", str(tmp_path / "led"), "log", "t", "--kind", "artifact.recorded"])
    assert r.exit_code == 0, r.output
    line = r.output.strip()
    assert "artifact.recorded" in line and '"locator":"out/chapter-16.md"' in line, line
    assert ref.digest[:19] in line and '"producer":"writer"' in line, line
