"""The retention contract: one gc and keep scenario, the same plans and results on every storage.

gc and keep are written once against the retention seam (``Ledger.gc_storage()``), with a
folder and an object store behind it. This suite writes the same ledger through the public
API on each -- a folder, a real SeaweedFS (``s3``), and the object-store code over an
in-process store (``memory``) -- and runs one scenario on it: marks made, listed and released
(through the library and the command line), a preview, an apply of that preview, and a second
apply that finds nothing left. What each step says, minus what is random or clock-bound by
nature (stream ids, heads, the moment of a mark, where the gc record lives), must equal what
the same step says on a folder, step for step.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import s3_server
from click.testing import CliRunner

import intentlog
from intentlog.checker import verify_ledger
from intentlog.cli import main
from intentlog.errors import UsageError
from intentlog.ledger import Ledger
from intentlog.refs import INLINE, walk
from intentlog.retention import GcPlan, GcResult, apply_gc, keep, kept_tasks, plan_gc, unkeep
from intentlog.s3 import on_client

LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=60)
BIG = b"a stored report " * 400  # more than 4 KiB: an object
SMALL = b"small inline bytes"  # rides inline in its event


class TimedMemoryClient(s3_server.MemoryClient):
    """The in-process store, saying when it wrote each key (as a real store's listing does)."""

    def __init__(self) -> None:
        super().__init__(name="gc-contract")
        self.times: dict[str, int] = {}
        self._clock = threading.Lock()

    def create(self, key: str, data: bytes) -> bool:
        made = super().create(key, data)
        if made:
            with self._clock:
                self.times[key] = time.time_ns()
        return made

    def scan_times(self, folder: str) -> Iterator[tuple[str, int, int]]:
        for key, size in self.scan(folder):
            yield key, size, self.times.get(key, -1)


#: how each storage is opened: ``(open the ledger, its --root for the command line or None)``
Opener = Callable[[], Ledger]


def _folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Opener, str | None]:
    root = tmp_path / "ledger"
    return (lambda: intentlog.open(root)), str(root)


def _s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Opener, str | None]:
    url = s3_server.ledger_url(monkeypatch)
    return (lambda: intentlog.open(url)), url


def _memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Opener, str | None]:
    client = TimedMemoryClient()
    return (lambda: Ledger(Path("mem"), storage=on_client(client, write=False), location="mem://gc-contract")), None


STORAGES = {"folder": _folder, "s3": _s3, "memory": _memory}


def crash(request: object) -> bytes:
    raise ConnectionError("connection reset")  # the request may have left: effect unknown


def build(open_ledger: Opener) -> tuple[str, bytes]:
    """Two tasks that expire (one naming an object, one carrying inline bytes a kept task names), one with an
    unknown effect, two to be kept, an object named by nothing; the inline digest and its bytes."""
    with open_ledger() as ledger:
        ledger.task("old-1").effect("fetch", {"n": 1}, send=lambda r: BIG)
        ledger.task("old-2").effect("fetch", {"n": 2}, send=lambda r: SMALL)
        inline = [d for ev in ledger.task("old-2").events() for d, ref in walk(ev.data, INLINE) if ref is not None]
        ledger.task("audit").append("note", {"copy": inline[0]})  # names bytes only old-2 carries
        try:
            ledger.task("unknown").effect("fetch", {"n": 3}, send=crash)
        except intentlog.EffectUnknown:
            pass
        ledger.task("kept").effect("fetch", {"n": 4}, send=lambda r: BIG + b"!")
        ledger.artifacts.put(b"referenced by nothing at all " * 200)
        carried = ledger.artifacts.get(inline[0])
    return inline[0], carried


def plan_shape(plan: GcPlan) -> dict[str, Any]:
    """A plan's JSON without what is random or clock-bound by nature (its clock, stream ids, heads, details)."""
    doc = plan.to_json()
    doc.pop("now")
    for t in doc["expired"]:
        for key in ("detail", "last_activity", "head", "stream"):
            t.pop(key)
    for k in doc["kept"]:
        for key in ("detail", "last_activity"):
            k.pop(key)
    return doc


def result_shape(result: GcResult) -> dict[str, Any]:
    """A result's JSON (its plan as :func:`plan_shape`), without where it is recorded (a file, a store's log)."""
    doc = result.to_json()
    doc["plan"] = plan_shape(result.plan)
    log = doc.pop("log")
    doc["recorded"] = log is not None and log["seq"] >= 1  # an empty plan is not recorded
    return doc


