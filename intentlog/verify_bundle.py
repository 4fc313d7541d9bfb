#!/usr/bin/env python3
"""verify_bundle.py: check an intentlog evidence bundle without intentlog and without trusting it.

Usage::

    python verify_bundle.py BUNDLE_DIR            # numbered claims, each PASS or FAIL; exit 0 only if all pass
    python verify_bundle.py BUNDLE_DIR --json     # the same, plus the re-derived work states, as JSON
    python verify_bundle.py BUNDLE_DIR --no-inventory   # skip the hashes.json check (to test meaning alone)
    python verify_bundle.py BUNDLE.tar            # the tar 'intentlog export --tar' writes, extracted safely first

This file is a standalone program. It imports only the Python standard library and the
``blake3`` package (``pip install blake3``), and shares no code with intentlog: the
format rules, the hash chain, the event kinds, the identity graph and the work-state
classification below are an independent implementation written from intentlog's
design notes. It re-derives every state from the exported events and compares it with
what the exporter claimed in ``states.json``; it checks every byte against its digest;
and when the bundle carries a provider's receipt log (``receipts/*.jsonl``) it checks
that every receipt is covered by an ``attempt.started`` in the record: an effect with no
recorded intent to cause it fails.

It reads only; it writes nothing, follows no symbolic link and leaves the bundle folder.
A tar is extracted into a temporary folder (removed afterwards) only when every member
is a plain file or folder inside ``intentlog-bundle/``: an absolute path, ``..``, a link,
a device or a repeated name is refused before anything is written.
Exit status: 0 every claim passed (skipped claims do not fail); 1 a claim failed or the
tar was refused; 2 usage (neither a folder nor a tar, blake3 missing).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # tarfile and tempfile are imported only to read a tar (they pull in more modules)
    import tarfile

try:
    from blake3 import blake3
except ImportError:  # pragma: no cover - exercised by hand
    sys.stderr.write("verify_bundle.py needs the blake3 package: pip install blake3\n")
    sys.exit(2)

VERIFIER = "intentlog-verify-bundle/1"
LEDGER_FORMAT = "intentlog/1"
HEADS_FORMAT = "intentlog-heads/1"
STATES_FORMAT = "intentlog-states/1"
HASHES_FORMAT = "intentlog-bundle-hashes/1"
WORKSTATE_VERSION = "intentlog-workstate/1"

CHUNK = 1 << 20
DIGEST_RE = re.compile(r"blake3:[0-9a-f]{64}\Z")
TASK_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
KIND_RE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*\Z")
TS_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\Z")
QUARANTINE_RE = re.compile(r"quarantine/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
RECEIPTS_RE = re.compile(r"receipts/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
LONE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
ENVELOPE = ("data", "kind", "prev", "seq", "ts")
# namespaces intentlog itself writes: an unknown kind there was written by a newer intentlog
RESERVED = ("task.", "stream.", "call.", "attempt.", "effect.", "context.", "artifact.", "session.", "approval.")
MAX_DETAILS = 20


# -- small helpers --------------------------------------------------------------------------


def b3(data: bytes) -> str:
    return "blake3:" + blake3(data).hexdigest()


def short(digest: object) -> str:
    return digest[:19] + "..." if isinstance(digest, str) and DIGEST_RE.match(digest) else repr(digest)


def reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_int(text: str) -> Any:
    """Integers as the format's writer reads them: exact within 64 bits, else a float (never a bignum)."""
    value = int(text)
    if -(2**63) <= value < 2**64:
        return value
    try:
        return float(value)
    except OverflowError as exc:
        raise ValueError("a number too large for a double") from exc


def parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("a number too large for a double")
    return value


def has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is str:
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif type(v) is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
        elif type(v) is list:
            stack.extend(v)
    return False


def loads(data: bytes) -> Any:
    """Strict JSON, as the format is written: UTF-8, no NaN or Infinity, no number beyond a double, no lone
    surrogate escape (json.loads would accept all of these); ValueError otherwise."""
    try:
        value = json.loads(
            data.decode("utf-8"), parse_constant=reject_constant, parse_int=parse_int, parse_float=parse_float
        )
    except RecursionError as exc:
        raise ValueError("nested too deeply") from exc
    if LONE_ESCAPE.search(data) is not None and has_lone_surrogate(value):
        raise ValueError("a string holds a lone surrogate escape")
    return value


def printable(text: str) -> str:
    """``text`` with control characters escaped: ids and keys come from the bundle, not from a friend."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class BundleError(Exception):
    """A file of the bundle cannot be read as what it must be."""


class Bundle:
    """The bundle folder: every path is checked to stay inside it, and no link is followed."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)

    def path(self, rel: str) -> str:
        parts = rel.split("/")
        if rel.startswith("/") or "\\" in rel or "\x00" in rel or any(p in ("", ".", "..") for p in parts):
            raise BundleError(f"{rel!r} is not a plain relative path inside the bundle")
        return os.path.join(self.root, *parts)

    def regular(self, rel: str) -> str | None:
        """The path of a regular file ``rel`` (None if absent); a link or anything else is an error."""
        path = self.path(rel)
        parent = self.root
        for part in rel.split("/")[:-1]:
            parent = os.path.join(parent, part)
            try:
                st = os.lstat(parent)
            except FileNotFoundError:
                return None
            if not stat.S_ISDIR(st.st_mode):
                raise BundleError(f"{rel}: a path component is a link or not a folder")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{rel} is not a regular file (a link, a folder or a device)")
        return path

    def read(self, rel: str) -> bytes | None:
        path = self.regular(rel)
        if path is None:
            return None
        with open(path, "rb") as f:
            return f.read()

    def hash(self, rel: str) -> tuple[str, int] | None:
        """(digest, size) of a regular file, read in chunks; None if absent."""
        path = self.regular(rel)
        if path is None:
            return None
        h = blake3()
        size = 0
        with open(path, "rb") as f:
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                h.update(chunk)
                size += len(chunk)
        return "blake3:" + h.hexdigest(), size

    def lines(self, rel: str) -> Iterator[bytes]:
        """Every line of a file with its newline (the last may lack it), in bounded memory per line."""
        path = self.regular(rel)
        if path is None:
            raise BundleError(f"{rel} is missing")
        with open(path, "rb") as f:
            yield from f

    def walk(self) -> Iterator[tuple[str, str]]:
        """(relative path, what) for every entry below the root that is not a folder: 'file' or 'other'."""
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            rel_dir = os.path.relpath(dirpath, self.root)
            prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            for name in list(dirnames):
                if os.path.islink(os.path.join(dirpath, name)):
                    dirnames.remove(name)
                    yield prefix + name, "other"
            for name in filenames:
                st = os.lstat(os.path.join(dirpath, name))
                yield prefix + name, "file" if stat.S_ISREG(st.st_mode) else "other"


# -- claims -----------------------------------------------------------------------------


class Claim:
    def __init__(self, text: str) -> None:
        self.text = text
        self.details: list[str] = []
        self.skipped = False

    def fail(self, detail: str) -> None:
        self.details.append(detail)

    @property
    def status(self) -> str:
        if self.skipped:
            return "SKIP"
        return "FAIL" if self.details else "PASS"


# -- field types of the event kinds (DESIGN sections 3 and 5) -------------------------------

Check = Callable[[Any], bool]


def is_int(v: Any) -> bool:
    return type(v) is int


def is_str(v: Any) -> bool:
    return type(v) is str


def is_digest(v: Any) -> bool:
    return type(v) is str and DIGEST_RE.match(v) is not None


def is_ref(v: Any) -> bool:
    """An artifact reference: {"digest": "blake3:<64 hex>", "size": n >= 0} (+ a string media_type)."""
    if type(v) is not dict or not is_digest(v.get("digest")):
        return False
    size, media = v.get("size"), v.get("media_type")
    return type(size) is int and size >= 0 and (media is None or type(media) is str)


