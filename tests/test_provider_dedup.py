"""Exactly-once where the provider allows it: an unknown effect resolved through the provider's idempotency window.

The provider here is a separate process (tests/dedup_provider.py) that deduplicates by
``Idempotency-Key`` and keeps its own logs of *effects* (first sends) and *requests* (all
sends); every claim is checked against those logs and the record on disk, never against
the absence of an exception.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from dedup_provider import CHARGE, KEY, KEY_HEADER, TASK, read_log, send_charge

import intentlog
import intentlog.http
from intentlog import ProviderDedup, UsageError
from intentlog._internal.digest import digest_bytes
from intentlog.eventlog.canonical import dumps
from intentlog.eventlog.format import encode_line
from intentlog.projections.status import task_status
from intentlog.projections.verify import verify_path as verify_ledger

HERE = Path(__file__).parent
PROVIDER = HERE / "dedup_provider.py"
HOUR = 3600.0


@dataclass
class Provider:
    url: str
    folder: Path
    proc: subprocess.Popen[str]

    def effects(self, key: str | None = KEY) -> list[dict[str, Any]]:
        return [e for e in read_log(self.folder / "effects.jsonl") if e["key"] == key]

    def requests(self, key: str | None = KEY) -> list[dict[str, Any]]:
        return [r for r in read_log(self.folder / "requests.jsonl") if r["key"] == key]

    def answers(self, key: str | None = KEY) -> list[dict[str, Any]]:
        return [a for a in read_log(self.folder / "answers.jsonl") if a["key"] == key]

    def _control(self, fields: dict[str, Any]) -> None:
        req = urllib.request.Request(f"{self.url}/_control", data=json.dumps(fields).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    def hold(self, seconds: float) -> None:
        """Sleep ``seconds`` before each answer; a negative value holds it until :meth:`release`."""
        self._control({"hold": seconds})

    def release(self) -> None:
        self._control({"release": True})

    def wait_answered(self, key: str | None = KEY, timeout: float = 30) -> None:
        """Wait until the provider keeps an answer for ``key`` (a repeat then gets it replayed)."""
        deadline = time.monotonic() + timeout
        while not self.answers(key):
            assert time.monotonic() < deadline, f"the provider kept no answer for {key}"
            time.sleep(0.01)


def _start(folder: Path, window: float) -> Provider:
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, str(PROVIDER), "serve", str(folder), "--window", str(window)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return Provider(f"http://127.0.0.1:{port}", folder, proc)


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[Provider]:
    p = _start(tmp_path / "provider", window=HOUR)
    try:
        yield p
    finally:
        p.proc.kill()
        p.proc.wait()


def kill_mid_send(p: Provider, ledger: Path, *args: str, release: bool = True) -> None:
    """Run the client in a child and SIGKILL it once the provider has the effect and is still working on it.

    The provider holds its answer until released: by the time of the kill with ``release``, else by the caller.
    """
    p.hold(-1)
    before = len(read_log(p.folder / "effects.jsonl"))  # any key, or none
    child = subprocess.Popen(
        [sys.executable, str(PROVIDER), "client", str(ledger), p.url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])},
    )
    deadline = time.monotonic() + 30
    while len(read_log(p.folder / "effects.jsonl")) == before:
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the provider never received the request"
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    p.hold(0)
    if release:
        p.release()


def events(ledger: Path, task: str = TASK) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (ledger / "tasks" / f"{task}.jsonl").read_bytes().splitlines()]


def kinds(ledger: Path) -> list[str]:
    return [e["kind"] for e in events(ledger)]


def folder_bytes(root: Path) -> dict[str, bytes]:
    """Every file's bytes, but the writer lock's (it names the pid of whoever opened the task last)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def rechain(path: Path, evs: list[dict[str, Any]]) -> None:
    out: list[bytes] = []
    prev: str | None = None
    for i, ev in enumerate(evs):
        line = encode_line(ev["kind"], dumps(ev["data"]), prev, i, ev["ts"])
        out.append(line)
        prev = digest_bytes(line)
    path.write_bytes(b"".join(out))


def dedup(window: float = HOUR, margin: float | None = None) -> ProviderDedup:
    return ProviderDedup(window=window, header=KEY_HEADER, margin=margin)


# -- the declaration -------------------------------------------------------------------------------


