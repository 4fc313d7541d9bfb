"""The replay checker (DESIGN §7): re-derive everything offline and compare it with the disk.

:func:`verify` reads a ledger through its :class:`~intentlog.checker.seams.LedgerReads` and
reports, without changing anything -- no write, no lock, no quarantine. The run is one,
whatever keeps the ledger: :func:`verify_path` reads a folder
(:class:`~intentlog.checker.folder.FolderReads`), :func:`verify_storage` the storage seams
(:class:`~intentlog.checker.seams.SeamReads`), :func:`verify_ledger` an open ledger
through its own reads:

* per stream: parse, ``seq`` and ``prev`` of every line (exact bytes, DESIGN §4 rule 6),
  torn tails, and a whole last line that does not chain (a suspect tail);
* per event: its shape and its place in the identity graph, both from the one registry
  in :mod:`intentlog.projections.schema`;
* every referenced artifact: present in ``objects/`` or inline in some event, and its
  bytes hash to its digest; files a repair moved to ``quarantine/``, likewise;
* workspace files recorded by ``artifact.recorded`` whose bytes changed since capture
  (severity ``changed``: the evidence is intact, the world moved on);
* ``heads.json`` from :func:`intentlog.heads.seal`, the only way to see a truncated tail
  (a hash chain cannot, DESIGN §4 rule 7);
* orphan blobs in ``objects/`` (``info``: harmless, garbage collection removes them).

Memory is bounded: streams are read line by line and files hashed in fixed-size chunks;
what grows is one entry per call, per referenced digest and per recorded locator, never
per byte. The checker imports no writing code: it reads heads.json and gc.jsonl through
their codecs (:mod:`intentlog.heads.codec`, :mod:`intentlog.eventlog.gclog`).

Layout: :mod:`.verify` (one run), :mod:`.streams` (lines, chain, seal, events),
:mod:`.artifacts` (bytes, quarantine, workspace, orphans), :mod:`.state` (what a run
accumulates, the ledger-level checks), :mod:`.seams` (what is read: :class:`LedgerReads`,
and its seam implementation), :mod:`.folder` (its folder implementation), :mod:`.walk`
(read-only file access), :mod:`.report` (:class:`Problem`, :class:`VerifyReport`).
"""

from __future__ import annotations

from ..eventlog.gclog import retired_by_gc
from ..heads.codec import HEADS_FILE, HEADS_FORMAT, StreamHead, decode_heads, encode_heads, read_heads_at
from .report import CHANGED, ERROR, INFO, VERIFY_VERSION, Problem, VerifyReport
from .verify import verify, verify_ledger, verify_path, verify_storage
from .walk import find_links

__all__ = [
    "CHANGED",
    "ERROR",
    "HEADS_FILE",
    "HEADS_FORMAT",
    "INFO",
    "VERIFY_VERSION",
    "Problem",
    "StreamHead",
    "VerifyReport",
    "decode_heads",
    "encode_heads",
    "find_links",
    "read_heads_at",
    "retired_by_gc",
    "verify",
    "verify_ledger",
    "verify_path",
    "verify_storage",
]
