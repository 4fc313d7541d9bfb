"""``intentlog merge SRC DST``: copy what one ledger has and the other lacks; refuse diverged tasks."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import orjson
import pytest
import s3_server
from click.testing import CliRunner

import intentlog
from intentlog.artifacts.objects import FolderObjects
from intentlog.checker import verify_path
from intentlog.cli import main
from intentlog.errors import MergeRefused, NotALedger
from intentlog.eventlog.storage import FolderStreams
from intentlog.merge import merge, merge_storage
from intentlog.s3 import ObjectArtifacts, ObjectStreams

BIG = {"text": "the provider's answer " * 400}  # large enough to be stored as an object, not inline


def _fill(root: Path, task: str, notes: int, *, effect: str | None = None) -> None:
    with intentlog.open(root) as led:
        t = led.task(task)
        for i in range(notes):
            t.append("note", {"i": i, "where": str(root.name)})
        if effect is not None:
            answer = orjson.dumps({**BIG, "for": effect})
            t.effect(effect, {"ask": effect}, send=lambda req: answer, interpret=orjson.loads)


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_merge_copies_tasks_and_objects_each_written_by_one_writer(tmp_path: Path) -> None:
    """Tasks only SRC has are copied with their objects, DST's own stay; the result verifies."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _fill(src, "a", 3, effect="ask-a")
    _fill(src, "shared", 2)
    _fill(dst, "b", 2, effect="ask-b")
    result = merge(src, dst)
    assert sorted(result.plan.create) == ["a", "shared"] and result.verify is not None and result.verify.ok
    assert len(result.plan.objects) >= 1
    assert (dst / "tasks" / "a.jsonl").read_bytes() == (src / "tasks" / "a.jsonl").read_bytes()
    assert sorted(FolderStreams(dst / "tasks").names()) == ["a", "b", "shared"]
    assert set(FolderObjects(src).list()) <= set(FolderObjects(dst).list())
    report = verify_path(dst)
    assert report.ok and report.tasks == 3, report.render()
    with intentlog.open(dst) as led:  # the copied effect reads back through the library
        never = lambda r: pytest.fail("paid twice")  # noqa: E731
        again = led.task("a").effect("ask-a", {"ask": "ask-a"}, send=never, interpret=orjson.loads)
        assert again["for"] == "ask-a"
    twice = merge(src, dst)
    assert twice.plan.create == {} and sorted(twice.plan.same) == ["a", "shared"] and twice.plan.objects == []


def test_merge_extends_a_stream_dst_holds_a_prefix_of(tmp_path: Path) -> None:
    """DST has the first lines of a task SRC carried on: the missing lines are appended; a DST ahead is left."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _fill(src, "t", 2)
    merge(src, dst)
    _fill(src, "t", 3, effect="later")  # the one writer went on in SRC
    _fill(dst, "ahead", 1)
    result = merge(src, dst)
    assert list(result.plan.extend) == ["t"] and result.plan.extend["t"][0] == 3
    assert (dst / "tasks" / "t.jsonl").read_bytes() == (src / "tasks" / "t.jsonl").read_bytes()
    assert result.verify is not None and result.verify.ok
    back = merge(dst, src)  # the other way: SRC is a prefix of nothing new, 'ahead' is copied
    assert list(back.plan.create) == ["ahead"] and back.plan.same == ["t"]


def test_a_diverged_task_is_refused_named_and_nothing_is_written(tmp_path: Path) -> None:
    """The same task id written on both sides (different lines at seq 2): refused and named; DST unchanged."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _fill(src, "base", 1)
    merge(src, dst)
    _fill(src, "fresh", 2, effect="new-object")  # would be copied, were the merge not refused
    for side in (src, dst):
        with intentlog.open(side) as led:
            led.task("base").append("note", {"by": side.name})
    before = _snapshot(dst)
    with pytest.raises(MergeRefused) as info:
        merge(src, dst)
    assert info.value.diverged == (("base", 2),)
    assert "'base' at seq 2" in str(info.value) and "nothing was written" in str(info.value)
    assert _snapshot(dst) == before, "DST's bytes are unchanged"
    cli = CliRunner().invoke(main, ["merge", str(src), str(dst)])
    assert cli.exit_code == 1 and "'base' at seq 2" in cli.output
    assert _snapshot(dst) == before


def test_a_new_destination_is_created_only_when_the_merge_goes_ahead(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "new"
    _fill(src, "t", 1)
    result = CliRunner().invoke(main, ["merge", str(src), str(dst), "--json"])
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.output)
    assert out["created"] == ["t"] and out["verified"] is True
    assert (dst / "intentlog.json").is_file()


def test_a_source_that_is_not_a_ledger_or_a_foreign_destination_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _fill(src, "t", 1)
    with pytest.raises(NotALedger):
        merge(tmp_path / "nothing", tmp_path / "dst")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(NotALedger):
        merge(src, foreign)
    assert sorted(os.listdir(foreign)) == ["notes.txt"]
    assert not (tmp_path / "dst").exists()


def test_a_torn_source_tail_is_not_copied(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _fill(src, "t", 2)
    with open(src / "tasks" / "t.jsonl", "ab") as f:
        f.write(b'{"data":{},"ki')
    result = merge(src, dst)
    assert result.plan.torn == ["t"] and result.verify is not None and result.verify.ok
    assert (dst / "tasks" / "t.jsonl").read_bytes().count(b"\n") == 3


def test_merge_through_the_seams_folder_into_an_object_store_and_back(tmp_path: Path) -> None:
    """The merge is written against the seams: a folder ledger into SeaweedFS and out again, byte for byte."""
    src, back = tmp_path / "src", tmp_path / "back"
    _fill(src, "a", 2, effect="ask")
    client = s3_server.fresh_client()
    remote = (ObjectStreams(client), ObjectArtifacts(client))
    merge_storage(FolderStreams(src / "tasks"), FolderObjects(src), *remote)
    assert remote[0].read("a") == (src / "tasks" / "a.jsonl").read_bytes()
    intentlog.open(back).close()
    merge_storage(*remote, FolderStreams(back / "tasks"), FolderObjects(back))
    assert (back / "tasks" / "a.jsonl").read_bytes() == (src / "tasks" / "a.jsonl").read_bytes()
    assert verify_path(back).ok


def test_merge_cli_into_an_s3_url_and_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``intentlog merge DIR s3://…`` probes the store, copies; merging back gives the same bytes, and verifies."""
    for k, v in s3_server.seaweed().env().items():
        monkeypatch.setenv(k, v)
    src, back = tmp_path / "src", tmp_path / "back"
    _fill(src, "a", 2, effect="ask")
    url = f"s3://{s3_server.BUCKET}/{s3_server.fresh_location().prefix}"
    out = CliRunner().invoke(main, ["merge", str(src), url, "--json"])
    assert out.exit_code == 0, out.output
    assert orjson.loads(out.output)["created"] == ["a"] and orjson.loads(out.output)["verified"] is True
    out = CliRunner().invoke(main, ["merge", url, str(back)])
    assert out.exit_code == 0 and "1 task(s) copied" in out.output, out.output
    assert (back / "tasks" / "a.jsonl").read_bytes() == (src / "tasks" / "a.jsonl").read_bytes()
    assert verify_path(back).ok
