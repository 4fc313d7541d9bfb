"""A LangGraph graph SIGKILLed at every boundary of a tool call sends its email at most once.

A real child process runs the graph of ``langgraph_child.py`` (draft → send → log,
``send`` calling an ``intentlog_tool`` that posts to a loopback mail service keeping its
own fsync'd receipt log). It is SIGKILLed at one boundary -- signalled by a marker file,
never by a timer -- and the thread is resumed by a fresh process, as a user would:

* killed before the tool started (in ``draft``, in ``send`` before the call): the resume
  sends once;
* killed inside the call, before the service recorded anything: the resume refuses with
  ``EffectUnknown``; the operator runs the ``--not-served`` command it names; the next
  resume sends once;
* killed inside the call, after the service sent the mail: the resume refuses; the
  operator runs the ``--served --evidence`` command with the service's answer; the next
  resume completes from that evidence without sending;
* killed after the tool returned (in ``send``, in ``log``): the resume replays the
  recorded result, sends nothing, and re-runs only the plain nodes.

Counted from the receipt log, outside the ledger: exactly one mail in every case, and
every receipt covered by an ``attempt.started`` of a call whose recorded arguments are
that very mail. ``intentlog verify`` passes on the ledger afterwards. Folder and s3://.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import langgraph  # noqa: F401  (under CI a missing extra fails, never skips)
else:
    pytest.importorskip(
        "langgraph", reason="SKIPPED LOUDLY: the LangGraph tests need: pip install 'intentlog[langgraph]'"
    )

from langgraph_child import MailService, read_receipts

import intentlog
from intentlog.artifacts.inline import ref_bytes

CHILD = Path(__file__).with_name("langgraph_child.py")
THREAD = "order-7"

# boundary -> how the first resume ends: completes, or refuses and the operator says served / not served
BOUNDARIES = {
    "in-draft": "completes",
    "before-tool": "completes",
    "before-receipt": "not_served",
    "after-receipt": "served",
    "after-tool": "completes",
    "in-log": "completes",
}


def _child(root: str, mail: MailService, *extra: str) -> list[str]:
    return [sys.executable, str(CHILD), root, mail.url, THREAD, *extra]


def _run(root: str, mail: MailService) -> dict[str, Any]:
    done = subprocess.run(_child(root, mail), capture_output=True, text=True, timeout=120)
    assert done.stdout.strip(), done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _kill_at(root: str, mail: MailService, where: str, marker: Path) -> None:
    """Run the graph until it signals ``where`` through ``marker``, then SIGKILL it."""
    if where in ("before-receipt", "after-receipt"):
        mail.hold, mail.marker = where, marker
        argv = _child(root, mail)
    else:
        argv = _child(root, mail, "--stop-at", where, str(marker))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not marker.exists():  # an event, not a timer: the child (or the service) writes it at the boundary
        if proc.poll() is not None:
            raise AssertionError(f"the child ended before {where}: {proc.communicate()}")
        assert time.monotonic() < deadline, f"no marker for {where}"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def _cli(command: str, *replace: tuple[str, str]) -> None:
    argv = shlex.split(command)
    assert argv[0] == "intentlog", command
    for old, new in replace:
        argv = [new if a == old else a for a in argv]
    done = subprocess.run([sys.executable, "-m", "intentlog.cli", *argv[1:]], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _sent_mails(root: str) -> list[tuple[str, int]]:
    """(sha256 of the mail body the tool sent, attempts started) for each tool call recorded."""
    ledger = intentlog.open(root, create=False)
    events = list(ledger.task("lg-" + THREAD).events())
    started: dict[str, int] = {}
    for ev in events:
        if ev.kind == "attempt.started":
            started[ev.data["call"]] = started.get(ev.data["call"], 0) + 1
    out = []
    for ev in events:
        if ev.kind == "call.manifest":
            request = json.loads(ref_bytes(ev.data["request"], ledger.artifacts))
            assert request["tool"] == "send_email"
            args = request["args"]  # the tool posts exactly this JSON of its arguments
            body = json.dumps({"to": args["to"], "subject": args["subject"], "body": args["body"]}).encode()
            out.append((hashlib.sha256(body).hexdigest(), started.get(ev.data["call"], 0)))
    ledger.close()
    return out


@pytest.fixture(params=["folder", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "folder":
        return str(tmp_path / "ledger")
    import s3_server

    return s3_server.ledger_url(monkeypatch)


@pytest.mark.parametrize("where", list(BOUNDARIES))
def test_a_graph_killed_at_a_boundary_sends_its_email_exactly_once(root: str, tmp_path: Path, where: str) -> None:
    """After SIGKILL at ``where`` and a resume (and the reconcile it names), the service holds exactly one mail."""
    receipts = tmp_path / "receipts.jsonl"
    with MailService(receipts) as mail:
        _kill_at(root, mail, where, tmp_path / "marker")
        after_kill = len(read_receipts(receipts))
        first = _run(root, mail)
        outcome = BOUNDARIES[where]
        if outcome == "completes":
            assert first.get("ok"), first
        else:
            assert first["error"] == "EffectUnknown", first
            assert len(read_receipts(receipts)) == after_kill, "a refused resume sent nothing"
            not_served, served = first["commands"]
            if outcome == "not_served":
                assert after_kill == 0
                _cli(not_served)
            else:
                assert after_kill == 1
                evidence = tmp_path / "evidence.json"
                evidence.write_text(json.dumps(json.loads(mail.responses[1])["message_id"]))  # the tool's result
                _cli(served, ("RESPONSE_FILE", str(evidence)))
            first = _run(root, mail)
            assert first.get("ok"), first
        again = _run(root, mail)  # a finished thread: running it again sends nothing
        assert again.get("ok"), again

    mails = read_receipts(receipts)
    assert len(mails) == 1, mails
    assert first["state"]["message_id"] == again["state"]["message_id"] == "m-1"
    assert first["state"]["logged"] == 1
    recorded = _sent_mails(root)
    for receipt in mails:  # every receipt is covered by an attempt.started of the call that carried that mail
        assert any(h == receipt["body_sha256"] and n >= 1 for h, n in recorded), (receipt, recorded)
    if where in ("after-tool", "in-log"):
        assert sum(n for _, n in recorded) == 1, "the resume replayed the call: no new attempt"
    verify = [sys.executable, "-m", "intentlog.cli", "--root", root, "verify"]
    done = subprocess.run(verify, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