def test_declaration_is_validated_and_recorded_in_the_manifest(tmp_path: Path) -> None:
    d = ProviderDedup(window=dt.timedelta(hours=24), header="Idempotency-Key")
    assert (d.window_s, d.header, d.margin_s) == (86400.0, "Idempotency-Key", 4320.0)  # 5 % of a day
    assert ProviderDedup(window=600).margin_s == 60.0  # never under a minute
    for bad in (0, -1, float("inf"), float("nan"), True, "60", dt.timedelta(0), None):
        with pytest.raises(UsageError, match="window"):
            ProviderDedup(window=bad)  # type: ignore[arg-type]
    for header in ("Idempotency Key", "", "key:", 7):
        with pytest.raises(UsageError, match="header"):
            ProviderDedup(window=HOUR, header=header)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="margin"):
        ProviderDedup(window=30)  # the default margin (60 s) leaves nothing
    with pytest.raises(UsageError, match="margin"):
        ProviderDedup(window=10, margin=-1)
    with pytest.raises(AttributeError):  # frozen
        ProviderDedup(window=HOUR).window_s = 1  # type: ignore[misc]

    root = tmp_path / "ledger"
    task = intentlog.open(root).task("t")
    task.effect("warm", {"x": 0}, lambda r: b"ok")
    before = folder_bytes(root)
    with pytest.raises(UsageError, match="ProviderDedup"):
        task.effect("k", {"x": 1}, lambda r: b"ok", dedup="24h")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="ProviderDedup"):
        task.prepare("k", {"x": 1}, dedup=86400)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="ProviderDedup"):
        intentlog.http.client(task, dedup=86400)  # type: ignore[arg-type]
    assert folder_bytes(root) == before  # refused before anything was written

    task.effect("k", {"x": 1}, lambda r: b"ok", dedup=d)
    manifest = [e for e in events(root, "t") if e["kind"] == "call.manifest"][-1]
    assert manifest["data"]["dedup"] == {"window_s": 86400.0, "header": "Idempotency-Key", "margin_s": 4320.0}


# -- killed mid-send, run again --------------------------------------------------------------------


