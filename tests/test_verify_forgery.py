"""Forgeries that change meaning (issue 12 item 6): caught by both verifiers after re-chaining and re-sealing.

The tamper tool below is what a forger with write access does: edit events, write every
line again with a valid ``prev`` chain, and seal the result (``heads.json`` recomputed;
in a bundle also ``states.json`` and ``hashes.json``). The chain and the seal then hold,
so only the meaning of the record can catch the edit: every value a completion carries
must be derivable from the events before it, and every ref anywhere in an event must name
stored bytes.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

import intentlog
from intentlog._internal.digest import digest_bytes
from intentlog.bundle import HASHES_FILE, STATES_FILE, check_bundle, encode_hashes, encode_states, export_bundle
from intentlog.bundle import file_hashes as bundle_file_hashes
from intentlog.eventlog.canonical import dumps
from intentlog.eventlog.format import encode_line
from intentlog.eventlog.reader import StreamScan
from intentlog.heads import stream_head
from intentlog.projections.verify import HEADS_FILE, encode_heads, verify_path
from intentlog.projections.workstate import work_state

REQ = {"model": "m", "prompt": "p"}
FAKE = "blake3:" + "ab" * 32

Events = list[dict[str, Any]]


def send(request: Any) -> bytes:
    return b'{"verdict": "accept", "score": 7}'


def parse(raw: bytes) -> Any:
    return orjson.loads(raw)


# -- the tamper tool ------------------------------------------------------------------------------


def read_events(stream: Path) -> Events:
    return [orjson.loads(line) for line in stream.read_bytes().splitlines()]


def rechain(stream: Path, events: Events) -> None:
    """Write ``events`` as a valid chain: seq 0, 1, 2... and each prev the digest of the line before."""
    out, prev = [], None
    for i, ev in enumerate(events):
        line = encode_line(ev["kind"], dumps(ev["data"]), prev, i, ev["ts"])
        out.append(line)
        prev = digest_bytes(line)
    stream.write_bytes(b"".join(out))


def reseal(root: Path) -> None:
    """heads.json recomputed for every stream (in a bundle, states.json and hashes.json too)."""
    tasks = sorted(p.stem for p in (root / "tasks").glob("*.jsonl"))
    (root / HEADS_FILE).write_bytes(encode_heads({t: stream_head(root / "tasks" / f"{t}.jsonl", t) for t in tasks}))
    if (root / STATES_FILE).exists():
        states = {t: work_state(StreamScan(root / "tasks" / f"{t}.jsonl"), task_id=t) for t in tasks}
        (root / STATES_FILE).write_bytes(encode_states(states))
    if (root / HASHES_FILE).exists():
        (root / HASHES_FILE).write_bytes(encode_hashes(bundle_file_hashes(root)))


def tamper(root: Path, task: str, edit: Callable[[Events], Events]) -> None:
    stream = root / "tasks" / f"{task}.jsonl"
    rechain(stream, edit(read_events(stream)))
    reseal(root)


def at(events: Events, kind: str, n: int = 0) -> int:
    """Index of the n-th event of ``kind``."""
    return [i for i, ev in enumerate(events) if ev["kind"] == kind][n]


# -- the record -----------------------------------------------------------------------------------


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    """One interpreted call and one raw call, sealed; both verifiers pass it."""
    root = tmp_path / "ev"
    with intentlog.open(root) as led:
        t = led.task("t")
        assert t.effect("judge", REQ, send, interpret=parse) == {"verdict": "accept", "score": 7}
        t.effect("raw", {"q": "raw"}, lambda r: b"raw bytes")
    reseal(root)
    assert verify_path(root).ok
    return root


def load_verifier() -> ModuleType:
    path = Path(intentlog.__file__).parent / "verify_bundle.py"
    spec = importlib.util.spec_from_file_location("verify_bundle_standalone", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def independent_failures(bundle: Path) -> list[str]:
    v = load_verifier().Verifier(str(bundle), inventory=True)
    v.run()
    return [f"{c.text} :: {' | '.join(c.details)}" for c in v.claims if c.status == "FAIL"]


def library_failures(bundle: Path) -> list[str]:
    return [p.render() for p in check_bundle(bundle).problems if p.severity != "info"]


Verdicts = tuple[list[str], list[str], list[str], bool]


def verdicts(root: Path, tmp_path: Path, edit: Callable[[Events], Events]) -> Verdicts:
    """Apply ``edit`` to the ledger and to a bundle exported before it; then each check's verdict.

    Returns (verify's errors on the ledger, check_bundle's on the bundle, verify_bundle.py's
    failed claims on the bundle, whether exporting the tampered ledger succeeded and checked ok).
    """
    bundle = tmp_path / f"bundle-{len(list(tmp_path.iterdir()))}"
    export_bundle(root, out=bundle, check=False)
    tamper(root, "t", edit)
    tamper(bundle, "t", edit)
    ledger_errors = [p.render() for p in verify_path(root).problems if p.severity == "error"]
    try:
        export_ok = export_bundle(root, out=tmp_path / f"re-{bundle.name}").ok
    except intentlog.IntentlogError:
        export_ok = False  # refused: the forged ref names no stored bytes
    return ledger_errors, library_failures(bundle), independent_failures(bundle), export_ok


# -- the edits ------------------------------------------------------------------------------------


def forge_result(events: Events) -> Events:
    i = at(events, "call.completed")
    events[i]["data"]["result"] = {"value": {"verdict": "reject", "score": 7}}
    return events


def delete_interpretation(events: Events) -> Events:
    del events[at(events, "attempt.interpreted")]
    return events


def forge_raw_response(events: Events) -> Events:
    i = at(events, "call.completed", 1)
    manifest = events[at(events, "call.manifest", 1)]["data"]["request"]
    events[i]["data"]["result"] = {"raw": True, "response": {k: manifest[k] for k in ("digest", "size")}}
    return events


def forge_unknown_field_ref(events: Events) -> Events:
    i = at(events, "call.completed")
    events[i]["data"]["audit"] = {"trail": [{"evidence": {"digest": FAKE, "size": 12}}]}
    return events


def forge_interpretation_error(events: Events) -> Events:
    i = at(events, "attempt.interpreted")
    d = events[i]["data"]
    del d["result"]
    d["error"] = "could not parse"
    return events


def forge_requested_hash(events: Events) -> Events:
    events[at(events, "call.requested")]["data"]["request_hash"] = FAKE
    return events


def second_completion(events: Events) -> Events:
    i = at(events, "call.completed")
    return [*events[: i + 1], orjson.loads(orjson.dumps(events[i])), *events[i + 1 :]]


FORGERIES = {
    "completed result contradicts the interpretation": forge_result,
    "interpretation deleted": delete_interpretation,
    "raw completion names another ref": forge_raw_response,
    "forged ref in an unknown field": forge_unknown_field_ref,
    "interpretation says error, completion a value": forge_interpretation_error,
    "call.requested hash differs from the manifest": forge_requested_hash,
    "a second completion that is not a reinterpretation": second_completion,
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_resealed_semantic_forgery_is_rejected_by_both_verifiers(name: str, ledger_dir: Path, tmp_path: Path) -> None:
    """verify, export's check and verify_bundle.py each reject the forgery though chain and seal hold."""
    ledger_errors, library, independent, export_ok = verdicts(ledger_dir, tmp_path, FORGERIES[name])
    report = verify_path(ledger_dir)
    assert not report.by_code("chain") and not report.by_code("heads") and not report.by_code("truncated")
    assert ledger_errors, name
    assert library, name
    assert independent, name
    assert not export_ok, name


