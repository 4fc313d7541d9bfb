"""The byte checks: every referenced artifact, the quarantined files, workspace captures, orphans.

Runs after every stream was read (:mod:`.streams` collected what the events reference);
files are hashed in fixed-size chunks, never followed through a link.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from .._internal.regular import NotRegular
from ..artifacts.inline import inline_bytes
from ..errors import ArtifactError, CorruptStream
from ..projections.schema import is_ref
from .report import CHANGED, ERROR, INFO, abbr
from .state import CheckerState
from .walk import hash_file, object_rel, relative, through_link

__all__ = ["ArtifactChecks"]


class ArtifactChecks(CheckerState):
    """The checks of the bytes the streams referenced, once every stream was read."""

    # -- bytes -------------------------------------------------------------------------

    def check_artifacts(self, other_tasks: Sequence[str]) -> None:
        missing: list[str] = []
        total = len(self.needs)
        for i, (digest, need) in enumerate(self.needs.items(), start=1):
            at = {"task": need.task, "seq": need.seq, "line": need.line, "digest": digest}
            more = f" (and {need.refs - 1} more reference(s))" if need.refs > 1 else ""
            if digest in self.inline:
                if self.inline[digest] != need.size:
                    self.add(
                        ERROR, "ref", f"{need.label}: the ref to {digest} says {need.size} bytes, but the bytes "
                        f"carried inline elsewhere are {self.inline[digest]}", **at,
                    )
                self.tick("artifacts", i, total)
                continue
            rel = object_rel(digest)
            link = through_link(rel, self.links)
            if link is not None:
                self.add(ERROR, "link", f"{need.label}: {rel} lies behind the link {link}, so its bytes were not "
                         "read; restore the real object", locator=link, **at)
                self.tick("artifacts", i, total)
                continue
            try:
                actual, size = self.hash_object(digest, rel)
            except FileNotFoundError:
                missing.append(digest)
                continue
            except NotRegular as exc:
                self.add(ERROR, "artifact_corrupt", f"{need.label}: {rel} is {exc}, not an object; move it aside "
                         "and restore the bytes", **at)
                continue
            except OSError as exc:
                self.add(ERROR, "io", f"{need.label}: cannot read {rel}: {exc.strerror or exc}", **at)
                continue
            finally:
                self.tick("artifacts", i, total)
            self.bytes_hashed += size
            self.checked += 1
            if actual != digest:
                self.add(
                    ERROR,
                    "artifact_corrupt",
                    f"{need.label}: {rel} hashes to {actual} ({size} bytes), not {digest}{more}: the object is "
                    "corrupt; restore it from a copy (opening it for writing would quarantine it)",
                    **at,
                )
            elif size != need.size:
                self.add(
                    ERROR, "ref", f"{need.label}: the ref to {digest} says {need.size} bytes but the object holds "
                    f"{size}: the event was edited", **at,
                )
        if missing and other_tasks:
            self._inline_elsewhere(set(missing), other_tasks)
        for digest in missing:
            if digest in self.inline:
                continue
            need = self.needs[digest]
            more = f" (and {need.refs - 1} more reference(s))" if need.refs > 1 else ""
            if digest in self.bad_inline:
                task, line = self.bad_inline[digest]
                self.add(
                    ERROR, "artifact_corrupt", f"{need.label}: the only copy of {digest} rides inline at "
                    f"tasks/{task}.jsonl line {line}, where it is corrupt{more}; restore the stream from a copy or git",
                    task=need.task, seq=need.seq, line=need.line, digest=digest,
                )
                continue
            self.add(
                ERROR,
                "artifact_missing",
                f"{need.label}: {digest} ({need.size} bytes) is neither in objects/ nor inline in any event{more}; "
                "restore objects/ from a copy or git",
                task=need.task, seq=need.seq, line=need.line, digest=digest,
            )

    def _inline_elsewhere(self, wanted: set[str], tasks: Sequence[str]) -> None:
        """With a task filter, a blob may still ride inline in a stream not being checked: look there."""
        for task in tasks:
            if self.blocked(f"tasks/{task}.jsonl"):
                continue
            try:
                for _, raw in self.stream_lines(task):
                    if not wanted:
                        return
                    if b'"inline' not in raw:
                        continue
                    try:
                        obj = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        continue
                    stack = [obj]
                    while stack:
                        v = stack.pop()
                        if type(v) is dict:
                            d = v.get("digest")
                            if d in wanted and is_ref(v):
                                try:
                                    data = inline_bytes(v)
                                except ArtifactError:
                                    data = None
                                if data is not None:
                                    wanted.discard(d)
                                    self.inline[d] = len(data)
                                    self.bytes_hashed += len(data)
                                    self.checked += 1
                            stack.extend(v.values())
                        elif type(v) is list:
                            stack.extend(v)
            except (OSError, NotRegular, CorruptStream):
                continue

    def check_quarantined(self) -> None:
        for q in self.quarantined:
            at = {"task": q.task, "seq": q.seq, "line": q.line, "digest": q.digest, "locator": q.file}
            rel = relative(q.file) or ""
            if not rel.startswith("quarantine/"):
                self.add(ERROR, "shape", f"stream.repaired names {q.file!r}, which is not a file in quarantine/", **at)
                continue
            if self.blocked(rel):
                continue  # reported as a link
            try:
                actual, size = self.reads.hash_file(rel, self.buf)
            except FileNotFoundError:
                self.add(
                    ERROR, "artifact_missing", f"the repaired tail was moved to {rel}, which is gone: the evidence "
                    "of what the crash left is lost; restore quarantine/ from a copy or git", **at,
                )
                continue
            except (NotRegular, OSError) as exc:
                self.add(ERROR, "io", f"cannot read {rel}: {exc}", **at)
                continue
            self.bytes_hashed += size
            if actual != q.digest or size != q.size:
                self.add(
                    ERROR, "artifact_corrupt", f"{rel} hashes to {abbr(actual)} ({size} bytes) but stream.repaired "
                    f"recorded {q.digest} ({q.size} bytes); restore it from a copy or git", **at,
                )

    def check_unrecorded_quarantine(self) -> None:
        """Files in quarantine/ that no stream.repaired names: worth knowing, never a failure."""
        named = {relative(q.file) for q in self.quarantined}
        if self.blocked("quarantine"):
            return
        for name in self.reads.quarantine_names():
            rel = f"quarantine/{name}"
            if rel in named:
                continue
            if name.endswith(".corrupt"):
                why = "an object the store found corrupt and moved aside (its good bytes were put back or are missing)"
            else:
                why = (
                    "bytes moved aside by a repair whose stream.repaired was never written (a crash mid-repair), "
                    "or from a stream since deleted"
                )
            self.add(INFO, "unrecorded_quarantine", f"{rel}: {why}; keep it as evidence", locator=rel)

    def check_captures(self) -> None:
        if not self.captures:
            return
        ws = self.workspace
        try:
            ws_root = ws.resolve(strict=True) if ws is not None else None
        except (OSError, RuntimeError):
            ws_root = None
        if ws_root is None or not ws_root.is_dir():
            self.add(
                INFO, "workspace", f"the workspace {ws} is not a folder here, so {len(self.captures)} recorded "
                "file(s) were not compared with their capture; pass the workspace to compare them",
            )
            return
        total = len(self.captures)
        for i, (loc, c) in enumerate(self.captures.items(), start=1):
            self.tick("workspace", i, total)
            at = {"task": c.task, "seq": c.seq, "line": c.line, "digest": c.digest, "locator": loc}
            recorded = f"recorded as {abbr(c.digest)} ({c.size} bytes) at tasks/{c.task}.jsonl line {c.line}"
            try:
                target = (ws_root / loc).resolve(strict=False)
            except (OSError, RuntimeError) as exc:
                self.add(CHANGED, "changed_since_capture", f"cannot be resolved ({exc}); {recorded}", **at)
                continue
            if not target.is_relative_to(ws_root):
                self.add(CHANGED, "changed_since_capture", f"now leads outside the workspace through a link, so it "
                         f"was not read; {recorded}", **at)
                continue
            try:
                actual, size = hash_file(target, self.buf)
            except FileNotFoundError:
                self.add(CHANGED, "changed_since_capture", f"is gone; {recorded}. The stored bytes are intact: "
                         f"'intentlog show {c.digest}' prints them", **at)
                continue
            except (NotRegular, OSError) as exc:
                self.add(CHANGED, "changed_since_capture", f"cannot be read ({exc}); {recorded}", **at)
                continue
            self.bytes_hashed += size
            if actual != c.digest:
                self.add(
                    CHANGED, "changed_since_capture", f"changed since capture: it now hashes to {abbr(actual)} "
                    f"({size} bytes), {recorded}; record it again if the change is intended", **at,
                )

    def check_bare(self) -> None:
        for digest, (task, seq, line) in self.bare.items():
            if digest in self.needs or digest in self.inline:
                continue
            rel = object_rel(digest)
            if not self.blocked(rel) and not self.object_exists(digest, rel):
                self.add(
                    INFO, "bare_digest", f"the data names {digest}, which is not stored; a bare digest string is "
                    "only informational: refer to stored bytes with a {digest, size} ref to have them checked",
                    task=task, seq=seq, line=line, digest=digest,
                )

    def check_orphans(self) -> None:
        if self.blocked("objects"):
            return
        try:
            for digest, size in self.reads.stored_objects():
                if digest in self.needs or digest in self.inline or digest in self.bare:
                    continue
                if size < 0:  # not listed with its size: asked for the orphans only
                    size = self.reads.object_size(digest)
                self.add(
                    INFO, "orphan_blob", f"{size} bytes referenced by no event: harmless (an interrupted run leaves "
                    "them); garbage collection removes them after a grace period", digest=digest,
                )
        except OSError as exc:
            self.add(ERROR, "io", f"cannot list objects/: {exc.strerror or exc}; check the folder's permissions")
