"""A parent and the children it has not joined are one unit for retention (rule ``children``).

A parent that spawned children it has not joined is kept (its script continues from this
record and joins them), and every child it has not joined is kept with it; an idle parent
given up (``fail``) goes with its unjoined children, dated by the latest activity among them,
so an age limit or a size cap takes all or none; the children of a parent that joined them
go by their own age. A backlog stream gc cannot read whole holds every child task (a child
item's task id is the child id, not ``NAME.item.ID``). The same on a folder and on an
``s3://`` ledger (a real SeaweedFS).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest
import s3_server

import intentlog
from intentlog.retention import apply_gc, keep, plan_gc
from intentlog.retention.policy import parse_ts
from intentlog.s3 import S3Client, parse_s3_url

LATER = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=60)
Opener = Callable[[], intentlog.Ledger]


def _build(ledger: intentlog.Ledger) -> None:
    merge = ledger.task("merge")  # returned children, not joined yet: the parent's re-run joins them
    merge.spawn("doc-a", {"doc": "a"}, run=lambda c: "summary a")
    merge.spawn("doc-b", {"doc": "b"}, run=lambda c: "summary b")
    merge.close()
    total = ledger.task("sum")  # joined: parent and child go by their own age
    total.spawn("part-1", 1, run=lambda c: 10)
    assert total.join() == {"part-1": 10}
    total.finish(10)
    total.close()
    gone = ledger.task("zz-given-up")  # given up with a child it never joined: both go, together
    gone.spawn("aa-orphan", 2, run=lambda c: 20)
    gone.fail_task("the source was withdrawn")
    gone.close()
    held = ledger.task("held-parent")  # given up, but a person keeps its unjoined child: kept with it
    held.spawn("held-kid", 3, run=lambda c: 30)
    held.fail_task("superseded")
    held.close()


def _on_record(opener: Opener, ids: list[str]) -> set[str]:
    with opener() as ledger:
        return set(ledger.task_ids()) & set(ids)


def _scenario(opener: Opener) -> None:
    with opener() as ledger:
        _build(ledger)
    with opener() as ledger:
        keep(ledger, "held-kid", "the reviewer's copy")
        plan = plan_gc(ledger, max_age="30d", now=LATER)
        kept = {k.task: k.rule for k in plan.kept}
        details = {k.task: k.detail for k in plan.kept}
        assert sorted(t.task for t in plan.expired) == ["aa-orphan", "part-1", "sum", "zz-given-up"], plan.render()
        assert kept["merge"] == "protected" and "child" in details["merge"], details["merge"]
        assert kept["doc-a"] == "children" and kept["doc-b"] == "children"
        assert "'merge'" in details["doc-a"] and "not joined" in details["doc-a"], details["doc-a"]
        assert kept["held-kid"] == "keep" and kept["held-parent"] == "children"
        assert "'held-kid'" in details["held-parent"], details["held-parent"]
        assert "doc-a  [children] kept with its parent 'merge'" in plan.render(), plan.render()
        result = apply_gc(ledger, plan)
        assert sorted(result.deleted) == ["aa-orphan", "part-1", "sum", "zz-given-up"] and not result.skipped
    everyone = ["merge", "doc-a", "doc-b", "sum", "part-1", "zz-given-up", "aa-orphan", "held-parent", "held-kid"]
    assert _on_record(opener, everyone) == {"merge", "doc-a", "doc-b", "held-parent", "held-kid"}
    with opener() as ledger:  # the parent's re-run finds its children's results
        assert ledger.task("merge").join() == {"doc-a": "summary a", "doc-b": "summary b"}


def test_a_parent_and_the_children_it_has_not_joined_are_kept_or_expired_together(ledger_root: Path) -> None:
    _scenario(lambda: intentlog.open(ledger_root))


def test_a_parent_and_its_unjoined_children_are_one_unit_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3_server.ledger_url(monkeypatch)
    _scenario(lambda: intentlog.open(url))


def _given_up_family(ledger: intentlog.Ledger) -> tuple[dt.datetime, dt.datetime]:
    """A given-up parent whose unjoined child was active after it; their last activities."""
    parent = ledger.task("p")
    parent.spawn("c", 1)
    parent.fail_task("given up")
    parent.close()
    ledger.task("c").finish(1)  # the child returns after its parent was given up: it is the younger
    ledger.task("c").close()
    ledger.task("other").finish(2)
    ledger.task("other").close()

    def last(task: str) -> dt.datetime:
        return max(parse_ts(ev.ts) for ev in ledger.task(task).events())

    return last("p"), last("c")


def _age(opener: Opener) -> None:
    with opener() as ledger:
        p_last, c_last = _given_up_family(ledger)
    assert c_last > p_last
    # the parent alone is past max age, its child is not: neither goes
    now = p_last + dt.timedelta(hours=1) + (c_last - p_last) / 2
    with opener() as ledger:
        plan = plan_gc(ledger, max_age="1h", max_size="none", grace="0s", now=now)
        assert [t.task for t in plan.expired] == [], plan.render()
        later = c_last + dt.timedelta(hours=2)
        plan = plan_gc(ledger, max_age="1h", max_size="none", grace="0s", now=later)
        assert sorted(t.task for t in plan.expired) == ["c", "other", "p"], plan.render()


def test_an_age_limit_takes_a_given_up_parent_and_its_younger_child_together(ledger_root: Path) -> None:
    _age(lambda: intentlog.open(ledger_root))


def test_an_age_limit_takes_both_or_neither_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3_server.ledger_url(monkeypatch)
    _age(lambda: intentlog.open(url))


def test_a_size_cap_takes_a_given_up_parent_with_its_unjoined_child(ledger_root: Path) -> None:
    """The cap is met by deleting the parent alone; its unjoined child goes with it, the newer task stays."""
    with intentlog.open(ledger_root) as ledger:
        _given_up_family(ledger)
    with intentlog.open(ledger_root) as ledger:
        total = plan_gc(ledger, max_age="none", max_size="none", now=LATER).bytes_before
        cap = total - (ledger_root / "tasks" / "p.jsonl").stat().st_size
        plan = plan_gc(ledger, max_age="none", max_size=cap, now=LATER)
        assert sorted(t.task for t in plan.expired) == ["c", "p"], plan.render()
        assert [k.task for k in plan.kept] == ["other"]
        result = apply_gc(ledger, plan)
        assert sorted(result.deleted) == ["c", "p"]
    assert sorted(p.name for p in (ledger_root / "tasks").glob("*.jsonl")) == ["other.jsonl"]


def _race(monkeypatch: pytest.MonkeyPatch, session: type, opener: Opener) -> None:
    """A writer takes the given-up parent up again after the apply's plan: its unjoined child stays with it."""
    real = session.delete_streams
    calls: list[list[str]] = []

    def resumed_first(self: object, expired: list[intentlog.retention.ExpiredTask], *args: object) -> None:
        if not calls:
            with opener() as other:
                other.task("p").append("note", {"resumed": True})  # the parent changes: gc must skip it
        calls.append([t.task for t in expired])
        real(self, expired, *args)

    monkeypatch.setattr(session, "delete_streams", resumed_first)
    with opener() as ledger:
        _given_up_family(ledger)
        keep(ledger, "other")
    with opener() as ledger:
        result = apply_gc(ledger, max_age="30d", now=LATER)
        skipped = dict(result.skipped)
        assert result.deleted == () and "p" in skipped, result
        assert "kept with its parent 'p'" in skipped["c"], skipped
        assert calls[0] == ["p"], calls  # the parent first; its child only once it is gone
    assert _on_record(opener, ["p", "c"]) == {"p", "c"}