def is_file_record(v: Any) -> bool:
    return type(v) is dict and type(v.get("file")) is str and is_digest(v.get("digest")) and nat(v.get("size"))


def nat(v: Any) -> bool:
    return type(v) is int and v >= 0


def pos(v: Any) -> bool:
    return type(v) is int and v >= 1


def anything(v: Any) -> bool:
    return True


def maybe(check: Check) -> Check:
    return lambda v: v is None or check(v)


def list_of(check: Check) -> Check:
    return lambda v: type(v) is list and all(check(x) for x in v)


def values_of(check: Check) -> Check:
    return lambda v: type(v) is dict and all(check(x) for x in v.values())


def one_of(*allowed: str) -> Check:
    return lambda v: type(v) is str and v in allowed


def number(v: Any) -> bool:
    return type(v) in (int, float)


def obj(v: Any) -> bool:
    return type(v) is dict


CALL = {"call": is_str}
ATTEMPT = {"call": is_str, "attempt": pos}
OPTIONAL_TEXT = maybe(is_str)

# kind -> (required fields, optional fields); extra fields are allowed (forward compatibility)
KINDS: dict[str, tuple[dict[str, Check], dict[str, Check]]] = {
    "task.created": ({"format": is_str, "stream": is_str, "task": is_str}, {}),
    "task.accepted": ({}, {"note": OPTIONAL_TEXT, "by": OPTIONAL_TEXT}),
    "stream.repaired": (
        {"line": pos, "offset": nat, "reason": is_str, "quarantined": is_file_record},
        {"suspect": lambda v: type(v) is bool, "accepted": is_str},
    ),
    "artifact.recorded": (
        {"locator": is_str, "digest": is_digest, "size": nat},
        {"producer": OPTIONAL_TEXT, "media_type": OPTIONAL_TEXT},
    ),
    "call.requested": (
        {**CALL, "key": is_str},
        {"name": OPTIONAL_TEXT, "resumes": is_str, "request_hash": is_digest, "inputs": values_of(is_digest)},
    ),
    "call.manifest": (
        {
            **CALL,
            "key": is_str,
            "request_hash": is_digest,
            "request": is_ref,
            "inputs": values_of(is_digest),
            "canon": is_str,
            "dropped": list_of(is_str),
            "redacted": list_of(is_str),
        },
        {"messages": list_of(is_ref), "dedup": obj},
    ),
    "call.preparation_failed": ({**CALL, "key": is_str, "error": is_str}, {}),
    "call.resumed": ({**CALL, "new_call": is_str, "key": is_str}, {}),
    "call.completed": ({**ATTEMPT, "result": anything}, {"reinterpretation": pos}),
    "call.failed": ({**CALL, "reason": is_str}, {"by": OPTIONAL_TEXT}),
    "attempt.started": (dict(ATTEMPT), {}),
    "attempt.not_sent": (dict(ATTEMPT), {"reason": OPTIONAL_TEXT}),
    "attempt.errored": (dict(ATTEMPT), {"error": OPTIONAL_TEXT}),
    "attempt.observed": (
        {**ATTEMPT, "response": is_ref},
        {
            "error": OPTIONAL_TEXT,
            "retryable": lambda v: type(v) is bool,
            "source": is_str,
            "encoding": one_of("utf-8/surrogateescape", "utf-8/surrogatepass"),
        },
    ),
    "attempt.progress": ({**ATTEMPT, "beats": pos}, {"elapsed": number, "info": maybe(obj)}),
    "attempt.timed_out": (
        {**ATTEMPT, "after": number, "limit": one_of("inactivity", "max_duration"), "timeout": number},
        {},
    ),
    "task.checkpoint": (
        {"phase": is_str, "evidence": list_of(is_ref), "status": is_str},
        {
            "revision": OPTIONAL_TEXT,
            "changed_files": list_of(is_str),
            "note": OPTIONAL_TEXT,
            "by": OPTIONAL_TEXT,
            "turn": is_str,
            "call": is_str,
        },
    ),
    "task.failed": ({"reason": is_str}, {"by": OPTIONAL_TEXT}),
    "task.forked": (
        {
            "from_task": is_str,
            "from_call": is_str,
            "upto_seq": nat,
            "from_head": maybe(is_digest),
            "from_stream": is_str,
        },
        {
            "key": OPTIONAL_TEXT,
            "note": OPTIONAL_TEXT,
            "accept_risk": lambda v: type(v) is bool,
            "unknown": list_of(is_str),
        },
    ),
    "approval.requested": ({"approval": is_str, "question": is_str, "binds": obj}, {}),
    "approval.decided": (
        {"approval": is_str, "decision": one_of("approve", "reject"), "request_hash": maybe(is_digest)},
        {"by": OPTIONAL_TEXT, "note": OPTIONAL_TEXT},
    ),
    "attempt.interpreted": (
        {**ATTEMPT, "interpreter": obj},
        {"result": anything, "result_ref": is_ref, "error": is_str, "reinterpretation": pos},
    ),
    "attempt.retry_decided": (
        {**ATTEMPT, "decision": one_of("retry", "fail"), "reason": is_str},
        {"delay": maybe(number)},
    ),
    "effect.reconciled": (
        {**ATTEMPT, "outcome": one_of("served", "not_served", "resend", "provider_dedup"), "evidence": maybe(is_ref)},
        {
            "note": OPTIONAL_TEXT,
            "by": OPTIONAL_TEXT,
            "source": is_str,
            "window_s": number,
            "margin_s": number,
            "age_s": number,
        },
    ),
    "context.compilation_requested": (
        {"compilation": is_str, "offered": list_of(obj), "required": list_of(is_str)},
        {},
    ),
    "context.compiled": ({"compilation": is_str, "package": is_ref, "selected": list_of(is_str)}, {}),
    "context.compilation_failed": ({"compilation": is_str, "error": is_str, "missing": list_of(is_str)}, {}),
}


def shape_problems(kind: str, data: dict[str, Any]) -> list[str]:
    required, optional = KINDS[kind]
    out = []
    for name, check in required.items():
        if name not in data:
            out.append(f"lacks the field {name!r}")
        elif not check(data[name]):
            out.append(f"field {name!r} has the wrong type or value: {data[name]!r:.60}")
    for name, check in optional.items():
        if name in data and not check(data[name]):
            out.append(f"field {name!r} has the wrong type or value: {data[name]!r:.60}")
    if kind == "attempt.interpreted" and sum(k in data for k in ("result", "result_ref", "error")) != 1:
        out.append("carries not exactly one of 'result', 'result_ref' and 'error'")
    return out


# -- the identity graph (DESIGN section 7) ------------------------------------------------


class GraphCall:
    def __init__(self, key: str) -> None:
        self.key = key
        self.manifest = False
        self.preparation_failed = False
        self.latest = 0  # the latest started attempt, 0 for none
        self.may_follow = False  # the latest attempt was settled: retry decided, not sent, not served, resend
        self.has_outcome = False  # the latest attempt was observed, not sent or reconciled
        self.observed: set[int] = set()
        self.resumed_by: str | None = None
        self.completed = False
        self.failed = False
        self.request_hash: str | None = None
        self.requested_hash: str | None = None  # what call.requested recorded, if anything
        self.timed_out = False  # the latest attempt was recorded timed out
        self.responses: dict[int, tuple[str, int]] = {}  # attempt -> (digest, size) of its latest observation
        # the latest interpretation no completion used yet: (attempt, canonical result digest or None for an error)
        self.interpretation: tuple[int, str | None] | None = None
        self.dedup: Any = None  # the manifest's provider dedup declaration
        self.first_started: str | None = None  # ts of the first attempt.started


