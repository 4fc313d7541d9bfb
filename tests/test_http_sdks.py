"""The real openai and anthropic SDKs through intentlog.http, against a loopback server that keeps a bill.

The server (``fake_llm_server.py``) appends an fsynced receipt for every request before it
answers; these tests read "was it sent, how often" from that log, never from the ledger.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
pytest.importorskip("httpx")

from fake_llm_server import FakeLLMServer  # noqa: E402

import intentlog  # noqa: E402
import intentlog.http  # noqa: E402

pytest_plugins = ["pytester", "intentlog.pytest_plugin"]

SECRET = "sk-proj-SDKTEST-0123456789abcdef"
# anthropic 2.x speaks httpx2 only (and refuses httpx clients); older versions speak httpx
ANTHROPIC_LIB = "httpx2" if getattr(anthropic._base_client, "httpx2", None) is not None else "httpx"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FakeLLMServer]:
    with FakeLLMServer(tmp_path / "receipts.jsonl", api_key=SECRET) as s:
        yield s


def _openai(task: intentlog.Task, server: FakeLLMServer, **kw: Any) -> Any:
    kw.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=server.url + "/v1", api_key=SECRET, http_client=intentlog.http.client(task), **kw)


def _anthropic(task: intentlog.Task, server: FakeLLMServer, **kw: Any) -> Any:
    kw.setdefault("max_retries", 0)
    http = intentlog.http.client(task, lib=ANTHROPIC_LIB)
    return anthropic.Anthropic(base_url=server.url, api_key=SECRET, http_client=http, **kw)


def _msgs(label: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": label}]


def _script(task: intentlog.Task, server: FakeLLMServer) -> dict[str, Any]:
    """One run of a small script using both SDKs, plain and streaming; what it saw, raw streams included."""
    oa, an = _openai(task, server), _anthropic(task, server)
    out: dict[str, Any] = {}
    with task.key("oa-plain"):
        out["oa-plain"] = oa.chat.completions.create(model="gpt-fake", messages=_msgs("oa-plain")).model_dump()
    with oa.chat.completions.with_streaming_response.create(
        model="gpt-fake", messages=_msgs("oa-stream"), stream=True
    ) as resp:
        out["oa-stream-raw"] = b"".join(resp.iter_bytes())
    out["oa-stream"] = [
        ch.model_dump()
        for ch in oa.chat.completions.create(model="gpt-fake", messages=_msgs("oa-stream2"), stream=True)
    ]
    out["an-plain"] = an.messages.create(model="claude-fake", max_tokens=20, messages=_msgs("an-plain")).model_dump()
    with an.messages.with_streaming_response.create(
        model="claude-fake", max_tokens=20, messages=_msgs("an-stream"), stream=True
    ) as resp:
        out["an-stream-raw"] = b"".join(resp.iter_bytes())
    with task.key("an-helper"), an.messages.stream(model="claude-fake", max_tokens=20, messages=_msgs("an-s2")) as s:
        out["an-stream"] = s.get_final_text()
    oa.close()
    an.close()
    return out


def test_completed_sdk_calls_replay_with_zero_receipts_and_streams_byte_identical(
    ledger: intentlog.Ledger, server: FakeLLMServer
) -> None:
    """A second run of an openai+anthropic script sends nothing and sees the same objects and stream bytes."""
    task = ledger.task("both-sdks")
    first = _script(task, server)
    receipts = server.receipts()
    assert len(receipts) == 6 and {r["label"] for r in receipts} >= {"oa-plain", "an-plain", "an-s2"}
    sent_streams = {r["label"]: server.responses[r["n"]] for r in receipts if r["stream"]}
    assert first["oa-stream-raw"] == sent_streams["oa-stream"]  # what the server sent, as it sent it
    assert first["an-stream-raw"] == sent_streams["an-stream"]
    intentlog.http.restart(task)  # as a new process would
    again = _script(task, server)
    assert len(server.receipts()) == 6
    assert again == first
    ws = task.work_state()
    assert [c.stage for c in ws.calls.values()] == ["completed"] * 6
    assert {"oa-plain", "an-helper"} <= set(ws.keys)


def test_no_credential_string_anywhere_under_the_ledger(
    ledger: intentlog.Ledger, ledger_root: Path, server: FakeLLMServer
) -> None:
    """The API key went over the wire (the server checks it) and is in no byte of the ledger folder."""
    task = ledger.task("secrets")
    _script(task, server)
    with _anthropic(task, server, default_headers={"anthropic-beta": "tools-2024"}) as an:
        an.messages.create(model="claude-fake", max_tokens=5, messages=_msgs(f"the key is {SECRET}"))
    ledger.close()
    assert all(r.get("label") for r in server.receipts())
    found = [str(p) for p in ledger_root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert found == []
    assert b"sk-proj-SDKTEST" not in b"".join(p.read_bytes() for p in ledger_root.rglob("*") if p.is_file())


def test_sdk_retries_become_attempts_of_one_call(ledger: intentlog.Ledger, server: FakeLLMServer) -> None:
    """With SDK retries on, a 503 then a 200 is one call with two attempts; the re-run sends nothing."""
    task = ledger.task("retries")
    with _openai(task, server, max_retries=2) as oa:
        reply = oa.chat.completions.create(model="gpt-fake-flaky-503", messages=_msgs("flaky"))
    assert [r["retry_count"] for r in server.receipts()] == ["0", "1"]
    [call] = task.work_state().calls.values()
    assert (call.stage, call.attempts) == ("completed", 2)
    intentlog.http.restart(task)
    with _openai(task, server, max_retries=2) as oa:
        assert oa.chat.completions.create(model="gpt-fake-flaky-503", messages=_msgs("flaky")) == reply
    assert len(server.receipts()) == 2


def test_sdk_does_not_retry_or_wrap_an_unknown_effect(ledger: intentlog.Ledger, server: FakeLLMServer) -> None:
    """A request the server took and never answered is never resent, whatever the SDK retries; the caller learns why."""
    task = ledger.task("unknown")
    with _openai(task, server, max_retries=2) as oa, pytest.raises(intentlog.EffectUnknown) as info:
        oa.chat.completions.create(model="gpt-fake-drop", messages=_msgs("charge-card"))
    assert info.value.next_operation == "reconcile effect"
    # anthropic 2.x wraps any transport exception in APIConnectionError and retries it: each
    # retry is the same unresolved call, so it raises EffectUnknown again and sends nothing
    with _anthropic(task, server, max_retries=1) as an, pytest.raises(anthropic.APIConnectionError) as wrapped:
        an.messages.create(model="claude-fake-drop", max_tokens=5, messages=_msgs("charge-card-2"))
    unknown = intentlog.http.unknown_effect(wrapped.value)
    assert unknown is not None and unknown.next_operation == "reconcile effect"
    assert intentlog.http.unknown_effect(ValueError("x")) is None
    assert [r["label"] for r in server.receipts()] == ["charge-card", "charge-card-2"]
    assert [c.stage for c in task.work_state().calls.values()] == ["effect_unknown", "effect_unknown"]


# -- killed at random moments ---------------------------------------------------------------

CHILD = """
import json, sys
import intentlog, intentlog.http

