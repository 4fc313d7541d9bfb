"""Durable streams: format, append, read, repair, lock, canonical hashing.

This layer knows nothing of calls, attempts or artifacts; everything above it does.
"""

from .canonical import CANON_VERSION, Canonical, Redact, canonicalize, dumps, request_hash
from .format import FORMAT, TASK_CREATED, Event, check_task_id
from .reader import ScanProblem, StreamScan, iter_lines, scan
from .writer import StreamWriter

__all__ = [
    "CANON_VERSION",
    "FORMAT",
    "TASK_CREATED",
    "Canonical",
    "Event",
    "Redact",
    "ScanProblem",
    "StreamScan",
    "StreamWriter",
    "canonicalize",
    "check_task_id",
    "dumps",
    "iter_lines",
    "request_hash",
    "scan",
]
