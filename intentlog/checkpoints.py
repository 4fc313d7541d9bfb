"""Checkpoints: a named phase of a task with the evidence that was accepted for it.

``task.checkpoint(phase, evidence=[...], outputs={label: ...}, partial=..., status=...,
revision=..., changed_files=..., git=..., note=...)`` appends ``task.checkpoint {phase,
evidence: [refs], status, revision, changed_files, note, by, partial?, turn?, call?}``; it
is durable (fdatasynced) when it returns, and every evidence artifact is durable before it.
A labelled output is an evidence ref carrying its ``label``; a partial checkpoint
(``partial=True``, status ``partial``) says its outputs are what an unfinished phase has
produced so far. ``git=`` captures the work tree's revision and changed files
(:func:`git_changes`) instead of taking them from the caller. A later process continues from
:func:`latest_checkpoint`: the newest checkpoint whose evidence all verifies -- every
artifact present and hashing to its digest. A checkpoint whose evidence does not verify
is skipped, and the one returned says which were skipped and why.

A checkpoint accepting a session turn names it (``turn``, ``call``): that is how a turn
is linked to "the checkpoint that accepted it" (:mod:`intentlog.sessions`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

from ._internal.digest import is_digest
from ._internal.gitrev import git_revision
from .artifacts import Ref, inline_bytes
from .artifacts.inline import ref_bytes
from .errors import ArtifactError, ArtifactMissing, IntentlogError, UsageError
from .eventlog.redaction import scrub_note
from .projections.operator import CheckpointRecord, EvidenceCheck, checkpoint_record, counted_checkpoint
from .refs import INLINE, walk

if TYPE_CHECKING:
    from .eventlog import Event
    from .stream import TaskStream

__all__ = [
    "PARTIAL", "Checkpoint", "CheckpointDiff", "Evidence", "GitChanges", "checkpoint_diff", "checkpoints",
    "evidence_check", "git_changes", "git_revision", "latest_checkpoint", "record_checkpoint",
]  # fmt: skip

#: What evidence may be given as: bytes (stored now), a :class:`Ref` or ref mapping of
#: stored bytes, or a digest string of stored bytes.
Evidence = bytes | Ref | Mapping[str, Any] | str

_INLINE_KEYS = ("inline", "inline_b64")

#: The status of a checkpoint whose outputs are partial (``partial=True``): the phase is not finished.
PARTIAL = "partial"


@final
@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A recorded checkpoint, with what checking its evidence found.

    ``problems`` lists why its evidence does not verify (empty: verified, or not checked
    when ``checked`` is False). ``skipped``, on the checkpoint :func:`latest_checkpoint`
    returns, names the newer checkpoints passed over: ``(seq, phase, why)``.
    """

    record: CheckpointRecord
    checked: bool = False
    problems: tuple[str, ...] = ()
    skipped: tuple[tuple[int, str, str], ...] = ()

    @property
    def verified(self) -> bool:
        return self.checked and not self.problems

    # the record's fields, for convenience
    @property
    def seq(self) -> int:
        return self.record.seq

    @property
    def ts(self) -> str:
        return self.record.ts

    @property
    def phase(self) -> str:
        return self.record.phase

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def evidence(self) -> tuple[Mapping[str, Any], ...]:
        return self.record.evidence

    @property
    def revision(self) -> str | None:
        return self.record.revision

    @property
    def changed_files(self) -> tuple[str, ...]:
        return self.record.changed_files

    @property
    def note(self) -> str | None:
        return self.record.note

    @property
    def partial(self) -> bool:
        return self.record.partial

    @property
    def outputs(self) -> Mapping[str, Mapping[str, Any]]:
        """The labelled outputs: each label and the ref recorded under it, in the order given."""
        return self.record.outputs

    @property
    def turn(self) -> str | None:
        return self.record.turn

    @property
    def call(self) -> str | None:
        return self.record.call


