"""The core never imports the LangGraph integration (nor LangGraph): it works without the extra."""

from __future__ import annotations

import subprocess
import sys


def test_importing_intentlog_and_its_cli_loads_no_langgraph() -> None:
    code = (
        "import sys, intentlog, intentlog.cli, intentlog.retention, intentlog.http\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('langgraph', 'langchain_core') "
        "or m.startswith('intentlog.langgraph'))\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
