"""A work-state fold's state as JSON values, and back (what the view cache keeps of a task).

Pure: values in, values out. :meth:`WorkStateFold.snapshot` and
:meth:`WorkStateFold.from_snapshot` are the fold's side of it; folding the events after a
snapshot into the fold restored from it gives what folding every event gives (a property
test holds it). Decoding never trusts a shape: anything else raises ``ValueError`` (or
``KeyError``/``TypeError``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

from ..eventlog.format import Event
from .records import CallRecord, CompRecord, call_from_json, call_to_json, comp_from_json, comp_to_json

__all__ = ["SNAPSHOT_VERSION", "FoldParts", "decode_snapshot", "encode_snapshot"]

#: The shape of a snapshot; a snapshot of another shape is refused.
SNAPSHOT_VERSION: Final = "intentlog-workstate-fold/1"


class FoldParts(NamedTuple):
    """What a fold holds, decoded."""

    task: str | None
    calls: dict[str, CallRecord]
    comps: dict[str, CompRecord]
    keys: dict[str, str]
    reserved: set[str]
    approval_keys: dict[str, list[str]]
    approval_digests: dict[str, list[str]]
    events: int
    last: Event | None
    last_completed: int
    last_accepted: int
    other: dict[str, int]
    anomalies: list[str]


def encode_snapshot(
    task: str | None,
    calls: Mapping[str, CallRecord],
    comps: Mapping[str, CompRecord],
    keys: Mapping[str, str],
    reserved: set[str],
    approval_keys: Mapping[str, list[str]],
    approval_digests: Mapping[str, list[str]],
    events: int,
    last: Event | None,
    last_completed: int,
    last_accepted: int,
    other: Mapping[str, int],
    anomalies: list[str],
) -> dict[str, Any]:
    return {
        "version": SNAPSHOT_VERSION,
        "task": task,
        "calls": [call_to_json(c) for c in calls.values()],
        "comps": [comp_to_json(c) for c in comps.values()],
        "keys": keys,
        "reserved": sorted(reserved),
        "approval_keys": approval_keys,
        "approval_digests": approval_digests,
        "events": events,
        "last": None if last is None else [last.seq, last.kind, last.ts, last.prev, last.digest],
        "last_completed": last_completed,
        "last_accepted": last_accepted,
        "other": other,
        "anomalies": anomalies,
    }


def decode_snapshot(snap: Mapping[str, Any], records: Iterable[CallRecord] | None = None) -> FoldParts:
    """The parts :func:`encode_snapshot` wrote (with ``records``, those call records instead of its own)."""
    if snap.get("version") != SNAPSHOT_VERSION:
        raise ValueError("a snapshot of another version")
    task = snap["task"]
    calls = [call_from_json(v) for v in snap["calls"]] if records is None else list(records)
    comps = [comp_from_json(v) for v in snap["comps"]]
    last = snap["last"]
    return FoldParts(
        task=task if type(task) is str else None,
        calls={c.call_id: c for c in calls},
        comps={c.cid: c for c in comps},
        keys=_str_map(snap["keys"]),
        reserved=set(snap["reserved"]),
        approval_keys=dict(snap["approval_keys"]),
        approval_digests=dict(snap["approval_digests"]),
        events=int(snap["events"]),
        last=None if last is None else Event(int(last[0]), last[1], last[2], last[3], {}, last[4]),
        last_completed=int(snap["last_completed"]),
        last_accepted=int(snap["last_accepted"]),
        other=dict(snap["other"]),
        anomalies=list(snap["anomalies"]),
    )


def _str_map(value: Any) -> dict[str, str]:
    if type(value) is not dict or not all(type(k) is str and type(v) is str for k, v in value.items()):
        raise ValueError("a snapshot's map of the wrong shape")
    return dict(value)
