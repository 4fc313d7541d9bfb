"""How soon a backlog item waiting for an event runs again once the event is signalled.

    python bench/backlog_wake.py [--repeats 5] [--poll 10] [--dir PATH] [--json]

One backlog item whose step waits for the event ``go`` (suspending: it holds no worker), a
run of one worker in a thread of this process. Once the backlog records the item scheduled
for its event, ``ledger.signal`` records the event and the latency is timed from the
signal's return to the item task's ``task.event_received`` (the record's own time).

- ``watch``: as a run does now: the supervisor watches the waiting item's inbox and takes
  it again as soon as the event is there (the fallback look set to an hour, so only the
  watch can wake it);
- ``poll`` (the baseline, measured in the same run): the inbox watch switched off, so the
  item is taken again only at its fallback look, ``--poll`` seconds after it suspended (10
  s: the look every run made before the watch).

Medians of ``--repeats`` signals each, and the ratio poll / watch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import intentlog
from intentlog.backlog import worker as worker_mod
from intentlog.backlog.wake import InboxWatch
from intentlog.eventlog.format import parse_utc
from intentlog.projections.idioms import EVENT_RECEIVED


def waiter(task: intentlog.Task, payload: Any) -> Any:
    return task.wait_for_event("go")


def _one(root: Path, name: str) -> float:
    """One item: wait for it to be scheduled for its event, signal it, the seconds to its ``event_received``."""
    with intentlog.open(root) as led:
        b = led.backlog(name)
        b.add("w", {})
        run = threading.Thread(target=lambda: b.run(waiter, workers=1, until_idle=True, poll=0.02))
        run.start()
        stream = led.stream_path(f"{name}.backlog")
        while b'"event":"go"' not in stream.read_bytes():
            time.sleep(0.005)  # waiting for the record
        led.signal(f"{name}.item.w", "go", {"n": 1})
        signalled = time.time()
        run.join()
        got = next(e for e in led.task(f"{name}.item.w").events() if e.kind == EVENT_RECEIVED)
        return parse_utc(got.ts).timestamp() - signalled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--poll", type=float, default=10.0, help="the baseline's fallback look, seconds")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="bench-wake-"))
    out: dict[str, Any] = {"repeats": args.repeats, "poll_s": args.poll}
    watch_on = InboxWatch.watch
    for mode in ("watch", "poll"):
        worker_mod.EVENT_POLL = 3600.0 if mode == "watch" else args.poll  # the workers fork from this process
        InboxWatch.watch = watch_on if mode == "watch" else (lambda self, rec: None)  # type: ignore[method-assign]
        samples = [_one(base / f"{mode}-{i}", f"w{i}") for i in range(args.repeats)]
        out[f"{mode}_median_s"] = round(statistics.median(samples), 4)
        out[f"{mode}_samples_s"] = [round(s, 4) for s in samples]
    InboxWatch.watch = watch_on  # type: ignore[method-assign]
    out["ratio_poll_over_watch"] = round(out["poll_median_s"] / max(out["watch_median_s"], 1e-6), 1)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"signal -> event received, median of {args.repeats}:")
        print(f"  watch (inbox watched):      {out['watch_median_s']:.3f} s")
        print(f"  poll (a look every {args.poll:g} s): {out['poll_median_s']:.3f} s")
        print(f"  ratio poll / watch: {out['ratio_poll_over_watch']}x")


if __name__ == "__main__":
    main()
