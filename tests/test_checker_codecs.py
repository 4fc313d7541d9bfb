"""heads.json and gc.jsonl each have one codec, next to its writer, that the checker reads through.

The writer's output decodes with the codec (so the checker and export read what gc and
seal write), and the checker's static import graph reaches no writing code.
"""

from __future__ import annotations

import ast
import datetime as dt
from pathlib import Path

import intentlog
from intentlog.eventlog import gclog
from intentlog.eventlog.reader import StreamScan
from intentlog.heads import seal
from intentlog.heads.codec import decode_heads, encode_heads, read_heads_at
from intentlog.retention import apply_gc, keep

PKG = Path(intentlog.__file__).parent


def test_what_gc_writes_decodes_with_the_gc_log_codec(tmp_path: Path) -> None:
    """apply_gc's gc.jsonl, read back by gclog: the deleted stream is named with its id, head and length."""
    ledger = intentlog.open(tmp_path / "ledger")
    ledger.task("old").append("note", {})
    ledger.task("kept").append("note", {})
    keep(ledger, "kept")
    ledger.close()
    scan = StreamScan(ledger.stream_path("old"))
    stream_id = next(ev.data["stream"] for ev in scan if ev.seq == 0)
    for _ in scan:  # to the end: scan.head is the last event's digest
        pass
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=90)
    result = apply_gc(ledger, max_age="30d", now=later)
    assert result.deleted == ("old",)
    deleted, problem = gclog.read_gc_deletions(ledger.root)
    assert problem is None
    d = deleted["old"]
    assert (d.stream, d.head, d.events, d.finished) == (stream_id, scan.head, 2, True)
    events = list(StreamScan(ledger.root / gclog.GC_LOG))
    assert [e.kind for e in events][1:] == [gclog.GC_STARTED, gclog.GC_FINISHED]
    entry = events[1].data["tasks"][0]
    assert {k: entry[k] for k in ("task", "stream", "head", "events")} == gclog.started_task(
        "old", stream_id, scan.head, 2
    )
    assert events[2].data["deleted"] == ["old"] and events[2].data["skipped"] == []
    ledger.close()


def test_the_gc_log_codec_reads_its_own_data_builders(tmp_path: Path) -> None:
    """started_task / finished_data, appended as gc.started / gc.finished, decode to one finished deletion;
    a skipped task is no deletion."""
    from intentlog.eventlog.writer import StreamWriter

    log = StreamWriter(
        path=tmp_path / gclog.GC_LOG, task_id="gc", quarantine_dir=tmp_path / "q", tmp_dir=tmp_path / "t", in_root=True
    )
    (tmp_path / "t").mkdir()
    log.open(wait=1.0)
    head = "blake3:" + "ab" * 32
    started = log.append(
        gclog.GC_STARTED, {"tasks": [gclog.started_task("a", "s1", head, 3), gclog.started_task("b", "s2", head, 1)]}
    )
    log.append(gclog.GC_FINISHED, gclog.finished_data(started.seq, ["a"], [("b", "a writer holds it")]))
    log.close()
    deleted, problem = gclog.read_gc_deletions(tmp_path)
    assert problem is None and sorted(deleted) == ["a"]
    assert deleted["a"] == gclog.GcDeletion("a", "s1", head, 3, started.ts, started.seq, True)


def test_heads_json_round_trips_through_its_codec(tmp_path: Path) -> None:
    """seal writes heads.json; codec.read_heads_at decodes it; encode_heads gives back the same bytes."""
    ledger = intentlog.open(tmp_path / "ledger")
    ledger.task("t").append("note", {"n": 1})
    dest = seal(ledger)
    heads = read_heads_at(ledger.root)
    assert heads is not None and heads["t"].seq == 1 and heads["t"].events == 2
    assert encode_heads(heads) == dest.read_bytes()
    assert decode_heads(dest.read_bytes()) == heads
    ledger.close()


def _imports(path: Path, module: str) -> set[str]:
    """Modules ``path`` imports at run time, at module or function level (``if TYPE_CHECKING:`` left out)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and node.module and id(node) not in typing_only:
            base = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
            out.add(".".join([*base, *node.module.split(".")]))
    return out


def test_the_checker_reaches_no_writing_code() -> None:
    """From every checker module, following imports (function-level too), no writer, lock, store or seal is reached."""
    todo = [f"intentlog.checker.{p.stem}" for p in (PKG / "checker").glob("*.py") if p.stem != "__init__"]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        rel = Path(*module.split(".")[1:])
        path = PKG / rel.with_suffix(".py")
        if not path.exists():
            path = PKG / rel / "__init__.py"
        if module in seen or not path.exists():
            continue
        seen.add(module)
        todo.extend(_imports(path, module))
    assert {"intentlog.heads.codec", "intentlog.eventlog.gclog", "intentlog.eventlog.reader"} <= seen
    bad = {m for m in seen if m.endswith((".writer", ".fsutil", ".lock", ".store", "intentlog.heads", ".retention"))}
    assert not bad, sorted(bad)
