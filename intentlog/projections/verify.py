"""The replay checker's names at their former path; the checker reads the disk, so it is :mod:`intentlog.checker`.

Kept because code and docs import ``verify_path`` and ``verify_ledger`` from here; new
code imports :mod:`intentlog.checker`. Nothing is defined here.
"""

from __future__ import annotations

# re-exports only, from the concrete modules (so import walkers follow them)
from ..checker.report import CHANGED, ERROR, INFO, VERIFY_VERSION, Problem, VerifyReport
from ..checker.verify import verify_ledger, verify_path
from ..checker.walk import find_links
from ..eventlog.gclog import retired_by_gc
from ..heads.codec import HEADS_FILE, HEADS_FORMAT, StreamHead, decode_heads, encode_heads, read_heads_at

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
    "verify_ledger",
    "verify_path",
]
