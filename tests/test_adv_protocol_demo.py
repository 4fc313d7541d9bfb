"""``intentlog demo`` as a new user runs it: with no argument (``./intentlog-demo``, a relative
path) or a relative DIR. Every claim must hold exactly as with an absolute path; the
standalone verifier in particular must find its bundle whatever the current folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from intentlog.cli import main


@pytest.mark.parametrize("argv", [[], ["rel/demo"]], ids=["default", "relative"])
def test_demo_from_a_relative_folder_passes_every_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["demo", *argv, "--json"], catch_exceptions=False)
    doc = json.loads(r.stdout)
    assert "cases" in doc, f"the demo stopped: {r.stdout[-3000:]}"  # an error document names the step that broke
    failed = [
        (c["case"], x["claim"]) for c in doc["cases"] + doc["corruptions"] for x in c["claims"] if not x["passed"]
    ]
    assert failed == []
    assert doc["ok"] is True and doc["claims_failed"] == 0
    assert r.exit_code == 0
    for case in doc["cases"]:
        assert case["verifier"]["exit"] in (0, 1) and case["verifier"]["claims"] > 0, case["case"]
