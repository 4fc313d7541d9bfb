"""One self-contained HTML report of a ledger (or an exported bundle): ``intentlog report``.

``intentlog.report.render(ledger, tasks=None)`` returns the page's bytes: an index of the
tasks with counts and filters, the verify result for the folder and for each task, and,
per task, a timeline of its calls and attempts coloured by stage, unknown effects and
other unresolved actions with the command that resolves each, approvals (who decided
what on which hash), checkpoints and phases, sessions as conversations, and artifacts
with digest, size and small payloads shown (escaped) in place. No network, no external
file, no clock: the same folder gives the same bytes. See docs/report.md.
"""

from __future__ import annotations

from .backlog import ITEM_FIELDS, check_backlog
from .model import MAX_EVENTS, PAYLOAD_MAX
from .render import DEFAULT_DETAIL, EARLIER_REPORT_FORMATS, REPORT_FORMAT, ReportResult, render, render_report

__all__ = [
    "DEFAULT_DETAIL",
    "ITEM_FIELDS",
    "MAX_EVENTS",
    "PAYLOAD_MAX",
    "EARLIER_REPORT_FORMATS",
    "REPORT_FORMAT",
    "REPORT_FILE",
    "ReportResult",
    "check_backlog",
    "render",
    "render_report",
]

#: The report's file name inside an exported bundle, beside README.md.
REPORT_FILE = "report.html"
