"""Provider deduplication windows: when an unknown effect may be resent under the same key, and when not."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import dedup as _dedup
from ..dedup import ProviderDedup, age_of
from ..errors import ResumeRefused
from ..projections.workstate import CallState
from .policy import PROVIDER_DEDUP, WRITE_SLACK

if TYPE_CHECKING:
    from ..stream import TaskStream

__all__ = ["check_window", "dedup_resend", "window"]


def window(task: TaskStream, st: CallState, dedup: ProviderDedup | None) -> tuple[ProviderDedup, float] | None:
    """The declaration relied on and the first attempt's age (s), when a resend may rely on the provider.

    Both this run's declaration and the manifest's must exist; of the two, the one
    with the shorter usable window (``window - margin``) is relied on. The age is this
    machine's clock minus the recorded ``ts`` of the call's first ``attempt.started``.
    None when there is no declaration, the timestamp is unreadable or in the future.
    """
    if dedup is None:
        return None
    recorded: ProviderDedup | None = None
    first_ts: str | None = None
    for ev in task.events(since=st.first_seq):
        if ev.data.get("call") != st.call_id:
            continue
        if ev.kind == "call.manifest":
            recorded = ProviderDedup.from_json(ev.data.get("dedup"))
        elif ev.kind == "attempt.started" and first_ts is None:
            first_ts = ev.ts
            break
    if recorded is None or first_ts is None:
        return None
    relied = min((recorded, dedup), key=lambda d: d.usable_s)
    age = age_of(first_ts, _dedup.clock())
    if age is None or age < 0:
        return None
    return relied, age

def dedup_resend(task: TaskStream, st: CallState, dedup: ProviderDedup | None, key: str) -> bool:
    """Resolve an unknown effect through the provider's idempotency window, or leave it (False, nothing appended).

    Inside the window (the first attempt started less than ``window - margin`` ago,
    less a second for the write itself), ``effect.reconciled {outcome:
    "provider_dedup", window_s, margin_s, age_s}`` is synced and the next attempt
    resends under the same key: the provider replays its first answer, or performs
    the effect once if the first send never reached it.
    """
    found = window(task, st, dedup)
    if found is None:
        return False
    relied, age = found
    if not age + WRITE_SLACK < relied.usable_s:
        return False
    task.append(
        "effect.reconciled",
        {
            "call": st.call_id,
            "attempt": st.attempts,
            "outcome": PROVIDER_DEDUP,
            "evidence": None,
            "note": f"resent under key {key!r}: the provider deduplicates it for {relied.window_s:g} s",
            "by": None,
            "source": PROVIDER_DEDUP,
            "window_s": relied.window_s,
            "margin_s": relied.margin_s,
            "age_s": round(age, 6),
        },
        sync=True,
    )
    return True

def check_window(task: TaskStream, st: CallState, dedup: ProviderDedup | None, key: str) -> None:
    """Before any send that relies on the provider's deduplication: still inside its window, or refused."""
    found = window(task, st, dedup)
    if found is not None and found[1] + WRITE_SLACK < found[0].usable_s:
        return
    raise ResumeRefused(
        call_id=st.call_id,
        key=key,
        reason="the provider's idempotency window has passed (or is not declared by this run)",
        next_operation="operator decides",
        detail="an earlier attempt was resolved by provider deduplication, and a send now could be a second "
        f"effect; fail the call (task.fail({st.call_id!r}, ...) or 'intentlog fail {task.id} "
        f"{st.call_id}') or run again with the declaration inside the window",
    )
