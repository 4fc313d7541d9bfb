"""fork, merge and ``--dry-run`` are one operation on either storage: a folder and a SeaweedFS give one record.

Every test builds one seed ledger in a folder (the same bytes for each storage), puts it on
the storage under test with ``merge`` and then forks, merges and dry-runs there through the
public API and the command line. What each storage ends up holding is compared with what the
seed's own bytes say it must hold -- the same expectation for both storages -- read back
through the storage (its stream bytes, every key or file, before and after).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import s3_server
from click.testing import CliRunner

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.cli import main
from intentlog.errors import EffectUnknown, MergeRefused
from intentlog.fork import check_fork
from intentlog.merge import merge


class Provider:
    def __call__(self, request: Any) -> bytes:
        return orjson.dumps({"echo": request})


def _boom(_: object) -> bytes:
    raise TimeoutError("read timed out")


def script(task: intentlog.Task, topic: str) -> None:
    send = Provider()
    a = task.effect("outline", {"step": "outline"}, send, interpret=orjson.loads)
    b = task.effect("draft", {"step": "draft", "topic": topic, "after": a}, send, interpret=orjson.loads)
    task.effect("review", {"step": "review", "draft": b}, send, interpret=orjson.loads)


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    """A folder ledger: task ``essay`` (three calls), task ``u`` (an unknown effect) and one object."""
    root = tmp_path / "seed"
    with intentlog.open(root) as ledger:
        script(ledger.task("essay"), "tides")
        with pytest.raises(EffectUnknown):
            ledger.task("u").effect("k1", {"q": 1}, send=_boom)
        ledger.artifacts.put(b"an object both storages must hold")
    return root


@pytest.fixture(params=["folder", "store"])
def location(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the ledger under test is: a new folder, or a fresh prefix on the run's SeaweedFS."""
    if request.param == "folder":
        return str(tmp_path / "ledger")
    return s3_server.ledger_url(monkeypatch)


def state(location: str) -> dict[str, bytes]:
    """Every key, or every file (lock files and tmp/ included), under the ledger, with its bytes."""
    if location.startswith("s3://"):
        return s3_server.snapshot(location)
    base = Path(location)
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def stream(location: str, task: str) -> bytes:
    with intentlog.open(location, create=False) as ledger:
        return ledger.streams.read(task)


def seed_lines(seed: Path, task: str) -> list[bytes]:
    return (seed / "tasks" / f"{task}.jsonl").read_bytes().splitlines(keepends=True)


def run(location: str, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["--root", location, *args])
    return r.exit_code, r.output


def expected_fork(
    seed: Path, task: str, from_call: str, key: str, note: str | None
) -> tuple[list[bytes], dict[str, Any]]:
    """The copied events (their seq, kind, ts and data bytes, as the seed holds them) and task.forked's data."""
    lines = seed_lines(seed, task)
    upto = min(orjson.loads(line)["seq"] for line in lines if orjson.loads(line)["data"].get("key") == key) - 1
    copied = [_without_prev(line) for line in lines[1 : upto + 1]]
    forked = {
        "from_task": task,
        "from_call": from_call,
        "key": key,
        "upto_seq": upto,
        "from_head": digest_bytes(lines[upto]),
        "from_stream": orjson.loads(lines[0])["data"]["stream"],
        "note": note,
    }
    return copied, forked


def _without_prev(line: bytes) -> bytes:
    """A line's bytes but ``prev`` (a fork re-chains its copies from its own line 0: only prev differs)."""
    obj = orjson.loads(line)
    return orjson.dumps({k: v for k, v in obj.items() if k != "prev"}, option=orjson.OPT_SORT_KEYS)


