"""Graph rules for the task as a whole: its creation and repairs, context compilations,
checkpoints, approvals and forks.

Each rule reads the :class:`~intentlog.projections.graph.TaskGraph`, updates it and yields
:class:`~intentlog.projections.fields.Finding` values; pure, never raises for bad data.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .._internal.digest import is_digest
from ..eventlog.format import FORMAT
from .fields import Finding
from .graph import Compilation, TaskGraph
from .graph_rules import ApprovalNode, approvals_of, bound_by

# -- graph rules: tasks and streams --------------------------------------------------


def on_task_created(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    if seq != 0:
        yield Finding("graph", f"at seq {seq}: a stream has exactly one task.created, at seq 0")
    if d["task"] != g.task_id:
        yield Finding(
            "graph", f"names task {d['task']!r} but the stream is {g.task_id!r}: a copied or renamed file"
        )
    if d["format"] != FORMAT:
        yield Finding("shape", f"declares format {d['format']!r}; this checker reads {FORMAT!r}")


def on_stream_repaired(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    # The writer appends stream.repaired right after the trusted lines it kept: at seq
    # line-1, or at seq 1 after a new task.created when nothing could be kept.
    expected = d["line"] - 1 if d["offset"] > 0 else 1
    if seq != expected:
        yield Finding(
            "graph", f"says the bad region began at line {d['line']} (offset {d['offset']}), "
            f"so it belongs at seq {expected}, not {seq}"
        )
    if d.get("suspect") is True:
        # a crash leaves a torn or garbage tail, never a whole event that fails to chain:
        # the line before it may have been edited (DESIGN §4 rule 4: reported loudly)
        yield Finding(
            "suspect_repair",
            f"a whole event line that did not chain was quarantined to {d['quarantined'].get('file')}: "
            f"the line before it (line {d['line'] - 1}) may have been edited; compare with a copy or git",
        )



# -- graph rules: context compilation ------------------------------------------------


def on_comp_requested(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    ids = frozenset(o["id"] for o in d["offered"] if isinstance(o.get("id"), str))
    g.compilations[d["compilation"]] = Compilation(ids)
    return iter(())


def _compilation(g: TaskGraph, d: Mapping[str, Any]) -> Compilation | Finding:
    c = g.compilations.get(d["compilation"])
    if c is None:
        return Finding("graph", f"names compilation {d['compilation']!r}, which was never requested")
    return c


def on_compiled(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    c = _compilation(g, d)
    if isinstance(c, Finding):
        yield c
        return
    stray = [s for s in d["selected"] if s not in c.offered]
    if stray:
        yield Finding("graph", f"compilation {d['compilation']!r} selected {stray}, which were not offered")


def on_comp_failed(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    c = _compilation(g, d)
    if isinstance(c, Finding):
        yield c



# -- graph rules: checkpoints, approvals, task verdicts, forks -----------------------


def _turn_completed(g: TaskGraph, key: str) -> bool:
    return any(n.key == key and n.completed for n in g.calls.values())


def on_checkpoint(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    cid, turn = d.get("call"), d.get("turn")
    if cid is not None:
        node = g.calls.get(cid)
        if node is None:
            yield Finding("graph", f"checkpoint {d['phase']!r} names call {cid!r}, which was never requested")
        elif not node.completed:
            yield Finding("graph", f"checkpoint {d['phase']!r} accepts {cid!r}, which has not completed")
        elif turn is not None and node.key != turn:
            yield Finding("graph", f"checkpoint {d['phase']!r} names turn {turn!r} but {cid!r} is key {node.key!r}")
    elif turn is not None and not _turn_completed(g, turn):
        yield Finding("graph", f"checkpoint {d['phase']!r} accepts turn {turn!r}, which has no completed call")


def _approvals(g: TaskGraph) -> dict[str, dict[str, Any]]:
    got: dict[str, dict[str, Any]] = g.extra.setdefault("approvals", {})
    return got


def on_approval_requested(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    binds = d["binds"]
    binding: str | None = None
    cid = binds.get("call")
    if cid is not None:
        node = g.calls.get(cid) if isinstance(cid, str) else None
        if node is None:
            yield Finding("graph", f"approval {d['approval']!r} binds call {cid!r}, which was never requested")
        else:
            if binds.get("key") not in (None, node.key):
                yield Finding("graph", f"approval {d['approval']!r} binds {cid!r} under key {binds.get('key')!r}, "
                              f"but that call's key is {node.key!r}")
            if binds.get("request_hash") != node.request_hash:
                yield Finding(
                    "graph", f"approval {d['approval']!r} binds {cid!r} with request hash "
                    f"{binds.get('request_hash')!r}, but that call's manifest records {node.request_hash!r}"
                )
        binding = binds.get("request_hash")
    elif "digest" in binds:
        binding = binds["digest"]
    if binding is not None and not is_digest(binding):
        yield Finding("shape", f"approval {d['approval']!r} binds {binding!r}, which is not a digest")
    _approvals(g)[d["approval"]] = {"binding": binding, "seq": seq, "decided": False}
    key = binds.get("key") if cid is not None and isinstance(binds.get("key"), str) else None
    if key is None and cid is not None and isinstance(cid, str) and cid in g.calls:
        key = g.calls[cid].key  # a binding that leaves out the key still binds the key of the call it names
    approvals_of(g)[d["approval"]] = ApprovalNode(binding, key, seq)
    by_key, by_digest = bound_by(g)
    index = by_key.setdefault(key, []) if key is not None else None
    if index is None and cid is None and isinstance(binding, str):
        index = by_digest.setdefault(binding, [])
    if index is not None and d["approval"] not in index:
        index.append(d["approval"])


def on_approval_decided(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    a = _approvals(g).get(d["approval"])
    if a is None:
        yield Finding("graph", f"a decision for approval {d['approval']!r}, which was never requested before it")
        return
    if d["request_hash"] != a["binding"]:
        yield Finding(
            "graph", f"approval {d['approval']!r} is decided for {d['request_hash']!r}, but its latest request "
            f"(seq {a['seq']}) binds {a['binding']!r}: a decision must name what it approves"
        )
    elif a["decided"]:
        yield Finding("graph", f"approval {d['approval']!r} is decided a second time for the same request")
    else:
        approvals_of(g)[d["approval"]].decision = d.get("decision")
    a["decided"] = True


def on_forked(g: TaskGraph, seq: int, d: Mapping[str, Any]) -> Iterator[Finding]:
    earlier = g.extra.get("forked")
    if earlier is not None and earlier > d["upto_seq"]:  # a fork of a fork copies the first marker: legal
        yield Finding("graph", f"a second task.forked (the first at seq {earlier})")
    g.extra["forked"] = seq
    if seq != d["upto_seq"] + 1:
        yield Finding(
            "graph", f"task.forked copies seq 1..{d['upto_seq']} of {d['from_task']!r}, so it belongs at seq "
            f"{d['upto_seq'] + 1}, right after the copied prefix, not at {seq}"
        )
