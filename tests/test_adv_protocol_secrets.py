"""Credential placements the redaction rule missed, each searched for in every byte afterwards.

Operator and script texts the library records on the caller's behalf (an approval's
question and decision note, a checkpoint's note, revision and changed files, the reason a
task or call was given up, an acceptance note) are scrubbed exactly as reconciliation
notes are; inside strings, a credential name whose value is a JSON object or array (a
JSON body kept as a string) has the whole value redacted, and a query parameter whose
name ends in ``Signature`` (AWS SigV4's ``X-Amz-Signature``, GCS's ``X-Goog-Signature``)
is a credential. The ledger and an exported bundle (folder and tar) are grepped byte for
byte.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import intentlog
from intentlog import canonicalize
from intentlog.bundle import export_bundle

SECRET = "zq-SEKRET-7f3a91c2e8d4"


def _files(root: Path) -> Iterator[Path]:
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            yield p


def _leaks(root: Path) -> list[str]:
    forms = [SECRET.encode(), base64.b64encode(f"user:{SECRET}".encode())]
    return [str(p.relative_to(root)) for p in _files(root) if any(f in p.read_bytes() for f in forms)]


def _assert_clean(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    root = Path(ledger.root)
    assert any(p.suffix == ".jsonl" for p in _files(root)), "the scenario recorded nothing"
    assert _leaks(root) == []
    out, tar = tmp_path / "bundle", tmp_path / "bundle.tar"
    export_bundle(root, out=out, tar=tar, check=False)
    assert _leaks(out) == []
    assert SECRET.encode() not in tar.read_bytes()


def _ok(_request: Any) -> bytes:
    return b'{"ok": true}'


def _bound(task: intentlog.Task) -> intentlog.Call:
    call = task.prepare("k", {"q": 1})
    task.request_approval("a", "send it?", binds=call)
    return call


def _approval_question(task: intentlog.Task) -> None:
    call = task.prepare("k", {"q": 1})
    task.request_approval("a", f"send it with password={SECRET}?", binds=call)


def _approval_note(task: intentlog.Task) -> None:
    _bound(task)
    task.decide("a", "approve", by="ops", note=f"checked, token={SECRET}")


def _approval_reject_note(task: intentlog.Task) -> None:
    _bound(task)
    task.decide("a", "reject", by="ops", note=f"Authorization: Bearer {SECRET}1 is the wrong account")


def _checkpoint_note(task: intentlog.Task) -> None:
    task.checkpoint("build", note=f"deployed with api_key={SECRET}")


def _checkpoint_revision(task: intentlog.Task) -> None:
    task.checkpoint("build", revision=f"https://ci:{SECRET}@git.example.com/repo.git@abc123")


def _checkpoint_changed_files(task: intentlog.Task) -> None:
    task.checkpoint("build", changed_files=[f"out/report.html?token={SECRET}"])


def _task_failed_reason(task: intentlog.Task) -> None:
    task.fail_task(f"the provider refused password={SECRET}")


def _task_accepted_note(task: intentlog.Task) -> None:
    task.accept(note=f"client_secret: {SECRET}")


def _call_failed_reason(task: intentlog.Task) -> None:
    call = task.prepare("k", {"q": 1})
    task.fail(call.call_id, f"rotated the key; old api_key={SECRET}")


def _session_turn_rejected(task: intentlog.Task) -> None:
    session = task.ledger.session(task.id + "-chat")
    session.turn({"messages": [{"role": "user", "content": "hi"}]}, _ok)
    session.reject(1, note=f"the answer quoted secret={SECRET}")


def _json_body_with_nested_credentials(task: intentlog.Task) -> None:
    body = json.dumps({"model": "m", "credentials": {"type": "service_account", "private": SECRET}})
    task.effect("k", {"body": body}, _ok)


def _json_body_with_credential_list(task: intentlog.Task) -> None:
    body = json.dumps({"api_keys": [SECRET, "other-key-0000000"]})
    task.effect("k", {"body": body}, _ok)


def _sigv4_presigned_url(task: intentlog.Task) -> None:
    url = f"https://bucket.s3.amazonaws.com/o?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature={SECRET}&X-Amz-Date=1"
    task.effect("k", {"url": url}, _ok)


def _goog_signed_url(task: intentlog.Task) -> None:
    task.effect("k", {"url": f"https://storage.googleapis.com/b/o?X-Goog-Signature={SECRET}"}, _ok)


PLACEMENTS: dict[str, Callable[[intentlog.Task], None]] = {
    f.__name__.lstrip("_"): f
    for f in (
        _approval_question,
        _approval_note,
        _approval_reject_note,
        _checkpoint_note,
        _checkpoint_revision,
        _checkpoint_changed_files,
        _task_failed_reason,
        _task_accepted_note,
        _call_failed_reason,
        _session_turn_rejected,
        _json_body_with_nested_credentials,
        _json_body_with_credential_list,
        _sigv4_presigned_url,
        _goog_signed_url,
    )
}


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_no_placement_reaches_the_record(ledger: intentlog.Ledger, tmp_path: Path, placement: str) -> None:
    with ledger.task("t") as task:
        PLACEMENTS[placement](task)
    _assert_clean(ledger, tmp_path)


def test_a_scrubbed_note_keeps_its_other_words(ledger: intentlog.Ledger) -> None:
    with ledger.task("t") as task:
        _bound(task)
        task.decide("a", "reject", by="ops", note=f"wrong account, token={SECRET}")
        st = task.approval("a")
    assert st.note == "wrong account, token=[REDACTED]"
    assert st.by == "ops"


def test_a_json_string_keeps_its_shape_around_a_redacted_object() -> None:
    body = json.dumps({"credentials": {"a": SECRET, "b": [1, {"c": "}"}]}, "model": "m"})
    data = json.loads(canonicalize({"body": body}).data)
    assert data["body"] == '{"credentials": [REDACTED], "model": "m"}'


def test_query_names_that_only_mention_keys_keep_their_values() -> None:
    url = "https://h/p?cache_key=abc12345&monkey=banana12&X-Amz-SignedHeaders=host"
    assert json.loads(canonicalize({"url": url}).data) == {"url": url}


def test_a_drift_message_never_shows_a_credential(ledger: intentlog.Ledger) -> None:
    """A re-run that turns the defaults off (or otherwise exposes a credential) is refused as DRIFT;
    the message names the path but shows no credential, from either side."""
    with ledger.task("t") as task:
        task.prepare("k", {"api_key": SECRET, "q": 1})
    for request, redact in (
        ({"api_key": SECRET, "q": 1}, intentlog.Redact([], defaults=False)),
        ({"api_key": SECRET, "q": 1, "headers": {"X-Custom": f"token={SECRET}"}}, intentlog.Redact([], defaults=False)),
        ({"api_key": SECRET, "q": 2, "db": {"url": f"postgres://app:{SECRET}@db/x"}}, None),
    ):
        with ledger.task("t") as task, pytest.raises(intentlog.ResumeRefused) as err:
            task.effect("k", request, _ok, redact=redact)
        assert "DRIFT" in str(err.value)
        assert SECRET not in str(err.value), str(err.value)
        assert "$." in str(err.value)  # the path is still named


def test_a_non_string_key_is_refused_without_quoting_it(ledger: intentlog.Ledger, tmp_path: Path) -> None:
    with ledger.task("t") as task, pytest.raises(intentlog.PreparationFailed) as err:
        task.effect("k", {(SECRET, 1): 2}, _ok)
    assert SECRET not in str(err.value) and "tuple" in str(err.value)
    _assert_clean(ledger, tmp_path)