def test_merge_puts_the_seeds_bytes_on_the_storage_then_extends_and_refuses_alike(seed: Path, location: str) -> None:
    objects = sorted(p.name for p in (seed / "objects").rglob("*") if p.is_file())
    events = sum(len(seed_lines(seed, t)) for t in ("essay", "u"))
    assert merge(seed, location).to_json() == {
        "created": ["essay", "u"],
        "extended": [],
        "same": [],
        "destination_ahead": [],
        "objects_copied": len(objects),
        "events_copied": events,
        "torn_tails_skipped": [],
        "retired_in_destination": [],
        "verified": True,
    }
    for t in ("essay", "u"):
        assert stream(location, t) == (seed / "tasks" / f"{t}.jsonl").read_bytes()
    with intentlog.open(location, create=False) as ledger:
        assert sorted(d.split(":")[1][2:] for d in ledger.objects.list()) == objects
    # the seed moves on: the same merge extends the storage's stream with exactly the new lines
    with intentlog.open(seed) as ledger:
        ledger.task("essay").effect("coda", {"step": "coda"}, Provider(), interpret=orjson.loads)
    grown = len(seed_lines(seed, "essay")) - len(stream(location, "essay").splitlines())
    result = merge(seed, location).to_json()
    assert (result["extended"], result["same"], result["events_copied"], result["objects_copied"]) == (
        ["essay"],
        ["u"],
        grown,
        0,
    )
    assert stream(location, "essay") == (seed / "tasks" / "essay.jsonl").read_bytes()
    # each side then writes its own line at one seq: refused on either storage, nothing written there
    common = len(seed_lines(seed, "essay"))
    with intentlog.open(location, create=False) as ledger:
        ledger.task("essay").effect("here", {"side": "storage"}, Provider(), interpret=orjson.loads)
    with intentlog.open(seed) as ledger:
        ledger.task("essay").effect("there", {"side": "seed"}, Provider(), interpret=orjson.loads)
    before = state(location)
    with pytest.raises(MergeRefused) as refused:
        merge(seed, location)
    assert refused.value.diverged == (("essay", common),)
    assert state(location) == before


@pytest.mark.parametrize("how", ["api", "cli"])
def test_fork_copies_the_same_record_on_either_storage(seed: Path, location: str, how: str) -> None:
    merge(seed, location)
    before = state(location)
    if how == "api":
        with intentlog.open(location, create=False) as ledger:
            fork_id = ledger.fork("essay", "call-2", "essay.b", note="another topic").id
    else:
        code, out = run(location, "fork", "essay", "--from", "call-2", "--as", "essay.b", "--note", "another topic")
        assert code == 0, out
        fork_id = "essay.b"
    assert fork_id == "essay.b"
    after = state(location)
    assert {k: v for k, v in after.items() if k in before} == before, "nothing that existed changed"
    lines = stream(location, "essay.b").splitlines(keepends=True)
    copied, forked = expected_fork(seed, "essay", "call-2", "draft", "another topic")
    assert [_without_prev(line) for line in lines[1:-1]] == copied
    last = orjson.loads(lines[-1])
    assert (last["kind"], last["seq"], last["data"]) == ("task.forked", forked["upto_seq"] + 1, forked)
    assert orjson.loads(lines[0])["data"]["task"] == "essay.b"
    with intentlog.open(location, create=False) as ledger:
        assert check_fork(ledger, "essay.b") == []
    code, out = run(location, "verify")
    assert code == 0, out
    # the id is taken now: a second fork under it is refused, writing nothing
    code, out = run(location, "fork", "essay", "--from", "call-3", "--as", "essay.b")
    assert code == 1 and "already exists" in out, out
    assert state(location) == after


def test_a_dry_run_leaves_the_storage_byte_identical_and_shows_what_the_command_appends(
    seed: Path, location: str
) -> None:
    merge(seed, location)
    code, out = run(location, "seal")  # the dry run's copy checks the streams against the seals, as a writer does
    assert code == 0, out
    for args in (
        ("fork", "essay", "--from", "call-3", "--json"),
        ("reconcile", "u", "call-1", "--not-served", "--json"),
    ):
        before = state(location)
        code, out = run(location, *args, "--dry-run")
        assert code == 0, out
        would = orjson.loads(out)
        assert would["dry_run"] is True
        assert state(location) == before, f"{args[0]} --dry-run wrote nothing"
        code, out = run(location, *args)
        assert code == 0, out
        done = orjson.loads(out)
        assert done["dry_run"] is False
        assert (done["task"], done["seq"], done["kind"], done["data"]) == (
            would["task"],
            would["seq"],
            would["kind"],
            would["data"],
        )
    _, forked = expected_fork(seed, "essay", "call-3", "review", None)
    assert orjson.loads(stream(location, "essay.fork-1").splitlines()[-1])["data"] == forked