def canonical(value: Any) -> str:
    """The digest of a value as canonical JSON: sorted keys, compact, UTF-8."""
    return b3(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def epoch_seconds(ts: str) -> float | None:
    """Seconds since the epoch of a recorded ts (2026-11-30T02:04:05.123456Z), None when unreadable."""
    import datetime

    try:
        when = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    except (TypeError, ValueError):
        return None
    return when.timestamp()


class Graph:
    """Follows one stream and names every event that breaks the identity graph."""

    def __init__(self, task: str) -> None:
        self.task = task
        self.calls: dict[str, GraphCall] = {}
        self.offered: dict[str, set[str]] = {}
        self.approvals: dict[str, tuple[Any, int, bool]] = {}  # id -> (what it binds, seq, decided)
        self.forked_at: int | None = None
        self.promises: dict[str, tuple[int, str]] = {}
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.ts = ""  # the ts of the event being followed (a provider dedup window is judged with it)

    def bad(self, seq: int, kind: str, text: str) -> None:
        self.problems.append(f"seq {seq} {kind}: {text}")

    def named_call(self, seq: int, kind: str, d: dict[str, Any]) -> GraphCall | None:
        c = self.calls.get(d["call"])
        if c is None:
            self.bad(seq, kind, f"names call {d['call']!r}, never requested before it")
            return None
        if type(d.get("key")) is str and d["key"] != c.key:
            self.bad(seq, kind, f"names call {d['call']!r} with key {d['key']!r}; it was requested with {c.key!r}")
            return None
        return c

    def latest_attempt(self, seq: int, kind: str, d: dict[str, Any]) -> GraphCall | None:
        c = self.named_call(seq, kind, d)
        if c is None:
            return None
        if c.latest == 0 or d["attempt"] != c.latest:
            self.bad(seq, kind, f"names attempt {d['attempt']} of {d['call']}, not its latest started attempt")
            return None
        return c

    def event(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        handler = getattr(self, "on_" + kind.replace(".", "_"), None)
        if handler is not None:
            handler(seq, kind, d)

    def on_task_created(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        if seq != 0:
            self.bad(seq, kind, "a stream has one task.created, at seq 0")
        if d["task"] != self.task:
            self.bad(seq, kind, f"names task {d['task']!r} but the file is {self.task}.jsonl")
        if d["format"] != LEDGER_FORMAT:
            self.bad(seq, kind, f"declares format {d['format']!r}, not {LEDGER_FORMAT!r}")

    def on_stream_repaired(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        want = d["line"] - 1 if d["offset"] > 0 else 1
        if seq != want:
            self.bad(seq, kind, f"a repair from line {d['line']} belongs at seq {want}")
        if d.get("suspect") is True:
            self.bad(seq, kind, "quarantined a whole event line that did not chain: the line before it may be edited")

    def on_call_requested(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        cid, key = d["call"], d["key"]
        if cid in self.calls:
            self.bad(seq, kind, f"call {cid!r} is requested twice")
            return
        self.calls[cid] = GraphCall(key)
        self.calls[cid].requested_hash = d.get("request_hash")
        promised = self.promises.pop("resume:" + cid, None) is not None
        old_id = d.get("resumes")
        if old_id is None:
            if promised:
                self.bad(seq, kind, f"a call.resumed introduced {cid!r}, but it does not say which call it resumes")
            return
        old = self.calls.get(old_id)
        if old is None:
            self.bad(seq, kind, f"{cid!r} resumes {old_id!r}, which was never requested")
        elif old.key != key:
            self.bad(seq, kind, f"{cid!r} resumes {old_id!r}, a call of another key")
        elif old.resumed_by != cid or not promised:
            self.bad(seq, kind, f"{cid!r} resumes {old_id!r}, but no call.resumed of {old_id!r} names it")

    def on_call_manifest(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.named_call(seq, kind, d)
        if c is None:
            return
        if c.manifest:
            self.bad(seq, kind, f"{d['call']} has a second manifest")
        if c.preparation_failed:
            self.bad(seq, kind, f"{d['call']} has a manifest after its preparation failed")
        c.manifest = True
        c.request_hash = d["request_hash"]
        c.dedup = d.get("dedup")
        if d["request_hash"] != d["request"]["digest"]:
            self.bad(seq, kind, "request_hash is not the digest of the recorded request")
        if c.requested_hash is not None and c.requested_hash != d["request_hash"]:
            self.bad(seq, kind, f"records another request hash than {d['call']}'s call.requested: the intent changed")

    def on_call_preparation_failed(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.named_call(seq, kind, d)
        if c is None:
            return
        if c.manifest:
            self.bad(seq, kind, f"{d['call']} failed preparation after its manifest")
        c.preparation_failed = True

    def on_call_resumed(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.named_call(seq, kind, d)
        if c is None:
            return
        if c.completed:
            self.bad(seq, kind, f"{d['call']} is resumed after it completed")
        if c.resumed_by is not None:
            self.bad(seq, kind, f"{d['call']} is resumed twice")
        if d["new_call"] in self.calls:
            self.bad(seq, kind, f"the new call {d['new_call']!r} already exists")
            return
        c.resumed_by = d["new_call"]
        self.promises["resume:" + d["new_call"]] = (
            seq,
            f"no call.requested of {d['new_call']!r} follows the resume yet (legal after a crash right after it: "
            "the next run of the key continues it)",
        )

    def on_attempt_started(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.named_call(seq, kind, d)
        if c is None:
            return
        n = d["attempt"]
        if not c.manifest:
            self.bad(seq, kind, f"attempt {n} of {d['call']} started without a manifest: intent never recorded")
        if c.completed or c.failed:
            self.bad(seq, kind, f"attempt {n} of {d['call']} started after the call ended")
        if n != c.latest + 1:
            self.bad(seq, kind, f"attempt {n} of {d['call']} started; attempt {c.latest + 1} was next")
        elif c.latest and not c.may_follow:
            self.bad(
                seq, kind, f"attempt {n} of {d['call']} started while attempt {c.latest} was unsettled: a blind resend"
            )
        if c.first_started is None:
            c.first_started = self.ts
        c.latest = n
        c.may_follow = False
        c.has_outcome = False
        c.timed_out = False

    def on_attempt_not_sent(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.latest_attempt(seq, kind, d)
        if c is None:
            return
        if d["attempt"] in c.observed:
            self.bad(seq, kind, "an observed attempt is recorded not sent")
        c.may_follow = c.has_outcome = True

    def on_attempt_errored(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        self.latest_attempt(seq, kind, d)

    def on_attempt_observed(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.latest_attempt(seq, kind, d)
        if c is None:
            return
        c.observed.add(d["attempt"])
        c.responses[d["attempt"]] = (d["response"]["digest"], d["response"]["size"])
        c.has_outcome = True
        from_reconciliation = d.get("source") == "reconciliation"
        if from_reconciliation and self.promises.pop(f"evidence:{d['call']}:{d['attempt']}", None) is None:
            self.bad(seq, kind, "an observation from reconciliation without a reconciliation carrying evidence")
        elif not from_reconciliation and c.timed_out:
            self.bad(
                seq, kind, "an observation after the attempt timed out: a late answer enters only by reconciliation"
            )

    def on_attempt_interpreted(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.latest_attempt(seq, kind, d)
        if c is None:
            return
        if d["attempt"] not in c.observed:
            self.bad(seq, kind, f"attempt {d['attempt']} of {d['call']} is interpreted but was never observed")
        ref = d.get("result_ref")
        if "result" in d:
            c.interpretation = (d["attempt"], "value " + canonical(d["result"]))
        else:
            c.interpretation = (d["attempt"], f"ref {ref['digest']}" if ref is not None and is_ref(ref) else None)

    def on_attempt_retry_decided(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.latest_attempt(seq, kind, d)
        if c is None:
            return
        if not c.has_outcome:
            self.bad(seq, kind, f"a decision on attempt {d['attempt']} of {d['call']}, whose effect is unknown")
        c.may_follow = d["decision"] == "retry"

    def on_effect_reconciled(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.latest_attempt(seq, kind, d)
        if c is None:
            return
        if d["evidence"] is not None and d["outcome"] != "served":
            self.bad(seq, kind, "only a 'served' reconciliation carries evidence")
        c.has_outcome = True
        c.may_follow = d["outcome"] in ("not_served", "resend", "provider_dedup")
        if d["outcome"] == "provider_dedup":
            self.check_dedup(seq, kind, d["call"], c)
        if d["evidence"] is not None:
            self.promises[f"evidence:{d['call']}:{d['attempt']}"] = (
                seq,
                f"the evidence of {d['call']} is never observed (no attempt.observed from reconciliation follows)",
            )

    def check_dedup(self, seq: int, kind: str, call: str, c: GraphCall) -> None:
        """A provider_dedup resend needs the manifest's declaration and a first attempt inside its window.

        reconciled.ts - first attempt.started.ts must lie in [0, window_s - margin_s].
        """
        decl = c.dedup
        if type(decl) is not dict:
            self.bad(seq, kind, f"'provider_dedup' of {call}, but its manifest declares no provider dedup window")
            return
        start, now = epoch_seconds(c.first_started or ""), epoch_seconds(self.ts)
        window, margin = decl.get("window_s"), decl.get("margin_s")
        numbers = all(type(v) in (int, float) for v in (window, margin))
        if start is None or now is None or not numbers or not 0 <= now - start <= window - margin:  # type: ignore[operator]
            self.bad(
                seq,
                kind,
                f"'provider_dedup' of {call} outside the declared window ({window!r} s less a margin of "
                f"{margin!r} s) of its first attempt",
            )

    def on_call_completed(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.named_call(seq, kind, d)
        if c is None:
            return
        n = d["attempt"]
        if c.completed and "reinterpretation" not in d:
            self.bad(seq, kind, f"{d['call']} completes twice, and the second is not a reinterpretation")
        if n not in c.observed:
            self.bad(seq, kind, f"{d['call']} completes with attempt {n}, which was never observed")
        elif n != c.latest:
            self.bad(seq, kind, f"{d['call']} completes with attempt {n}, but attempt {c.latest} started after it")
        else:
            self.derivable(seq, kind, c, n, d["result"])
        c.completed = True

    def derivable(self, seq: int, kind: str, c: GraphCall, n: int, result: Any) -> None:
        """What a completion carries must come from the events before it: an interpretation, or the response."""
        carried: str | None = None
        if type(result) is dict and sorted(result) == ["value"]:
            carried = "value " + canonical(result["value"])
        elif type(result) is dict and sorted(result) == ["value_ref"] and is_ref(result["value_ref"]):
            carried = "ref " + result["value_ref"]["digest"]
        if carried is not None:
            interp, c.interpretation = c.interpretation, None
            if interp is None or interp[0] != n:
                self.bad(seq, kind, f"a value for attempt {n}, but no interpretation of that attempt precedes it")
            elif interp[1] is None:
                self.bad(seq, kind, f"a value for attempt {n}, whose latest interpretation recorded an error")
            elif carried != interp[1]:
                self.bad(seq, kind, f"the value differs from the result the latest interpretation of attempt {n} holds")
        elif type(result) is dict and sorted(result) == ["raw", "response"] and result["raw"] is True:
            ref = result["response"]
            if not is_ref(ref) or c.responses.get(n) != (ref["digest"], ref["size"]):
                self.bad(seq, kind, f"the raw response it names is not the one attempt {n}'s observation stored")
        else:
            self.bad(seq, kind, f"result is not {{value}}, {{value_ref}} or {{raw, response}}: {result!r:.60}")

    def on_call_failed(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.named_call(seq, kind, d)
        if c is None:
            return
        if c.completed:
            self.bad(seq, kind, f"{d['call']} is recorded failed after it completed")
        c.failed = True

    def on_context_compilation_requested(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        self.offered[d["compilation"]] = {o["id"] for o in d["offered"] if type(o.get("id")) is str}

    def on_context_compiled(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        offered = self.offered.get(d["compilation"])
        if offered is None:
            self.bad(seq, kind, f"names compilation {d['compilation']!r}, never requested")
            return
        stray = [s for s in d["selected"] if s not in offered]
        if stray:
            self.bad(seq, kind, f"selected {stray}, which were not offered")

    def on_context_compilation_failed(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        if d["compilation"] not in self.offered:
            self.bad(seq, kind, f"names compilation {d['compilation']!r}, never requested")

    # long effects: heartbeats and timeouts belong only while an attempt is out

    def still_out(self, seq: int, kind: str, d: dict[str, Any]) -> GraphCall | None:
        c = self.latest_attempt(seq, kind, d)
        if c is None:
            return None
        if c.has_outcome or c.timed_out or c.completed:
            self.bad(seq, kind, f"attempt {d['attempt']} of {d['call']} already has an outcome or timed out")
            return None
        return c

    def on_attempt_progress(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        self.still_out(seq, kind, d)

    def on_attempt_timed_out(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        c = self.still_out(seq, kind, d)
        if c is not None:
            c.timed_out = True
        if d["after"] < 0 or d["timeout"] <= 0:
            self.bad(seq, kind, "after must be >= 0 and timeout > 0 seconds")

    # checkpoints, approvals, forks

    def on_task_checkpoint(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        cid, turn = d.get("call"), d.get("turn")
        if cid is not None:
            c = self.calls.get(cid)
            if c is None:
                self.bad(seq, kind, f"names call {cid!r}, never requested")
            elif not c.completed:
                self.bad(seq, kind, f"accepts {cid!r}, which has not completed")
            elif turn is not None and c.key != turn:
                self.bad(seq, kind, f"names turn {turn!r}, but {cid!r} has key {c.key!r}")
        elif turn is not None and not any(c.key == turn and c.completed for c in self.calls.values()):
            self.bad(seq, kind, f"accepts turn {turn!r}, which has no completed call")

    def on_approval_requested(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        binds = d["binds"]
        binding: Any = None
        if binds.get("call") is not None:
            cid = binds["call"]
            c = self.calls.get(cid) if type(cid) is str else None
            if c is None:
                self.bad(seq, kind, f"binds call {cid!r}, never requested")
            else:
                if binds.get("key") not in (None, c.key):
                    self.bad(seq, kind, f"binds {cid!r} under key {binds.get('key')!r}; its key is {c.key!r}")
                if binds.get("request_hash") != c.request_hash:
                    self.bad(seq, kind, f"binds {cid!r} with a request hash its manifest does not record")
            binding = binds.get("request_hash")
        elif "digest" in binds:
            binding = binds["digest"]
        if binding is not None and not is_digest(binding):
            self.bad(seq, kind, f"binds {binding!r}, not a digest")
        self.approvals[d["approval"]] = (binding, seq, False)

    def on_approval_decided(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        a = self.approvals.get(d["approval"])
        if a is None:
            self.bad(seq, kind, f"decides approval {d['approval']!r}, never requested before it")
            return
        binding, requested_at, decided = a
        if d["request_hash"] != binding:
            self.bad(
                seq, kind, f"decides for {d['request_hash']!r}, but the request at seq {requested_at} binds {binding!r}"
            )
        elif decided:
            self.bad(seq, kind, f"decides approval {d['approval']!r} a second time")
        self.approvals[d["approval"]] = (binding, requested_at, True)

    def on_task_forked(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        if self.forked_at is not None and self.forked_at > d["upto_seq"]:  # a fork of a fork copies the first
            self.bad(seq, kind, f"a second task.forked (the first at seq {self.forked_at})")
        self.forked_at = seq
        if seq != d["upto_seq"] + 1:
            self.bad(
                seq, kind, f"copies seq 1..{d['upto_seq']} of its origin, so it belongs at seq {d['upto_seq'] + 1}"
            )

    def finish(self) -> None:
        for tag, (seq, text) in sorted(self.promises.items(), key=lambda x: x[1]):
            # a pending resume is a legal crash state; every other unkept promise is a problem
            (self.notes if tag.startswith("resume:") else self.problems).append(f"seq {seq}: {text}")
        self.promises.clear()


# -- the work state (DESIGN section 6), re-derived from the events ---------------------------


class Try:
    """What the record says about one attempt."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.not_sent = False
        self.observed = False
        self.failure: str | None = None  # the provider answered with this error
        self.interpreted = False
        self.interpret_error: str | None = None
        self.decision: str | None = None
        self.reconciled: str | None = None


class CallRecord:
    def __init__(self, cid: str, key: str, seq: int, resumes: str | None) -> None:
        self.cid = cid
        self.key = key
        self.first_seq = seq
        self.resumes = resumes
        self.manifest = False
        self.request_hash: str | None = None
        self.tries: list[Try] = []
        self.completed = False
        self.failed = False
        self.preparation_failed = False
        self.resumed_to: str | None = None


class CompilationRecord:
    def __init__(self, seq: int, offered: list[dict[str, Any]], required: list[str]) -> None:
        self.first_seq = seq
        self.offered = offered
        self.required = required
        self.stage = "requested"
        self.missing: list[str] = []


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


class Projection:
    """Each call and compilation, classified by the last evidence recorded for it."""

    def __init__(self) -> None:
        self.calls: dict[str, CallRecord] = {}
        self.latest_of_key: dict[str, str] = {}
        self.compilations: dict[str, CompilationRecord] = {}
        self.events = 0
        self.last_seq = -1
        self.last_completion = -1
        self.last_acceptance = -1

    def event(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        self.events += 1
        self.last_seq = seq
        if kind == "task.accepted":
            self.last_acceptance = seq
            return
        if kind.startswith("context."):
            self.compilation_event(seq, kind, d)
            return
        cid = d.get("call")
        if kind == "call.requested":
            key = d.get("key")
            if type(cid) is str and type(key) is str and cid not in self.calls:
                resumes = d.get("resumes")
                self.calls[cid] = CallRecord(cid, key, seq, resumes if type(resumes) is str else None)
                h = d.get("request_hash")  # the intent's hash rides in the first event (the manifest repeats it)
                self.calls[cid].request_hash = h if type(h) is str else None
                self.latest_of_key[key] = cid
            return
        if not kind.startswith(("call.", "attempt.", "effect.")) or type(cid) is not str or cid not in self.calls:
            return
        c = self.calls[cid]
        if kind == "call.manifest":
            c.manifest = True
            h = d.get("request_hash")
            c.request_hash = h if type(h) is str else None
        elif kind == "call.preparation_failed":
            c.preparation_failed = True
        elif kind == "call.resumed":
            if type(d.get("new_call")) is str:
                c.resumed_to = d["new_call"]
        elif kind == "call.completed":
            c.completed = True
            self.last_completion = seq
        elif kind == "call.failed":
            c.failed = True
        elif kind == "attempt.started":
            c.tries.append(Try(len(c.tries) + 1))
        else:
            t = c.tries[-1] if c.tries else None
            if t is None or d.get("attempt") != t.n:
                return  # not the latest started attempt: it moves nothing
            if kind == "attempt.not_sent":
                t.not_sent = True
            elif kind == "attempt.observed":
                t.observed = True
                t.failure = None if d.get("error") is None else str(d.get("error"))
            elif kind == "attempt.interpreted":
                t.interpreted = True
                t.interpret_error = None if d.get("error") is None else str(d.get("error"))
            elif kind == "attempt.retry_decided":
                t.decision = str(d.get("decision"))
            elif kind == "effect.reconciled":
                t.reconciled = str(d.get("outcome"))

    def compilation_event(self, seq: int, kind: str, d: dict[str, Any]) -> None:
        cid = d.get("compilation")
        if type(cid) is not str:
            return
        if kind == "context.compilation_requested":
            offered = [o for o in as_list(d.get("offered")) if isinstance(o, dict)]
            required = [r for r in as_list(d.get("required")) if isinstance(r, str)]
            self.compilations[cid] = CompilationRecord(seq, offered, required)
            return
        comp = self.compilations.get(cid)
        if comp is None:
            return
        if kind == "context.compiled":
            comp.stage = "compiled"
        elif kind == "context.compilation_failed":
            comp.stage = "failed"
            offered_ids = {o.get("id") for o in comp.offered}
            never_offered = {r for r in comp.required if r not in offered_ids}
            recorded = {m for m in as_list(d.get("missing")) if isinstance(m, str)}
            comp.missing = sorted(never_offered | recorded)

    # the ladder: each rung asks whether a particular piece of evidence exists

    def classify(self, c: CallRecord) -> tuple[str, str, str, bool]:
        """(stage, next operation, provider effect, duplicate effect risk) of one call."""
        effect = "none"
        for t in c.tries:  # happened beats unknown beats none
            if t.observed or t.reconciled == "served":
                effect = "happened"
                break
            if not (t.not_sent or t.reconciled == "not_served"):
                effect = "unknown"
        if c.completed:
            return "completed", "none", "happened", False
        if c.preparation_failed:
            return "preparation_failed", "fix inputs", effect, False
        successor = self.calls.get(c.resumed_to) if c.resumed_to is not None else None
        if successor is not None and successor.resumes == c.cid:
            return "superseded", "none", effect, False
        if c.failed:
            return "failed", "operator decides", effect, False
        if not c.manifest:
            return "requested", "start call", effect, False
        if not c.tries:
            return "manifest_recorded", "start call", effect, False
        t = c.tries[-1]
        if t.decision == "retry":
            return "retry_decided", "start next attempt", effect, False
        if t.decision is not None:
            return "failed", "operator decides", effect, False
        if t.interpreted:
            return "interpreted", "finalize" if t.interpret_error is None else "redecide", effect, False
        if t.observed:
            return "observed", "reinterpret" if t.failure is None else "redecide", effect, False
        if t.reconciled == "not_served":
            return "reconciled_not_served", "start next attempt", effect, False
        if t.reconciled == "resend":
            return "risk_accepted", "start next attempt", effect, True
        if t.reconciled == "provider_dedup":
            return "provider_dedup", "start next attempt", effect, False
        if t.reconciled == "served":
            return "reconciled_served", "operator decides", effect, False
        if t.not_sent:
            return "not_sent", "start next attempt", effect, False
        return "effect_unknown", "reconcile effect", "unknown", True

    def result(self) -> dict[str, Any]:
        calls: dict[str, dict[str, Any]] = {}
        for cid, c in self.calls.items():
            stage, nxt, effect, risk = self.classify(c)
            calls[cid] = {
                "key": c.key,
                "stage": stage,
                "next_operation": nxt,
                "provider_effect": effect,
                "duplicate_effect_risk": risk,
                "attempts": len(c.tries),
                "request_hash": c.request_hash,
                "resumes": c.resumes,
                "superseded_by": c.resumed_to if stage == "superseded" else None,
            }
        comps: dict[str, dict[str, Any]] = {}
        for cid, comp in self.compilations.items():
            comps[cid] = {
                "stage": comp.stage,
                "next_operation": {"requested": "recompile", "failed": "fix inputs"}.get(comp.stage, "none"),
                "required": list(comp.required),
                "missing": list(comp.missing),
            }
        waiting: list[tuple[int, str, str]] = []
        for cid in self.latest_of_key.values():  # an earlier call of a key was superseded or retried
            nxt = calls[cid]["next_operation"]
            if nxt != "none":
                waiting.append((self.calls[cid].first_seq, cid, nxt))
        for cid, comp in self.compilations.items():
            if comps[cid]["next_operation"] != "none":
                waiting.append((comp.first_seq, cid, comps[cid]["next_operation"]))
        waiting.sort()
        accepted = self.last_completion >= 0 and self.last_acceptance > self.last_completion
        if waiting:
            task_next = waiting[0][2]
        elif self.last_completion >= 0 and not accepted:
            task_next = "check and accept"
        else:
            task_next = "none"
        return {
            "next_operation": task_next,
            "unresolved": [w[1] for w in waiting],
            "accepted": accepted,
            "events": self.events,
            "last_seq": self.last_seq,
            "calls": calls,
            "compilations": comps,
        }


# -- reading one stream --------------------------------------------------------------------


class Stream:
    """Everything learned from one task stream in a single pass."""

    def __init__(self, task: str) -> None:
        self.task = task
        self.chain: list[str] = []
        self.shape: list[str] = []
        self.notes: list[str] = []
        self.graph = Graph(task)
        self.projection = Projection()
        self.count = 0
        self.head: str | None = None
        self.digest_at: dict[int, str] = {}
        self.stream_id: str | None = None
        self.refs: dict[str, tuple[int, int]] = {}  # digest -> (size, first seq)
        self.quarantined: list[tuple[int, dict[str, Any]]] = []
        self.manifests: dict[str, str] = {}  # call -> request hash
        self.started: dict[str, int] = {}  # call -> attempt.started events


def walk_refs(value: Any, found: list[dict[str, Any]]) -> None:
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is dict:
            if is_ref(v):
                found.append(v)
            stack.extend(v.values())
        elif type(v) is list:
            stack.extend(v)


def inline_payload(ref: dict[str, Any]) -> bytes | None:
    """The bytes a ref carries inline (None when it carries none); BundleError when they are malformed."""
    text, b64 = ref.get("inline"), ref.get("inline_b64")
    if "inline" in ref and "inline_b64" in ref:
        raise BundleError("carries both inline and inline_b64")
    if "inline" in ref:
        if type(text) is not str:
            raise BundleError("'inline' is not a string")
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BundleError("'inline' holds a lone surrogate") from exc
    if "inline_b64" in ref:
        if type(b64) is not str:
            raise BundleError("'inline_b64' is not a string")
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BundleError("'inline_b64' is not base64") from exc
    return None


class Verifier:
    def __init__(self, root: str, *, inventory: bool = True) -> None:
        self.bundle = Bundle(root)
        self.inventory = inventory
        self.claims: list[Claim] = []
        self.streams: dict[str, Stream] = {}
        self.inline: dict[str, int] = {}  # digest -> size, from valid inline payloads anywhere
        self.bad_inline: dict[str, str] = {}
        self.states: dict[str, Any] = {}

    def claim(self, text: str) -> Claim:
        c = Claim(text)
        self.claims.append(c)
        return c

    # -- the whole run -------------------------------------------------------------------

    def run(self) -> None:
        self.check_marker()
        self.check_inventory()
        tasks = self.list_tasks()
        heads = self.load_json("heads.json", HEADS_FORMAT, "tasks")
        states = self.load_json("states.json", STATES_FORMAT, "tasks")
        same = self.claim("tasks/, heads.json and states.json name the same tasks: " + (", ".join(tasks) or "none"))
        for label, doc in (("heads.json", heads), ("states.json", states)):
            if doc is None:
                same.fail(f"{label} is missing or unreadable")
            elif sorted(doc["tasks"]) != tasks:
                same.fail(f"{label} names {sorted(doc['tasks'])}")
        if not tasks:
            same.fail("the bundle holds no task stream")
        for task in tasks:
            self.streams[task] = self.read_stream(task)
        for task in tasks:
            s = self.streams[task]
            self.stream_claims(s, (heads or {}).get("tasks", {}).get(task))
            self.state_claims(s, (states or {}).get("tasks", {}).get(task))
        self.check_receipts()

    def check_marker(self) -> None:
        c = self.claim(f"intentlog.json declares the ledger format {LEDGER_FORMAT} with blake3 hashes")
        try:
            data = self.bundle.read("intentlog.json")
            marker = loads(data) if data is not None else None
        except (BundleError, ValueError) as exc:
            c.fail(str(exc))
            return
        if type(marker) is not dict or marker.get("format") != LEDGER_FORMAT or marker.get("hash") != "blake3":
            c.fail(f"intentlog.json is {marker!r}")

    def load_json(self, rel: str, fmt: str, field: str) -> dict[str, Any] | None:
        try:
            data = self.bundle.read(rel)
            doc = loads(data) if data is not None else None
        except (BundleError, ValueError):
            return None
        if type(doc) is not dict or doc.get("format") != fmt or type(doc.get(field)) is not dict:
            return None
        return doc

    def check_inventory(self) -> None:
        c = self.claim("every file matches its digest and size in hashes.json, and no file is unlisted")
        if not self.inventory:
            c.skipped = True
            c.text += " (skipped: --no-inventory)"
            return
        doc = self.load_json("hashes.json", HASHES_FORMAT, "files")
        if doc is None or doc.get("hash") != "blake3":
            c.fail(f"hashes.json is missing or not a {HASHES_FORMAT} file")
            return
        listed: dict[str, Any] = doc["files"]
        present: set[str] = set()
        total = 0
        for rel, what in sorted(self.bundle.walk()):
            if what != "file":
                c.fail(f"{rel} is a link or a special file")
                continue
            if rel != "hashes.json":
                present.add(rel)
        for rel in sorted(present - set(listed)):
            c.fail(f"{rel} is not listed")
        for rel, entry in sorted(listed.items()):
            if type(entry) is not dict or not is_digest(entry.get("digest")) or not nat(entry.get("size")):
                c.fail(f"{rel}: the entry is not {{digest, size}}")
                continue
            try:
                got = self.bundle.hash(rel)
            except BundleError as exc:
                c.fail(str(exc))
                continue
            if got is None:
                c.fail(f"{rel} is listed but missing")
            elif got != (entry["digest"], entry["size"]):
                c.fail(
                    f"{rel} hashes to {short(got[0])} ({got[1]} bytes), listed as {short(entry['digest'])} "
                    f"({entry['size']} bytes)"
                )
            else:
                total += got[1]
        c.text = c.text.replace("every file", f"every one of the {len(listed)} files ({total} bytes)", 1)

    def list_tasks(self) -> list[str]:
        out = []
        for rel, _ in sorted(self.bundle.walk()):
            if rel.startswith("tasks/") and rel.endswith(".jsonl"):
                name = rel[len("tasks/") : -len(".jsonl")]
                if TASK_RE.match(name):
                    out.append(name)
        return sorted(out)

    # -- one stream ------------------------------------------------------------------------

    def read_stream(self, task: str) -> Stream:
        s = Stream(task)
        prev: str | None = None
        expected = 0
        try:
            for lineno, line in enumerate(self.bundle.lines(f"tasks/{task}.jsonl"), start=1):
                if not line.endswith(b"\n"):
                    s.chain.append(f"line {lineno}: incomplete (no newline): a torn tail")
                    break
                digest = b3(line)
                try:
                    ev = loads(line)
                except ValueError as exc:
                    s.chain.append(f"line {lineno}: not JSON ({exc})")
                    prev, expected = digest, expected + 1
                    continue
                if type(ev) is not dict or sorted(ev) != list(ENVELOPE):
                    s.chain.append(f"line {lineno}: not an object with exactly {', '.join(ENVELOPE)}")
                    prev, expected = digest, expected + 1
                    continue
                seq, kind, data, ts = ev["seq"], ev["kind"], ev["data"], ev["ts"]
                if type(seq) is not int or type(kind) is not str or type(data) is not dict or type(ts) is not str:
                    s.chain.append(f"line {lineno}: seq, kind, data or ts has the wrong type")
                    prev, expected = digest, expected + 1
                    continue
                if seq != expected:
                    s.chain.append(f"line {lineno}: seq is {seq}, {expected} was expected")
                if ev["prev"] != prev:
                    s.chain.append(
                        f"line {lineno}: prev is {short(ev['prev'])}, the line before hashes to {short(prev)}"
                    )
                prev, expected = digest, seq + 1
                s.count += 1
                s.head = digest
                s.digest_at[seq] = digest
                self.read_event(s, lineno, seq, kind, ts, data)
        except BundleError as exc:
            s.chain.append(str(exc))
        if s.count == 0:
            s.chain.append("the stream holds no event")
        s.graph.finish()
        self.states[task] = s.projection.result()
        return s

    def read_event(self, s: Stream, lineno: int, seq: int, kind: str, ts: str, data: dict[str, Any]) -> None:
        where = f"line {lineno} (seq {seq}) {kind}"
        if s.count == 1:
            if kind != "task.created":
                s.shape.append(f"{where}: the first event must be task.created")
            elif type(data.get("stream")) is str:
                s.stream_id = data["stream"]
        if KIND_RE.match(kind) is None:
            s.shape.append(f"{where}: the kind is not dotted lowercase words")
        if TS_RE.match(ts) is None:
            s.shape.append(f"{where}: ts {ts!r} is not UTC like 2026-11-30T02:04:05.123456Z")
        s.projection.event(seq, kind, data)
        if kind in KINDS:
            problems = shape_problems(kind, data)
            s.shape.extend(f"{where}: {p}" for p in problems)
            if not problems:
                s.graph.ts = ts
                s.graph.event(seq, kind, data)
                if kind == "call.manifest":
                    s.manifests[data["call"]] = data["request_hash"]
                elif kind == "attempt.started":
                    s.started[data["call"]] = s.started.get(data["call"], 0) + 1
                elif kind == "stream.repaired":
                    s.quarantined.append((seq, data["quarantined"]))
        elif kind.startswith(RESERVED):
            s.notes.append(f"{where}: a kind this verifier does not know (a newer intentlog?); only its refs checked")
        found: list[dict[str, Any]] = []
        walk_refs({k: v for k, v in data.items() if not (kind == "stream.repaired" and k == "quarantined")}, found)
        for ref in found:
            digest, size = ref["digest"], ref["size"]
            try:
                payload = inline_payload(ref)
            except BundleError as exc:
                self.bad_inline.setdefault(digest, f"tasks/{s.task}.jsonl {where}: {exc}")
                continue
            if payload is not None:
                if b3(payload) != digest or len(payload) != size:
                    self.bad_inline.setdefault(
                        digest, f"tasks/{s.task}.jsonl {where}: the inline bytes do not hash to {short(digest)}"
                    )
                else:
                    self.inline.setdefault(digest, size)
            s.refs.setdefault(digest, (size, seq))
            if s.refs[digest][0] != size:
                s.shape.append(f"{where}: a ref to {short(digest)} says {size} bytes, another says {s.refs[digest][0]}")

    def stream_claims(self, s: Stream, sealed: Any) -> None:
        t = s.task
        c = self.claim(
            f"{t}: every one of its {s.count} lines is a whole event, seq counts from 0 and each prev is "
            "the digest of the line before"
        )
        for p in s.chain[:MAX_DETAILS]:
            c.fail(p)
        c = self.claim(f"{t}: the stream ends at the head sealed in heads.json (seq {s.count - 1}, {short(s.head)})")
        if type(sealed) is not dict:
            c.fail("heads.json has no entry for it")
        else:
            if sealed.get("stream") != s.stream_id:
                c.fail(f"the stream id is {s.stream_id!r}, heads.json sealed {sealed.get('stream')!r}")
            if sealed.get("seq") != s.count - 1 or sealed.get("events") != s.count:
                c.fail(
                    f"heads.json sealed seq {sealed.get('seq')!r} ({sealed.get('events')!r} events); the stream "
                    f"has {s.count} events: truncated or extended"
                )
            sealed_seq = sealed.get("seq")
            at_seal = s.digest_at.get(sealed_seq) if type(sealed_seq) is int else None
            if sealed.get("head") != at_seal:
                c.fail(
                    f"the event at the sealed seq hashes to {short(at_seal)}, "
                    f"heads.json sealed {short(sealed.get('head'))}"
                )
        c = self.claim(f"{t}: every event has the fields its kind requires, with the right types")
        for p in s.shape[:MAX_DETAILS]:
            c.fail(p)
        c = self.claim(
            f"{t}: the identity graph holds: each attempt has a call with a manifest, each observation an "
            "attempt, each completion an observation, each resume links two calls of one key"
        )
        for p in s.graph.problems[:MAX_DETAILS]:
            c.fail(p)
        c = self.claim(f"{t}: each of the {len(s.refs)} artifact(s) it references is present and hashes to its digest")
        for digest, (size, seq) in sorted(s.refs.items()):
            problem = self.artifact_problem(digest, size)
            if problem is not None:
                c.fail(f"seq {seq}: {problem}")
        for seq, q in s.quarantined:
            problem = self.quarantine_problem(q)
            if problem is not None:
                c.fail(f"seq {seq} stream.repaired: {problem}")
        for note in (s.notes + s.graph.notes)[:MAX_DETAILS]:
            c.text += f" [note: {note}]"

    def artifact_problem(self, digest: str, size: int) -> str | None:
        if digest in self.inline:
            return (
                None if self.inline[digest] == size else f"{short(digest)} is {self.inline[digest]} bytes, not {size}"
            )
        hexd = digest[len("blake3:") :]
        rel = f"objects/{hexd[:2]}/{hexd[2:]}"
        try:
            got = self.bundle.hash(rel)
        except BundleError as exc:
            return str(exc)
        if got is None:
            if digest in self.bad_inline:
                return f"the only copy of {short(digest)} is inline and corrupt: {self.bad_inline[digest]}"
            return f"{short(digest)} ({size} bytes) is neither in objects/ nor inline in any event"
        if got[0] != digest:
            return f"{rel} hashes to {short(got[0])}, not {short(digest)}: its bytes changed"
        if got[1] != size:
            return f"{rel} holds {got[1]} bytes, the ref says {size}"
        if digest in self.bad_inline:
            return self.bad_inline[digest]
        return None

    def quarantine_problem(self, q: dict[str, Any]) -> str | None:
        rel = q["file"]
        if QUARANTINE_RE.match(rel) is None:
            return f"{rel!r} is not a file in quarantine/"
        try:
            got = self.bundle.hash(rel)
        except BundleError as exc:
            return str(exc)
        if got is None:
            return f"{rel} is missing"
        if got != (q["digest"], q["size"]):
            return (
                f"{rel} hashes to {short(got[0])} ({got[1]} bytes), recorded {short(q['digest'])} ({q['size']} bytes)"
            )
        return None

    # -- the states ----------------------------------------------------------------------------

    def state_claims(self, s: Stream, claimed: Any) -> None:
        t = s.task
        mine = self.states[t]
        if type(claimed) is not dict:
            self.claim(f"{t}: states.json holds its work state").fail("no entry in states.json")
            return
        version = claimed.get("version")
        if version != WORKSTATE_VERSION:
            self.claim(f"{t}: states.json uses the work-state table {WORKSTATE_VERSION}").fail(
                f"it says {version!r}; this verifier knows {WORKSTATE_VERSION} only"
            )
        their_calls: dict[str, Any] = claimed["calls"] if type(claimed.get("calls")) is dict else {}
        for cid in sorted(set(their_calls) - set(mine["calls"])):
            self.claim(f"{t} {cid}: states.json claims a call the events hold").fail("no call.requested names it")
        for cid, st in mine["calls"].items():
            risk = "a duplicate effect risk" if st["duplicate_effect_risk"] else "no duplicate risk"
            c = self.claim(
                f"{t} {cid} (key {st['key']!r}): {st['stage']} -> {st['next_operation']}; provider effect "
                f"{st['provider_effect']}, {risk}; as states.json says"
            )
            theirs = their_calls.get(cid)
            if type(theirs) is not dict:
                c.fail("states.json has no entry for this call")
                continue
            for field, value in st.items():
                if theirs.get(field) != value:
                    c.fail(f"states.json says {field} {theirs.get(field)!r}; the events say {value!r}")
        their_comps: dict[str, Any] = claimed["compilations"] if type(claimed.get("compilations")) is dict else {}
        for cid in sorted(set(their_comps) - set(mine["compilations"])):
            self.claim(f"{t} compilation {cid}: states.json claims a compilation the events hold").fail(
                "no context.compilation_requested names it"
            )
        for cid, st in mine["compilations"].items():
            missing = f"; missing {', '.join(st['missing'])}" if st["missing"] else ""
            c = self.claim(
                f"{t} compilation {cid}: {st['stage']} -> {st['next_operation']}{missing}; as states.json says"
            )
            theirs = their_comps.get(cid)
            if type(theirs) is not dict:
                c.fail("states.json has no entry for this compilation")
                continue
            for field, value in st.items():
                if theirs.get(field) != value:
                    c.fail(f"states.json says {field} {theirs.get(field)!r}; the events say {value!r}")
        c = self.claim(
            f"{t}: next operation {mine['next_operation']!r} (unresolved: "
            f"{', '.join(mine['unresolved']) or 'none'}; {mine['events']} events); as states.json says"
        )
        for field in ("next_operation", "unresolved", "accepted", "events", "last_seq"):
            if claimed.get(field) != mine[field]:
                c.fail(f"states.json says {field} {claimed.get(field)!r}; the events say {mine[field]!r}")

    # -- provider receipts -----------------------------------------------------------------------

    def check_receipts(self) -> None:
        started: dict[str, int] = {}  # request hash -> attempts started for calls with that manifest
        for s in self.streams.values():
            for call, request_hash in s.manifests.items():
                started[request_hash] = started.get(request_hash, 0) + s.started.get(call, 0)
        logs = sorted(rel for rel, _ in self.bundle.walk() if rel.startswith("receipts/"))
        for rel in logs:
            c = self.claim(
                f"{rel}: every receipt is covered by an attempt.started of a call whose manifest has its "
                "request hash (no effect without recorded intent)"
            )
            if RECEIPTS_RE.match(rel) is None:
                c.fail("not a plain file name under receipts/")
                continue
            seen: dict[str, int] = {}
            n = 0
            try:
                for lineno, line in enumerate(self.bundle.lines(rel), start=1):
                    if not line.strip():
                        continue
                    try:
                        receipt = loads(line)
                    except ValueError as exc:
                        c.fail(f"line {lineno}: not JSON ({exc})")
                        continue
                    body = receipt.get("body_hash") if type(receipt) is dict else None
                    if type(body) is not str or not is_digest(body):
                        c.fail(f"line {lineno}: no body_hash digest")
                        continue
                    n += 1
                    seen[body] = seen.get(body, 0) + 1
                    if seen[body] > started.get(body, 0):
                        c.fail(
                            f"line {lineno}: receipt {seen[body]} of request {short(body)}, but the record has "
                            f"{started.get(body, 0)} attempt.started for it: an effect no recorded attempt covers"
                        )
            except BundleError as exc:
                c.fail(str(exc))
            c.text = c.text.replace("every receipt", f"each of its {n} receipt(s)", 1)


# -- a bundle as a tar ---------------------------------------------------------------------------

TAR_ROOT = "intentlog-bundle"


def open_tar(path: str) -> tarfile.TarFile:
    import tarfile

    try:
        return tarfile.open(path, "r:")
    except (OSError, tarfile.TarError) as exc:
        raise BundleError(f"{path} is not a readable tar ({exc})") from exc


def extract_tar(path: str, dest: str) -> str:
    """Extract the bundle tar ``path`` under ``dest``; return the bundle folder. BundleError refuses the tar."""
    seen: set[str] = set()
    with open_tar(path) as tf:
        for m in tf:
            name = m.name.rstrip("/")
            parts = name.split("/")
            if (
                m.name.startswith("/")
                or "\\" in name
                or "\x00" in name
                or parts[0] != TAR_ROOT
                or any(p in ("", ".", "..") for p in parts)
            ):
                raise BundleError(f"member {m.name!r} is not a plain path inside {TAR_ROOT}/")
            if name in seen:
                raise BundleError(f"member {m.name!r} appears twice")
            seen.add(name)
            target = os.path.join(dest, *parts)
            if m.isdir():
                os.makedirs(target, exist_ok=True)
            elif m.isreg() and len(parts) > 1:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                src = tf.extractfile(m)
                if src is None:
                    raise BundleError(f"member {m.name!r} cannot be read")
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
                with os.fdopen(fd, "wb") as out, src:
                    while True:
                        chunk = src.read(CHUNK)
                        if not chunk:
                            break
                        out.write(chunk)
            else:
                raise BundleError(f"member {m.name!r} is a link or a special file; a bundle holds only files")
    inner = os.path.join(dest, TAR_ROOT)
    if not os.path.isdir(inner):
        raise BundleError(f"the tar holds no {TAR_ROOT}/ folder")
    return inner


# -- output ------------------------------------------------------------------------------------


def render(v: Verifier, out: Any) -> None:
    width = len(str(len(v.claims)))
    for i, c in enumerate(v.claims, start=1):
        out.write(f"{i:>{width}}. [{c.status}] {printable(c.text)}\n")
        for d in c.details[:MAX_DETAILS]:
            out.write(f"{' ' * (width + 2)}- {printable(d)}\n")
        if len(c.details) > MAX_DETAILS:
            out.write(f"{' ' * (width + 2)}- ... and {len(c.details) - MAX_DETAILS} more\n")
    passed = sum(c.status == "PASS" for c in v.claims)
    failed = sum(c.status == "FAIL" for c in v.claims)
    skipped = sum(c.status == "SKIP" for c in v.claims)
    verdict = "PASS: every claim holds" if not failed else "FAIL: the bundle does not prove what it claims"
    out.write(f"{len(v.claims)} claims: {passed} passed, {failed} failed, {skipped} skipped. {verdict}\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="verify_bundle.py",
        description="Check an intentlog evidence bundle independently: chains, kinds, the identity graph, every "
        "byte, the re-derived work states and the provider receipts. Exit 0 only when every claim passes.",
    )
    p.add_argument(
        "bundle", nargs="?", default=".", help="the bundle folder or its tar (default: the current folder)"
    )
    p.add_argument("--json", action="store_true", help="print the claims and the re-derived states as JSON")
    p.add_argument("--no-inventory", action="store_true", help="skip the hashes.json check (meaning alone)")
    a = p.parse_args(argv)
    if os.path.isfile(a.bundle):
        import tempfile

        with tempfile.TemporaryDirectory(prefix="verify-bundle-") as tmp:
            try:
                folder = extract_tar(a.bundle, tmp)
            except (BundleError, OSError) as exc:
                sys.stderr.write(f"verify_bundle.py: {printable(a.bundle)}: refused, not checked: {exc}\n")
                return 1
            return report(a, folder)
    if not os.path.isdir(a.bundle):
        sys.stderr.write(f"verify_bundle.py: {a.bundle} is neither a folder nor a tar\n")
        return 2
    return report(a, a.bundle)


def report(a: argparse.Namespace, folder: str) -> int:
    """Run every claim over the bundle folder and print them as ``a`` asks; the exit status."""
    v = Verifier(folder, inventory=not a.no_inventory)
    v.run()
    ok = not any(c.status == "FAIL" for c in v.claims)
    if a.json:
        doc = {
            "verifier": VERIFIER,
            "ok": ok,
            "claims": [
                {"n": i, "status": c.status, "claim": c.text, "details": c.details}
                for i, c in enumerate(v.claims, start=1)
            ],
            "states": v.states,
        }
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    else:
        render(v, sys.stdout)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