def test_killed_mid_send_is_resent_inside_the_window_and_paid_once(
    provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger"
    kill_mid_send(provider, ledger, "--via", "core")
    assert kinds(ledger)[-1] == "attempt.started"  # the record says: unknown
    provider.wait_answered()  # the provider finishes the first request and keeps its answer
    real = time.time
    monkeypatch.setattr(intentlog.dedup, "clock", lambda: real() + 1.2)  # and 1.2 s more have passed

    task = intentlog.open(ledger).task(TASK)
    result = task.effect(KEY, CHARGE, send_charge(provider.url), interpret=json.loads, dedup=dedup())

    assert len(provider.effects()) == 1  # paid once
    assert len(provider.requests()) == 2  # sent twice, under the same key
    assert result["id"] == "ch_1"  # the provider's replay of the first answer
    evs = events(ledger)
    rec = [e for e in evs if e["kind"] == "effect.reconciled"]
    assert len(rec) == 1
    d = rec[0]["data"]
    assert (d["outcome"], d["source"], d["attempt"], d["window_s"], d["margin_s"]) == (
        "provider_dedup",
        "provider_dedup",
        1,
        HOUR,
        180.0,
    )
    assert 1.0 <= d["age_s"] < 60
    assert kinds(ledger)[-5:] == [
        "effect.reconciled",
        "attempt.started",
        "attempt.observed",
        "attempt.interpreted",
        "call.completed",
    ]
    st = task.work_state().call_for_key(KEY)
    assert st is not None and st.stage == "completed" and st.provider_dedup
    report = verify_ledger(ledger)
    assert report.ok, report


def test_after_the_window_it_stays_unknown_and_nothing_is_sent(
    provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger"
    # declared window 3 s with a 1 s margin: usable for under 2 s after the first send
    kill_mid_send(provider, ledger, "--via", "core", "--window", "3", "--margin", "1")
    real = time.time
    monkeypatch.setattr(intentlog.dedup, "clock", lambda: real() + 2.5)  # 2.5 s later
    before = folder_bytes(ledger)
    task = intentlog.open(ledger).task(TASK)
    with pytest.raises(intentlog.EffectUnknown) as info:
        task.effect(KEY, CHARGE, send_charge(provider.url), interpret=json.loads, dedup=dedup(3, 1))
    assert info.value.next_operation == "reconcile effect"
    assert folder_bytes(ledger) == before  # nothing appended
    assert len(provider.requests()) == 1 and len(provider.effects()) == 1  # nothing sent


def test_without_a_declaration_it_stays_unknown(provider: Provider, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    kill_mid_send(provider, ledger, "--via", "core", "--no-dedup")
    provider.wait_answered()
    before = folder_bytes(ledger)
    task = intentlog.open(ledger).task(TASK)
    # no declaration now, nor in the manifest: unknown
    with pytest.raises(intentlog.EffectUnknown):
        task.effect(KEY, CHARGE, send_charge(provider.url), interpret=json.loads)
    # declared only now: the first attempt was not sent under it, so still unknown
    with pytest.raises(intentlog.EffectUnknown):
        task.effect(KEY, CHARGE, send_charge(provider.url), interpret=json.loads, dedup=dedup())
    assert folder_bytes(ledger) == before
    assert len(provider.requests()) == 1


def test_declared_at_first_but_not_now_stays_unknown(provider: Provider, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    kill_mid_send(provider, ledger, "--via", "core")
    provider.wait_answered()
    before = folder_bytes(ledger)
    task = intentlog.open(ledger).task(TASK)
    with pytest.raises(intentlog.EffectUnknown):
        task.effect(KEY, CHARGE, send_charge(provider.url), interpret=json.loads)
    assert folder_bytes(ledger) == before and len(provider.requests()) == 1


def test_a_first_attempt_in_the_future_is_refused(
    provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger"
    kill_mid_send(provider, ledger, "--via", "core")
    provider.wait_answered()
    before = folder_bytes(ledger)
    real = time.time
    monkeypatch.setattr(intentlog.dedup, "clock", lambda: real() - 600)  # this clock runs 10 min behind the record
    task = intentlog.open(ledger).task(TASK)
    with pytest.raises(intentlog.EffectUnknown):
        task.effect(KEY, CHARGE, send_charge(provider.url), interpret=json.loads, dedup=dedup())
    assert folder_bytes(ledger) == before and len(provider.requests()) == 1


def test_key_in_use_is_retried_under_the_policy_never_a_second_effect(provider: Provider, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    kill_mid_send(provider, ledger, "--via", "core", release=False)  # the provider still works on the first send

    def release_after_a_409() -> None:  # a third request means the second got its 409: only then the first ends
        deadline = time.monotonic() + 60
        while len(provider.requests()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        provider.release()

    releaser = threading.Thread(target=release_after_a_409)
    releaser.start()
    task = intentlog.open(ledger).task(TASK)
    policy = intentlog.RetryPolicy(max_attempts=12, backoff=0.5, factor=1.0)
    try:
        result = task.effect(KEY, CHARGE, send_charge(provider.url), interpret=json.loads, retry=policy, dedup=dedup())
    finally:
        releaser.join()

    assert result["id"] == "ch_1"
    assert len(provider.effects()) == 1  # never a second effect
    assert len(provider.requests()) >= 3  # the first, at least one 409, the replay
    evs = events(ledger)
    failures = [e for e in evs if e["kind"] == "attempt.observed" and e["data"].get("error")]
    assert failures and all("409" in e["data"]["error"] and e["data"]["retryable"] for e in failures)
    retries = [e for e in evs if e["kind"] == "attempt.retry_decided"]
    assert len(retries) == len(failures) and all(e["data"]["decision"] == "retry" for e in retries)
    assert [e["data"]["outcome"] for e in evs if e["kind"] == "effect.reconciled"] == ["provider_dedup"]
    assert evs[-1]["kind"] == "call.completed"
    assert verify_ledger(ledger).ok


def test_a_key_reused_with_other_parameters_is_refused_as_drift(provider: Provider, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    first = intentlog.open(ledger).task("first")
    first.effect(KEY, CHARGE, send_charge(provider.url), interpret=json.loads, dedup=dedup())
    other = intentlog.open(ledger).task("other")  # another task, the same key, another charge
    with pytest.raises(intentlog.CallFailed, match="DRIFT"):
        other.effect(KEY, {**CHARGE, "amount": 9900}, send_charge(provider.url), interpret=json.loads, dedup=dedup())
    assert len(provider.effects()) == 1 and len(provider.requests()) == 2
    evs = events(ledger, "other")
    assert [e["kind"] for e in evs][-3:] == ["attempt.observed", "attempt.retry_decided", "call.failed"]
    assert evs[-3]["data"]["retryable"] is False
    assert evs[-1]["data"]["reason"].startswith("DRIFT")
    st = other.work_state().call_for_key(KEY)
    assert st is not None and st.stage == "failed"


def test_the_operator_view_names_the_reconciliation(provider: Provider, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    kill_mid_send(provider, ledger, "--via", "core")
    provider.wait_answered()
    task = intentlog.open(ledger).task(TASK)
    task.effect(KEY, CHARGE, send_charge(provider.url), interpret=json.loads, dedup=dedup())
    evs = list(task.events())
    upto = next(i for i, e in enumerate(evs) if e.kind == "effect.reconciled") + 1
    ws = intentlog.work_state(evs[:upto])
    c = ws.calls["call-1"]
    assert (c.stage, c.next_operation, c.duplicate_effect_risk) == ("provider_dedup", "start next attempt", False)
    assert c.provider_dedup and "window" in (c.reason or "")
    status = task_status(evs[:upto], task_id=TASK)
    assert status.unresolved_action is not None and "provider dedup" in status.unresolved_action


# -- through the real clients ----------------------------------------------------------------------


def test_through_httpx_the_header_carries_the_recorded_key(provider: Provider, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    kill_mid_send(provider, ledger, "--via", "httpx")
    provider.wait_answered()
    task = intentlog.open(ledger).task(TASK)
    with intentlog.http.client(task, base_url=provider.url, dedup=dedup()) as http, task.key(KEY):
        response = http.post("/v1/charges", json=CHARGE, headers={KEY_HEADER: "ignored-random-key"})
    assert response.status_code == 200 and response.json()["id"] == "ch_1"
    assert response.headers.get("Idempotent-Replayed") == "true"
    assert len(provider.effects()) == 1 and len(provider.requests()) == 2  # both under the call's key
    manifest = next(e for e in events(ledger) if e["kind"] == "call.manifest")
    ref = manifest["data"]["request"]
    request = ref["inline"].encode() if "inline" in ref else task.ledger.artifacts.get(ref["digest"])
    assert orjson.loads(request)["headers"][KEY_HEADER.lower()] == KEY  # the key the provider saw is recorded
    # offline replay answers from the record (the resolved first attempt is skipped), sends nothing
    with intentlog.http.replay(task, dedup=dedup()).client(base_url=provider.url) as offline, task.key(KEY):
        again = offline.post("/v1/charges", json=CHARGE)
    assert again.json()["id"] == "ch_1" and len(provider.requests()) == 2
    assert [e["data"]["outcome"] for e in events(ledger) if e["kind"] == "effect.reconciled"] == ["provider_dedup"]
    assert verify_ledger(ledger).ok


def test_through_openai_the_unknown_call_completes_once(provider: Provider, tmp_path: Path) -> None:
    openai = pytest.importorskip("openai")
    ledger = tmp_path / "ledger"
    kill_mid_send(provider, ledger, "--via", "openai")
    provider.wait_answered()
    task = intentlog.open(ledger).task(TASK)
    client = openai.OpenAI(
        base_url=f"{provider.url}/v1",
        api_key="sk-dedup-test",
        http_client=intentlog.http.client(task, dedup=dedup()),
        max_retries=0,
    )
    with task.key(KEY):
        reply = client.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "answer #1"
    assert len(provider.effects()) == 1 and len(provider.requests()) == 2
    assert [e["data"]["outcome"] for e in events(ledger) if e["kind"] == "effect.reconciled"] == ["provider_dedup"]
    # without the declaration the same situation stays unknown through the SDK
    ledger2 = tmp_path / "ledger2"
    kill_mid_send(provider, ledger2, "--via", "openai", "--no-dedup")
    task2 = intentlog.open(ledger2).task(TASK)
    plain = openai.OpenAI(
        base_url=f"{provider.url}/v1", api_key="sk-dedup-test", http_client=intentlog.http.client(task2), max_retries=0
    )
    with pytest.raises(intentlog.EffectUnknown), task2.key(KEY):
        plain.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": "hi"}])


# -- forged reconciliations ------------------------------------------------------------------------


@pytest.fixture
def resolved(provider: Provider, tmp_path: Path) -> Path:
    """A ledger whose unknown effect was resolved by provider dedup (verified clean)."""
    ledger = tmp_path / "ledger"
    kill_mid_send(provider, ledger, "--via", "core")
    task = intentlog.open(ledger).task(TASK)
    task.effect(KEY, CHARGE, send_charge(provider.url), interpret=json.loads, dedup=dedup())
    task.ledger.close()
    assert verify_ledger(ledger).ok
    return ledger


def _forge_no_declaration(evs: list[dict[str, Any]]) -> None:
    for e in evs:
        if e["kind"] == "call.manifest":
            del e["data"]["dedup"]


def _forge_outside_window(evs: list[dict[str, Any]]) -> None:
    for e in evs:
        if e["kind"] == "attempt.started" and e["data"]["attempt"] == 1:
            e["ts"] = "2020-01-01T00:00:00.000000Z"  # years before the reconciliation


@pytest.mark.parametrize("forge", [_forge_no_declaration, _forge_outside_window])
def test_verify_rejects_a_forged_provider_dedup(resolved: Path, forge: Any) -> None:
    path = resolved / "tasks" / f"{TASK}.jsonl"
    evs = events(resolved)
    forge(evs)
    rechain(path, evs)
    report = verify_ledger(resolved)
    assert not report.ok
    assert any("provider_dedup" in f.message for f in report.problems if f.severity == "error"), report


@pytest.mark.parametrize("forge", [_forge_no_declaration, _forge_outside_window])
def test_verify_bundle_rejects_a_forged_provider_dedup(resolved: Path, tmp_path: Path, forge: Any) -> None:
    from test_bundle import VERIFIER_FILE, rehash, reseal, restate

    from intentlog.bundle import export_bundle

    bundle = tmp_path / "bundle"
    assert export_bundle(resolved, out=bundle).ok
    run = [sys.executable, str(bundle / VERIFIER_FILE), str(bundle)]
    assert subprocess.run(run, capture_output=True, text=True, timeout=60).returncode == 0
    path = bundle / "tasks" / f"{TASK}.jsonl"
    evs = events(bundle)
    forge(evs)
    rechain(path, evs)
    restate(bundle)
    reseal(bundle)
    rehash(bundle)
    p = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stdout
    assert "provider_dedup" in p.stdout


def test_the_synthetic_provider_replays_a_repeated_key(tmp_path: Path) -> None:
    """The yardstick itself: a repeated key is one effect and two requests; the logs are the provider's own."""
    p = _start(tmp_path / "prov", window=HOUR)
    try:
        send_charge(p.url)(CHARGE)
        assert len(p.effects()) == 1 and len(p.requests()) == 1
        send_charge(p.url)(CHARGE)
        assert len(p.effects()) == 1 and len(p.requests()) == 2  # the provider replays a repeated key
    finally:
        p.proc.kill()
        p.proc.wait()


# -- in-process: prepare / Call.run, and the window checked again before every later send ----------


def _unknown_first(task: intentlog.Task, d: ProviderDedup) -> intentlog.Call:
    call = task.prepare("k", {"amount": 5}, dedup=d)

    def lost(request: Any) -> bytes:
        raise ConnectionResetError("connection reset after the request left")

    with pytest.raises(intentlog.EffectUnknown):
        call.run(lost)
    return call


def test_prepare_and_call_run_resolve_inside_the_window(tmp_path: Path) -> None:
    task = intentlog.open(tmp_path / "ledger").task("t")
    d = ProviderDedup(window=HOUR)
    _unknown_first(task, d)
    sent: list[Any] = []
    again = task.prepare("k", {"amount": 5})  # binds to the recorded call
    assert again.run(lambda r: sent.append(r) or b"replayed", dedup=d) == b"replayed"
    assert sent == [{"amount": 5}]
    rec = [e for e in task.events() if e.kind == "effect.reconciled"]
    assert [e.data["outcome"] for e in rec] == ["provider_dedup"] and rec[0].data["margin_s"] == 180.0


def test_a_later_send_relying_on_the_window_checks_it_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ledger"
    task = intentlog.open(root).task("t")
    d = ProviderDedup(window=HOUR)
    _unknown_first(task, d)
    busy = intentlog.ProviderFailure("HTTP 409: key in use", retryable=True)

    def in_use(request: Any) -> bytes:
        raise busy

    hand_back = intentlog.RetryPolicy(hand_back=True)
    with pytest.raises(intentlog.RetryHandedBack):
        task.effect("k", {"amount": 5}, in_use, retry=hand_back, dedup=d)  # resolved, resent, 409, retry pending
    st = task.work_state().call_for_key("k")
    assert st is not None and st.stage == "retry_decided" and st.provider_dedup
    before = folder_bytes(root)
    real = time.time
    monkeypatch.setattr(intentlog.dedup, "clock", lambda: real() + 2 * HOUR)  # the window has passed
    sent: list[Any] = []
    with pytest.raises(intentlog.ResumeRefused, match="window has passed") as info:
        task.effect("k", {"amount": 5}, lambda r: sent.append(r) or b"x", dedup=d)
    assert info.value.next_operation == "operator decides"
    monkeypatch.setattr(intentlog.dedup, "clock", real)
    with pytest.raises(intentlog.ResumeRefused, match="not declared by this run"):
        task.effect("k", {"amount": 5}, lambda r: sent.append(r) or b"x")  # inside, but not declared now
    assert sent == [] and folder_bytes(root) == before
    assert task.effect("k", {"amount": 5}, lambda r: sent.append(r) or b"ok", dedup=d) == b"ok"  # inside: sent
    assert len(sent) == 1
