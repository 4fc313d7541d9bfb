"""The writer repairs only what a crash can cause; the operator accepts the rest explicitly.

Before the fix, a bit flip in line n-1 made the writer quarantine line n (a whole event
that no longer chained) and a re-run resumed from before it and paid again; a sealed
stream cut by a line or two, or emptied, was silently extended and re-sent every effect.
Now both are refused for writing with CorruptStream (0 sends, bytes unchanged) until
``intentlog repair TASK --accept-damage`` moves the damage aside and records that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from strategies import b3, check_chain, raw_lines

import intentlog
from intentlog.cli import main
from intentlog.heads import seal


class Provider:
    """Counts what it is sent: the test's own record of payment."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def __call__(self, request: Any) -> bytes:
        self.sent.append(request)
        return b'{"answer": 42}'


def _completed(root: Path) -> tuple[intentlog.Ledger, Path, list[bytes]]:
    led = intentlog.open(root)
    t = led.task("t")
    p = Provider()
    t.effect("k", {"q": 1}, p)
    t.close()
    assert len(p.sent) == 1
    return led, t.path, raw_lines(t.path)


def _flip_ts(line: bytes) -> bytes:
    """Change the last digit of the timestamp: still a well-formed event, but its hash changes."""
    obj = orjson.loads(line)
    ts = obj["ts"]
    obj["ts"] = ts[:-2] + str((int(ts[-2]) + 1) % 10) + "Z"
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n"


def _rerun_sends(led: intentlog.Ledger) -> tuple[int, BaseException | None]:
    p = Provider()
    err: BaseException | None = None
    try:
        led.task("t").effect("k", {"q": 1}, p)
    except intentlog.IntentlogError as exc:
        err = exc
    finally:
        led.task("t").close()
    return len(p.sent), err


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_a_bit_flip_in_line_n_minus_1_is_refused_with_zero_sends(tmp_path: Path, k: int) -> None:
    """The stream ends at line k+1 (0-based); line k is flipped, so the last line does not chain."""
    led, path, lines = _completed(tmp_path / "l")
    damaged = b"".join(lines[:k]) + _flip_ts(lines[k]) + lines[k + 1]
    path.write_bytes(damaged)

    sends, err = _rerun_sends(led)
    assert sends == 0, "a re-run paid again"
    assert isinstance(err, intentlog.CorruptStream) and err.line == k + 2
    assert str(path) in str(err) and "does not chain" in str(err) and "--accept-damage" in str(err)
    assert path.read_bytes() == damaged, "nothing written"
    assert not any((tmp_path / "l" / "quarantine").iterdir())

    with pytest.raises(intentlog.CorruptStream):
        led.repair("t")  # only what a writer would do: refused the same way
    # line k+1 is attempt.started when k == 2: moving it aside needs the resend risk accepted too
    started = orjson.loads(lines[k + 1])["kind"] == "attempt.started"
    if started:
        with pytest.raises(intentlog.CorruptStream, match="accept_resend"):
            led.repair("t", accept_damage=True, dry_run=True)
    dry = led.repair("t", accept_damage=True, accept_resend=started, dry_run=True)
    assert (dry.action, dry.line, dry.size, dry.event) == ("damage", k + 2, len(lines[k + 1]), None)
    assert path.read_bytes() == damaged, "a dry run writes nothing"

    report = led.repair("t", accept_damage=True, accept_resend=started)
    assert (report.action, report.line, report.quarantined) == ("damage", k + 2, dry.quarantined)
    assert report.quarantined is not None
    assert (tmp_path / "l" / report.quarantined).read_bytes() == lines[k + 1]
    events = check_chain(path)
    rep = events[-1]
    assert rep["kind"] == "stream.repaired" and rep["seq"] == k + 1
    assert rep["data"]["accepted"] == ("damage+resend" if started else "damage") and rep["data"]["suspect"] is True
    assert rep["data"]["quarantined"] == {
        "file": report.quarantined,
        "digest": b3(lines[k + 1]),
        "size": len(lines[k + 1]),
    }
    led.task("t").append("note", {"writable": True})  # and the task is writable again
    led.close()