def _opt_text(value: object, label: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise UsageError(f"checkpoint {label} must be a string or None, not {type(value).__name__}")
    return value


def _evidence_ref(task: TaskStream, item: object, i: int) -> dict[str, Any]:
    """One evidence item as the ref the checkpoint records; refuses what is not stored."""
    from .effects.records import store_bytes

    if isinstance(item, (bytes, bytearray, memoryview)):
        return store_bytes(task, bytes(item))
    if isinstance(item, Ref):
        ref: dict[str, Any] = dict(item.to_json())
    elif isinstance(item, str):
        if not is_digest(item):
            raise UsageError(f"evidence {i}: {item!r} is not a digest ('blake3:' and 64 lowercase hex digits)")
        return {"digest": item, "size": task.store.size_of(item)}
    elif isinstance(item, Mapping):
        try:
            base = Ref.from_json(item)
        except ArtifactError as exc:
            raise UsageError(f"evidence {i}: not an artifact ref ({exc})") from exc
        ref = dict(base.to_json())
        if any(k in item for k in _INLINE_KEYS):  # bytes carried inline: checked, and kept with the checkpoint
            inline_bytes(item)
            ref.update({k: item[k] for k in _INLINE_KEYS if k in item})
            return ref
    else:
        raise UsageError(
            f"evidence {i}: give bytes, a Ref, a ref mapping or a digest string, not {type(item).__name__}"
        )
    if not task.store.exists(ref["digest"]):
        raise ArtifactMissing(ref["digest"], f"evidence {i} of a checkpoint")
    return ref


def record_checkpoint(
    task: TaskStream,
    phase: str,
    *,
    evidence: Iterable[Evidence] = (),
    outputs: Mapping[str, Evidence] | None = None,
    partial: bool = False,
    status: str | None = None,
    revision: str | None = None,
    changed_files: Sequence[str] = (),
    git: bool | str | os.PathLike[str] = False,
    note: str | None = None,
    by: str | None = None,
    turn: str | None = None,
    call: str | None = None,
    _refs: Sequence[Mapping[str, Any]] | None = None,
) -> Event:
    """Append ``task.checkpoint``; durable on return, its evidence bytes durable before it.

    ``evidence``: bytes (stored now: inline in the event when small, else a blob), a
    :class:`~intentlog.Ref`, a ref mapping (a ``CallState.response``, say) or a digest
    string naming bytes already stored -- anything not stored raises
    :class:`~intentlog.errors.ArtifactMissing` and writes nothing. ``status`` is free
    text; ``failed`` and ``rejected`` mean a verifier refused the work (the task pauses for
    review). ``revision`` (a git commit, say: :func:`git_revision` reads the one HEAD names
    from ``.git``, without running git) and ``changed_files`` (paths) describe the
    workspace at the checkpoint; record the files themselves as evidence to keep their
    bytes. ``turn`` and ``call`` name the session turn (or call) this checkpoint accepts.

    ``outputs`` (``{label: bytes, Ref, ref mapping or digest}``) records labelled outputs:
    each is evidence like the rest, its ref carrying ``label`` (a non-empty string).
    ``partial=True`` says those outputs are partial -- what a phase not yet finished has
    produced -- and makes the status ``partial`` unless another is given (default:
    ``accepted``). ``git=True`` (the current folder) or ``git=FOLDER`` captures
    ``revision`` and ``changed_files`` from that git work tree (:func:`git_changes`; a
    folder outside one, or git missing, raises :class:`~intentlog.errors.UsageError`);
    giving ``revision`` or ``changed_files`` as well is refused. Everything is checked
    (and git read) before the first byte is stored.
    """
    if not isinstance(phase, str) or not phase:
        raise UsageError(f"a checkpoint needs a phase name (a non-empty string), not {phase!r}")
    if type(partial) is not bool:
        raise UsageError(f"partial must be True or False, not {partial!r}")
    if status is None:
        status = PARTIAL if partial else "accepted"
    if not isinstance(status, str) or not status:
        raise UsageError(f"a checkpoint status must be a non-empty string, not {status!r}")
    if isinstance(changed_files, str) or not all(isinstance(f, str) for f in changed_files):
        raise UsageError("changed_files must be a list of paths (strings)")
    if isinstance(evidence, (str, bytes, Mapping)):
        raise UsageError("evidence must be a list of items (bytes, refs or digests), not a single one")
    labelled = _labelled(outputs)
    if git is not False:
        if revision is not None or changed_files:
            raise UsageError("give revision and changed_files, or git= to capture them, not both")
        captured = git_changes(Path.cwd() if git is True else git)
        revision, changed_files = captured.revision, captured.changed_files
    data: dict[str, Any] = {
        "phase": phase,
        "status": status,
        # texts are scrubbed as every operator text is: a remote URL or a note can quote a credential
        "revision": scrub_note(_opt_text(revision, "revision")),
        "changed_files": [scrub_note(f) for f in changed_files],
        "note": scrub_note(_opt_text(note, "note")),
        "by": _opt_text(by, "by"),
    }
    if turn is not None:
        data["turn"] = _opt_text(turn, "turn")
    if call is not None:
        data["call"] = _opt_text(call, "call")
    if partial:
        data["partial"] = True
    if _refs is not None:  # refs the caller knows are in this stream (a session's observed response)
        data["evidence"] = [dict(r) for r in _refs]
    else:
        data["evidence"] = [_evidence_ref(task, e, i) for i, e in enumerate(evidence)]
    n = len(data["evidence"])
    data["evidence"] += [
        _evidence_ref(task, item, n + i) | {"label": label} for i, (label, item) in enumerate(labelled)
    ]
    return task.append("task.checkpoint", data)


def _labelled(outputs: object) -> list[tuple[str, Evidence]]:
    """``outputs`` as ``(label, item)`` pairs, checked: a mapping of non-empty string labels."""
    if outputs is None:
        return []
    if not isinstance(outputs, Mapping) or "digest" in outputs:
        raise UsageError("outputs must map labels to items ({'draft.md': b'...'}), not " + type(outputs).__name__)
    pairs = list(outputs.items())
    for label, _ in pairs:
        if not isinstance(label, str) or not label:
            raise UsageError(f"an output's label must be a non-empty string, not {label!r}")
    return pairs


@final
@dataclass(frozen=True, slots=True)
class GitChanges:
    """What :func:`git_changes` read from a git work tree: HEAD's commit and the changed paths."""

    folder: str
    revision: str | None  # None: a branch with no commit yet
    changed_files: tuple[str, ...]  # relative to the repository's top, sorted: changed, staged or untracked


def git_changes(folder: str | os.PathLike[str]) -> GitChanges:
    """The revision HEAD names (:func:`git_revision`) and the files changed since it, in ``folder``'s work tree.

    The changed files are what ``git status --porcelain -z --untracked-files=all`` lists
    (modified, staged, deleted, renamed -- both names -- and untracked, not ignored), as
    paths from the top of the repository, sorted. Runs git (read-only: ``--no-optional-locks``);
    raises :class:`~intentlog.errors.UsageError` when ``folder`` is not in a git work tree
    or git cannot be run.
    """
    where = os.fspath(folder)
    argv = ["git", "--no-optional-locks", "-C", where, "status", "--porcelain=v1", "-z", "--untracked-files=all"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"cannot run git to capture the changed files of {where}: {exc}") from exc
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise UsageError(
            f"cannot capture the git revision of {where}: {said[0] if said else 'git status failed'}; "
            "check that it is inside a git work tree, or pass revision= and changed_files= yourself"
        )
    return GitChanges(where, git_revision(where), _porcelain_paths(done.stdout))


def _porcelain_paths(out: bytes) -> tuple[str, ...]:
    """The paths of ``git status --porcelain=v1 -z``: ``XY PATH`` entries, a rename's source after it."""
    paths: set[str] = set()
    fields = out.split(b"\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.add(entry[3:].decode("utf-8", "backslashreplace"))
        if entry[:1] in (b"R", b"C") or entry[1:2] in (b"R", b"C"):  # a rename or copy: its source follows
            if i < len(fields) and fields[i]:
                paths.add(fields[i].decode("utf-8", "backslashreplace"))
            i += 1
    return tuple(sorted(paths))


def _inline_index(task: TaskStream, wanted: set[str]) -> dict[str, Mapping[str, Any]]:
    """For each wanted digest, a ref carrying its bytes inline somewhere in this task's stream."""
    found: dict[str, Mapping[str, Any]] = {}
    if not wanted:
        return found
    for ev in task.events():
        for digest, ref in walk(ev.data, INLINE):
            if ref is not None and digest in wanted and digest not in found:
                found[digest] = ref
        if len(found) == len(wanted):
            break
    return found


def _check(task: TaskStream, ref: Mapping[str, Any], index: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why ``ref``'s bytes do not verify, or None when they are present and hash to its digest."""
    digest, size = ref.get("digest"), ref.get("size")
    if not is_digest(digest) or type(size) is not int:
        return f"evidence {ref!r} is not an artifact ref"
    try:
        data = ref_bytes(ref, task.store, inline_index=index)
    except IntentlogError as exc:
        return str(exc)
    if len(data) != size:
        return f"{digest}: the ref says {size} bytes, the stored bytes are {len(data)}"
    return None


def _wanted(records: Iterable[CheckpointRecord]) -> set[str]:
    """The digests of evidence not carried inline in its own ref (looked up in the stream when not stored)."""
    return {
        str(e.get("digest"))
        for r in records
        for e in r.evidence
        if not any(k in e for k in _INLINE_KEYS) and is_digest(e.get("digest"))
    }


def _problems(task: TaskStream, r: CheckpointRecord, index: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    return tuple(p for p in (_check(task, e, index) for e in r.evidence) if p is not None)


def evidence_check(task: TaskStream) -> EvidenceCheck:
    """Why one checkpoint's evidence does not verify against ``task``'s store (empty: it does).

    The check :func:`latest_checkpoint` and :meth:`intentlog.Task.status` both hand to
    :func:`~intentlog.projections.operator.counted_checkpoint`; the stream is read for
    inline copies only when a checkpoint names evidence not inline in its own ref.
    """

    def check(r: CheckpointRecord) -> tuple[str, ...]:
        return _problems(task, r, _inline_index(task, _wanted((r,))))

    return check


def checkpoints(task: TaskStream, *, verify: bool = True) -> list[Checkpoint]:
    """Every checkpoint of the task, oldest first; with ``verify``, each one's evidence checked. Takes no lock."""
    records = [checkpoint_record(ev) for ev in task.events() if ev.kind == "task.checkpoint"]
    if not verify:
        return [Checkpoint(r) for r in records]
    index = _inline_index(task, _wanted(records))
    return [Checkpoint(r, checked=True, problems=_problems(task, r, index)) for r in records]


def latest_checkpoint(task: TaskStream, *, verified: bool = True, phase: str | None = None) -> Checkpoint | None:
    """The newest checkpoint (of ``phase``, when given) whose evidence all verifies; None if there is none.

    With ``verified=False``, the newest checkpoint whatever its evidence. The checkpoint
    returned lists in ``skipped`` the newer ones passed over and why, so a script can say
    it continues from an older phase because a newer one's evidence is gone or corrupt.
    Which checkpoint counts is :func:`~intentlog.projections.operator.counted_checkpoint`'s
    rule, the one :meth:`intentlog.Task.status` names the phase by.
    """
    records = [checkpoint_record(ev) for ev in task.events() if ev.kind == "task.checkpoint"]
    records = [r for r in records if phase is None or r.phase == phase]
    check = evidence_check(task) if verified else None
    found, skipped = counted_checkpoint(records, check)
    if found is None:
        return None
    return Checkpoint(found, checked=verified, skipped=skipped)


@final
@dataclass(frozen=True, slots=True)
class CheckpointDiff:
    """What changed from checkpoint ``a`` to checkpoint ``b`` (:func:`checkpoint_diff`).

    Each pair is ``(a's, b's)``; evidence is compared by digest (bytes with the same
    digest are the same bytes), changed files by path, each tuple in ``b``'s order then
    ``a``'s. Read from the records alone: nothing is fetched or checked.
    """

    seqs: tuple[int, int]
    phase: tuple[str, str]
    status: tuple[str, str]
    revision: tuple[str | None, str | None]
    evidence_added: tuple[str, ...]
    evidence_removed: tuple[str, ...]
    evidence_kept: tuple[str, ...]
    files_added: tuple[str, ...]
    files_removed: tuple[str, ...]

    @property
    def same(self) -> bool:
        """True when phase, status, revision, evidence and changed files are all the same."""
        return (
            self.phase[0] == self.phase[1] and self.status[0] == self.status[1]
            and self.revision[0] == self.revision[1] and not self.evidence_added and not self.evidence_removed
            and not self.files_added and not self.files_removed
        )  # fmt: skip

    def lines(self) -> list[str]:
        """The diff as text: a heading, the fields that changed, then ``+``/``-`` evidence and files."""
        out = [f"seq {self.seqs[0]} {self.phase[0]} -> seq {self.seqs[1]} {self.phase[1]}"]
        for name, (x, y) in (("status", self.status), ("revision", self.revision)):
            if x != y:
                out.append(f"{name}: {x or '-'} -> {y or '-'}")
        out += [f"+ evidence {d}" for d in self.evidence_added] + [f"- evidence {d}" for d in self.evidence_removed]
        out += [f"+ file {f}" for f in self.files_added] + [f"- file {f}" for f in self.files_removed]
        return out


def _digests(c: Checkpoint) -> list[str]:
    seen: dict[str, None] = {}
    for e in c.evidence:
        d = e.get("digest")
        if isinstance(d, str):
            seen.setdefault(d, None)
    return list(seen)


def checkpoint_diff(a: Checkpoint, b: Checkpoint) -> CheckpointDiff:
    """What changed from checkpoint ``a`` to ``b`` (two of ``task.checkpoints()``, of one task or two)."""
    if not isinstance(a, Checkpoint) or not isinstance(b, Checkpoint):
        raise TypeError(f"checkpoint_diff compares two checkpoints, not {type(a).__name__} and {type(b).__name__}")
    ea, eb = _digests(a), _digests(b)
    fa, fb = list(dict.fromkeys(a.changed_files)), list(dict.fromkeys(b.changed_files))
    return CheckpointDiff(
        seqs=(a.seq, b.seq),
        phase=(a.phase, b.phase),
        status=(a.status, b.status),
        revision=(a.revision, b.revision),
        evidence_added=tuple(d for d in eb if d not in ea),
        evidence_removed=tuple(d for d in ea if d not in eb),
        evidence_kept=tuple(d for d in eb if d in ea),
        files_added=tuple(f for f in fb if f not in fa),
        files_removed=tuple(f for f in fa if f not in fb),
    )
