"""A provider's own receipt log, keyed as the provider keys it, checked against a bundle by both verifiers.

A fake provider on 127.0.0.1 logs every request it receives (the raw body bytes' SHA-256
and BLAKE3, and the ``Idempotency-Key`` header) before it answers. Its log is then cut to
one shape per test: keyed by the idempotency key alone, by ``sha256:`` of the body, by
``blake3:`` of the body. ``export --receipts`` carries it; the library's ``verify --bundle``
and the standalone ``verify_bundle.py`` (a separate ``python -I`` process) must agree that
every receipt is covered, and that one receipt no recorded attempt covers is a violation.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import blake3
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import intentlog
from intentlog import ProviderDedup
from intentlog.bundle import check_bundle, export_bundle
from intentlog.eventlog.canonical import canonicalize

httpx = pytest.importorskip("httpx")

import intentlog.http  # noqa: E402

HEADER = "Idempotency-Key"


class _Provider(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _Provider

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:  # the receipt is kept before the request is worked on
            self.server.log.append(
                {
                    "sha256": "sha256:" + hashlib.sha256(body).hexdigest(),
                    "blake3": "blake3:" + blake3.blake3(body).hexdigest(),
                    "key": self.headers.get(HEADER),
                }
            )
        data = b'{"id": "ch_1", "verdict": "accept"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def provider() -> Iterator[_Provider]:
    server = _Provider()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _url(p: _Provider) -> str:
    return f"http://127.0.0.1:{p.server_address[1]}"


def _drop_in_call(root: Path, p: _Provider) -> None:
    """An http drop-in call that sends the call's key in the declared idempotency header."""
    with intentlog.open(root) as led:
        dedup = ProviderDedup(window=3600, header=HEADER)
        with intentlog.http.client(led.task("orders"), base_url=_url(p), dedup=dedup) as c:
            assert c.post("/v1/charges", json={"customer": "cus_1", "amount": 1000}).status_code == 200


def _effect_call(root: Path, p: _Provider) -> None:
    """A task.effect whose send posts the canonical request bytes with the call key as its idempotency key."""
    request = {"model": "m", "prompt": "review page 7"}

    def send(req: Any) -> bytes:
        r = httpx.post(
            _url(p) + "/v1/review", content=canonicalize(req).data, headers={HEADER: "review-p7"}, timeout=30
        )
        r.raise_for_status()
        return r.content

    with intentlog.open(root) as led:
        led.task("chapter-16").effect("review-p7", request, send=send)


def _shape(entry: dict[str, Any], shape: str) -> dict[str, Any]:
    if shape == "key":
        return {"idempotency_key": entry["key"], "n": 1}
    return {"body_hash": entry[shape], "status": 200}


def _uncovered(shape: str) -> dict[str, Any]:
    if shape == "key":
        return {"idempotency_key": "never-recorded", "n": 9}
    other = b'{"model":"m","prompt":"a request nobody recorded"}'
    digest = hashlib.sha256(other).hexdigest() if shape == "sha256" else blake3.blake3(other).hexdigest()
    return {"body_hash": f"{shape}:{digest}", "status": 200}


