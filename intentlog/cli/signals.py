"""``intentlog signal``: record an external event for a task waiting on it (``task.wait_for_event``).

The payload is ``--data FILE`` or ``--payload TEXT`` (JSON): ``--json`` is the output
switch every command takes.
"""

from __future__ import annotations

from pathlib import Path

import click
import orjson

from .._internal.text import printable as p
from ..errors import UsageError
from .app import Ctx, echo, emit_json, handle_errors, json_option, main, pass_ctx, require_task, task_arg


def _payload(data: Path | None, text: str | None) -> object:
    """The payload from ``--data FILE`` or ``--json TEXT`` (JSON either way); None when neither is given."""
    if data is not None and text is not None:
        raise click.UsageError("give the payload once: --data FILE or --payload TEXT, not both")
    if data is None and text is None:
        return None
    raw = data.read_bytes() if data is not None else (text or "").encode()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        where = str(data) if data is not None else "--payload"
        raise UsageError(f"the payload in {where} is not JSON ({exc}); nothing was written") from exc


@main.command()
@task_arg()
@click.argument("name")
@click.option(
    "--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="A file holding the JSON payload."
)
@click.option("--payload", "payload_json", metavar="TEXT", help="The JSON payload itself (--json: the output switch).")
@click.option("--id", "event_id", help="The event's id (idempotency key); default: the payload's digest.")
@click.option("--wait", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds to wait for another sender holding the task's inbox.")  # fmt: skip
@json_option
@pass_ctx
@handle_errors
def signal(
    c: Ctx, task: str, name: str, data: Path | None, payload_json: str | None, event_id: str | None, wait: float,
    as_json: bool,
) -> None:  # fmt: skip
    """Record event NAME for TASK (it returns from task.wait_for_event); idempotent by --id.

    Written to the task's inbox, so it is recorded while the task's script runs. The same
    delivery again writes nothing; another payload under the same id, or a second event
    under a name already signalled, is refused (exit 1) and writes nothing.

    \b
    Example:
      intentlog signal chapter-16 review --payload '{"approved": true}' --id review-42
      intentlog signal chapter-16 review --data answer.json
    """
    from ..idioms.events import signal as record_signal

    payload = _payload(data, payload_json)
    with c.ledger(write=True) as ledger:
        require_task(c, ledger, task)
        sig, wrote = record_signal(ledger, task, name, payload, event_id=event_id, wait=wait)
    if as_json:
        emit_json(
            {"task": task, "event": sig.name, "id": sig.event_id, "payload_hash": sig.payload_hash,
             "inbox_seq": sig.seq, "recorded": wrote}
        )  # fmt: skip
        return
    said = "recorded" if wrote else "already recorded (nothing written)"
    echo(
        f"{said}: event {p(sig.name)} for {p(task)}, id {p(sig.event_id)}, payload {p(sig.payload_hash)}, at inbox "
        f"seq {sig.seq}; the waiting script receives it at its next read (a stopped one when re-run)"
    )
