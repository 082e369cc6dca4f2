"""The prompt: Markdown sections in a fixed order (task first, nudge last), capped in size."""

from __future__ import annotations

import re
from dataclasses import dataclass

from daemon.excerpt import excerpt

SECTION_ORDER = (
    ("task", "# Task"),
    ("progress", "# Progress so far"),
    ("answers", "# Answers from a person"),
    ("rules", "# Rules from earlier runs"),
    ("failed", "# What failed last time"),
    ("feedback", "# Reviewer feedback"),
    ("note", "# Note from a person"),
    ("nudge", "# Nudge"),
)
# When the prompt is over its cap, these are cut first, in this order.
CUT_ORDER = ("failed", "progress", "rules", "feedback", "answers", "note", "nudge", "task")
CUT_MARK = "[... {n} bytes cut to fit the prompt cap ...]\n"


def fenced(text: str, info: str = "text") -> str:
    """Quote `text` as data in a fence longer than any backtick run inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{info}\n{body}{fence}\n"


@dataclass
class PromptParts:
    """What goes into one prompt; empty parts are left out."""

    task: str
    progress: str = ""
    answers: str = ""  # a person's answers to the loop's agents' questions (people/answers.py)
    rules: str = ""
    failed: str = ""
    feedback: str = ""
    note: str = ""
    nudge: str = ""

    def render(self) -> str:
        sections = []
        for key, heading in SECTION_ORDER:
            body = getattr(self, key).strip("\n")
            if body.strip():
                sections.append(f"{heading}\n\n{body}\n")
        return "\n".join(sections)


def _cut_checks(text: str, drop: int) -> str:
    """The checks' output `drop` bytes shorter: its excerpt (daemon/excerpt.py: the lines
    naming failures, the first failure, the end), inside its fence when it has one."""
    lines = text.splitlines(keepends=True)
    fence = lines[0] if lines and lines[0].startswith("```") else ""
    body = "".join(lines[1:-1]) if fence and len(lines) > 1 else text
    room = len(body.encode("utf-8")) - drop
    if room <= len(CUT_MARK) + 16:
        return ""
    cut = excerpt(body, room)
    return fenced(cut, fence.strip("`\n")) if fence else cut


def _cut_tail(text: str, drop: int) -> str:
    data = text.encode("utf-8")
    if drop >= len(data):
        return ""
    return data[: len(data) - drop].decode("utf-8", "ignore") + "\n" + CUT_MARK.format(n=drop)


def build_prompt(parts: PromptParts, cap_bytes: int) -> str:
    """Render the prompt; over `cap_bytes`, cut the checks' output first, then the rest."""
    text = parts.render()
    for key in CUT_ORDER:
        over = len(text.encode("utf-8")) - cap_bytes
        if over <= 0:
            return text
        current = getattr(parts, key)
        if not current:
            continue
        margin = over + len(CUT_MARK) + 16
        cut = _cut_checks(current, margin) if key == "failed" else _cut_tail(current, margin)
        setattr(parts, key, cut)
        text = parts.render()
    data = text.encode("utf-8")
    return data[:cap_bytes].decode("utf-8", "ignore")
