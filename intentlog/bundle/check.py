"""The library's own check of a bundle (a folder or its tar): verify plus what only a bundle has."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import blake3
import orjson

from .. import __version__
from .._internal.args import check_path
from .._internal.digest import is_digest
from ..artifacts.inline import inline_bytes
from ..checker.report import ERROR, INFO, Problem, VerifyReport
from ..checker.verify import verify_path
from ..errors import (
    IntentlogError,
    LedgerError,
    UsageError,
)
from ..eventlog.listing import task_ids
from ..eventlog.reader import StreamScan
from ..heads.codec import HEADS_FILE, StreamHead, decode_heads
from ..projections.workstate import WorkState, work_state
from ..report import EARLIER_REPORT_FORMATS, REPORT_FILE
from .files import (
    CHECKED_CALL_FIELDS,
    CHECKED_COMPILATION_FIELDS,
    CHECKED_TASK_FIELDS,
    HASHES_FILE,
    HASHES_FORMAT,
    README_FILE,
    RECEIPTS_DIR,
    STATES_FILE,
    STATES_FORMAT,
    TAR_ROOT,
    VERIFIER_FILE,
    Progress,
    file_hashes,
    verifier_source,
)
from .page import NOT_AT_EXPORT, report_page
from .readme import readme_text
from .receipts import BODY_FIELD, KEY_FIELD, body_digests, call_keys, chosen, describe, receipt_identifiers, uncovered
from .untar import extract_tar

# -- the library's check of a bundle ----------------------------------------------------------


def check_bundle(
    bundle: str | os.PathLike[str], *, inventory: bool = True, progress: Progress | None = None
) -> VerifyReport:
    """The library's check of an exported bundle; changes nothing.

    :func:`~intentlog.checker.verify_path` over the bundle as a ledger (with no
    workspace: recorded files are checked as the objects the bundle carries), plus:
    ``heads.json`` exists and every stream ends exactly at its sealed head (``bundle``);
    ``tasks/``, ``heads.json`` and ``states.json`` name the same tasks and ``states.json``
    equals this library's projection of each stream (``states``); every receipt in
    ``receipts/`` is covered by its own ``attempt.started`` of a call sent with the line's
    ``body_hash`` or ``idempotency_key`` (``receipts``, :mod:`intentlog.bundle.receipts`);
    every file matches ``hashes.json`` and none is unlisted
    (``inventory``), and ``README.md`` and ``report.html`` are byte for byte what this
    library renders of the bundle's record (``rendering``; both skipped when ``inventory``
    is false). Raises
    :class:`~intentlog.errors.NotALedger` when ``bundle`` is neither a folder nor a tar.

    ``bundle`` may also be the tar :func:`export_bundle` writes: it is extracted into a
    temporary folder (removed afterwards), refusing with
    :class:`~intentlog.errors.LedgerError` any member that is not a plain file or folder
    under ``intentlog-bundle/`` (absolute paths, ``..``, links, devices, duplicates, sparse
    files) or that ``hashes.json`` does not list at least its size, before anything of it
    is written (:mod:`intentlog.bundle.untar`).
    """
    root = check_path(bundle, "bundle")
    if root.is_file():
        return _check_tar(root, inventory=inventory, progress=progress)
    no_workspace = root / ".no-workspace-in-a-bundle"
    report = verify_path(root, workspace=no_workspace, progress=progress)
    problems: list[Problem] = []
    for p in report.problems:
        if p.code == "workspace":
            p = replace(
                p,
                message="a bundle carries the bytes of recorded workspace files as objects (checked above), not the "
                "workspace itself, so they were not compared with any current file",
            )
        problems.append(p)
    bundle_check = _BundleCheck(root)
    problems.extend(bundle_check.run(inventory))
    # report.html holds the check export made before the page and hashes.json existed: render it again from that
    at_export = replace(report, problems=_in_order([p for p in problems if p.code not in NOT_AT_EXPORT]))
    if inventory:
        problems.extend(bundle_check.renderings(at_export))
    return replace(report, problems=_in_order(problems))


def rendered(bundle: str | os.PathLike[str]) -> dict[str, bytes]:
    """What ``README.md`` and ``report.html`` must hold for the bundle folder's record, by relative path.

    The renderings :func:`check_bundle` compares with (export writes the same bytes): drawn
    from ``heads.json``, the projected states, the receipt logs' names and the bundle's
    files with their check. README.md is absent when ``heads.json`` does not name the
    streams in ``tasks/`` (then there is no record to render it from).
    """
    root = check_path(bundle, "bundle")
    report = check_bundle(root, inventory=False)
    at_export = replace(report, problems=_in_order([p for p in report.problems if p.code not in NOT_AT_EXPORT]))
    bc = _BundleCheck(root)
    bc.run(False)
    return bc.expected(at_export)


def _in_order(problems: list[Problem]) -> tuple[Problem, ...]:
    order = {ERROR: 0, "changed": 1, INFO: 2}
    return tuple(sorted(problems, key=lambda p: order.get(p.severity, 3)))


def _check_tar(path: Path, *, inventory: bool, progress: Progress | None) -> VerifyReport:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="intentlog-bundle-") as tmp:
        inner = extract_tar(path, Path(tmp))
        report = check_bundle(inner, inventory=inventory, progress=progress)
        shown = f"{path}:{TAR_ROOT}"
        problems = tuple(replace(p, message=p.message.replace(str(inner), shown)) for p in report.problems)
        return replace(report, root=str(path), problems=problems)


class _BundleCheck:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.problems: list[Problem] = []
        self.sealed: dict[str, StreamHead] | None = None
        self.projected: dict[str, WorkState] = {}
        self.unlike: set[str] = set()  # files the inventory found changed, unlisted or missing

    def add(self, code: str, message: str, *, severity: str = ERROR, **where: Any) -> None:
        self.problems.append(Problem(severity, code, message, **where))

    def run(self, check_inventory: bool) -> list[Problem]:
        tasks = task_ids(self.root)
        heads = self.heads()
        states = self.load(STATES_FILE, STATES_FORMAT)
        if heads is not None and sorted(heads) != tasks:
            self.add("bundle", f"heads.json seals {sorted(heads)} but tasks/ holds {tasks}", locator=HEADS_FILE)
        if states is not None and sorted(states) != tasks:
            self.add("states", f"states.json holds {sorted(states)} but tasks/ holds {tasks}", locator=STATES_FILE)
        projected = self.projected
        if heads is not None and sorted(heads) == tasks:
            self.sealed = heads
        for task in tasks:
            scan = StreamScan(self.root / "tasks" / f"{task}.jsonl")
            projected[task] = work_state(scan, task_id=task)
            h = heads.get(task) if heads is not None else None
            if h is not None and scan.problem is None and (scan.count != h.events or scan.head != h.head):
                self.add(
                    "bundle",
                    f"the stream has {scan.count} events ending at {scan.head}, but heads.json sealed "
                    f"{h.events} ending at {h.head}: a bundle's stream ends exactly at its sealed head",
                    task=task,
                )
            if states is not None and task in states:
                self.compare_states(task, states[task], projected[task])
        self.receipts(projected)
        if check_inventory:
            self.inventory()
        if (self.root / VERIFIER_FILE).is_file() and (self.root / VERIFIER_FILE).read_bytes() != verifier_source():
            self.add(
                "verifier",
                f"{VERIFIER_FILE} differs from the one intentlog {__version__} ships: read it before you run it",
                severity=INFO,
                locator=VERIFIER_FILE,
            )
        return self.problems

    def renderings(self, at_export: VerifyReport) -> list[Problem]:
        """README.md and report.html against what this library renders of the bundle's record (``rendering``).

        Both are deterministic renderings (no clock, no path): README.md of the sealed heads,
        the projected states and the receipt logs' names; report.html of the bundle's files
        with ``at_export``, the check as export made it. Part of the inventory: a file the
        inventory already found changed or absent is not reported twice; with heads.json
        unusable README.md is not rendered (reported above).
        """
        found: list[Problem] = []
        for rel, expected in self.expected(at_export).items():
            path = self.root / rel
            if rel not in self.unlike and path.is_file() and not path.is_symlink():
                self._compare(rel, expected, found)
        return found

    def expected(self, at_export: VerifyReport) -> dict[str, bytes]:
        """README.md (when heads.json names the streams) and report.html as this library renders them."""
        out: dict[str, bytes] = {}
        if self.sealed is not None:
            folder = self.root / RECEIPTS_DIR
            logs = sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
            out[README_FILE] = readme_text(self.sealed, self.projected, logs)
        out[REPORT_FILE] = report_page(self.root, at_export)
        return out

    def _compare(self, rel: str, expected: bytes, found: list[Problem]) -> None:
        path = self.root / rel
        with open(path, "rb") as f:  # never more than the rendering's size (and one byte) read
            got = f.read(len(expected) + 1)
        if got == expected:
            return
        earlier = _earlier_report_format(got) if rel == REPORT_FILE else None
        if earlier is not None:  # an older release's markup: not comparable, and said so (never silently passed)
            found.append(
                Problem(
                    INFO,
                    "rendering",
                    f"was rendered as {earlier} and intentlog {__version__} renders another format, so it was not "
                    "compared: do not act on what it says; read the verifiers' claims, or run 'intentlog report' "
                    "on the record again",
                    locator=rel,
                )
            )
            return
        mine, theirs = expected.splitlines(), got.splitlines()
        pairs = enumerate(zip(mine, theirs, strict=False), start=1)
        line = next((i for i, (a, b) in pairs if a != b), min(len(mine), len(theirs)) + 1)
        found.append(
            Problem(
                ERROR,
                "rendering",
                f"is not what intentlog {__version__} renders of this bundle's record and its check (first "
                f"difference at line {line}): it was edited after export, or the files it is drawn from were; do "
                "not act on what it says, read the verifiers' claims",
                locator=rel,
            )
        )

    def heads(self) -> dict[str, StreamHead] | None:
        path = self.root / HEADS_FILE
        try:
            return decode_heads(path.read_bytes(), where=str(path))
        except FileNotFoundError:
            self.add("bundle", "heads.json is missing: a bundle anchors every stream's head", locator=HEADS_FILE)
        except (OSError, LedgerError):
            pass  # verify_path reported it
        return None

    def load(self, rel: str, fmt: str) -> dict[str, Any] | None:
        try:
            doc = orjson.loads((self.root / rel).read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            self.add("states", f"{rel} cannot be read ({exc})", locator=rel)
            return None
        if type(doc) is not dict or doc.get("format") != fmt or type(doc.get("tasks")) is not dict:
            self.add("states", f"{rel} is not a {fmt} file with a 'tasks' object", locator=rel)
            return None
        tasks: dict[str, Any] = doc["tasks"]
        return tasks

    def compare_states(self, task: str, claimed: Any, ws: WorkState) -> None:
        mine = orjson.loads(orjson.dumps(ws.to_json()))
        if claimed == mine:
            return
        if type(claimed) is not dict:
            self.add("states", "states.json's entry is not an object", task=task, locator=STATES_FILE)
            return
        diffs = [
            f"{f}: states.json says {claimed.get(f)!r:.80}, the events say {mine[f]!r:.80}"
            for f in CHECKED_TASK_FIELDS
            if claimed.get(f) != mine[f]
        ]
        for group, fields in (("calls", CHECKED_CALL_FIELDS), ("compilations", CHECKED_COMPILATION_FIELDS)):
            theirs: dict[str, Any] = claimed[group] if type(claimed.get(group)) is dict else {}
            for cid in sorted(set(mine[group]) | set(theirs)):
                a, b = mine[group].get(cid), theirs.get(cid)
                if a is None:
                    diffs.append(f"{cid}: states.json holds it, but no event records it")
                elif type(b) is not dict:
                    diffs.append(f"{cid}: states.json has no entry for it")
                else:
                    diffs.extend(
                        f"{cid} {k}: states.json says {b.get(k)!r:.80}, the events say {a.get(k)!r:.80}"
                        for k in fields
                        if a.get(k) != b.get(k)
                    )
        if diffs:
            self.add(
                "states",
                "states.json does not match the work state projected from the stream: " + "; ".join(diffs[:10]),
                task=task,
                locator=STATES_FILE,
            )
            return
        self.add(
            "states_detail",
            "states.json differs from this library's projection only in explanatory fields that neither verifier "
            "checks (reasons, timestamps, inventories, anomalies): read them with care",
            severity=INFO,
            task=task,
            locator=STATES_FILE,
        )

    def request_bytes(self, ref: Mapping[str, Any] | None) -> bytes | None:
        """The recorded request's bytes (inline or in ``objects/``), or None when absent or not its digest."""
        if ref is None:
            return None
        try:
            data = inline_bytes(ref)
        except IntentlogError:
            return None
        digest = ref.get("digest")
        if data is None and is_digest(digest):
            hexd = str(digest).partition(":")[2]
            path = self.root / "objects" / hexd[:2] / hexd[2:]
            try:
                data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
            except OSError:
                data = None
        if data is None or "blake3:" + blake3.blake3(data).hexdigest() != digest:
            return None
        return data

    def dedup_of(self, task: str) -> dict[str, Any]:
        """call -> the manifest's provider-deduplication declaration, for the calls of ``task`` that have one."""
        out: dict[str, Any] = {}
        for ev in StreamScan(self.root / "tasks" / f"{task}.jsonl"):
            if ev.kind == "call.manifest" and type(ev.data) is dict and ev.data.get("dedup") is not None:
                out[str(ev.data.get("call"))] = ev.data["dedup"]
        return out

    def receipts(self, projected: Mapping[str, WorkState]) -> None:
        folder = self.root / RECEIPTS_DIR
        if not folder.is_dir():
            return
        capacity: list[int] = []
        known: dict[tuple[str, str], list[int]] = {}  # identifier -> calls sent with it that started an attempt
        for task, ws in projected.items():
            dedup = self.dedup_of(task)
            for c in ws.calls.values():
                if c.request_hash is None or c.attempts == 0:
                    continue
                request = self.request_bytes(c.request)
                bodies = body_digests(c.request_hash, request)
                keys = call_keys(c.key, request, dedup.get(c.call_id))
                for ident in [("body", x) for x in sorted(bodies)] + [("key", x) for x in sorted(keys)]:
                    known.setdefault(ident, []).append(len(capacity))
                capacity.append(c.attempts)
        for path in sorted(folder.iterdir()):
            rel = f"{RECEIPTS_DIR}/{path.name}"
            if path.is_symlink() or not path.is_file():
                self.add("receipts", f"{rel} is not a regular file", locator=rel)
                continue
            lines: list[tuple[int, tuple[str, str], int]] = []  # (line number, identifier, its n-th receipt)
            seen: dict[tuple[str, str], int] = {}
            for lineno, line in enumerate(path.read_bytes().splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    receipt = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    self.add("receipts", f"line {lineno} is not JSON ({exc})", locator=rel)
                    continue
                idents = receipt_identifiers(receipt)
                if not idents:
                    self.add(
                        "receipts",
                        f"line {lineno} has neither a {BODY_FIELD} digest (blake3:/sha256:) nor an {KEY_FIELD}",
                        locator=rel,
                    )
                    continue
                ident = chosen(known, idents)
                seen[ident] = seen.get(ident, 0) + 1
                lines.append((lineno, ident, seen[ident]))
            for i in uncovered([known.get(ident, []) for _, ident, _ in lines], capacity):
                lineno, ident, nth = lines[i]
                started = sum(capacity[c] for c in known.get(ident, []))
                self.add(
                    "receipts",
                    f"line {lineno}: receipt {nth} of {describe(ident)}, but the record has {started} "
                    "attempt.started of calls sent with it, each covering one receipt: the provider saw "
                    "an effect no recorded attempt covers",
                    locator=rel,
                    **({"digest": ident[1]} if ident[0] == "body" and ident[1].startswith("blake3:") else {}),
                )

    def inventory(self) -> None:
        path = self.root / HASHES_FILE
        try:
            doc = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            self.add("inventory", f"hashes.json cannot be read ({exc})", locator=HASHES_FILE)
            return
        if type(doc) is not dict or doc.get("format") != HASHES_FORMAT or type(doc.get("files")) is not dict:
            self.add("inventory", f"hashes.json is not a {HASHES_FORMAT} file", locator=HASHES_FILE)
            return
        listed: dict[str, Any] = doc["files"]
        try:
            present = file_hashes(self.root)
        except UsageError as exc:
            self.add("inventory", str(exc))
            return
        for rel in sorted(set(present) - set(listed)):
            self.add("inventory", "is in the bundle but not in hashes.json", locator=rel)
            self.unlike.add(rel)
        for rel, entry in sorted(listed.items()):
            got = present.get(rel)
            want = (entry.get("digest"), entry.get("size")) if type(entry) is dict else None
            if got != want:
                self.unlike.add(rel)
            if got is None:
                self.add("inventory", "is listed in hashes.json but missing", locator=rel)
            elif got != want:
                self.add(
                    "inventory", f"hashes to {got[0]} ({got[1]} bytes), but hashes.json lists {want!r}", locator=rel
                )


_GENERATOR = b'<meta name="generator" content="'


def _earlier_report_format(page: bytes) -> str | None:
    """The report format a page names in its generator tag, when it is one this library rendered before."""
    at = page.find(_GENERATOR, 0, 4096)
    if at < 0:
        return None
    start = at + len(_GENERATOR)
    end = page.find(b'"', start, start + 64)
    name = page[start:end].decode("ascii", "replace") if end > 0 else ""
    return name if name in EARLIER_REPORT_FORMATS else None
