"""Sessions: turns are calls of the effect protocol under ``turn-<n>``, replayed byte for byte.

Every test ends by reading the record back from disk: the stream parsed without
intentlog, a reopened handle, or a fresh interpreter.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from effect_child import disk_events, files_containing, snapshot

import intentlog
from intentlog import EffectUnknown, ResumeRefused
from intentlog._internal.digest import digest_bytes
from intentlog.artifacts.inline import INLINE_MAX
from intentlog.projections.status import task_status
from intentlog.projections.verify import verify_ledger

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-session-0123456789abcdef"
SYSTEM = {"role": "system", "content": "You review paragraphs."}


def req(*messages: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m-1", "api_key": SECRET, "temperature": 0, "messages": list(messages), **extra}


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


class Provider:
    """Answers in order; records every request it receives."""

    def __init__(self, *answers: bytes | str) -> None:
        self.answers = list(answers)
        self.requests: list[Any] = []

    def __call__(self, request: Any) -> bytes | str:
        self.requests.append(request)
        return self.answers[len(self.requests) - 1]


def never(request: Any) -> bytes:
    raise AssertionError("a replayed turn must not send")


def reopen(ledger: intentlog.Ledger, session: str = "chat") -> intentlog.Ledger:
    """The ledger as a new process sees it: every handle closed, state read back from disk."""
    ledger.close()
    return intentlog.open(ledger.root)


# -- identity, replay, refusal ---------------------------------------------------------


def test_a_completed_turn_asked_again_returns_the_saved_response_and_sends_nothing(ledger: intentlog.Ledger) -> None:
    """The same turn with the same request (timestamps aside, keys in any order) replays; the provider sees one send."""
    p = Provider(b'{"reply": "first"}')
    t1 = ledger.session("chat").turn(req(SYSTEM, user("hi", ts="2026-01-01T00:00:00Z")), p)
    assert (t1.turn_id, t1.call_id, t1.replayed, t1.accepted) == ("turn-1", "call-1", False, True)
    assert p.requests[0]["api_key"] == SECRET  # send gets the request as given
    led = reopen(ledger)
    shuffled = {"messages": [SYSTEM, {"ts": "2026-05-05T05:05:05Z", "content": "hi", "role": "user"}]}
    shuffled |= {"temperature": 0, "api_key": SECRET, "model": "m-1"}
    t1b = led.session("chat").turn(shuffled, never)
    assert (t1b.turn_id, t1b.call_id, t1b.replayed, t1b.response) == ("turn-1", "call-1", True, b'{"reply": "first"}')
    kinds = [e["kind"] for e in disk_events(led.task("chat").path)]
    assert kinds.count("call.requested") == 1 and kinds.count("attempt.started") == 1
    assert kinds.count("task.checkpoint") == 1  # accepted once, not again on replay


def test_the_same_turn_with_another_request_is_refused_and_appends_nothing(ledger: intentlog.Ledger) -> None:
    """turn-1 asked with a changed message raises ResumeRefused (DRIFT) and leaves the ledger byte-identical."""
    ledger.session("chat").turn(req(SYSTEM, user("hi")), Provider(b"ok"))
    led = reopen(ledger)
    before = snapshot(led.root)
    with pytest.raises(ResumeRefused) as err:
        led.session("chat").turn(req(SYSTEM, user("hi, changed")), never)
    assert err.value.reason == "DRIFT" and err.value.key == "turn-1"
    assert "same turn identity with a different request" in str(err.value)
    assert "intentlog fork chat --from turn-1" in str(err.value)
    led.close()
    assert snapshot(led.root) == before


def test_turns_are_numbered_per_session_object_or_named(ledger: intentlog.Ledger) -> None:
    """A Session numbers its turns 1, 2, 3; turn=n names one; next_turn() is the first number unrecorded."""
    s = ledger.session("chat")
    s.turn(req(user("a")), Provider(b"A"))
    s.turn(req(user("a"), user("b")), Provider(b"B"))
    assert s.next_turn() == 3
    s.turn(req(user("c")), Provider(b"C"), turn=7)
    assert s.next_turn() == 8
    led = reopen(ledger)
    assert [t.turn_id for t in led.session("chat").turns()] == ["turn-1", "turn-2", "turn-7"]
    with pytest.raises(intentlog.UsageError):
        led.session("chat").turn(req(user("x")), never, turn=0)


# -- history -----------------------------------------------------------------------------


def test_history_excludes_incomplete_turns_but_the_record_keeps_them(ledger: intentlog.Ledger) -> None:
    """A turn whose send died (unknown effect) is in turns() for audit and not in history(); the next prompt is built
    from completed, accepted turns only."""
    s = ledger.session("chat")
    s.turn(req(user("one")), Provider(b"ONE"))

    def dies(request: Any) -> bytes:
        raise ConnectionResetError("the provider hung up mid-answer")

    with pytest.raises(EffectUnknown):
        s.turn(req(user("one"), user("two")), dies)
    s.turn(req(user("three")), Provider(b"THREE"), turn=3)
    led = reopen(ledger)
    s2 = led.session("chat")
    assert [(t.turn_id, t.stage) for t in s2.turns()] == [
        ("turn-1", "completed"),
        ("turn-2", "effect_unknown"),
        ("turn-3", "completed"),
    ]
    assert [t.turn_id for t in s2.history()] == ["turn-1", "turn-3"]
    assert [t.response for t in s2.history()] == [b"ONE", b"THREE"]
    assert s2.turns()[1].response is None


def test_a_rejected_turn_leaves_history_until_accepted(ledger: intentlog.Ledger) -> None:
    """With accept=False a verifier decides: a rejected turn is left out (the task pauses for review); accepting it
    later records the checkpoint that links it, and it enters history."""
    s = ledger.session("chat", accept=False)
    t = s.turn(req(user("draft")), Provider(b"DRAFT"))
    assert not t.accepted and ledger.session("chat").history() == []
    s.reject(t, note="cites a source that does not exist", by="verifier")
    led = reopen(ledger)
    st = task_status(led.task("chat").events(), task_id="chat")
    assert st.state == "paused for review" and "failed verification" in (st.reason or "")
    ev = led.session("chat").accept("turn-1", note="checked again", by="alice")
    led = reopen(led)
    [h] = led.session("chat").history()
    assert (h.turn_id, h.accepted, h.checkpoint) == ("turn-1", True, ev.seq)
    cp = [e for e in disk_events(led.task("chat").path) if e["kind"] == "task.checkpoint"][-1]["data"]
    assert (cp["phase"], cp["turn"], cp["call"], cp["status"]) == ("turn-1", "turn-1", "call-1", "accepted")
    assert cp["evidence"][0]["digest"] == digest_bytes(b"DRAFT")


def test_each_message_is_stored_once_as_the_conversation_grows(ledger: intentlog.Ledger) -> None:
    """Each message rides inline (or as one blob) the first time it is recorded and by digest afterwards; its canonical
    bytes come back from history with timestamps dropped and credentials redacted."""
    long_text = "x" * (INLINE_MAX + 500)  # a message stored in objects/
    convo: list[dict[str, Any]] = [SYSTEM, user(long_text, ts="t0")]
    s = ledger.session("chat")
    for i in range(4):
        t = s.turn(req(*convo), Provider(f"answer {i}".encode()))
        convo += [{"role": "assistant", "content": t.text}, user(f"follow-up {i}", created_at=f"t{i}")]
    led = reopen(ledger)
    manifests = [e["data"] for e in disk_events(led.task("chat").path) if e["kind"] == "call.manifest"]
    inline_counts: dict[str, int] = {}
    for m in manifests:
        for ref in m["messages"]:
            if "inline" in ref or "inline_b64" in ref:
                inline_counts[ref["digest"]] = inline_counts.get(ref["digest"], 0) + 1
    assert inline_counts and set(inline_counts.values()) == {1}
    assert [len(m["messages"]) for m in manifests] == [2, 4, 6, 8]
    assert len(list((led.root / "objects").rglob("*"))) - len(list((led.root / "objects").glob("*"))) == 1
    last = led.session("chat").history()[-1]
    values = last.message_values()
    assert values[1] == {"role": "user", "content": long_text}  # 'ts' dropped
    assert values[-1] == {"role": "user", "content": "follow-up 2"}
    assert files_containing(led.root, SECRET.encode()) == []
    assert verify_ledger(led).ok


def test_a_request_without_a_message_list_is_one_hashed_request(ledger: intentlog.Ledger) -> None:
    """A request with no 'messages' list is recorded whole, as a plain effect; the turn still replays."""
    s = ledger.session("chat")
    s.turn({"prompt": "plain"}, Provider(b"P"))
    led = reopen(ledger)
    assert led.session("chat").turn({"prompt": "plain"}, never).response == b"P"
    [m] = [e["data"] for e in disk_events(led.task("chat").path) if e["kind"] == "call.manifest"]
    assert "messages" not in m


def test_a_request_that_cannot_be_recorded_is_a_preparation_failure(ledger: intentlog.Ledger) -> None:
    """A message that is not JSON (NaN) records call.preparation_failed for the turn; a good request then runs it."""
    s = ledger.session("chat")
    with pytest.raises(intentlog.PreparationFailed):
        s.turn(req(user("n", score=float("nan"))), never)
    s.turn(req(user("n")), Provider(b"fine"), turn=1)
    led = reopen(ledger)
    kinds = [e["kind"] for e in disk_events(led.task("chat").path)]
    assert "call.preparation_failed" in kinds and led.session("chat").history()[0].response == b"fine"


# -- exact bytes ------------------------------------------------------------------------

TEXTS: dict[str, bytes] = {
    "quoted shell text": b"""Run: sh -c 'echo "$HOME"' && sed -e "s/'/\\\\'/g" <<'EOF'\n"quoted" 'single'\nEOF\n""",
    "dollar and backticks": b"total $5 `$(whoami)` $& $1 $$ $' $` ${x} \\$ \\`",
    "crlf": b"line one\r\nline two\r\n\r\n\rbare cr\n",
    "lone surrogates escaped by the provider": b'{"text": "\\ud83d lone \\udc00 and a pair \\ud83d\\ude00"}',
    "not utf-8": b"\xff\xfe\x00 caf\xe9 \x80\xc3(",
    "large, all of the above": b"\r\n".join([b"$`x`", b"\xff\xfe", b'"\\ud800"', b"y" * (INLINE_MAX + 1)]),
}


@pytest.mark.parametrize("name", list(TEXTS))
def test_a_response_replays_byte_for_byte(ledger: intentlog.Ledger, name: str) -> None:
    """The response comes back as the very bytes the provider sent: on the first call, and replayed after reopening."""
    raw = TEXTS[name]
    t = ledger.session("chat").turn(req(user(name)), Provider(raw))
    assert t.response == raw
    led = reopen(ledger)
    again = led.session("chat").turn(req(user(name)), never)
    assert again.replayed and again.response == raw and type(again.response) is bytes
    assert again.text is not None and again.text.encode("utf-8", "surrogateescape") == raw
    assert led.session("chat").history()[0].response == raw
    assert verify_ledger(led).ok


@pytest.mark.parametrize("text", ["caf\udce9 from bytes decoded with surrogateescape", "a lone \ud800 surrogate"])
def test_text_with_lone_surrogates_is_given_back_as_the_same_str(ledger: intentlog.Ledger, text: str) -> None:
    """A send that returns str with lone surrogates is recorded (not an unknown effect) and its text replays equal."""
    t = ledger.session("chat").turn(req(user("s")), Provider(text))
    assert t.completed and t.text == text
    led = reopen(ledger)
    again = led.session("chat").turn(req(user("s")), never)
    assert again.text == text
    [obs] = [e["data"] for e in disk_events(led.task("chat").path) if e["kind"] == "attempt.observed"]
    assert obs["encoding"] in ("utf-8/surrogateescape", "utf-8/surrogatepass")


def test_every_text_replays_byte_for_byte_in_a_fresh_interpreter(ledger: intentlog.Ledger) -> None:
    """Recorded by this process, replayed by another: each response's bytes are equal (compared as hex)."""
    s = ledger.session("chat")
    for i, raw in enumerate(TEXTS.values(), start=1):
        s.turn(req(user(str(i))), Provider(raw), turn=i)
    ledger.close()
    code = (
        "import sys, intentlog\n"
        "s = intentlog.open(sys.argv[1]).session('chat')\n"
        "def never(r): raise AssertionError('sent')\n"
        "for i in range(1, int(sys.argv[2]) + 1):\n"
        "    print(s.turn({'model': 'm-1', 'api_key': 'other', 'temperature': 0,\n"
        "                  'messages': [{'role': 'user', 'content': str(i)}]}, never, turn=i).response.hex())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(ledger.root), str(len(TEXTS))],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert [bytes.fromhex(h) for h in out] == list(TEXTS.values())


# -- the documentation ------------------------------------------------------------------


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_the_examples_in_docs_sessions_md_run(tmp_path: Path) -> None:
    """Each python example in docs/sessions.md runs as written (twice: the second run resumes from the record)."""
    blocks = _python_blocks(ROOT / "docs" / "sessions.md")
    assert len(blocks) >= 5
    for i, code in enumerate(blocks):
        script = tmp_path / f"example_{i}.py"
        script.write_text(code)
        for _ in range(2):
            p = subprocess.run(
                [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
            )
            assert p.returncode == 0, f"example {i}:\n{code}\n{p.stdout}\n{p.stderr}"
    ledger = intentlog.open(tmp_path / "evidence", create=False)
    assert verify_ledger(ledger).ok, verify_ledger(ledger).render()
    assert orjson.loads(orjson.dumps([t for t in ledger.task_ids()]))  # the examples left tasks to inspect
