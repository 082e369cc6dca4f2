"""Text from an agent made safe to show in a terminal: no control sequences, no rich markup.

An agent's words, its tool output, a task or a reason can hold escape sequences that move
the cursor, clear the screen, set the window title, or rewrite what a person reads (a `\\r`
that returns over a line); and `[bold]`-style text that rich would take as markup when it
is printed inside a markup string. `clean` removes the first; `markup` also escapes the
second for strings that go through rich's markup parser (tables, panels, `console.print`).
"""

from __future__ import annotations

import re

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST, or to the end when never closed), the
# string sequences DCS, SOS, PM, APC (ESC P/X/^/_ ... ST), then any other ESC sequence.
_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\|$)"
    r"|\x1b[ -/]*[0-~]?"
)
# Left after the sequences: C0 controls but tab and newline, DEL, and the C1 controls
# (0x80-0x9f; 0x9b is a one-byte CSI in some terminals).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """`text` without terminal control sequences or control characters (tab and newline kept)."""
    text = text.replace("\r\n", "\n")
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))


def markup(text: str) -> str:
    """`text` cleaned and escaped for rich's markup parser: shown as written, never styled."""
    from rich.markup import escape

    return escape(clean(text))


def checks_word(value: bool | None) -> str:
    """An attempt's checks in a word: passed, failed, not run."""
    return {True: "passed", False: "failed", None: "not run"}[value]
