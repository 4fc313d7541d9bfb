"""A bundle's ``report.html``: the one rendering of a bundle's record export writes and the check renders again."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ..checker.report import VerifyReport
from ..report import render

__all__ = ["NOT_AT_EXPORT", "report_page"]

_TITLE: Final = "intentlog evidence bundle"
_NOTE: Final = (
    "An evidence bundle's report, derived from the bundle's own files (hashes.json lists it; intentlog's check of "
    "the bundle renders it again and compares). Commands name the ledger the bundle was exported from."
)
#: Problem codes the check embedded in report.html cannot hold: export renders the page before hashes.json
#: exists (``inventory``), with the verifier it ships (``verifier``) and the states it projects
#: (``states_detail``), and before there is a page (``rendering``).
NOT_AT_EXPORT: Final = frozenset({"inventory", "verifier", "states_detail", "rendering"})


def report_page(bundle: Path, check: VerifyReport) -> bytes:
    """``report.html``: the page :func:`intentlog.report.render` draws of ``bundle`` with ``check`` in it.

    Deterministic: the same bundle files and the same check give the same bytes, wherever
    the bundle lies, so :func:`~intentlog.bundle.check_bundle` renders it again and compares.
    """
    # the bundle holds exactly the exported tasks: every one is in the index, the detail bounded as everywhere
    return render(bundle, verify=check, title=_TITLE, note=_NOTE)