def test_a_dry_run_is_refused_as_the_real_command_is_when_a_stream_contradicts_its_seal(
    seed: Path, location: str
) -> None:
    """The seals travel into the private copy: a stream cut below its sealed head is refused there too."""
    merge(seed, location)
    kept = state(location)
    with intentlog.open(location, create=False) as ledger:
        ledger.task("essay").effect("coda", {"step": "coda"}, Provider(), interpret=orjson.loads)
    code, out = run(location, "seal")
    assert code == 0, out
    # the coda's events go (its segments, or its lines), the seal stays: the stream ends below its sealed head
    if location.startswith("s3://"):
        client = s3_server.client_of(location)
        for key, _ in client.scan("tasks/essay/s"):
            if key not in kept:
                client.delete(key)
    else:
        (Path(location) / "tasks" / "essay.jsonl").write_bytes(kept["tasks/essay.jsonl"])
    assert stream(location, "essay") == (seed / "tasks" / "essay.jsonl").read_bytes()
    before = state(location)
    code, dry = run(location, "accept", "essay", "--dry-run")
    assert code == 1 and "events were cut from its end" in dry, dry
    code, real = run(location, "accept", "essay")
    assert code == 1 and "events were cut from its end" in real, real
    assert state(location) == before


def test_a_fork_in_a_cloned_folder_without_its_empty_folders_is_created(seed: Path, tmp_path: Path) -> None:
    """A git clone drops empty folders (tmp/): the command line's fork stages the new stream all the same."""
    clone = tmp_path / "clone"
    merge(seed, clone)
    for empty in ("tmp", "quarantine"):
        (clone / empty).rmdir()
    code, out = run(str(clone), "fork", "essay", "--from", "call-2", "--as", "essay.b")
    assert code == 0, out
    _, forked = expected_fork(seed, "essay", "call-2", "draft", None)
    assert orjson.loads(stream(str(clone), "essay.b").splitlines()[-1])["data"] == forked


def test_a_merge_into_a_store_that_does_not_fence_writers_writes_nothing(
    seed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The destination must fence writers: the merge is refused before anything is written, though this process
    wrote to the store before (when the probe passed)."""
    import intentlog.s3
    from intentlog.errors import StoreRefused

    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url, create=False) as ledger:  # probed before its first put
        ledger.task("other").effect("k", {"q": 1}, Provider(), interpret=orjson.loads)
    before = state(url)

    def refused(client: object) -> None:
        raise StoreRefused(str(client), ["a second conditional create of one key succeeded"])

    monkeypatch.setattr(intentlog.s3, "require_fencing", refused)
    with pytest.raises(StoreRefused, match="second conditional create"):
        merge(seed, url)
    assert state(url) == before


def test_a_merged_capture_is_compared_beside_a_folder_and_never_with_an_unrelated_folder(
    seed: Path, location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorded file is compared in the folder holding the destination (the seed's workspace here); a store
    has no such folder, so the merge's check never reads the current folder for it."""
    (tmp_path / "notes.txt").write_bytes(b"what the seed recorded")
    with intentlog.open(seed) as ledger:
        ledger.task("notes").record_artifact("notes.txt")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no notes.txt here
    result = merge(seed, location)
    assert result.verify is not None and result.verify.ok, result.verify.render() if result.verify else None
    compared = not location.startswith("s3://")
    assert any(p.code == "workspace" for p in result.verify.problems) is not compared