def _both_verifiers(bundle: Path) -> tuple[bool, bool, str]:
    library = check_bundle(bundle)
    proc = subprocess.run(
        [sys.executable, "-I", str(bundle / "verify_bundle.py"), str(bundle)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    receipts = [p.message for p in library.problems if p.code == "receipts"]
    return library.ok, proc.returncode == 0, "\n".join(receipts) + "\n" + proc.stdout[-3000:]


def _export(root: Path, tmp: Path, lines: list[dict[str, Any]], name: str) -> Path:
    log = tmp / "provider" / name
    log.parent.mkdir(exist_ok=True)
    log.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    bundle = tmp / f"bundle-{name}"
    export_bundle(root, out=bundle, receipts=[log], check=False)
    return bundle


CASES = [("drop-in", "key"), ("effect", "key"), ("effect", "sha256"), ("effect", "blake3")]


@pytest.mark.parametrize(("call", "shape"), CASES)
def test_a_provider_log_in_its_own_shape_is_covered_and_an_unrecorded_send_is_not(
    tmp_path: Path, provider: _Provider, call: str, shape: str
) -> None:
    root = tmp_path / "ledger"
    (_drop_in_call if call == "drop-in" else _effect_call)(root, provider)
    assert len(provider.log) == 1 and provider.log[0]["key"]
    lines = [_shape(provider.log[0], shape)]

    good = _export(root, tmp_path, lines, f"{shape}.jsonl")
    lib_ok, std_ok, why = _both_verifiers(good)
    assert lib_ok and std_ok, why

    bad = _export(root, tmp_path, [*lines, _uncovered(shape)], f"{shape}-extra.jsonl")
    lib_ok, std_ok, why = _both_verifiers(bad)
    assert not lib_ok and not std_ok, why
    assert "no recorded attempt covers" in why

    twice = _export(root, tmp_path, lines * 2, f"{shape}-twice.jsonl")  # two sends, one attempt recorded
    lib_ok, std_ok, why = _both_verifiers(twice)
    assert not lib_ok and not std_ok, why


def test_a_drop_in_receipt_with_the_wire_body_hash_is_matched_by_its_key(tmp_path: Path, provider: _Provider) -> None:
    """The drop-in records a canonical envelope, not the wire bytes: a line with both fields falls back to the key."""
    root = tmp_path / "ledger"
    _drop_in_call(root, provider)
    entry = provider.log[0]
    bundle = _export(root, tmp_path, [{"body_hash": entry["sha256"], "idempotency_key": entry["key"]}], "both.jsonl")
    lib_ok, std_ok, why = _both_verifiers(bundle)
    assert lib_ok and std_ok, why


def test_a_line_without_either_field_fails_both(tmp_path: Path, provider: _Provider) -> None:
    root = tmp_path / "ledger"
    _effect_call(root, provider)
    bundle = _export(root, tmp_path, [{"request_id": "req_1"}], "nameless.jsonl")
    lib_ok, std_ok, why = _both_verifiers(bundle)
    assert not lib_ok and not std_ok, why
    assert "idempotency_key" in why


def _two_calls_one_body(root: Path, p: _Provider) -> None:
    """Two task.effect calls, keys ``a`` and ``b``, that send the same request bytes."""
    request = {"model": "m", "prompt": "the same prompt twice"}

    def sender(key: str) -> Any:
        def send(req: Any) -> bytes:
            r = httpx.post(_url(p) + "/v1/review", content=canonicalize(req).data, headers={HEADER: key}, timeout=30)
            r.raise_for_status()
            return r.content

        return send

    with intentlog.open(root) as led:
        for key in ("a", "b"):
            led.task("chapter-16").effect(key, request, send=sender(key))


def test_each_attempt_covers_one_receipt_whichever_field_names_it(tmp_path: Path, provider: _Provider) -> None:
    """A body receipt two calls share yields to a later key receipt; a third receipt of those sends is uncovered."""
    root = tmp_path / "ledger"
    _two_calls_one_body(root, provider)
    body, key_a = provider.log[0]["sha256"], provider.log[0]["key"]
    assert key_a == "a" and provider.log[1]["sha256"] == body
    fits = [{"body_hash": body}, {"idempotency_key": "a"}]  # the first must be moved to call b to cover both
    lib_ok, std_ok, why = _both_verifiers(_export(root, tmp_path, fits, "fits.jsonl"))
    assert lib_ok and std_ok, why
    # the demo's forged receipt: an unknown body under a key whose one attempt another line already claimed
    forged = [*fits, {"body_hash": "blake3:" + "ab" * 32, "idempotency_key": "b"}]
    lib_ok, std_ok, why = _both_verifiers(_export(root, tmp_path, forged, "forged.jsonl"))
    assert not lib_ok and not std_ok, why
    assert "line 3" in why


# -- the assignment of receipts to attempts, in both verifiers ---------------------------------------


def _max_covered(wants: list[list[int]], capacity: list[int]) -> int:
    """The most receipts any assignment covers (exhaustive over small cases)."""
    best = 0

    def go(r: int, left: list[int], covered: int) -> None:
        nonlocal best
        if covered + len(wants) - r <= best:
            return
        if r == len(wants):
            best = covered
            return
        for c in set(wants[r]):
            if left[c] > 0:
                left[c] -= 1
                go(r + 1, left, covered + 1)
                left[c] += 1
        go(r + 1, left, covered)

    go(0, list(capacity), 0)
    return best


@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=4).flatmap(
        lambda cap: st.tuples(
            st.just(cap),
            st.lists(st.lists(st.integers(0, len(cap) - 1), max_size=3, unique=True), max_size=7),
        )
    )
)
def test_both_assignments_cover_as_many_receipts_as_possible_and_report_the_same_lines(
    case: tuple[list[int], list[list[int]]],
) -> None:
    from intentlog import verify_bundle
    from intentlog.bundle.receipts import uncovered

    capacity, wants = case
    library = uncovered(wants, capacity)
    standalone = list(verify_bundle.assign_receipts(wants, capacity))
    assert library == standalone
    assert len(wants) - len(library) == _max_covered(wants, capacity)


def test_many_sends_of_one_body_and_one_too_many_receipts(tmp_path: Path) -> None:
    """Thousands of calls sharing a body: the one receipt too many is found without deep recursion."""
    from intentlog import verify_bundle
    from intentlog.bundle.receipts import uncovered

    n = 1500
    wants = [list(range(n)) for _ in range(n)] + [[0], list(range(n))]
    capacity = [1] * n
    assert uncovered(wants, capacity) == [n, n + 1]
    assert list(verify_bundle.assign_receipts(wants, capacity)) == [n, n + 1]


def test_the_cli_exports_a_key_log_and_exits_1_on_an_uncovered_key(tmp_path: Path, provider: _Provider) -> None:
    """``intentlog export --receipts`` takes the provider's key log as it is; an unrecorded key makes it exit 1."""
    from click.testing import CliRunner

    from intentlog.cli import main

    root = tmp_path / "ledger"
    _drop_in_call(root, provider)
    log = tmp_path / "keys.jsonl"
    log.write_bytes(orjson.dumps({"idempotency_key": provider.log[0]["key"]}) + b"\n")
    runner = CliRunner()
    r = runner.invoke(main, ["--root", str(root), "export", "--out", str(tmp_path / "b"), "--receipts", str(log)])
    assert r.exit_code == 0, r.output
    assert runner.invoke(main, ["verify", "--bundle", str(tmp_path / "b")]).exit_code == 0
    log.write_bytes(log.read_bytes() + orjson.dumps({"idempotency_key": "sent-outside-the-record"}) + b"\n")
    r = runner.invoke(
        main, ["--root", str(root), "export", "--out", str(tmp_path / "c"), "--receipts", str(log), "--json"]
    )
    assert r.exit_code == 1, r.output
    assert "sent-outside-the-record" in r.output
