"""Adversarial checks of the idioms, the signal command, gc over inboxes, redaction and the writer's resumed check."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

import intentlog
from intentlog.cli import main
from intentlog.errors import UsageError
from intentlog.retention.plan import plan_gc


def _bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.jsonl"))}


# -- durable sleep: times a record cannot hold ------------------------------------------------


@pytest.mark.parametrize(
    "when",
    [dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(999, 12, 31, tzinfo=dt.timezone.utc)],
)
def test_sleep_until_a_year_before_1000_is_refused_not_recorded_unreadable(
    ledger_root: Path, when: dt.datetime
) -> None:
    """A wake time the record's timestamp format cannot hold is refused before anything is written.

    It used to be recorded as ``1-01-01T...``, which no later run could parse: every re-run
    of the task raised ValueError from then on.
    """
    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        task.value("x", lambda: 1)
        before = _bytes(ledger_root)
        with pytest.raises(UsageError, match="sleep"):
            task.sleep_until(when, name="early", block=False)
        assert _bytes(ledger_root) == before
    with intentlog.open(ledger_root) as ledger:
        assert ledger.task("t").sleep_for(0, name="after") is not None  # the task still runs


@pytest.mark.parametrize("seconds", [1e18, 1e13])
def test_sleep_for_beyond_the_year_9999_is_a_usage_error(ledger: intentlog.Ledger, seconds: float) -> None:
    task = ledger.task("t")
    with pytest.raises(UsageError, match="sleep"):
        task.sleep_for(seconds, name="forever", block=False)
    assert [ev.kind for ev in task.events()] == ["task.created"]


@pytest.mark.parametrize("timeout", [1e18, 1e13])
def test_wait_timeout_beyond_the_year_9999_is_a_usage_error(ledger: intentlog.Ledger, timeout: float) -> None:
    task = ledger.task("t")
    with pytest.raises(UsageError, match="timeout"):
        task.wait_for_event("go", timeout=timeout, block=False)
    assert [ev.kind for ev in task.events()] == ["task.created"]


# -- inboxes are not tasks to wait in, signal or spawn -----------------------------------------


def test_signal_to_an_inbox_is_refused_on_the_command_line(ledger_root: Path) -> None:
    """``intentlog signal T.inbox ...`` made an inbox of an inbox (``T.inbox.inbox``) that nothing ever reads."""
    with intentlog.open(ledger_root) as ledger:
        ledger.task("t").value("x", lambda: 1)
        ledger.signal("t", "go", {"ok": True})
    before = _bytes(ledger_root)
    got = CliRunner().invoke(main, ["--root", str(ledger_root), "signal", "t.inbox", "go", "--payload", "1"])
    assert got.exit_code != 0
    assert "inbox" in got.output
    assert _bytes(ledger_root) == before
    assert not (ledger_root / "tasks" / "t.inbox.inbox.jsonl").exists()


def test_spawning_a_child_under_an_inbox_id_is_refused(ledger: intentlog.Ledger) -> None:
    """A child ``T.inbox`` would be the inbox a task's signals go to: spawn refuses it and writes nothing."""
    parent = ledger.task("p")
    parent.value("x", lambda: 1)
    before = _bytes(ledger.root)
    with pytest.raises(UsageError, match="inbox"):
        parent.spawn("p.inbox", {})
    with pytest.raises(UsageError, match="inbox"):
        parent.spawn("other.inbox", {})
    assert _bytes(ledger.root) == before


# -- gc and inboxes ------------------------------------------------------------------------------


def _memory_opener() -> Callable[[], intentlog.Ledger]:
    import s3_server

    from intentlog.ledger import Ledger
    from intentlog.s3 import on_client

    client = s3_server.MemoryClient(name="adv-inbox")
    return lambda: Ledger(Path("mem"), storage=on_client(client, write=False), location="mem://adv-inbox")