@pytest.mark.parametrize("cut", ["one line", "two lines", "emptied", "mid-line"])
def test_a_sealed_stream_cut_short_is_refused_with_zero_sends(tmp_path: Path, cut: str) -> None:
    led, path, lines = _completed(tmp_path / "l")
    seal(led)
    sealed = orjson.loads((tmp_path / "l" / "heads.json").read_bytes())["tasks"]["t"]
    keep = {"one line": lines[:-1], "two lines": lines[:-2], "emptied": [], "mid-line": [*lines[:-1], lines[-1][:9]]}
    damaged = b"".join(keep[cut])
    path.write_bytes(damaged)

    sends, err = _rerun_sends(led)
    assert sends == 0, "a re-run of a cut sealed stream paid again"
    assert isinstance(err, intentlog.CorruptStream)
    assert "heads.json" in str(err) and sealed["head"] in str(err)
    assert path.read_bytes() == damaged

    report = led.repair("t", accept_damage=True)
    assert report.action == "damage" and report.event is not None
    rep = report.event.data
    assert rep["accepted"] == "damage" and rep["seal"] == {"seq": sealed["seq"], "head": sealed["head"]}
    # writable from now on, in this process and the next: the stream records which seal it accepted
    led.task("t").append("note", {"after": "repair"})
    led.close()
    led2 = intentlog.open(tmp_path / "l")
    led2.task("t").append("note", {"again": True})
    led2.close()
    kinds = [e["kind"] for e in check_chain(path)]
    assert kinds[-3:] == ["stream.repaired", "note", "note"]
    seal(led2)  # and it can be sealed again


def test_a_torn_tail_after_the_sealed_head_is_still_repaired_automatically(tmp_path: Path) -> None:
    """What a crash leaves after a sealed stream grew is repaired by the next writer, as before."""
    led, path, _ = _completed(tmp_path / "l")
    seal(led)
    led.task("t").append("note", {"i": 1})
    led.close()
    with path.open("ab") as f:
        f.write(b'{"data":{"i":2},"ki')
    ev = led.task("t").append("note", {"i": 3})
    led.close()
    events = check_chain(path)
    assert events[-2]["kind"] == "stream.repaired" and "accepted" not in events[-2]["data"]
    assert ev.seq == events[-1]["seq"]


def test_a_rewritten_stream_that_rechains_is_refused_against_its_seal(tmp_path: Path) -> None:
    """Same length, valid chain, but the sealed seq no longer hashes to the sealed head."""
    led, path, lines = _completed(tmp_path / "l")
    seal(led)
    out, prev = [], None
    for i, line in enumerate(lines):
        obj = orjson.loads(line)
        obj["prev"] = prev
        if i == 1:
            obj["ts"] = orjson.loads(_flip_ts(line))["ts"]
        raw = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n"
        out.append(raw)
        prev = b3(raw)
    path.write_bytes(b"".join(out))
    sends, err = _rerun_sends(led)
    assert sends == 0 and isinstance(err, intentlog.CorruptStream) and "rewritten" in str(err)


def test_the_repair_command(tmp_path: Path) -> None:
    led, path, lines = _completed(tmp_path / "l")
    led.close()
    damaged = b"".join(lines[:3]) + _flip_ts(lines[3]) + lines[4]
    path.write_bytes(damaged)
    runner = CliRunner()
    res = runner.invoke(main, ["--root", str(tmp_path / "l"), "repair", "t"])
    assert res.exit_code == 1 and "does not chain" in res.output + (res.stderr or "")
    assert path.read_bytes() == damaged
    res = runner.invoke(main, ["--root", str(tmp_path / "l"), "repair", "t", "--accept-damage", "--dry-run"])
    assert res.exit_code == 0 and "would move accepted damage from line 5" in res.output
    assert path.read_bytes() == damaged
    res = runner.invoke(main, ["--root", str(tmp_path / "l"), "repair", "t", "--accept-damage", "--json"])
    assert res.exit_code == 0, res.output
    out = orjson.loads(res.output)
    assert (out["action"], out["line"], out["event"]["kind"]) == ("damage", 5, "stream.repaired")
    assert (tmp_path / "l" / out["quarantined"]).read_bytes() == lines[4]
    res = runner.invoke(main, ["--root", str(tmp_path / "l"), "repair", "t"])
    assert res.exit_code == 0 and "nothing to repair" in res.output