def test_the_forged_value_is_named_as_a_forgery(ledger_dir: Path) -> None:
    """The problem says what: a completion whose value no interpretation produced (code 'forgery')."""
    tamper(ledger_dir, "t", forge_result)
    report = verify_path(ledger_dir)
    found = report.by_code("forgery")
    assert len(found) == 1 and found[0].task == "t"
    assert "differs from the result" in found[0].message


def test_the_clean_record_passes_both_verifiers(ledger_dir: Path, tmp_path: Path) -> None:
    """The untouched record (re-chained identically) passes verify, export's check and verify_bundle.py."""
    before = (ledger_dir / "tasks" / "t.jsonl").read_bytes()
    ledger_errors, library, independent, export_ok = verdicts(ledger_dir, tmp_path, lambda ev: ev)
    assert (ledger_dir / "tasks" / "t.jsonl").read_bytes() == before
    assert (ledger_errors, library, independent, export_ok) == ([], [], [], True)


def reinterpret(events: Events, *, mark: bool = True, value: Any = None) -> Events:
    """A later interpretation and completion of the completed call, as a reinterpretation records them."""
    i = at(events, "call.completed")
    interp = orjson.loads(orjson.dumps(events[at(events, "attempt.interpreted")]))
    done = orjson.loads(orjson.dumps(events[i]))
    new_value = {"verdict": "accept", "score": 8} if value is None else value
    interp["data"]["result"] = new_value
    interp["data"]["interpreter"] = {"name": "parse", "version": "2"}
    done["data"]["result"] = {"value": new_value}
    if mark:
        interp["data"]["reinterpretation"] = 1
        done["data"]["reinterpretation"] = 1
    return [*events[: i + 1], interp, done, *events[i + 1 :]]


