"""The README.md an auditor reads first: what the bundle holds and how to check it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import __version__
from ..heads.codec import StreamHead
from ..projections.workstate import WorkState
from .files import BUNDLE_FORMAT, RECEIPTS_DIR, digest_of, verifier_source


def readme_text(heads: Mapping[str, StreamHead], states: Mapping[str, WorkState], receipts: Sequence[str]) -> bytes:
    verifier = digest_of(verifier_source())
    rows = [f"| `{t}` | {h.events} | `{h.head}` | {states[t].next_operation} |" for t, h in sorted(heads.items())]
    logs = "\n".join(f"- `{RECEIPTS_DIR}/{name}`" for name in receipts) or "- none"
    text = f"""# intentlog evidence bundle

The record of {len(heads)} task(s), exported by intentlog {__version__} ({BUNDLE_FORMAT}). Every
event of each task is here, byte for byte as it was appended, with every artifact its
events refer to. Nothing in this folder depends on when or where it was exported.

| task | events | head (digest of the last line) | next operation |
|---|---|---|---|
{chr(10).join(rows)}

Provider receipt logs (written by the provider, not by intentlog):

{logs}

## Check it without trusting intentlog

`verify_bundle.py` is one file that imports only the Python standard library (3.10 or
newer) and the `blake3` package. It shares no code with intentlog: it re-derives every
state from the events and checks every byte. Read it before you run it; its BLAKE3
digest is `{verifier}` (compare with a copy from a source you trust).

    python -m venv venv && venv/bin/pip install blake3
    venv/bin/python verify_bundle.py .

It prints numbered claims, each `[PASS]` or `[FAIL]`, and exits 0 only when every one
passes. `--json` prints the claims and the states it re-derived; `--no-inventory` skips
the `hashes.json` check, to see what the meaning of the record alone proves.

With intentlog installed, its own checker must agree:

    intentlog verify --bundle .

## What is here

| file | what it is |
|---|---|
| `intentlog.json` | the ledger marker: the bundle is also a ledger folder |
| `tasks/<task>.jsonl` | one event per line; `prev` is the BLAKE3 digest of the line before |
| `objects/<2 hex>/<62 hex>` | artifact bytes, named by their BLAKE3 digest (small payloads ride inline in events) |
| `quarantine/` | bytes a crash left, moved aside by a repair that a `stream.repaired` event records |
| `heads.json` | each stream's id, last seq, head digest and event count: a cut tail is visible |
| `states.json` | what intentlog says each call and compilation is, and what is safe next |
| `receipts/` | provider receipt logs: every receipt must be covered by a recorded `attempt.started` |
| `report.html` | the record as one page for people, derived from the files above; intentlog's check re-renders it |
| `hashes.json` | the digest and size of every other file |
| `verify_bundle.py` | the independent verifier |

A stream is exported only whole: intentlog refuses to export a stream with a torn tail
or damage, so a bundle never carries a partial record as if it were complete.
"""
    return text.encode("utf-8")