@pytest.mark.parametrize("storage", ["folder", "memory"])
def test_gc_keeps_the_inbox_of_a_task_it_keeps(ledger_root: Path, storage: str) -> None:
    """A waiting (protected) task's inbox holds the signal its re-run receives: gc must not expire it alone."""
    opener = (lambda: intentlog.open(ledger_root)) if storage == "folder" else _memory_opener()
    with opener() as ledger:
        task = ledger.task("w")
        with pytest.raises(intentlog.Suspended):
            task.wait_for_event("go", block=False)
        task.close()
        ledger.signal("w", "go", {"x": 1})
        ledger.task("done").value("x", lambda: 1)  # something gc may take, so the plan is not refused
    with opener() as ledger:
        plan = plan_gc(ledger, max_age="0s", grace="0s", max_size="none")
    expired = {t.task for t in plan.expired}
    assert "w" not in expired
    assert "w.inbox" not in expired, "the signal a protected waiter needs would be deleted"
    assert "done" in expired


def test_gc_never_expires_an_inbox_before_its_task(ledger_root: Path) -> None:
    """An inbox older than its task (the signal came first) goes no earlier than the task, by age or size."""
    with intentlog.open(ledger_root) as ledger:
        ledger.signal("early", "go", {"x": 1})  # a webhook before the task ran
        ledger.task("early").value("x", lambda: 1)
        ledger.task("zz").value("x", lambda: 1)
    with intentlog.open(ledger_root) as ledger:
        newest = max(ev.ts for ev in ledger.task("early").events())
        cut = dt.datetime.strptime(newest, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
        plan = plan_gc(ledger, max_age="0s", grace="0s", max_size="none", now=cut)
    expired = {t.task for t in plan.expired}
    assert "early.inbox" not in expired or "early" in expired


# -- recorded values: what the first run sees is what the record holds ----------------------------


@pytest.mark.parametrize("value", ["sk_feature_branch_2024", {"note": "Basic a1b2c3d4e5"}])
def test_a_value_is_returned_as_recorded_when_the_stream_redacts_a_shape(ledger_root: Path, value: object) -> None:
    """The stream core replaces credential shapes in every record; the first run must see that record too.

    Otherwise the first run used the raw string and every re-run the redacted one: a request
    built from it hashes differently on the re-run (DRIFT), against the documented promise.
    """
    with intentlog.open(ledger_root) as ledger:
        first = ledger.task("t").value("v", lambda: value)
    with intentlog.open(ledger_root) as ledger:
        again = ledger.task("t").value("v", lambda: "other")
    assert first == again


def test_a_spawn_with_a_redacted_payload_is_the_same_spawn_on_the_re_run(ledger_root: Path) -> None:
    """The re-run spawning the same child with the same payload was refused as 'another payload'."""
    payload = {"branch": "sk_feature_branch_2024"}
    with intentlog.open(ledger_root) as ledger:
        ledger.task("p").spawn("c", payload)
    with intentlog.open(ledger_root) as ledger:
        ledger.task("p").spawn("c", payload)  # the same delivery: nothing more recorded
        kinds = [ev.kind for ev in ledger.task("p").events()]
    assert kinds.count("task.child_spawned") == 1


def test_a_step_name_too_long_for_its_record_is_refused_at_decoration(ledger: intentlog.Ledger) -> None:
    """``@task.step(name=...)`` took a 200-character name and failed only at the first call."""
    task = ledger.task("t")
    with pytest.raises(UsageError, match="step"):
        task.step(name="z" * 200)(lambda x: x)
    assert task.step(name="z" * 150)(lambda x: x)(1) == 1


# -- the writer's resumed check -------------------------------------------------------------------


_APPEND_ONE = (
    "import sys, intentlog\nwith intentlog.open(sys.argv[1]) as o:\n    o.task('t').append('app.note', {'v': 'cccc'})\n"
)


def test_an_earlier_line_edited_while_another_process_grew_the_stream_is_caught_at_the_next_open(
    ledger_root: Path,
) -> None:
    """Between two opens in one process: a byte of an early event flipped (same length), a valid line added."""
    import subprocess
    import sys

    from intentlog.errors import CorruptStream

    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        task.append("app.note", {"v": "aaaa"})
        for _ in range(300):  # long enough for the next open to resume from this one's check
            task.append("app.note", {"v": "bbbb"})
        task.close()
        path = ledger_root / "tasks" / "t.jsonl"
        subprocess.run([sys.executable, "-c", _APPEND_ONE, str(ledger_root)], check=True)
        grown = path.read_bytes()
        edited = grown.replace(b'"v":"aaaa"', b'"v":"zzzz"', 1)
        assert edited != grown and len(edited) == len(grown)
        with open(path, "r+b") as fh:
            fh.write(edited)
        with pytest.raises(CorruptStream):
            task.append("app.note", {"v": "dddd"})


def test_an_earlier_line_edited_in_place_without_growth_is_caught_at_the_next_open(ledger_root: Path) -> None:
    """The same edit with no line added: the file's times moved, so the full check runs and refuses it."""
    from intentlog.errors import CorruptStream

    with intentlog.open(ledger_root) as ledger:
        task = ledger.task("t")
        task.append("app.note", {"v": "aaaa"})
        for _ in range(300):
            task.append("app.note", {"v": "bbbb"})
        task.close()
        path = ledger_root / "tasks" / "t.jsonl"
        data = path.read_bytes()
        with open(path, "r+b") as fh:
            fh.write(data.replace(b'"v":"aaaa"', b'"v":"zzzz"', 1))
        before = path.read_bytes()
        with pytest.raises(CorruptStream):
            task.append("app.note", {"v": "dddd"})
        assert path.read_bytes() == before


# -- redaction of what the idioms record ----------------------------------------------------------


def test_a_recorded_value_holding_a_named_credential_is_not_recorded_in_clear(ledger: intentlog.Ledger) -> None:
    task = ledger.task("t")
    try:
        task.value("conn", lambda: {"password": "hunter2-42", "dsn": "postgres://app:hunter2-42@db/x"})
    except UsageError:
        pass  # refusing it, as backlog.add refuses such a payload, keeps it out of the record too
    assert b"hunter2-42" not in (ledger.root / "tasks" / "t.jsonl").read_bytes()


# -- a signal racing the wait's timeout -----------------------------------------------------------


class _TimesOutFirst:
    """A ledger whose waiter reaches its deadline between the sender's check and its append."""

    def __init__(self, ledger: intentlog.Ledger) -> None:
        self.ledger = ledger
        self.fired = False

    def task(self, task_id: str, *, wait: float = 0.0) -> intentlog.Task:
        if task_id.endswith(".inbox") and not self.fired:
            self.fired = True
            from intentlog.idioms import events as events_mod

            later = events_mod._now() + 7200  # past the recorded deadline
            saved, events_mod._now = events_mod._now, lambda: later
            try:
                with pytest.raises(intentlog.EventTimedOut):
                    self.ledger.task("w").wait_for_event("go", timeout=3600)
            finally:
                events_mod._now = saved
        return self.ledger.task(task_id, wait=wait)


def test_a_signal_racing_the_timeout_is_refused_when_the_timeout_wins(ledger: intentlog.Ledger) -> None:
    from intentlog.idioms.errors import EventConflict
    from intentlog.idioms.events import signal

    waiter = ledger.task("w")
    with pytest.raises(intentlog.Suspended):
        waiter.wait_for_event("go", timeout=3600, block=False)
    waiter.close()
    with pytest.raises(EventConflict):
        signal(_TimesOutFirst(ledger), "w", "go", {"ok": True})


# -- over-redaction that makes two requests one ----------------------------------------------------


def test_a_boolean_under_a_credential_name_keeps_requests_apart() -> None:
    from intentlog.eventlog.canonical import canonicalize

    on = canonicalize({"otp_enabled": True, "cvc_check": None})
    off = canonicalize({"otp_enabled": False, "cvc_check": None})
    assert on.digest != off.digest


def test_an_oversized_signal_payload_makes_no_inbox(ledger_root: Path, tmp_path: Path) -> None:
    """'nothing was written': a payload too large for a line is refused before the inbox stream is created."""
    with intentlog.open(ledger_root) as ledger:
        ledger.task("t").value("x", lambda: 1)
    big = tmp_path / "big.json"
    big.write_text('"' + "x" * (17 << 20) + '"')
    before = _bytes(ledger_root)
    got = CliRunner().invoke(main, ["--root", str(ledger_root), "signal", "t", "big", "--data", str(big)])
    assert got.exit_code != 0 and "nothing was written" in got.output
    assert _bytes(ledger_root) == before
    assert not (ledger_root / "tasks" / "t.inbox.jsonl").exists()
