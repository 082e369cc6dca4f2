"""What the read commands print for a person, without rich: lines wrapped to the terminal's
width, tables drawn as rich draws them (a heavy head, light body), colour on a terminal.

`status` is typed all morning and must answer at once; importing rich alone costs it 25 to
60 ms of its 100. Text here is plain: what goes in has been through `clean` (no control
sequences) and is never read as markup.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

# (No dataclasses: their import alone is 5 ms.) SGR codes of the styles loopd's read commands use.
_STYLES = {"bold": "1", "italic": "3", "red": "31", "yellow": "33", "bold red": "1;31"}


class Terminal:
    """Where the text goes: its width in columns, and whether it takes colour."""

    def __init__(self, width: int = 80, colour: bool = False) -> None:
        self.width, self.colour = width, colour

    @classmethod
    def of(cls, file: TextIO | None = None) -> Terminal:
        """As rich's Console sees `file` (stdout): $COLUMNS, else the terminal's size, else
        80; colour on a terminal unless $NO_COLOR is set or $TERM is dumb."""
        file = file or sys.stdout
        tty = _isatty(file)
        width = 80
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            width = int(columns)
        elif tty:
            try:
                width = os.get_terminal_size(file.fileno()).columns or 80
            except (OSError, ValueError):
                width = 80
        dumb = os.environ.get("TERM", "") == "dumb" or "NO_COLOR" in os.environ
        return cls(width=width, colour=tty and not dumb)

    def paint(self, text: str, style: str) -> str:
        """`text` in `style` (a key of _STYLES, or ""), when the terminal takes colour."""
        if not style or not self.colour or not text:
            return text
        return f"\x1b[{_STYLES[style]}m{text}\x1b[0m"

    def title(self, text: str, width: int) -> list[str]:
        """A table's title: centred over `width`, in italics, wrapped where it is wider."""
        lines = wrap(text, width) if text else []
        return [self.paint(line.center(width).rstrip(), "italic") for line in lines]

    def lines(self, text: str, style: str = "") -> list[str]:
        """`text` wrapped to the width, each line painted."""
        return [self.paint(line, style) for line in wrap(text, self.width)]


def _isatty(file: TextIO) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):
        return False


def wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` columns, broken between words; a word longer than
    a line is folded. Its own newlines are kept."""
    out: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            candidate = f"{line} {word}" if line else word
            if len(candidate) <= width:
                line = candidate
                continue
            if line:
                out.append(line)
            while len(word) > width:
                out.append(word[:width])
                word = word[width:]
            line = word
        out.append(line)
    return out


class Column:
    """A table's column: its heading, the least width it may fold to, and whether it may
    wrap at all (a RUN_ID is copied whole: never)."""

    def __init__(self, heading: str, least: int = 1, wrap: bool = True) -> None:
        self.heading, self.least, self.wrap = heading, least, wrap


def table(terminal: Terminal, title: str, columns: list[Column], rows: list[list[str]]) -> list:
    """The rows under the headings in boxes, as rich's default table: each column as wide as
    its widest cell, the widest that may wrap folded first until the table fits the width."""
    widths = [max([len(c.heading), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    room = terminal.width - (3 * len(columns) + 1)
    # Words kept whole where the width allows; folded only below that.
    words = [
        max([c.least, *(len(w) for row in rows for w in row[i].split())])
        for i, c in enumerate(columns)
    ]
    widths = _fitted(_fitted(widths, columns, room, words), columns, room)
    inner = sum(widths) + 3 * len(widths) + 1
    out = terminal.title(title, inner)
    out.append("┏" + "┳".join("━" * (w + 2) for w in widths) + "┓")
    heads = [wrap(c.heading, w) for c, w in zip(columns, widths, strict=True)]
    depth = max(len(h) for h in heads)
    heads = [[""] * (depth - len(h)) + h for h in heads]  # headings sit on the rule
    for n in range(depth):
        cells = [terminal.paint(h[n].ljust(w), "bold") for h, w in zip(heads, widths, strict=True)]
        out.append("┃ " + " ┃ ".join(cells) + " ┃")
    out.append("┡" + "╇".join("━" * (w + 2) for w in widths) + "┩")
    for row in rows:
        wrapped = [wrap(cell, w) for cell, w in zip(row, widths, strict=True)]
        for n in range(max(len(c) for c in wrapped)):
            parts = [
                (c[n : n + 1] or [""])[0].ljust(w) for c, w in zip(wrapped, widths, strict=True)
            ]
            out.append("│ " + " │ ".join(parts) + " │")
    out.append("└" + "┴".join("─" * (w + 2) for w in widths) + "┘")
    return out


def _fitted(
    widths: list[int], columns: list[Column], room: int, floors: list[int] | None = None
) -> list[int]:
    """`widths` narrowed to `room` in all: the widest column that may wrap loses a column at
    a time, none below its floor (its least, unless given)."""
    widths = list(widths)
    floors = floors or [c.least for c in columns]
    while sum(widths) > room:
        narrowable = [i for i, c in enumerate(columns) if c.wrap and widths[i] > max(floors[i], 1)]
        if not narrowable:
            break  # the caller chose a table that cannot fit: it overflows
        widest = max(narrowable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def listing(
    terminal: Terminal, title: str, headings: list[str], rows: list[list[str]], right: set[int]
) -> list[str]:
    """Rows in columns two spaces apart under bold headings and a rule, the last column
    wrapped into what the width leaves it (its lines indented under it); columns in `right`
    right-justified."""
    fixed = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headings[:-1])]
    indent = sum(fixed) + 2 * len(fixed)
    last = max(terminal.width - indent, 1)

    def line(cells: list[str]) -> str:
        out = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, fixed, strict=True))
        ]
        return "  ".join(out)

    lines = terminal.title(title, terminal.width)
    lines.append(terminal.paint((line(headings[:-1]) + "  " + headings[-1]).rstrip(), "bold"))
    lines.append("─" * min(terminal.width, indent + len(headings[-1])))
    for row in rows:
        wrapped = wrap(row[-1], last) if row[-1] else [""]
        lines.append((line(row[:-1]) + "  " + wrapped[0]).rstrip())
        lines += [" " * indent + more for more in wrapped[1:]]
    return lines


def panel(terminal: Terminal, title: str, text: str) -> list[str]:
    """`text` wrapped in a rounded box as wide as the terminal, `title` in its top edge."""
    inner = max(terminal.width - 4, 1)
    head = f" {title} " if title else ""
    rule = terminal.width - 2
    left = max((rule - len(head)) // 2, 0)
    top = "╭" + "─" * left + head + "─" * max(rule - left - len(head), 0) + "╮"
    body = ["│ " + line.ljust(inner) + " │" for line in wrap(text, inner)]
    return [top, *body, "╰" + "─" * rule + "╯"]
