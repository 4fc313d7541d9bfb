"""Plain-text tables for the command line and the demo (one place, one layout)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_table"]


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the header is the first line."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(cells, widths, strict=True)).rstrip()

    return [line(header), *(line(r) for r in rows)]
