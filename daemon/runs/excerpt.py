"""A long check output cut to a budget: its head, its first failure and its tail.

Keeping only the tail drops what matters most when a test runner prints a lot: the first
failing test (or error line) is often near the top, and the tail is then kilobytes of
repeated subtests or the summary. The three parts share one budget.
"""

from __future__ import annotations

import re

# The first line a person would look at in a failing run: test runners' failure headers and
# markers (pytest, unittest, go, TAP, jest/mocha, cargo), tracebacks, exception lines,
# compiler diagnostics. The earliest match wins.
FIRST_FAILURE = re.compile(
    r"^(?:=+ (?:FAILURES|ERRORS) =+\s*$"
    r"|_{3,} .+ _{3,}\s*$"
    r"|(?:FAILED|ERROR)\b"
    r"|(?:FAIL|ERROR):"
    r"|--- FAIL:"
    r"|not ok\b"
    r"|Traceback \(most recent call last\)"
    r"|E {2,}\S"
    r"|\s*(?:FAIL|✕|✗|×)\s+\S"
    r"|thread '.*' panicked at"
    r"|npm ERR!"
    r"|error(?:\[\w+\])?:)"
    r"|^.*?\b\w*(?:Error|Exception)\b: "
    r"|^\S+:\d+(?::\d+)?: (?:fatal )?error\b",
    re.MULTILINE,
)
HEAD_SHARE = 0.2  # of the budget, for the first lines (the command's setup, what ran)
FAILURE_SHARE = 0.4  # for the first failure and the lines after it
CONTEXT_LINES = 2  # lines kept before the first failure, when they fit


def cut_marker(n: int) -> str:
    return f"[... {n} characters cut ...]\n"


def first_failure(text: str) -> int | None:
    """Where the line of the first failure starts, or None when no line looks like one."""
    match = FIRST_FAILURE.search(text)
    if match is None:
        return None
    return text.rfind("\n", 0, match.start()) + 1


def excerpt(text: str, limit: int) -> str:
    """`text` when it fits in `limit` characters; else its head, its first failure and its
    tail, with a marker where each cut is, all within `limit`."""
    if len(text) <= limit:
        return text
    budget = max(limit - 3 * len(cut_marker(len(text))), 0)
    at = first_failure(text)
    tail_len = budget - int(budget * HEAD_SHARE)
    spans = [(0, _line_end(text, int(budget * HEAD_SHARE)))]
    if at is not None and spans[0][1] <= at < len(text) - tail_len:
        window = int(budget * FAILURE_SHARE)
        tail_len -= window
        spans.append(_failure_span(text, at, window))
    start = len(text) - tail_len
    newline = text.find("\n", start)
    spans.append((newline + 1 if 0 <= newline < len(text) - 1 else start, len(text)))
    return _joined(text, spans)


def _line_end(text: str, end: int) -> int:
    """`end` moved back to just after a line's end, when one is before it."""
    newline = text.rfind("\n", 0, end)
    return newline + 1 if newline >= 0 else end


def _failure_span(text: str, at: int, window: int) -> tuple[int, int]:
    """The failing line with a few lines before it and what follows, within `window`."""
    start = at
    for _ in range(CONTEXT_LINES):
        before = text.rfind("\n", 0, max(start - 1, 0)) + 1
        if before >= start or at - before > window // 4:
            break
        start = before
    end = min(start + window, len(text))
    line_end = text.find("\n", at)
    whole = _line_end(text, end)
    # The failing line itself stays even when the lines after it do not fit.
    return start, whole if line_end < 0 or whole > line_end else end


def _joined(text: str, spans: list[tuple[int, int]]) -> str:
    """The spans of `text` in order, overlaps merged, a cut marker for each gap."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, kept_to = [], 0
    for start, end in merged:
        if start > kept_to:
            out.append(cut_marker(start - kept_to))
        out.append(text[start:end])
        kept_to = end
    if kept_to < len(text):
        out.append(cut_marker(len(text) - kept_to))
    return "".join(out)