ledger, base, sdk, count, lib = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
task = intentlog.open(ledger).task("nightly")
if sdk == "openai":
    import openai
    client = openai.OpenAI(base_url=base + "/v1", http_client=intentlog.http.client(task), max_retries=0)

    def call(label, stream):
        msgs = [{"role": "user", "content": label}]
        if stream:
            chunks = client.chat.completions.create(model="gpt-fake", messages=msgs, stream=True)
            return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        return client.chat.completions.create(model="gpt-fake", messages=msgs).choices[0].message.content
else:
    import anthropic
    client = anthropic.Anthropic(base_url=base, http_client=intentlog.http.client(task, lib=lib), max_retries=0)

    def call(label, stream):
        msgs = [{"role": "user", "content": label}]
        if stream:
            with client.messages.stream(model="claude-fake", max_tokens=50, messages=msgs) as s:
                return s.get_final_text()
        return client.messages.create(model="claude-fake", max_tokens=50, messages=msgs).content[0].text

print("ready", flush=True)
for i in range(count):
    label = f"doc-{i}"
    try:
        if i % 2 == 0:
            with task.key(f"summary-{i}"):
                text = call(label, stream=i % 3 == 2)
        else:
            text = call(label, stream=i % 3 == 2)
    except Exception as exc:
        unknown = intentlog.http.unknown_effect(exc)  # anthropic wraps it in APIConnectionError
        if unknown is None:
            raise
        print(json.dumps({"unknown": unknown.call_id, "label": label}), flush=True)
        sys.exit(3)
    print(json.dumps({"label": label, "text": text}), flush=True)
