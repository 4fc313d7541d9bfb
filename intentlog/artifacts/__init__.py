"""The content-addressed artifact store: bytes named by their BLAKE3 digest (DESIGN §3).

``eventlog`` and ``artifacts`` know nothing of calls: this package imports nothing from
projections, effects or the command line.
"""

from __future__ import annotations

from .inline import INLINE_MAX, inline_bytes, inline_ref
from .records import capture_locator
from .store import ArtifactStore, Ref

__all__ = ["INLINE_MAX", "ArtifactStore", "Ref", "capture_locator", "inline_bytes", "inline_ref"]
