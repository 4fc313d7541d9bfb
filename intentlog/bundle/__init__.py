"""Evidence bundles: a task's record, exported for an auditor who trusts neither the producer nor intentlog.

:func:`export_bundle` writes a folder (and, or, a deterministic tar) holding

* ``intentlog.json``, ``tasks/<id>.jsonl`` (each stream copied byte for byte) and
  ``objects/..`` (every blob the streams reference; small payloads stay inline), plus
  ``quarantine/..`` files that a ``stream.repaired`` names: the bundle is a valid ledger
  folder, so :func:`intentlog.checker.verify_path` reads it directly;
* ``heads.json``: the head of every exported stream (a truncated stream is visible);
* ``states.json``: the work state the library projects for each task;
* ``receipts/<name>``: provider receipt logs, when given;
* ``README.md`` for the auditor, ``verify_bundle.py`` (the standalone verifier, which
  imports only the standard library and ``blake3`` and shares no code with intentlog),
  ``.gitattributes`` (``-text``: git must never rewrite a hashed byte) and
  ``hashes.json``, the digest and size of every other file.

A bundle is deterministic: no clock is read and nothing about the export run (time,
user, host, path) is written, so exporting the same record twice gives byte-identical
files and bundles diff cleanly in git.

Export reads streams without a lock, as every reader does, and refuses rather than
exports partial evidence: a stream with a torn tail or damage in the middle
(:class:`~intentlog.errors.CorruptStream`), a stream that no longer holds the head the
ledger's ``heads.json`` sealed, a referenced blob that is missing
(:class:`~intentlog.errors.ArtifactMissing`) or corrupt
(:class:`~intentlog.errors.DigestMismatch`). It builds the bundle in a temporary folder
beside the target and renames it into place, so a crash leaves no half bundle under the
target's name; every file is fsynced before it gets its name.

:func:`check_bundle` is the library's own check of a bundle: the replay checker over it
as a ledger, plus what only a bundle has -- every stream ends at its sealed head,
``states.json`` equals the library's projection of the streams, every receipt is covered
by a recorded ``attempt.started``, and every file matches ``hashes.json``.
"""


from __future__ import annotations

from .check import check_bundle
from .export import ExportResult, export_bundle
from .files import (
    BUNDLE_FORMAT,
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
    encode_hashes,
    encode_states,
    file_hashes,
    verifier_source,
)

__all__ = [
    "BUNDLE_FORMAT",
    "CHECKED_CALL_FIELDS",
    "CHECKED_COMPILATION_FIELDS",
    "CHECKED_TASK_FIELDS",
    "HASHES_FILE",
    "HASHES_FORMAT",
    "README_FILE",
    "RECEIPTS_DIR",
    "STATES_FILE",
    "STATES_FORMAT",
    "TAR_ROOT",
    "VERIFIER_FILE",
    "ExportResult",
    "check_bundle",
    "encode_hashes",
    "encode_states",
    "export_bundle",
    "file_hashes",
    "verifier_source",
]
