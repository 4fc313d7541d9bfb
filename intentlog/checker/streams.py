"""The stream checks: every line's parse, seq and prev, torn and suspect tails, the seal, and each event.

Each event's shape and its place in the identity graph come from the one registry in
:mod:`intentlog.projections.schema` (pure folds); this module reads the stream from the
disk line by line and records what the events reference for :mod:`.artifacts`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Final

import orjson

from .._internal.digest import digest_bytes
from .._internal.regular import NotRegular
from ..artifacts.inline import inline_bytes
from ..errors import ArtifactError, CorruptStream, DigestMismatch, NotSerializable
from ..eventlog.format import TASK_CREATED, check_kind, is_reserved
from ..eventlog.gclog import GC_LOG
from ..heads.codec import StreamHead
from ..projections.graph_rules import table_findings
from ..projections.schema import FILE, TaskGraph, check_shape, is_ref, rule_for
from ..refs import CHECK, CHECK_REFS, walk
from .report import ERROR, INFO, Problem, abbr
from .state import UNKNOWN, Capture, CheckerState, Need, QuarantineFile, StreamFacts
from .walk import relative

__all__ = ["StreamChecks"]

_KEYS: Final = frozenset({"data", "kind", "prev", "seq", "ts"})
#: The fields of a ref itself (a kind whose data is its own ref, artifact.recorded, carries them).
_REF_KEYS: Final = frozenset({"digest", "size", "media_type", "inline", "inline_b64"})
_TS_RE: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\Z")


class StreamChecks(CheckerState):
    """The checks of one stream at a time, line by line (memory per call and per referenced digest)."""

    # -- one stream --------------------------------------------------------------------

    def check_stream(self, task: str, sealed: StreamHead | None) -> StreamFacts:
        s = StreamFacts(task, sealed_seq=sealed.seq if sealed is not None else None)
        if self.blocked(f"tasks/{task}.jsonl"):
            return s  # reported as a link; a linked stream is never read
        self._stream = s
        try:
            self._read_stream(s)
        except NotRegular as exc:
            self.add(ERROR, "link", f"the stream is {exc}, so it was not read", task=task)
        except CorruptStream as exc:  # read through a seam: its segments do not make one stream
            d = self.reads.gc_remains(task, exc)
            if d is not None:
                self.add(
                    INFO, "deleted_by_gc", f"what is left of the stream gc deleted at {d.ts} (the gc log's seq "
                    f"{d.seq}): {exc.reason}; not a stream, never read as one (the numbers a fenced writer "
                    "could still put at are kept for ever; a new stream under the id starts after them)", task=task,
                )
                self._stream = None
                return s
            self.add(
                ERROR, "segments", f"{exc}: its stored segments do not make one stream, so its events were not "
                "checked; restore the segments from a copy", task=task,
            )
        except OSError as exc:
            d = self.reads.gc_remains(task, exc)
            if d is not None:  # an empty folder, after gc
                self.add(
                    INFO, "deleted_by_gc", f"deleted by gc at {d.ts} (the gc log's seq {d.seq}); its empty folder "
                    "is still listed: 'intentlog gc --apply' removes it", task=task,
                )
                self._stream = None
                return s
            self.add(ERROR, "io", f"cannot read the stream: {exc.strerror or exc}", task=task)
        self._stream = None
        if s.suppressed:
            self.problems.append(
                Problem(INFO, "more", f"{s.suppressed} more problem(s) in this stream were not listed", task=task)
            )
        if sealed is not None:
            self._compare_head(s, sealed)
        return s

    def _read_stream(self, s: StreamFacts) -> None:
        task = s.task
        graph = TaskGraph(task)
        self.spawn_links.begin(task)
        expected_seq: int | None = 0
        expected_prev: object = None
        bad_run: tuple[int, int, str] | None = None  # first unparseable line: (line, offset, reason)
        last_line = 0
        last_break: int | None = None  # index in problems of a chain/seq break on the latest line
        first = True
        for lineno, (offset, raw) in enumerate(self.stream_lines(task), start=1):
            last_line = lineno
            last_break = None
            if not raw.endswith(b"\n"):  # only ever the last line
                holder = self._writer(task) if bad_run is None else None
                if holder is not None:
                    self.add(
                        INFO,
                        "in_flight",
                        f"the last line is incomplete ({len(raw)} bytes so far), and a live process (pid {holder}) "
                        "holds the task's writer lock: an append in flight, not damage; verify again once it is done",
                        task=task,
                        line=lineno,
                    )
                    break
                start = bad_run or (lineno, offset, "")
                bad_run = None
                self.add(
                    ERROR,
                    "torn_tail",
                    f"the last line is incomplete ({len(raw)} bytes without a newline): an append that never "
                    f"returned, as a crash leaves it{_torn_from(start, lineno)}; opening the task for writing "
                    "moves it to quarantine/",
                    task=task,
                    line=start[0],
                )
                break
            try:
                obj: Any = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                obj, why = None, f"not valid JSON ({exc})"
            else:
                why = "not an event object"
            if type(obj) is not dict or type(obj.get("seq")) is not int or "kind" not in obj:
                if bad_run is None:
                    bad_run = (lineno, offset, why)
                expected_seq, expected_prev = None, UNKNOWN
                continue
            if bad_run is not None:
                self.add(
                    ERROR,
                    "parse",
                    f"{bad_run[2]}, and event lines follow it (line {lineno}): damage in the middle of the stream, "
                    "never repaired automatically; restore the file from a copy or git",
                    task=task,
                    line=bad_run[0],
                )
                bad_run = None
            seq: int = obj["seq"]
            digest = digest_bytes(raw)
            if not _is_envelope(obj):
                self.add(
                    ERROR,
                    "parse",
                    "not an event: an event is an object with exactly data (object), kind, prev, seq, ts",
                    task=task,
                    line=lineno,
                    seq=seq,
                )
                expected_seq, expected_prev = seq + 1, digest
                continue
            before = len(self.problems)
            self._check_link(task, lineno, seq, obj["prev"], expected_seq, expected_prev)
            if len(self.problems) > before:
                last_break = before
            expected_seq, expected_prev = seq + 1, digest
            self.events += 1
            s.last_seq = max(s.last_seq, seq)
            if seq == s.sealed_seq and s.at_sealed is None:
                s.at_sealed = digest
            kind: str = obj["kind"]
            data: dict[str, Any] = obj["data"]
            if first:
                first = False
                if kind != TASK_CREATED:
                    self.add(
                        ERROR, "graph", f"the first event is {kind}, not task.created", task=task, line=lineno, seq=seq
                    )
                elif type(data.get("stream")) is str:
                    s.stream_id = data["stream"]
            self._check_event(graph, task, lineno, seq, kind, obj["ts"], data)
        if bad_run is not None:
            self.add(
                ERROR,
                "torn_tail",
                f"{bad_run[2]}{_torn_from(bad_run, last_line)}, and nothing event-like follows: a torn tail "
                "(a crash mid-append, or garbage after power loss); opening the task for writing moves it "
                "to quarantine/",
                task=task,
                line=bad_run[0],
            )
        elif last_break is not None and last_break < len(self.problems):
            p = self.problems[last_break]
            self.problems[last_break] = replace(
                p,
                message=p.message + "; it is the last line: a suspect tail (written without a valid link), "
                "which the next writer moves to quarantine/",
            )
        if last_line == 0:
            self.add(ERROR, "graph", "the stream is empty: it has no task.created", task=task)
        for seq, f in graph.finish():
            self.add(f.severity, f.code, f.message, task=task, seq=seq)

    def _check_link(
        self, task: str, lineno: int, seq: int, prev: object, expected_seq: int | None, expected_prev: object
    ) -> None:
        seq_ok = expected_seq is None or seq == expected_seq
        prev_ok = expected_prev is UNKNOWN or prev == expected_prev
        if not seq_ok and expected_seq is not None:
            if seq > expected_seq:
                what = (
                    f"seq is {seq} but {expected_seq} was expected: {seq - expected_seq} event(s) missing "
                    "before this line, or lines moved"
                )
            else:
                what = f"seq is {seq} but {expected_seq} was expected: an event repeated or moved"
            if not prev_ok:
                what += f"; its prev ({abbr(prev)}) does not match line {lineno - 1} either"
            self.add(ERROR, "seq", what, task=task, line=lineno, seq=seq)
        elif not prev_ok:
            if expected_prev is None:
                what = f"prev is {abbr(prev)} but the first line must have prev null"
            else:
                what = (
                    f"prev is {abbr(prev)} but line {lineno - 1} hashes to {abbr(expected_prev)}: line {lineno - 1} "
                    "was changed, or this line was not written after it; restore the file from a copy or git"
                )
            self.add(ERROR, "chain", what, task=task, line=lineno, seq=seq)

    def _compare_head(self, s: StreamFacts, sealed: StreamHead) -> None:
        where = {"task": s.task, "seq": sealed.seq}
        retired = self.reads.retired(s.task, sealed)
        if s.stream_id != sealed.stream and s.stream_id is not None and retired:
            self.add(
                INFO,
                "deleted_by_gc",
                f"heads.json sealed stream {sealed.stream!r}, which gc deleted ({GC_LOG} records it); this stream "
                f"({s.stream_id!r}) was created after that under the same id; run 'intentlog seal' to anchor it",
                digest=sealed.head,
                **where,
            )
        elif s.stream_id != sealed.stream:
            self.add(
                ERROR,
                "heads",
                f"the stream id is {s.stream_id!r} but heads.json sealed {sealed.stream!r}: the stream was replaced "
                "(or recreated after a repair quarantined all of it); restore it from a copy or git",
                **where,
            )
        elif s.last_seq < sealed.seq:
            self.add(
                ERROR,
                "truncated",
                f"the stream ends at seq {s.last_seq} but heads.json sealed seq {sealed.seq} ({sealed.events} events): "
                f"{sealed.seq - s.last_seq} event(s) were cut from its tail; restore the file from a copy or git",
                digest=sealed.head,
                **where,
            )
        elif s.at_sealed != sealed.head:
            self.add(
                ERROR,
                "heads",
                f"the event at seq {sealed.seq} hashes to {abbr(s.at_sealed)} but heads.json sealed "
                f"{abbr(sealed.head)}: the stream was rewritten after the seal",
                digest=sealed.head,
                **where,
            )

    # -- one event ---------------------------------------------------------------------

    def _check_event(
        self, graph: TaskGraph, task: str, lineno: int, seq: int, kind: str, ts: str, data: dict[str, Any]
    ) -> None:
        at = {"task": task, "line": lineno, "seq": seq}
        try:
            check_kind(kind)
        except NotSerializable:
            self.add(ERROR, "shape", f"event kind {kind!r} is not dotted lowercase words", **at)
        if _TS_RE.match(ts) is None:
            self.add(ERROR, "shape", f"ts {ts!r} is not UTC like 2026-11-30T02:04:05.123456Z", **at)
        rule = rule_for(kind)
        if rule is None:
            self.spawn_links.note(task, seq, kind, data)  # backlog.item_added: no shape rule, its link is judged
            if is_reserved(kind):
                self.add(
                    INFO,
                    "unknown_kind",
                    f"{kind} is in intentlog's own namespace but this checker has no rule for it "
                    "(written by a newer intentlog?); only its refs were checked",
                    **at,
                )
            self._scan(data, task, seq, lineno, kind)
            return
        findings = check_shape(rule, data)
        if not findings:
            self.spawn_links.note(task, seq, kind, data)  # a link between streams, judged once all are read
        if not findings and rule.graph is not None:
            graph.extra["ts"] = ts  # rules that judge time (a provider dedup window) read the event's own ts
            findings.extend(table_findings(graph, kind, data))  # the graph rules table, before the event is folded
            findings.extend(rule.graph(graph, seq, data))
        for finding in findings:
            self.add(finding.severity, finding.code, f"{kind}: {finding.message}", **at)
        for name in rule.refs:
            if is_ref(data.get(name)):
                self._ref(data[name], task, seq, lineno, f"{kind} {name}")
        if rule.self_ref and is_ref(data):
            self._ref(data, task, seq, lineno, kind)
        for name in rule.scan:
            if name in data:
                self._scan(data[name], task, seq, lineno, f"{kind} {name}")
        for name, value in data.items():  # refs anywhere else, unknown fields included, are checked too
            known = name in rule.refs or name in rule.scan or name in rule.files
            known = known or (rule.self_ref and name in _REF_KEYS)
            if not known and type(value) in (dict, list):
                self._scan(value, task, seq, lineno, f"{kind} {name}", bare=False)
        for name in rule.files:
            if FILE.check(data.get(name)):
                f = data[name]
                self.quarantined.append(QuarantineFile(f["file"], f["digest"], f["size"], task, seq, lineno))
        if rule.locator is not None and not findings:
            self._capture(data, rule.locator, ts, task, seq, lineno)

    def _capture(self, data: dict[str, Any], field: str, ts: str, task: str, seq: int, lineno: int) -> None:
        loc = relative(data[field])
        if loc is None:
            self.add(
                ERROR, "shape", f"{field} {data[field]!r} is not a path inside the workspace", task=task, seq=seq,
                line=lineno,
            )
            return
        prior = self.captures.get(loc)
        if prior is None or ts >= prior.ts:
            self.captures[loc] = Capture(ts, data["digest"], data["size"], task, seq, lineno)

    def _ref(self, ref: dict[str, Any], task: str, seq: int, lineno: int, label: str) -> None:
        at = {"task": task, "seq": seq, "line": lineno}
        digest: str = ref["digest"]
        size: int = ref["size"]
        try:
            data = inline_bytes(ref)
        except DigestMismatch as exc:
            self.add(
                ERROR,
                "artifact_corrupt",
                f"{label}: the bytes carried inline hash to {abbr(exc.actual)} or differ in size, but the ref says "
                f"{digest} ({size} bytes): the event was edited; restore the stream from a copy or git",
                digest=digest,
                **at,
            )
            self.bad_inline.setdefault(digest, (task, lineno))
            return
        except ArtifactError as exc:
            self.add(ERROR, "ref", f"{label}: {exc}", digest=digest, **at)
            return
        if data is not None:
            self.bytes_hashed += len(data)
            if digest not in self.inline:
                self.inline[digest] = size
                self.checked += 1
            return
        need = self.needs.get(digest)
        if need is None:
            self.needs[digest] = Need(size, task, seq, lineno, label)
            return
        need.refs += 1
        if need.size != size:
            self.add(
                ERROR,
                "ref",
                f"{label}: the ref to {digest} says {size} bytes, but {need.label} at tasks/{need.task}.jsonl "
                f"line {need.line} says {need.size}",
                digest=digest,
                **at,
            )

    def _scan(self, value: Any, task: str, seq: int, lineno: int, label: str, *, bare: bool = True) -> None:
        """Search values for refs (checked) and, with ``bare``, bare digests (informational), without recursion."""
        for digest, ref in walk(value, CHECK if bare else CHECK_REFS):
            if ref is not None:
                self._ref(ref, task, seq, lineno, f"{label}: a ref in the data")
            elif digest not in self.bare:
                self.bare[digest] = (task, seq, lineno)


def _is_envelope(obj: dict[str, Any]) -> bool:
    """Exactly the five event keys, each of its type (seq was checked by the caller)."""
    return (
        obj.keys() == _KEYS
        and type(obj["kind"]) is str
        and type(obj["data"]) is dict
        and type(obj["ts"]) is str
        and (obj["prev"] is None or type(obj["prev"]) is str)
    )


def _torn_from(start: tuple[int, int, str], last: int) -> str:
    if start[0] == last:
        return ""
    return f" (lines {start[0]}-{last} from byte {start[1]})"
