"""``intentlog repair --accept-resend``: the CLI reaches ``ledger.repair(accept_resend=True)``.

Damage whose bytes record an ``attempt.started`` is refused (exit 1, bytes unchanged) with
``--accept-damage`` alone, and the error names the flag that accepts it; with both flags the
dry run writes nothing and the repair records ``"accepted": "damage+resend"``.
``--accept-resend`` without ``--accept-damage`` is malformed usage (exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner
from strategies import check_chain, raw_lines

import intentlog
from intentlog.cli import main


def _flip_ts(line: bytes) -> bytes:
    obj = orjson.loads(line)
    ts = obj["ts"]
    obj["ts"] = ts[:-2] + str((int(ts[-2]) + 1) % 10) + "Z"
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n"


def _damaged(root: Path) -> tuple[Path, bytes]:
    """A completed call whose attempt.started line no longer chains (its predecessor flipped)."""
    led = intentlog.open(root)
    t = led.task("t")
    t.effect("k", {"q": 1}, lambda _r: b'{"answer": 42}')
    t.close()
    led.close()
    lines = raw_lines(t.path)
    k = next(i for i, ln in enumerate(lines) if orjson.loads(ln)["kind"] == "attempt.started") - 1
    damaged = b"".join(lines[:k]) + _flip_ts(lines[k]) + lines[k + 1]
    t.path.write_bytes(damaged)
    return t.path, damaged


def _run(root: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["--root", str(root), "repair", "t", *args])


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_damage_recording_a_started_send_needs_accept_resend(tmp_path: Path) -> None:
    root = tmp_path / "l"
    path, damaged = _damaged(root)
    before = _snapshot(root)

    r = _run(root, "--accept-damage", "--json")
    assert r.exit_code == 1
    assert "attempt.started" in r.stderr and "--accept-resend" in r.stderr
    assert orjson.loads(r.stdout)["exit_code"] == 1
    assert _snapshot(root) == before, "a refusal writes nothing"

    r = _run(root, "--accept-damage", "--accept-resend", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    dry = orjson.loads(r.stdout)
    assert dry["dry_run"] is True and dry["action"] == "damage"
    assert _snapshot(root) == before, "a dry run writes nothing"

    r = _run(root, "--accept-damage", "--accept-resend", "--json")
    assert r.exit_code == 0, r.output
    report = orjson.loads(r.stdout)
    assert report["quarantined"] == dry["quarantined"]
    rep = check_chain(path)[-1]
    assert rep["kind"] == "stream.repaired"
    assert rep["data"]["accepted"] == "damage+resend"
    assert len(rep["data"]["started"]) == 1
    moved = (root / report["quarantined"]).read_bytes()
    assert orjson.loads(moved)["kind"] == "attempt.started" and damaged.endswith(moved)


def test_accept_resend_alone_is_malformed_usage(tmp_path: Path) -> None:
    root = tmp_path / "l"
    _damaged(root)
    before = _snapshot(root)
    for extra in ([], ["--json"], ["--dry-run"]):
        r = _run(root, "--accept-resend", *extra)
        assert r.exit_code == 2, (extra, r.output)
        assert "--accept-damage" in r.stderr
        if extra == ["--json"]:
            assert orjson.loads(r.stdout)["exit_code"] == 2
    assert _snapshot(root) == before
