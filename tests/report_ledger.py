"""A ledger whose record covers every stage the report draws (shared by the report tests).

Tasks: ``every-stage`` (requested, manifest, started, observed, interpreted, decided,
completed, reconciled, timed out; an approval decided by a named person on a hash; a
checkpoint in a phase), ``unknown`` (an attempt started with nothing after it), ``chat``
(a session of two turns), ``hostile`` (a response and a note that carry ``<script>``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import intentlog
from intentlog.sessions import Session

#: A payload that would set a global and open a dialog if it were ever treated as markup.
HOSTILE = (
    '</script><script>window.__pwned = 1; alert("pwned")</script>'
    '<img src=x onerror="window.__pwned=2"><b onmouseover="window.__pwned=3">bold</b>'
)


def _reset(_r: Any) -> bytes:
    raise ConnectionResetError("reset mid-answer")


def build(root: Path) -> Path:
    """Write the ledger at ``root`` (deterministic content; timestamps are the record's own)."""
    ledger = intentlog.open(root)
    t = ledger.task("every-stage")
    t.effect("plain", {"model": "m", "prompt": "hello"}, lambda r: b'{"answer": 42}', interpret=lambda b: {"n": 42})
    tries = {"n": 0}

    def flaky(_r: Any) -> bytes:
        tries["n"] += 1
        if tries["n"] == 1:
            raise intentlog.ProviderFailure("503 busy", body=b"busy", retryable=True)
        return b"ok on the second try"

    t.effect("flaky", {"model": "m", "prompt": "again"}, flaky, retry=intentlog.RetryPolicy(max_attempts=3, backoff=0))
    try:
        t.effect("lost", {"model": "m", "prompt": "lost"}, _reset)
    except intentlog.EffectUnknown:
        pass
    lost = t.work_state().call_for_key("lost")
    assert lost is not None
    t.reconcile(lost.call_id, "not_served", note="the provider's log has no such key")
    t.effect("lost", {"model": "m", "prompt": "lost"}, lambda r: b"served at last")
    release = threading.Event()
    try:
        t.effect("slow", {"model": "m", "prompt": "slow"}, lambda r: b"late" if release.wait(10) else b"",
                 max_duration=0.05)
    except intentlog.EffectUnknown:
        pass
    release.set()
    slow = t.work_state().call_for_key("slow")
    assert slow is not None
    t.reconcile(slow.call_id, "served", evidence=b"the late answer")
    t.effect("slow", {"model": "m", "prompt": "slow"}, lambda r: b"never sent")
    call = t.prepare("ship", {"model": "m", "prompt": "ship it"})
    t.request_approval("ship-ok", "Ship the release notes?", binds=call)
    t.decide("ship-ok", "approve", by="alice", note="read them")
    t.effect("ship", {"model": "m", "prompt": "ship it"}, lambda r: b"shipped")
    t.checkpoint("review", evidence=[b"the reviewer's report"], status="passed", note="all claims supported")

    u = ledger.task("unknown")
    try:
        u.effect("charge-42", {"amount": 42}, _reset)
    except intentlog.EffectUnknown:
        pass

    s = Session(ledger.task("chat"))
    s.turn({"messages": [{"role": "user", "content": "Hi there"}]}, lambda r: b"Hello! How can I help?")
    s.turn(
        {"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
                      {"role": "user", "content": "Summarise chapter 3"}]},
        lambda r: b"Chapter 3 is about fsync.",
    )

    h = ledger.task("hostile")
    h.effect("inject", {"prompt": HOSTILE}, lambda r: HOSTILE.encode())
    h.append("note", {"text": HOSTILE, "phase": HOSTILE})
    ledger.close()
    return root
