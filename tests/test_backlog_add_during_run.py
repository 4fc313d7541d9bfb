"""Items added by another process while a run goes on are run by it, never missed by its fold.

The supervisor gives the backlog's lock back about every second so that ``add`` gets in; its
next record then lands after the other process's records. Its fold of the backlog stream used
to take that record as the next one and so never saw what was added in between: a run with
``until_idle`` ended with the added item still queued (a real supervisor process, a folder).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from backlog_steps import open_gate, wait_at_gate

import intentlog

TESTS = Path(__file__).parent

RUN = """
import sys, intentlog
from backlog_steps import step
view = intentlog.open(sys.argv[1]).backlog("g").run(step, workers=1, until_idle=True, poll=0.02)
print("done", view.counts["done"], "queued", view.counts["queued"], flush=True)
"""


def _receipts(path: Path) -> list[str]:
    if not path.exists():
        return []
    import orjson

    return [orjson.loads(line)["key"] for line in path.read_bytes().splitlines()]


def test_an_item_added_while_a_run_goes_on_is_run_by_it(tmp_path: Path) -> None:
    root = tmp_path / "l"
    with intentlog.open(root) as led:
        led.backlog("g").add_many([{"item": f"i{n}", "payload": {"item": f"i{n}", "effects": 1}} for n in range(4)])
    receipts = tmp_path / "receipts.jsonl"
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "BACKLOG_RECEIPTS": str(receipts),
        "BACKLOG_SLEEP": "0.8",
        "BACKLOG_GATE": str(gate),  # the last item's send is held until the add is recorded
        "BACKLOG_GATE_KEYS": "i3:0",
    }
    sup = subprocess.Popen([sys.executable, "-c", RUN, str(root)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        wait_at_gate(str(gate), "i3:0")  # three items done before it: the lock given back meanwhile
        assert len(_receipts(receipts)) == 4
        with intentlog.open(root) as led:
            led.backlog("g").add("late", {"item": "late", "effects": 1})
        open_gate(str(gate))  # only now can the run reach its end
        out, _ = sup.communicate(timeout=120)
    finally:
        open_gate(str(gate))
        sup.kill()
    assert sup.returncode == 0
    assert out.split() == ["done", "5", "queued", "0"], out
    assert sorted(_receipts(receipts)) == sorted(f"{i}:0" for i in ("i0", "i1", "i2", "i3", "late"))
