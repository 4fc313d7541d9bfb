"""One ledger storage: the folder and the object store answer the same questions, and nothing else asks which.

Every question whose answer depends on where a ledger lives is a method of
:class:`~intentlog.ledgerstorage.LedgerStorage`; the two implementations are the folder
(:mod:`intentlog.folderstorage`) and the object store (:mod:`intentlog.s3.ledgerstorage`).
The same script run on both gives the same answers, and the package outside them holds no
branch on which one a ledger has (the allowlist below names the few left, each with why).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import s3_server

import intentlog
from intentlog.folderstorage import FolderLedgerStorage
from intentlog.ledger import Ledger
from intentlog.s3 import on_client
from intentlog.s3.ledgerstorage import StoreLedgerStorage

PKG = Path(intentlog.__file__).parent

#: the questions a module asked when it branched on where its ledger lives
BRANCH = re.compile(r"storage is (not )?None|\.remote\b|remote_streams|on_store|is_on_store")

#: the storage itself: the protocol, its two implementations, and the object store's package
IMPLEMENTATIONS = ("ledgerstorage.py", "folderstorage.py", "s3/")

#: (file, stripped line) left asking, each with why
ALLOWED: dict[tuple[str, str], str] = {
    # the one place a ledger's storage is chosen: what the Ledger constructor was given
    ("ledger.py", "if storage is None:  # the choice itself"): "the choice",
    # the line codec of a stream read whole is a module named eventlog/remote.py (imported, not asked)
    ("eventlog/gclog.py", "from .remote import events_in"): "a module name",
    ("eventlog/writer.py", "from .remote import events_in, tail_of"): "a module name",
    ("checker/seams.py", "from ..eventlog.remote import events_in"): "a module name",
    # verify --fix on a folder only: the command refuses it on a store before anything is read
    ("cli/verify_export.py", "if ledger.storage is None:"): "a command's refusal",
}  # fmt: skip


def branches() -> set[tuple[str, str]]:
    """Every line outside the storage implementations that asks which storage a ledger has."""
    found = set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in IMPLEMENTATIONS or rel.startswith("s3/"):
            continue
        for line in path.read_text().splitlines():
            if BRANCH.search(line):
                found.add((rel, line.strip()))
    return found


def test_no_module_outside_the_storage_asks_which_storage_it_has() -> None:
    """The branch patterns occur outside the two implementations only where the allowlist says why."""
    assert sorted(branches() - ALLOWED.keys()) == []


def test_the_allowlist_holds_no_stale_entries() -> None:
    """An entry whose line is gone is removed with it (so the list only shrinks)."""
    assert sorted(ALLOWED.keys() - branches()) == []


def test_the_branch_scan_can_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module that asks ``ledger.storage is not None`` is found."""
    fake = tmp_path / "intentlog"
    fake.mkdir()
    (fake / "late.py").write_text("def f(ledger):\n    if ledger.storage is not None:\n        return 1\n")
    monkeypatch.setattr(f"{__name__}.PKG", fake)
    assert branches() == {("late.py", "if ledger.storage is not None:")}


def _folder(tmp_path: Path) -> Ledger:
    return intentlog.open(tmp_path / "ledger")


def _store(tmp_path: Path) -> Ledger:
    name = f"ls-{tmp_path.name}"  # a store of its own
    return Ledger(Path("mem"), storage=on_client(s3_server.MemoryClient(name=name)), location=f"mem://{name}")


@pytest.fixture(params=["folder", "store"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Ledger:
    made = _folder(tmp_path) if request.param == "folder" else _store(tmp_path)
    request.addfinalizer(made.close)
    return made


def test_each_ledger_holds_its_own_storage(tmp_path: Path) -> None:
    """A folder ledger holds the folder's storage, a ledger given an object store the store's."""
    with _folder(tmp_path) as folder, _store(tmp_path) as store:
        assert isinstance(folder.backend, FolderLedgerStorage)
        assert isinstance(store.backend, StoreLedgerStorage)
        assert folder.storage is None and store.storage is not None  # what each was given, as before
        assert folder.artifacts is folder.backend.artifacts and store.streams is store.storage.streams


def test_the_same_script_gets_the_same_answers_on_both(ledger: Ledger) -> None:
    """A task's events, existence, names, work state, seals and lease facts read alike on a folder and a store."""
    t = ledger.task("t")
    assert not t.stream.exists() and not ledger.backend.has_stream("t")
    t.append("note", {"n": 1})
    t.append("note", {"n": 2})
    assert [e.data for e in ledger.backend.task_events("t", 2)] == [{"n": 2}]
    assert [e.seq for e in ledger.backend.scan_events("t")] == [0, 1, 2]
    assert ledger.backend.has_stream("t") and not ledger.backend.has_stream("u")
    assert ledger.task_ids() == ["t"]
    assert ledger.backend.lease_holder(t.stream) == os.getpid(), "this process writes it"
    assert ledger.backend.progress(t.stream) > 0
    assert t.work_state().task_id == "t"
    assert ledger.sealed_heads() is None and ledger.backend.sealed_head("t") is None
    t.close()
    assert ledger.backend.lease_holder(t.stream) is None and not ledger.backend.held_elsewhere(t.stream)
    assert ledger.repair("t").action == "none"
    assert [e.data for e in t.events(since=1)] == [{"n": 1}, {"n": 2}], "nothing was cut"


def test_only_a_store_fences_a_lease(ledger: Ledger) -> None:
    """On a store a stalled lease is taken at the next epoch and given back; a folder's lock cannot be taken."""
    t = ledger.task("t")
    t.append("note", {})
    t.close()
    epoch = ledger.backend.fence(t.stream)
    assert ledger.backend.fences == (epoch is not None)
    assert (epoch is not None) == isinstance(ledger.backend, StoreLedgerStorage)
    assert [e.kind for e in t.events()][-1] == "note", "a fence appends no event"