def cli_shape(out: str) -> Any:
    """A ``--json`` command's output without clock-bound fields."""
    doc = json.loads(out)
    if isinstance(doc, dict) and "now" in doc:
        doc.pop("now")
        for k in doc["kept"]:
            for key in ("detail", "last_activity"):
                k.pop(key)
    if isinstance(doc, list):
        for mark in doc:
            mark.pop("since", None)
    return doc


def scenario(open_ledger: Opener, root: str | None) -> list[tuple[str, Any]]:
    """Every step of one gc and keep run, as what it says: compared across storages."""
    steps: list[tuple[str, Any]] = []
    inline, carried = build(open_ledger)
    ledger = open_ledger()
    with pytest.raises(UsageError, match="no task 'nope'"):
        keep(ledger, "nope")
    steps.append(("keep audit", keep(ledger, "audit", note="evidence for the audit").note))
    steps.append(("keep kept", keep(ledger, "kept").note))
    steps.append(("keep old-1", keep(ledger, "old-1", note="for a moment").note))
    steps.append(("unkeep old-1", unkeep(ledger, "old-1")))
    steps.append(("unkeep old-1 again", unkeep(ledger, "old-1")))
    steps.append(("kept", {t: m.note for t, m in kept_tasks(open_ledger()).items()}))
    if root is not None:  # the command line (the in-process store has no address to give it)
        runner = CliRunner()
        for args in (["keep", "old-2", "--note", "briefly"], ["keep", "old-2", "--remove"], ["keep", "--json"]):
            got = runner.invoke(main, ["--root", root, *args])
            steps.append(
                ("cli " + " ".join(args), (got.exit_code, cli_shape(got.stdout) if "--json" in args else None))
            )
        got = runner.invoke(main, ["--root", root, "gc", "--json"])  # now: everything in its grace period
        steps.append(("cli gc --json", (got.exit_code, cli_shape(got.stdout))))
    preview = plan_gc(open_ledger(), now=LATER)
    steps.append(("preview", plan_shape(preview)))
    result = apply_gc(open_ledger(), preview)
    steps.append(("apply", result_shape(result)))
    again = apply_gc(open_ledger(), now=LATER)
    steps.append(("apply again", result_shape(again)))
    after = open_ledger()
    steps.append(("tasks after", after.task_ids()))
    steps.append(("evacuated bytes", after.artifacts.get(inline) == carried))
    report = verify_ledger(open_ledger())
    steps.append(("verify", (report.ok, report.tasks, [p.code for p in report.problems if p.severity == "error"])))
    return steps


@pytest.mark.parametrize("storage", sorted(STORAGES))
def test_gc_and_keep_say_the_same_on_every_storage(
    storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / storage).mkdir()
    (tmp_path / "reference").mkdir()
    open_ledger, root = STORAGES[storage](tmp_path / storage, monkeypatch)
    got = scenario(open_ledger, root)
    ref_open, ref_root = _folder(tmp_path / "reference", monkeypatch)
    expected = scenario(ref_open, ref_root)
    if root is None:  # the command line steps are the folder's alone
        expected = [s for s in expected if not s[0].startswith("cli ")]
    assert [name for name, _ in got] == [name for name, _ in expected]
    for (name, mine), (_, theirs) in zip(got, expected, strict=True):
        assert mine == theirs, name
    # and what the scenario does, pinned: it can fail on every storage alike
    said = dict(got)
    assert said["kept"] == {"audit": "evidence for the audit", "kept": None}
    preview = said["preview"]
    assert [t["task"] for t in preview["expired"]] == ["old-1", "old-2"]
    assert {k["task"]: k["rule"] for k in preview["kept"]} == {"audit": "keep", "kept": "keep", "unknown": "protected"}
    assert len(preview["blobs"]) == 2 and len(preview["evacuate"]) == 1
    applied = said["apply"]
    assert applied["deleted"] == ["old-1", "old-2"] and applied["blobs_deleted"] == 2 and applied["exact"]
    assert len(applied["evacuated"]) == 1
    assert applied["recorded"] and not said["apply again"]["recorded"]
    assert said["apply again"]["deleted"] == [] and said["apply again"]["plan"]["expired"] == []
    assert said["tasks after"] == ["audit", "kept", "unknown"]
    assert said["evacuated bytes"] is True
    assert said["verify"] == (True, 3, [])