print("done", flush=True)
"""


def _reconcile(ledger_root: Path, server: FakeLLMServer, call_id: str, label: str) -> str:
    """Play the operator: ask the provider's bill whether it served the call, and record the answer."""
    time.sleep(0.05)
    served = [r for r in server.receipts() if r["label"] == label]
    with intentlog.open(ledger_root) as led:
        task = led.task("nightly")
        if not served:
            task.reconcile(call_id, "not_served", note="no receipt at the provider")
            return "not_served"
        n = served[0]["n"]
        deadline = time.monotonic() + 5
        while n not in server.responses and time.monotonic() < deadline:  # the server may still hold it
            time.sleep(0.02)
        media = "text/event-stream; charset=utf-8" if served[0]["stream"] else "application/json"
        body = intentlog.http.evidence(server.responses[n], headers={"content-type": media})
        task.reconcile(call_id, "served", evidence=body, note=f"receipt {n}")
        return "served"


def _run_child(script: Path, ledger_root: Path, server: FakeLLMServer, sdk: str, count: int, kill_after: float | None):
    env = {**os.environ, "OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": SECRET}
    argv = [sys.executable, str(script), str(ledger_root), server.url, sdk, str(count), ANTHROPIC_LIB]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    assert ready.strip() == "ready", proc.communicate()
    killed = False
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            killed = True
    out, err = proc.communicate(timeout=60)
    return proc.returncode, killed, ready + out, err


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_killed_at_random_moments_never_pays_twice(
    tmp_path: Path, ledger_root: Path, server: FakeLLMServer, sdk: str
) -> None:
    """SIGKILL at random moments, re-run, reconcile what is unknown: exactly one receipt per logical call.

    A kill that leaves an unknown effect makes the next run raise EffectUnknown (never a
    resend); the operator's reconciliation, checked against the server's bill, decides.
    """
    seed = int(os.environ.get("INTENTLOG_KILL_SEED", "0")) or random.randrange(1, 2**31)
    rng = random.Random(seed)
    count, kills_wanted = 5, 3 if sdk == "openai" else 2  # anthropic takes a second to import
    server.hold = 0.12
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    history: list[str] = []
    kills = unknowns = 0
    final = None
    done = 0  # calls the last run got through: the kill window covers the ones still to do
    for _ in range(20):
        kill_after = rng.uniform(0.0, 0.1 + (count - done) * 0.18) if kills < kills_wanted else None
        code, killed, out, err = _run_child(script, ledger_root, server, sdk, count, kill_after)
        done = max(done, sum(1 for line in out.splitlines() if line.startswith('{"label"')))
        if killed:
            kills += 1
            history.append(f"killed after {kill_after:.2f}s")
            continue
        if code == 3:
            unknown = json.loads(out.strip().splitlines()[-1])
            unknowns += 1
            history.append(f"{unknown} -> " + _reconcile(ledger_root, server, unknown["unknown"], unknown["label"]))
            continue
        assert code == 0, (seed, history, out, err)
        final = out
        break
    assert final is not None, (seed, history)
    per_label = Counter(r["label"] for r in server.receipts())
    assert per_label == {f"doc-{i}": 1 for i in range(count)}, (seed, history, per_label)
    before = len(server.receipts())
    code, _, again, err = _run_child(script, ledger_root, server, sdk, count, None)
    assert code == 0, err
    assert len(server.receipts()) == before  # completed calls replay with zero receipts
    assert again == final
    texts = [json.loads(line)["text"] for line in final.splitlines()[1:-1]]
    assert all(re.fullmatch(r"summary #\d+ of 'doc-\d'", t) for t in texts), texts
    check = subprocess.run(
        [sys.executable, "-m", "intentlog.cli", "--root", str(ledger_root), "verify"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    print(f"seed {seed}: {kills} kills, {unknowns} unknown effects reconciled: {history}")


# -- the pytest fixture ---------------------------------------------------------------------


def _doc_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_pytest_fixture_records_once_replays_offline_and_fails_on_unrecorded(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """The docs' fixture example records against the server, replays with it stopped, and fails on a new request."""
    example = next(b for b in _doc_blocks(ROOT / "docs" / "http.md") if "intentlog_replay" in b)
    pytester.makepyfile(test_summary=example)
    server = FakeLLMServer(tmp_path / "receipts.jsonl", api_key=SECRET).start()
    env = {"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": SECRET}
    for name, value in env.items():
        pytester._monkeypatch.setenv(name, value)
    try:
        pytester.runpytest("-p", "intentlog.pytest_plugin", "--intentlog-mode=record").assert_outcomes(passed=1)
        assert len(server.receipts()) == 1
    finally:
        server.stop()
    cassette = pytester.path / "cassettes" / "test_summary" / "test_summary"
    assert (cassette / "intentlog.json").is_file()
    assert not [p for p in cassette.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    pytester._monkeypatch.delenv("OPENAI_API_KEY")  # replay needs no key: nothing is sent
    pytester.runpytest("-p", "intentlog.pytest_plugin").assert_outcomes(passed=1)
    pytester.makepyfile(test_summary=example.replace('"content": "hi"', '"content": "hello"'))
    result = pytester.runpytest("-p", "intentlog.pytest_plugin")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*NotRecorded*is not in the record*"])
    result.stdout.fnmatch_lines(["*$.body.json.messages[[]0[]].content: recorded 'hi', now 'hello'*"])
    swallowing = example.replace("    reply = client", "    try:\n        client").replace(
        "    assert reply.choices[0].message.content",
        "    except Exception:\n        pass",
    )
    swallowing = swallowing.replace(
        'messages=[{"role": "user", "content": "hi"}])', 'messages=[{"role": "user", "content": "new"}])'
    )
    pytester.makepyfile(test_summary=swallowing)
    result = pytester.runpytest("-p", "intentlog.pytest_plugin")
    result.assert_outcomes(passed=1, errors=1)  # the teardown still fails loudly
    result.stdout.fnmatch_lines(["*1 request(s) not answered from the record*"])
    assert len(server.receipts()) == 1


def test_fixture_loaded_with_pytest_plugins_names_its_cassette(intentlog_replay: Any) -> None:
    """Loaded through pytest_plugins, the fixture defaults to offline replay of cassettes/<module>/<test>."""
    assert intentlog_replay.mode == "replay"
    assert intentlog_replay.root == Path(__file__).parent / "cassettes" / "test_http_sdks" / (
        "test_fixture_loaded_with_pytest_plugins_names_its_cassette"
    )
    assert intentlog_replay.task_id == "http" and intentlog_replay.misses == []


def test_docs_examples_run_and_resume(tmp_path: Path, server: FakeLLMServer) -> None:
    """Every runnable example in docs/http.md runs against the server, and a second run sends nothing."""
    env = {
        **os.environ,
        "OPENAI_BASE_URL": server.url + "/v1",
        "OPENAI_API_KEY": SECRET,
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": SECRET,
        "TICKETS_API": server.url,
    }
    blocks = [b for b in _doc_blocks(ROOT / "docs" / "http.md") if "intentlog_replay" not in b]
    assert len(blocks) >= 4
    if importlib.util.find_spec("httpx2") is None:  # Python 3.10: anthropic < 2 and no httpx2
        blocks = [b for b in blocks if 'lib="httpx2"' not in b]
    outputs = []
    for run in range(2):
        before = len(server.receipts())
        for i, block in enumerate(blocks):
            script = tmp_path / f"example_{i}.py"
            script.write_text(block)
            proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
            assert proc.returncode == 0, f"example {i}:\n{block}\n{proc.stderr}"
            outputs.append(proc.stdout)
        if run == 0:
            assert len(server.receipts()) > before
        else:
            assert len(server.receipts()) == before  # the second run replays every call
    half = len(outputs) // 2
    assert outputs[:half] == outputs[half:]
    assert not [p for p in (tmp_path / "evidence").rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
