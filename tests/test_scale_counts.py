"""Work that grows with the ledger grows linearly: counted, never timed.

``verify`` and ``report`` are run over the same reads with the task names as strings
that count their own hashing and comparing: a check that rebuilds a set of every task
once per task hashes N² names, a linear one a few per task. Doubling the tasks must
about double the count. ``verify``'s output is bounded likewise: thousands of ``info``
findings of one kind print a bounded number of lines and a count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog.checker.folder import FolderReads
from intentlog.checker.verify import verify
from intentlog.report import render

COUNT = [0]


class Name(str):
    """A task id that counts how often it is hashed or compared."""

    __slots__ = ()

    def __hash__(self) -> int:
        COUNT[0] += 1
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        COUNT[0] += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)


class CountingReads(FolderReads):
    def names(self) -> list[str]:
        return [Name(n) for n in super().names()]

    def listing(self) -> tuple[list[str], list[str], str | None]:
        names, strays, failed = super().listing()
        return [Name(n) for n in names], strays, failed


class Src:
    """What ``render`` takes: something with ``reads()``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def reads(self) -> CountingReads:
        return CountingReads(self.root)


def _grow(root: Path, start: int, stop: int) -> None:
    with intentlog.open(root) as led:
        for i in range(start, stop):
            t = led.task(f"t{i:05d}")
            t.append("note", {"i": i})
            t.close()


def _counted(fn: Any) -> int:
    COUNT[0] = 0
    fn()
    return COUNT[0]


@pytest.fixture(scope="module")
def sizes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[int]]:
    """Name operations of verify and report at 150 and 300 tasks (the same ledger, grown)."""
    root = tmp_path_factory.mktemp("scale") / "l"
    out: dict[str, list[int]] = {"verify": [], "report": []}
    for start, stop in ((0, 150), (150, 300)):
        _grow(root, start, stop)
        out["verify"].append(_counted(lambda: verify(CountingReads(root))))
        out["report"].append(_counted(lambda: render(Src(root), detail=10)))
    return out


def test_verify_is_linear_in_the_number_of_tasks(sizes: dict[str, list[int]]) -> None:
    small, big = sizes["verify"]
    assert big <= 2.4 * small, f"name operations {small} at 150 tasks, {big} at 300: not linear"
    assert big <= 40 * 300, f"{big} name operations for 300 tasks"


def test_report_is_linear_in_the_number_of_tasks(sizes: dict[str, list[int]]) -> None:
    small, big = sizes["report"]
    assert big <= 2.4 * small, f"name operations {small} at 150 tasks, {big} at 300: not linear"
    assert big <= 80 * 300, f"{big} name operations for 300 tasks"


def test_verify_lists_a_bounded_number_of_info_findings_and_counts_the_rest(tmp_path: Path) -> None:
    """300 orphan objects: 100 listed, one line counts the other 200; errors are never capped."""
    from intentlog.checker.state import MAX_INFO_PER_CODE

    root = tmp_path / "l"
    with intentlog.open(root) as led:
        for i in range(300):
            led.artifacts.put(b"orphan %d" % i)
        t = led.task("t")
        t.append("note", {"i": 0})
    report = verify(FolderReads(root))
    orphans = report.by_code("orphan_blob")
    assert len(orphans) == MAX_INFO_PER_CODE == 100
    [more] = [p for p in report.by_code("more") if p.task is None]
    assert more.severity == "info" and "200 more [orphan_blob]" in more.message
    text = report.render()
    assert text.count("[orphan_blob]") == 101 and len(text.splitlines()) < 130
    assert report.ok