def test_a_reinterpretation_is_accepted_by_both(ledger_dir: Path, tmp_path: Path) -> None:
    """An interpretation and a completion marked reinterpretation after a completion pass; each matches its own."""
    ledger_errors, library, independent, _ = verdicts(ledger_dir, tmp_path, reinterpret)
    assert (ledger_errors, independent) == ([], [])
    assert not [p for p in library if "[forgery]" in p or "[graph]" in p]


def test_an_unmarked_second_completion_is_rejected_even_when_derivable(ledger_dir: Path, tmp_path: Path) -> None:
    """Without 'reinterpretation' a second completion is refused by both, though its value matches."""
    ledger_errors, _, independent, _ = verdicts(ledger_dir, tmp_path, lambda ev: reinterpret(ev, mark=False))
    assert any("second time" in e for e in ledger_errors)
    assert any("completes twice" in e for e in independent)


def test_a_reinterpretation_completion_must_match_the_new_interpretation(ledger_dir: Path, tmp_path: Path) -> None:
    """The second completion carries the first interpretation's value: not what the latest one recorded."""

    def edit(events: Events) -> Events:
        events = reinterpret(events)
        j = at(events, "call.completed", 1)
        events[j]["data"]["result"] = {"value": {"verdict": "accept", "score": 7}}
        return events

    ledger_errors, _, independent, _ = verdicts(ledger_dir, tmp_path, edit)
    assert any("[forgery]" in e for e in ledger_errors)
    assert independent


def test_a_matching_requested_hash_passes(ledger_dir: Path, tmp_path: Path) -> None:
    """call.requested carrying the manifest's request hash (as the protocol writes it) passes both."""

    def edit(events: Events) -> Events:
        for i, ev in enumerate(events):
            if ev["kind"] == "call.requested":
                cid = ev["data"]["call"]
                m = next(e for e in events[i:] if e["kind"] == "call.manifest" and e["data"]["call"] == cid)
                ev["data"]["request_hash"] = m["data"]["request_hash"]
        return events

    ledger_errors, library, independent, ok = verdicts(ledger_dir, tmp_path, edit)
    assert (ledger_errors, library, independent, ok) == ([], [], [], True)


def test_a_forged_ref_in_an_unknown_kind_at_depth_is_checked(ledger_dir: Path, tmp_path: Path) -> None:
    """A user kind holding a ref nested deep names bytes that must exist; verify and verify_bundle.py say so."""

    def edit(events: Events) -> Events:
        ev = orjson.loads(orjson.dumps(events[-1]))
        ev["kind"] = "app.note"
        ev["data"] = {"a": [{"b": {"c": {"digest": FAKE, "size": 3}}}]}
        return [*events, ev]

    _, library, independent, export_ok = verdicts(ledger_dir, tmp_path, edit)
    assert verify_path(ledger_dir).by_code("artifact_missing")
    assert any("[artifact_missing]" in e for e in library)
    assert any("neither in objects/ nor inline" in f for f in independent)
    assert not export_ok
