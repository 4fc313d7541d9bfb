"""Plain text for the command line and the demo: one table layout, one escaping rule.

Every field a caller or a person wrote (a task id, a call key, an approval's question,
``by`` and ``note``, a failure reason) reaches a terminal through :func:`printable`: a
character a terminal could act on instead of showing — a control character (ESC, BEL,
CR, backspace, newline), a format character (a bidirectional override), a line or
paragraph separator, a surrogate or private-use code point — is shown as its Python
escape (``\\x1b``, ``\\u202e``), so a field can neither move the cursor, erase the
screen, set the window title, reorder what is shown nor start a line of its own.
:func:`terminal_text` is the last guard on whole lines: the same rule, keeping only the
line breaks, tabs and colour sequences the renderer itself put there.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Final

__all__ = ["format_table", "printable", "terminal_text"]

# what click.style writes: SGR sequences only (colour, bold, reset)
_SGR: Final = re.compile(r"\x1b\[[0-9;]*m")


def _shown(ch: str) -> str:
    if ch.isprintable() or unicodedata.category(ch) == "Zs":
        return ch
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every character a terminal could act on shown as its escape (see the module)."""
    if text.isprintable():
        return text
    return "".join(map(_shown, text))


def _line(line: str) -> str:
    if line.isprintable():
        return line
    out: list[str] = []
    at = 0
    for m in _SGR.finditer(line):
        out.append("\t".join(printable(part) for part in line[at : m.start()].split("\t")))
        out.append(m.group())
        at = m.end()
    out.append("\t".join(printable(part) for part in line[at:].split("\t")))
    return "".join(out)


def terminal_text(text: str) -> str:
    """A renderer's output made safe for a terminal: :func:`printable` but for line breaks, tabs and colour."""
    if text.isprintable():
        return text
    return "\n".join(_line(line) for line in text.split("\n"))


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the header is the first line."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(cells, widths, strict=True)).rstrip()

    return [line(header), *(line(r) for r in rows)]