def test_a_child_stays_when_its_parent_is_taken_up_during_the_apply(
    ledger_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from intentlog.retention.folder import FolderSession

    _race(monkeypatch, FolderSession, lambda: intentlog.open(ledger_root))


def test_a_child_stays_with_its_parent_taken_up_on_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    from intentlog.s3.gcsource import StoreSession

    url = s3_server.ledger_url(monkeypatch)
    _race(monkeypatch, StoreSession, lambda: intentlog.open(url))


def _family_and_backlog(ledger: intentlog.Ledger) -> None:
    ledger.backlog("nb").add("x", {"item": "x"})
    parent = ledger.task("p")
    parent.spawn("kid", 1, run=lambda c: 1)  # a child, as a backlog's child item's task is: its own id
    assert parent.join() == {"kid": 1}
    parent.close()
    ledger.task("other").finish(2)
    ledger.task("other").close()


def _unreadable_backlog(plan: intentlog.retention.GcPlan) -> None:
    kept = {k.task: k.rule for k in plan.kept}
    assert kept["kid"] == "backlog", plan.render()
    assert "cannot be read whole and it is a child task" in {k.task: k.detail for k in plan.kept}["kid"]
    assert {"p", "other"} <= {t.task for t in plan.expired}
    assert "kid" not in {t.task for t in plan.expired}


def test_a_backlog_stream_gc_cannot_read_holds_every_child_task(ledger_root: Path) -> None:
    with intentlog.open(ledger_root) as ledger:
        _family_and_backlog(ledger)
    stream = ledger_root / "tasks" / "nb.backlog.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"', b"'", 2)  # a line in the middle no longer parses
    stream.write_bytes(b"".join(lines))
    before = stream.read_bytes()
    with intentlog.open(ledger_root) as ledger:
        _unreadable_backlog(plan_gc(ledger, max_age="1d", now=LATER))
        apply_gc(ledger, max_age="1d", now=LATER)
    assert (ledger_root / "tasks" / "kid.jsonl").exists() and stream.read_bytes() == before


def test_a_backlog_stream_gc_cannot_read_on_the_store_holds_every_child_task(monkeypatch: pytest.MonkeyPatch) -> None:
    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        _family_and_backlog(ledger)
    client = S3Client(parse_s3_url(url))
    segs = sorted(k for k, _ in client.scan("tasks/nb.backlog/s"))
    damaged = False
    for seg in segs:
        body = client.get(seg)
        if body is not None and b'"phase":"backlog"' in body and b"backlog.item_added" in body:
            client.delete(seg)  # an edited event before the item's: the item's link to it breaks
            client.create(seg, body.replace(b'"phase":"backlog"', b'"phase":"backlxg"'))
            damaged = True
            break
    assert damaged, segs
    with intentlog.open(url) as ledger:
        _unreadable_backlog(plan_gc(ledger, max_age="1d", now=LATER))
        apply_gc(ledger, max_age="1d", now=LATER)
    with intentlog.open(url) as ledger:
        assert "kid" in ledger.task_ids()


def test_the_children_of_a_parent_gc_cannot_read_are_kept_with_it(ledger_root: Path) -> None:
    """Whether it joined them is unknown: its children, listed before it and after it, stay with it."""
    with intentlog.open(ledger_root) as ledger:
        parent = ledger.task("m")
        parent.spawn("a-kid", 1, run=lambda c: 1)
        parent.spawn("z-kid", 2, run=lambda c: 2)
        assert parent.join() == {"a-kid": 1, "z-kid": 2}
        parent.finish(3)
        parent.close()
        ledger.task("other").finish(4)
        ledger.task("other").close()
    stream = ledger_root / "tasks" / "m.jsonl"
    lines = stream.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"', b"'", 2)  # a line in the middle no longer parses
    stream.write_bytes(b"".join(lines))
    with intentlog.open(ledger_root) as ledger:
        plan = plan_gc(ledger, max_age="30d", now=LATER)
        kept = {k.task: (k.rule, k.detail) for k in plan.kept}
        assert kept["m"][0] == "unreadable" and [t.task for t in plan.expired] == ["other"], plan.render()
        for kid in ("a-kid", "z-kid"):
            assert kept[kid][0] == "children" and "its parent 'm'" in kept[kid][1], kept[kid]
        assert apply_gc(ledger, plan).deleted == ("other",)
    assert (ledger_root / "tasks" / "a-kid.jsonl").exists() and (ledger_root / "tasks" / "z-kid.jsonl").exists()


def test_the_store_and_a_folder_holding_the_same_family_plan_alike(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Row for row and byte for byte, through the library and ``intentlog gc --json``."""
    import json

    from click.testing import CliRunner

    from intentlog.cli import main
    from intentlog.merge import merge

    url = s3_server.ledger_url(monkeypatch)
    with intentlog.open(url) as ledger:
        _build(ledger)
        _given_up_family(ledger)
    folder = tmp_path / "copy"
    merge(url, folder)
    store, local = intentlog.open(url, create=False), intentlog.open(folder)
    for policy in ({"max_age": "30d"}, {"max_age": "none", "max_size": "3KB"}, {"max_age": "45d", "grace": "0s"}):
        on_store = plan_gc(store, now=LATER, **policy)  # type: ignore[arg-type]
        on_folder = plan_gc(local, now=LATER, **policy)  # type: ignore[arg-type]
        assert on_store.render() == on_folder.render()
        assert b"".join(on_store.iter_json()) == b"".join(on_folder.iter_json())
    assert {"merge", "doc-a", "doc-b"} <= {k.task for k in plan_gc(store, now=LATER).kept}
    docs = []
    for root in (url, str(folder)):
        got = CliRunner().invoke(main, ["--root", root, "gc", "--json", "--grace", "0s"])
        assert got.exit_code == 0, got.output
        doc = json.loads(got.stdout)
        doc.pop("now")
        docs.append(doc)
    assert docs[0] == docs[1]
    kept = {k["task"]: k["rule"] for k in docs[0]["kept"]}
    assert kept["merge"] == "protected" and kept["doc-a"] == kept["doc-b"] == "children"
